/**
 * \file stages/11_backward_tensor_cores/demo.cpp
 * \brief Stage 11's demo: one training step's attention in fp16 or bf16, forward (stage 07)
 *        then backward (this stage), the gradients checked against the float64 reference.
 *
 * \code
 * stage11_backward_tensor_cores                      # B=4 H=32 N=4096 d=64 fp16, dO random
 * stage11_backward_tensor_cores --causal --dim 128 --dtype bf16
 * stage11_backward_tensor_cores --compare            # beside the forward pass's own time
 * stage11_backward_tensor_cores --variant bc64       # another choice of LOG.md
 * stage11_backward_tensor_cores --save out/ && stage11_backward_tensor_cores --load out/
 * \endcode
 */
#include <string>

#include "common/backward_demo.h"
#include "stages/07_memory_pipeline/pipelined_attention.h"
#include "stages/11_backward_tensor_cores/tensor_core_backward.h"
#include "stages/11_backward_tensor_cores/tuning.h"

namespace {

namespace bw = fa::tc_backward;

fa::BackwardStageDemo describe() {
  fa::BackwardStageDemo s;
  s.id = "11_backward_tensor_cores";
  s.title = "the backward pass on tensor cores, P recomputed from the log-sum-exp";
  s.about =
      "the backward pass on tensor cores (mma.sync): dQ, dK and dV in fp16 or bf16, fp32 sums.\n"
      "Runs stage 07's forward pass and then this stage on random (or loaded) inputs and a random dO, "
      "checks the gradients against a float64 CPU reference and reports the backward pass's median time.";
  s.dtypes = {fa::DType::F16, fa::DType::BF16};
  s.forward_name = "stage 07";
  s.forward = [](const fa::AttentionProblem& p, const void* q, const void* k, const void* v, void* o, float* lse,
                 void* /*stats: none*/) {
    fa::pipeline::attention(p, q, k, v, o, lse);
  };
  s.run = [](const fa::AttentionProblem& p, const fa::BackwardTensors& t, void* ws) {
    bw::attention_backward(p, {t.q, t.k, t.v, t.o, t.d_o, t.lse, t.dq, t.dk, t.dv}, ws);
  };
  s.variants = bw::variants();
  s.workspace_bytes = bw::workspace_bytes;
  s.workspace_what = "D and lse, two floats a query row, and dQ's fp32 accumulator";
  s.hbm_bytes = bw::hbm_bytes_model;
  s.flops = bw::flops;
  s.tiles = [](const fa::AttentionProblem& p) {
    return "Bc = " + std::to_string(bw::key_tile_rows(p.dim)) + " key rows a block, Br = " + std::to_string(bw::Br) +
           " query rows a step; " + fa::format_bytes(static_cast<double>(bw::shared_bytes(p.dim))) +
           " of shared memory per block";
  };
  return s;
}

}  // namespace

/// Runs stage 11's demo through the shared driver; exits 0 when every check passed.
int main(int argc, char** argv) { return fa::run_backward_demo(argc, argv, describe()); }
