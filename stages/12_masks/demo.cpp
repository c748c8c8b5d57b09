/**
 * \file stages/12_masks/demo.cpp
 * \brief Stage 12's demo: attention under a sliding window, packed documents or a block
 *        mask, skipping the blocks the mask empties; fp16 (default) or bf16. Without a mask
 *        flag it runs the causal mask (--causal) or none, and `--compare` runs stage 08.
 *
 * \code
 * stage12_masks --causal --window-left 256            # B=4 H=32 N=4096 d=64 (needs a Hopper GPU)
 * stage12_masks_cpu --seq-q 700 --seq-kv 700 --docs 5  # the CPU twin, on any machine
 * stage12_masks --block-density 0.3 --dim 128
 * \endcode
 */
#include "common/demo.h"
#include "stages/08_hopper/hopper_attention.h"
#include "stages/12_masks/masked_attention.h"

/// Runs stage 12 through the shared demo driver, with stage 08 for --compare.
int main(int argc, char** argv) {
  fa::StageDemo stage = fa::masks::describe();
  stage.compare_with = {fa::hopper::describe()};
  return fa::run_stage_demo(argc, argv, stage);
}
