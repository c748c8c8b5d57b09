/**
 * \file stages/06_tensor_cores/demo.cpp
 * \brief Stage 06's demo: FlashAttention-2 on tensor cores in fp16 (default) or bf16;
 *        `--compare` runs stages 05, 04 and 01 on the same values in fp32.
 *
 * \code
 * stage06_tensor_cores                         # B=4 H=32 N=4096 d=64, fp16
 * stage06_tensor_cores --dtype bf16 --compare  # side by side with the fp32 stages
 * stage06_tensor_cores --seq-q 100 --seq-kv 257 --dim 128 --causal
 * \endcode
 */
#include "common/demo.h"
#include "stages/01_naive/naive_attention.h"
#include "stages/04_flash1/flash1_attention.h"
#include "stages/05_flash2/flash2_attention.h"
#include "stages/06_tensor_cores/tensor_core_attention.h"

/// Runs stage 06 through the shared demo driver, with stages 05, 04 and 01 for --compare.
int main(int argc, char** argv) {
  fa::StageDemo stage = fa::tensor_core::describe();
  stage.compare_with = {fa::flash2::describe(), fa::flash1::describe(), fa::naive::describe()};
  return fa::run_stage_demo(argc, argv, stage);
}
