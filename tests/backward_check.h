// Shared by the tests of the 16-bit backward stages (11 and 13): one backward pass on fresh
// seeded inputs, dQ, dK, dV and the workspace poisoned before it, every gradient element of
// every head compared with the float64 reference; a wrapper that hands a stage its inputs
// through the strides of one of fa::test's layouts; and the checks both stages run through
// their own run_and_check (every variant, every strided layout).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/backward_demo.h"
#include "common/cuda_check.h"
#include "common/demo.h"
#include "common/device_buffer.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/verify.h"
#include "stages/11_backward_tensor_cores/tensor_core_backward.h"
#include "tests/catch.h"
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

/// What a backward pass was given (the inputs and dO, as floats) and what it wrote.
struct BackwardOutputs {
  AttentionInputs in;             ///< Q, K, V
  std::vector<float> d_o;         ///< dO
  AttentionGradients<float> got;  ///< dQ, dK, dV
};

/// One backward pass on fresh inputs (seeded, rounded to p.dtype, entries in ±magnitude),
/// with dQ, dK, dV and `workspace` bytes of workspace poisoned before it; nothing checked.
/// With `forward` O and lse come from it, else from the float64 reference (O rounded to
/// p.dtype). A non-zero `logit`: every logit moved to about that value (fa::shift_logits).
inline BackwardOutputs run_backward(const AttentionProblem& p, uint64_t seed, const Backward16& backward,
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
  return {std::move(in), std::move(d_o),
          {download_as_float(dq.data(), q_n, p.dtype), download_as_float(dk.data(), kv_n, p.dtype),
           download_as_float(dv.data(), kv_n, p.dtype)}};
}

/// run_backward(), then every gradient element of every head checked against the float64
/// reference.
inline BackwardRun run_backward_check(const AttentionProblem& p, uint64_t seed, const Backward16& backward,
                                      std::size_t workspace, float magnitude = 1.0f, const Forward16& forward = {},
                                      double logit = 0.0) {
  BackwardOutputs out = run_backward(p, seed, backward, workspace, magnitude, forward, logit);
  BackwardRun r;
  r.check = check_attention_backward(p, out.in, out.d_o, out.got, sample_indices(p.batch_heads(), p.batch_heads()));
  r.got = std::move(out.got);
  return r;
}

/// The exercises' battery of a 16-bit backward stage: B = 1, H = 2, fp16 and bf16 at d = 64 and
/// 128, Nq × Nkv of 1 × 1, 70 × 130, 130 × 70 causal and 100 × 300 causal, each run checked
/// whole against the float64 reference (seeds from `seed` + 1 on); `workspace_bytes` is the
/// stage's.
inline void require_gradients_battery(const Backward16& backward,
                                      const std::function<std::size_t(const AttentionProblem&)>& workspace_bytes,
                                      uint64_t seed) {
  for (DType t : {DType::F16, DType::BF16}) {
    for (int64_t d : {64, 128}) {
      for (auto [nq, nkv, causal] : std::vector<std::tuple<int64_t, int64_t, bool>>{
               {1, 1, false}, {70, 130, false}, {130, 70, true}, {100, 300, true}}) {
        const AttentionProblem p = make_problem(1, 2, nq, nkv, d, 0.0, causal, t);
        require_passed(p, run_backward_check(p, ++seed, backward, workspace_bytes(p)).check);
      }
    }
  }
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

/// A backward stage as a Backward16 that reads O and writes dQ at 4 bytes past a 16-byte
/// boundary (elements 2 onward of buffers of their own, the rest poisoned and dQ's checked
/// untouched), where kernels 1 and 3 cannot take 16 bytes at a time: their 4-byte paths.
inline Backward16 misaligned_o_dq_backward(const Backward16& stage) {
  return [stage](const AttentionProblem& p, const tc_backward::Tensors& t, void* ws) {
    const int64_t n = p.q_elems(), off = 2;
    std::vector<uint16_t> o_host(static_cast<size_t>(n + off), 0xFFFF);
    FA_CUDA_CHECK(cudaMemcpy(o_host.data() + off, t.o, static_cast<size_t>(n) * 2, cudaMemcpyDeviceToHost));
    const DeviceBuffer<uint16_t> o(o_host);
    DeviceBuffer<uint16_t> dq(static_cast<size_t>(n + off + 8));
    dq.fill_bytes(kPoisonByte);
    stage(p, {t.q, t.k, t.v, o.data() + off, t.d_o, t.lse, dq.data() + off, t.dk, t.dv}, ws);
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> all = dq.download();
    FA_CUDA_CHECK(cudaMemcpy(t.dq, all.data() + off, static_cast<size_t>(n) * 2, cudaMemcpyHostToDevice));
    std::fill_n(all.begin() + off, n, uint16_t{0xFFFF});  // taken: what remains must be the poison
    REQUIRE(std::count(all.begin(), all.end(), uint16_t{0xFFFF}) == static_cast<std::ptrdiff_t>(all.size()));
  };
}

/// Each variant of a stage's tuning.h is another choice of its LOG.md; each must still compute
/// the gradients: ragged lengths over several tiles, one query, logits all far below zero, with
/// and without the causal mask, d = 64 and 128. `run_and_check(p, seed, magnitude, backward,
/// forward_on_device, logit)` is the stage's own (run_backward_check with its workspace).
/// Under AddressSanitizer, only the pairs backward_variant_case_runs() names.
template <class RunAndCheck>
void check_backward_variants(const std::vector<Variant<BackwardStageRun>>& variants, uint64_t seed,
                             const RunAndCheck& run_and_check) {
  for (const auto& v : variants) {
    if (v.name == "tuned") continue;  // the finished kernel: the stage's own tests run it
    INFO("variant " << v.name << ": " << v.summary);
    const Backward16 run = [&v](const AttentionProblem& p, const tc_backward::Tensors& t, void* ws) {
      v.run(p, {t.q, t.k, t.v, t.o, t.d_o, t.lse, t.dq, t.dk, t.dv}, ws);
    };
    for (int64_t d : {64, 128}) {
      for (bool causal : {false, true}) {
        if (!backward_variant_case_runs(d, causal)) continue;
        const DType t = causal ? DType::BF16 : DType::F16;
        const AttentionProblem p = make_problem(1, 2, 150, 133, d, 0.0, causal, t);
        require_passed(p, run_and_check(p, ++seed, 1.0f, run, false, 0.0).check);
        const AttentionProblem low = make_problem(1, 1, 70, causal ? 70 : 130, d, 0.0, causal, t);
        require_passed(low, run_and_check(low, ++seed, 1.0f, run, false, -300.0).check);
        const AttentionProblem one = make_problem(1, 2, 1, causal ? 1 : 257, d, 0.0, causal, t);
        require_passed(one, run_and_check(one, ++seed, 1.0f, run, false, 0.0).check);
      }
    }
  }
}

/// What the Python module hands a backward stage: q, k and v as views of one buffer with the
/// heads side by side in each row, O and dO laid out alike ("interleaved"); and tensors with
/// spare elements between rows and heads ("padded"). fp16 and bf16, d = 64 and 128, causal on
/// one shape of three. `stage` is the stage's attention_backward_strided.
template <class RunAndCheck, class Strided>
void check_strided_backward(uint64_t seed, const RunAndCheck& run_and_check, const Strided& stage) {
  for (const std::string layout : {"interleaved", "padded"}) {
    INFO(layout);
    const Backward16 backward = strided_backward(layout, stage);
    for (DType t : {DType::F16, DType::BF16}) {
      for (int64_t d : {64, 128}) {
        for (auto [b, h, nq, nkv] :
             std::vector<std::array<int64_t, 4>>{{2, 3, 70, 130}, {1, 2, 1, 1}, {3, 1, 65, 64}}) {
          const AttentionProblem p = make_problem(b, h, nq, nkv, d, 0.0, nq == 70, t);
          require_passed(p, run_and_check(p, ++seed, 1.0f, backward, false, 0.0).check);
        }
      }
    }
  }
}

}  // namespace fa::test
