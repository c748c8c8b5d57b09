// Shared by the tests of the 16-bit backward stages (11 and 13): one backward pass on fresh
// seeded inputs, dQ, dK, dV and the workspace poisoned before it, every gradient element of
// every head compared with the float64 reference; and a wrapper that hands a stage its
// inputs through the strides of one of fa::test's layouts.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/verify.h"
#include "stages/11_backward_tensor_cores/tensor_core_backward.h"
#include "tests/stage_check.h"

namespace fa::test {

/// One 16-bit backward pass: the stage's gradients and their tensors.
using Backward16 = std::function<void(const AttentionProblem&, const tc_backward::Tensors&, void* workspace)>;
/// A forward pass that writes O (p.dtype) and each row's lse.
using Forward16 = std::function<void(const AttentionProblem&, const void* q, const void* k, const void* v, void* o,
                                     float* lse)>;

/// What a backward pass wrote, widened to float, and its check against the reference.
struct BackwardRun {
  AttentionGradients<float> got;  ///< dQ, dK, dV
  GradientCheck check;            ///< against the reference, every head
};

/// One backward pass on fresh inputs (seeded, rounded to p.dtype, entries in ±magnitude),
/// `workspace` bytes of poisoned workspace, every gradient element of every head checked.
/// With `forward` O and lse come from it, else from the float64 reference (O rounded to
/// p.dtype). A non-zero `logit`: every logit moved to about that value (fa::shift_logits).
inline BackwardRun run_backward_check(const AttentionProblem& p, uint64_t seed, const Backward16& backward,
                                      std::size_t workspace, float magnitude = 1.0f, const Forward16& forward = {},
                                      double logit = 0.0) {
  AttentionInputs in = random_inputs(p, seed, magnitude);
  if (logit != 0.0) shift_logits(in, p.dim, p.scale, p.dtype, logit);
  std::vector<float> d_o = random_output_gradient(p, seed);
  for (float& e : d_o) e = round_to(p.dtype, e);
  const auto q_n = static_cast<size_t>(p.q_elems()), kv_n = static_cast<size_t>(p.kv_elems());
  const size_t bytes = dtype_bytes(p.dtype);
  // dO and O travel as "the inputs" q and k of a second upload: the same rounding, the same type.
  std::vector<float> o_host(q_n);
  DeviceBuffer<float> lse(static_cast<size_t>(p.rows()));
  const DeviceInputs inputs = upload_inputs(in.q, in.k, in.v, p.dtype);
  DeviceBuffer<unsigned char> o(q_n * bytes);
  if (forward) {
    forward(p, inputs.q.data(), inputs.k.data(), inputs.v.data(), o.data(), lse.data());
    o_host = download_as_float(o.data(), q_n, p.dtype);
  } else {
    const AttentionRows<double> fwd = reference_attention(p, in.q.data(), in.k.data(), in.v.data(), all_rows(p));
    for (size_t i = 0; i < q_n; ++i) o_host[i] = round_to(p.dtype, static_cast<float>(fwd.o[i]));
    lse.upload(std::vector<float>(fwd.lse.begin(), fwd.lse.end()));
  }
  const DeviceInputs o_do = upload_inputs(o_host, d_o, {}, p.dtype);
  DeviceBuffer<unsigned char> dq(q_n * bytes), dk(kv_n * bytes), dv(kv_n * bytes);
  DeviceBuffer<unsigned char> ws(workspace);
  for (auto* b : {&dq, &dk, &dv, &ws}) b->fill_bytes(kPoisonByte);  // an element never written stays NaN
  backward(p, {inputs.q.data(), inputs.k.data(), inputs.v.data(), o_do.q.data(), o_do.k.data(), lse.data(), dq.data(),
               dk.data(), dv.data()},
           ws.data());
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  BackwardRun r;
  r.got = {download_as_float(dq.data(), q_n, p.dtype), download_as_float(dk.data(), kv_n, p.dtype),
           download_as_float(dv.data(), kv_n, p.dtype)};
  r.check = check_attention_backward(p, in, d_o, r.got, sample_indices(p.batch_heads(), p.batch_heads()));
  return r;
}

/// A strided backward stage (its attention_backward_strided) as a Backward16 that reads Q, K,
/// V, O and dO where the layout `name` of test_layout() says, every element between them
/// poisoned (NaN); dQ, dK and dV are written contiguous.
inline Backward16 strided_backward(
    const std::string& name,
    const std::function<void(const AttentionProblem&, const tc_backward::Tensors&, void*, const Layout&)>& stage) {
  return [name, stage](const AttentionProblem& p, const tc_backward::Tensors& t, void* ws) {
    const Layout layout = test_layout(name, p);
    const auto q = scatter(p, p.seq_q, t.q, layout.q);
    const auto k = scatter(p, p.seq_kv, t.k, layout.k);
    const auto v = scatter(p, p.seq_kv, t.v, layout.v);
    const auto o = scatter(p, p.seq_q, t.o, layout.o);
    const auto d_o = scatter(p, p.seq_q, t.d_o, layout.d_o);
    stage(p, {q.data(), k.data(), v.data(), o.data(), d_o.data(), t.lse, t.dq, t.dk, t.dv}, ws, layout);
    FA_CUDA_CHECK(cudaDeviceSynchronize());
  };
}

}  // namespace fa::test
