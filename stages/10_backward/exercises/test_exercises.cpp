// Grades stage 10's exercises: the learner's copy of backward_attention.cu, its dQ, dK and dV
// against the float64 reference gradients (every head, whole), from the reference forward
// pass's O and log-sum-exp: ragged lengths and head dims, many heads, the causal mask, large
// logits; the gradients poisoned before each run. `cmake --workflow --preset exercises` runs
// them.
#include <cuda_runtime.h>

#include <tuple>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/verify.h"
#include "stages/10_backward/backward_attention.h"
#include "tests/catch.h"

namespace {

void require_gradients(const fa::AttentionProblem& p, uint64_t seed, float magnitude = 1.0f) {
  const fa::AttentionInputs in = fa::random_inputs(p, seed, magnitude);
  const std::vector<float> d_o = fa::random_output_gradient(p, seed);
  const fa::AttentionRows<double> fwd = fa::reference_attention(p, in.q.data(), in.k.data(), in.v.data(), fa::all_rows(p));
  const auto q_n = static_cast<size_t>(p.q_elems()), kv_n = static_cast<size_t>(p.kv_elems());
  fa::DeviceBuffer<float> q(in.q), k(in.k), v(in.v), g(d_o), o(q_n), lse(static_cast<size_t>(p.rows()));
  o.upload(std::vector<float>(fwd.o.begin(), fwd.o.end()));
  lse.upload(std::vector<float>(fwd.lse.begin(), fwd.lse.end()));
  fa::DeviceBuffer<float> dq(q_n), dk(kv_n), dv(kv_n);
  fa::DeviceBuffer<unsigned char> ws(fa::backward::workspace_bytes(p));
  for (auto* b : {&dq, &dk, &dv}) b->fill_bytes(fa::kPoisonByte);
  ws.fill_bytes(fa::kPoisonByte);
  fa::backward::attention_backward(
      p, {q.data(), k.data(), v.data(), o.data(), g.data(), lse.data(), dq.data(), dk.data(), dv.data()}, ws.data());
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  const fa::AttentionGradients<float> got{dq.download(), dk.download(), dv.download()};
  const fa::GradientCheck c =
      fa::check_attention_backward(p, in, d_o, got, fa::sample_indices(p.batch_heads(), p.batch_heads()));
  INFO(fa::describe(p));
  INFO("dQ: " << fa::describe(c.dq, fa::gradient_namer(p, c.heads, "dQ")));
  INFO("dK: " << fa::describe(c.dk, fa::gradient_namer(p, c.heads, "dK")));
  INFO("dV: " << fa::describe(c.dv, fa::gradient_namer(p, c.heads, "dV")));
  REQUIRE(c.passed());
}

void backward_battery() {
  uint64_t seed = 90;
  for (auto [nq, nkv, d] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 1, 16}, {7, 64, 32}, {100, 100, 64}, {70, 130, 128}, {130, 70, 64}}) {
    require_gradients(fa::make_problem(1, 2, nq, nkv, d), ++seed);
  }
  require_gradients(fa::make_problem(3, 5, 64, 100, 32), 97);
  for (auto [nq, nkv] : std::vector<std::pair<int64_t, int64_t>>{{150, 150}, {100, 150}, {150, 100}}) {
    require_gradients(fa::make_problem(2, 2, nq, nkv, 64, 0.0, /*causal=*/true), ++seed);
  }
  require_gradients(fa::make_problem(1, 2, 100, 257, 64), 5, 30.0f);  // logits in the hundreds
}

}  // namespace

TEST_CASE("10-row-d: D = rowsum(dO * O), and dQ zeroed", "[10-row-d]") { backward_battery(); }

TEST_CASE("10-ds: dS = P * (dP - D)", "[10-ds]") { backward_battery(); }

TEST_CASE("10-bug: find the bug", "[10-bug]") { backward_battery(); }
