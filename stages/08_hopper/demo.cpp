/**
 * \file stages/08_hopper/demo.cpp
 * \brief Stage 08's demo: FlashAttention-2 on Hopper (TMA, mbarrier, wgmma, warp
 *        specialisation), fp16 (default) or bf16; `--compare` runs stage 07 on the same inputs.
 *
 * \code
 * stage08_hopper                          # B=4 H=32 N=4096 d=64, fp16 (needs a Hopper GPU)
 * stage08_hopper_cpu                      # the CPU twin, through the backend's emulation
 * stage08_hopper --dim 128 --causal --compare
 * \endcode
 */
#include "common/demo.h"
#include "stages/06_tensor_cores/tensor_core_attention.h"
#include "stages/07_memory_pipeline/pipelined_attention.h"
#include "stages/08_hopper/hopper_attention.h"

/// Runs stage 08 through the shared demo driver, with stages 07 and 06 for --compare.
int main(int argc, char** argv) {
  fa::StageDemo stage = fa::hopper::describe();
  stage.compare_with = {fa::pipeline::describe(), fa::tensor_core::describe()};
  return fa::run_stage_demo(argc, argv, stage);
}
