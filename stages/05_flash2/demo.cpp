/**
 * \file stages/05_flash2/demo.cpp
 * \brief Stage 05's demo: FlashAttention-2 with no workspace and its IO-model bytes;
 *        `--compare` runs stages 01, 03 and 04 on the same inputs (see describe.cpp).
 *
 * \code
 * stage05_flash2                      # B=4 H=32 N=4096 d=64
 * stage05_flash2 --compare            # side by side with stages 01, 03 and 04
 * stage05_flash2 --seq-q 100 --seq-kv 257 --dim 128 --causal
 * \endcode
 */
#include "common/demo.h"
#include "stages/01_naive/naive_attention.h"
#include "stages/03_streaming/streaming_attention.h"
#include "stages/04_flash1/flash1_attention.h"
#include "stages/05_flash2/flash2_attention.h"

/// Runs stage 05 through the shared demo driver, with stages 01, 03 and 04 for --compare.
int main(int argc, char** argv) {
  fa::StageDemo stage = fa::flash2::describe();
  stage.compare_with = {fa::naive::describe(), fa::streaming::describe(), fa::flash1::describe()};
  return fa::run_stage_demo(argc, argv, stage);
}
