/**
 * \file stages/13_backward_hopper/demo.cpp
 * \brief Stage 13's demo: one training step's attention in fp16 or bf16 on a Hopper GPU,
 *        forward (stage 08) then backward (this stage), the gradients checked against the
 *        float64 reference.
 *
 * \code
 * stage13_backward_hopper                      # B=4 H=32 N=4096 d=64 fp16, dO random (needs a Hopper GPU)
 * stage13_backward_hopper_cpu --batch 1 --heads 2 --seq-q 300 --seq-kv 200   # the CPU twin
 * stage13_backward_hopper --causal --dim 128 --dtype bf16
 * stage13_backward_hopper --compare            # beside the forward pass's own time
 * stage13_backward_hopper --variant atomics    # dQ by atomics, the step before (LOG.md)
 * \endcode
 */
#include <string>

#include "common/backward_demo.h"
#include "stages/08_hopper/hopper_attention.h"
#include "stages/13_backward_hopper/hopper_backward.h"
#include "stages/13_backward_hopper/tuning.h"

namespace {

namespace bw = fa::hopper_backward;

fa::BackwardStageDemo describe() {
  fa::BackwardStageDemo s;
  s.id = "13_backward_hopper";
  s.title = "the backward pass on Hopper: TMA, wgmma and warp specialisation";
  s.about =
      "the backward pass on a Hopper GPU (wgmma, TMA, mbarriers): dQ, dK and dV in fp16 or bf16, fp32 sums.\n"
      "Runs stage 08's forward pass and then this stage on random (or loaded) inputs and a random dO, "
      "checks the gradients against a float64 CPU reference and reports the backward pass's median time.";
  s.dtypes = {fa::DType::F16, fa::DType::BF16};
  s.head_dims = {64, 128};
  s.forward_name = "stage 08";
  s.forward = [](const fa::AttentionProblem& p, const void* q, const void* k, const void* v, void* o, float* lse,
                 void* /*stats: none*/) {
    fa::hopper::attention(p, q, k, v, o, lse);
  };
  s.run = [](const fa::AttentionProblem& p, const fa::BackwardTensors& t, void* ws) {
    bw::attention_backward(p, {t.q, t.k, t.v, t.o, t.d_o, t.lse, t.dq, t.dk, t.dv}, ws);
  };
  s.variants = bw::variants();
  s.workspace_bytes = bw::workspace_bytes;
  s.workspace_what =
      "D and lse, two floats a query row, dQ's fp32 accumulator, and without the mask the sums of the last round's cut "
      "blocks (up to 131 of 128 keys x d floats x 2)";
  s.hbm_bytes = bw::hbm_bytes_model;
  s.flops = fa::tc_backward::flops;
  s.tiles = [](const fa::AttentionProblem& p) {
    return "Bc = " + std::to_string(bw::Bc) + " key rows a block (two consumer warpgroups of 64), Br = " +
           std::to_string(bw::q_tile_rows(p.dim)) + " query rows a step; " +
           fa::format_bytes(static_cast<double>(bw::shared_bytes(p.dim))) + " of shared memory per block";
  };
  return s;
}

}  // namespace

/// Runs stage 13's demo through the shared driver; exits 0 when every check passed.
int main(int argc, char** argv) { return fa::run_backward_demo(argc, argv, describe()); }
