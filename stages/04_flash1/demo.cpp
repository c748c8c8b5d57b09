/**
 * \file stages/04_flash1/demo.cpp
 * \brief Stage 04's demo: FlashAttention-1 with its m/l workspace and IO-model bytes;
 *        `--compare` runs stages 01 and 03 on the same inputs (see describe.cpp).
 *
 * \code
 * stage04_flash1                      # B=4 H=32 N=4096 d=64
 * stage04_flash1 --compare            # side by side with stages 01 and 03
 * stage04_flash1 --seq-q 100 --seq-kv 257 --dim 128 --causal
 * \endcode
 */
#include "common/demo.h"
#include "stages/01_naive/naive_attention.h"
#include "stages/03_streaming/streaming_attention.h"
#include "stages/04_flash1/flash1_attention.h"

/// Runs stage 04 through the shared demo driver, with stages 01 and 03 for --compare.
int main(int argc, char** argv) {
  fa::StageDemo stage = fa::flash1::describe();
  stage.compare_with = {fa::naive::describe(), fa::streaming::describe()};
  return fa::run_stage_demo(argc, argv, stage);
}
