/**
 * \file stages/07_memory_pipeline/demo.cpp
 * \brief Stage 07's demo: stage 06 with a memory pipeline, fp16 (default) or bf16;
 *        `--compare` runs stage 06 on the same inputs, and the fp32 stages 05 and 01.
 *
 * \code
 * stage07_memory_pipeline                          # B=4 H=32 N=4096 d=64, fp16
 * stage07_memory_pipeline --dim 128 --causal --compare
 * \endcode
 */
#include "common/demo.h"
#include "stages/01_naive/naive_attention.h"
#include "stages/05_flash2/flash2_attention.h"
#include "stages/06_tensor_cores/tensor_core_attention.h"
#include "stages/07_memory_pipeline/pipelined_attention.h"

/// Runs stage 07 through the shared demo driver, with stages 06, 05 and 01 for --compare.
int main(int argc, char** argv) {
  fa::StageDemo stage = fa::pipeline::describe();
  stage.compare_with = {fa::tensor_core::describe(), fa::flash2::describe(), fa::naive::describe()};
  return fa::run_stage_demo(argc, argv, stage);
}
