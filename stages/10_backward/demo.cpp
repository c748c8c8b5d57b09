/**
 * \file stages/10_backward/demo.cpp
 * \brief Stage 10's demo: one training step's attention, forward (stage 05) then
 *        backward (this stage), the gradients checked against the float64 reference.
 *
 * \code
 * stage10_backward                                  # B=4 H=32 N=4096 d=64, dO random
 * stage10_backward --causal --dim 128
 * stage10_backward --compare                        # beside the forward pass's own time
 * stage10_backward --variant late_load              # one step of LOG.md undone
 * stage10_backward --save out/ && stage10_backward --load out/   # q, k, v, do in; o, dq, dk, dv out
 * \endcode
 */
#include <string>
#include <vector>

#include "common/backward_demo.h"
#include "stages/05_flash2/flash2_attention.h"
#include "stages/10_backward/backward_attention.h"
#include "stages/10_backward/tuning.h"

namespace {

namespace bw = fa::backward;

// This stage's pass (or a variant's) on the demo's tensors, which are fp32 here.
fa::BackwardStageRun typed(bw::BackwardRun run) {
  return [run](const fa::AttentionProblem& p, const fa::BackwardTensors& t, void* ws) {
    run(p,
        {static_cast<const float*>(t.q), static_cast<const float*>(t.k), static_cast<const float*>(t.v),
         static_cast<const float*>(t.o), static_cast<const float*>(t.d_o), t.lse, static_cast<float*>(t.dq),
         static_cast<float*>(t.dk), static_cast<float*>(t.dv), static_cast<const fa::flash2::RowStats*>(t.stats)},
        ws);
  };
}

fa::BackwardStageDemo describe() {
  fa::BackwardStageDemo s;
  s.id = "10_backward";
  s.title = "the backward pass, P recomputed from the log-sum-exp";
  s.about =
      "the backward pass, dQ, dK and dV recomputed from the forward's log-sum-exp.\n"
      "Runs stage 05's forward pass and then this stage on random (or loaded) inputs and a random dO, "
      "checks the gradients against a float64 CPU reference and reports the backward pass's median time.";
  s.dtypes = {fa::DType::F32};
  s.forward_name = "stage 05";
  // Stage 05 hands over each row's m and 1/l as well, from which P is rebuilt exactly at
  // large logits (the README's section on them).
  s.forward = [](const fa::AttentionProblem& p, const void* q, const void* k, const void* v, void* o, float* lse,
                 void* stats) {
    fa::flash2::attention(p, static_cast<const float*>(q), static_cast<const float*>(k),
                          static_cast<const float*>(v), static_cast<float*>(o), lse, nullptr,
                          static_cast<fa::flash2::RowStats*>(stats));
  };
  s.stats_bytes = sizeof(fa::flash2::RowStats);
  s.run = typed(bw::attention_backward);
  for (const fa::Variant<bw::BackwardRun>& v : bw::variants()) s.variants.push_back({v.name, v.summary, typed(v.run)});
  s.workspace_bytes = bw::workspace_bytes;
  s.workspace_what = "D, one float a query row";
  s.hbm_bytes = bw::hbm_bytes_model;
  s.flops = bw::flops;
  s.tiles = [](const fa::AttentionProblem& p) {
    return "Bc = " + std::to_string(bw::Bc) + " key rows a block, Br = " + std::to_string(bw::Br) +
           " query rows a step; " + fa::format_bytes(static_cast<double>(bw::shared_bytes(p.dim))) +
           " of shared memory per block";
  };
  return s;
}

}  // namespace

/// Runs stage 10's demo through the shared driver; exits 0 when every check passed.
int main(int argc, char** argv) { return fa::run_backward_demo(argc, argv, describe()); }
