/**
 * \file stages/03_streaming/demo.cpp
 * \brief Stage 03's demo: streaming attention with no workspace; it reports what stage
 *        01 would have needed for the same shape and the bytes each query reads
 *        (see describe.cpp).
 *
 * \code
 * stage03_streaming                                       # B=4 H=32 N=4096 d=64
 * stage03_streaming --compare                             # and stage 01 on the same inputs
 * stage03_streaming --batch 1 --heads 8 --seq-q 65536 --seq-kv 65536   # S would be 128 GiB
 * \endcode
 */
#include "common/demo.h"
#include "stages/01_naive/naive_attention.h"
#include "stages/03_streaming/streaming_attention.h"

/// Runs stage 03 through the shared demo driver, with stage 01 for --compare.
int main(int argc, char** argv) {
  fa::StageDemo stage = fa::streaming::describe();
  stage.compare_with = {fa::naive::describe()};
  return fa::run_stage_demo(argc, argv, stage);
}
