// Stage 01 against the float64 reference: ragged shapes, every head dim, B·H > 1,
// causal, large-magnitude logits; and its row softmax on its own.
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "common/device_buffer.h"
#include "common/reference.h"
#include "stages/01_naive/naive_attention.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

using fa::AttentionProblem;
using fa::DeviceTensors;

namespace {

// Runs stage 01 with its workspace allocated here.
void run_naive(const AttentionProblem& p, const DeviceTensors& t) {
  fa::DeviceBuffer<float> S(fa::naive::workspace_bytes(p) / sizeof(float));
  fa::naive::attention(p, t.q, t.k, t.v, t.o, S.data());
}

}  // namespace

TEST_CASE("stage 01 matches the reference on ragged shapes and every head dim", "[stage01]") {
  // Lengths that are not multiples of the 32-wide tiles, 1 included, with Nq != Nkv.
  const std::vector<std::pair<int64_t, int64_t>> lengths = {
      {1, 1}, {1, 257}, {7, 64}, {64, 7}, {100, 100}, {257, 1000}, {1000, 257}};
  uint64_t seed = 100;
  for (int64_t d : fa::supported_head_dims()) {
    for (auto [nq, nkv] : lengths) {
      const AttentionProblem p = fa::make_problem(1, 2, nq, nkv, d);
      fa::test::require_passed(p, fa::test::run_and_check(p, run_naive, ++seed));
    }
  }
}

TEST_CASE("stage 01 handles many heads and batches", "[stage01]") {
  const AttentionProblem p = fa::make_problem(3, 5, 64, 100, 32);
  fa::test::require_passed(p, fa::test::run_and_check(p, run_naive, 7));
}

TEST_CASE("stage 01 applies the causal mask", "[stage01]") {
  for (auto [nq, nkv] : std::vector<std::pair<int64_t, int64_t>>{{257, 257}, {100, 257}, {257, 100}}) {
    const AttentionProblem p = fa::make_problem(2, 2, nq, nkv, 64, 0.0, /*causal=*/true);
    fa::test::require_passed(p, fa::test::run_and_check(p, run_naive, 11));
  }
}

TEST_CASE("stage 01 stays finite and accurate with large-magnitude logits", "[stage01]") {
  // Inputs in [-30, 30] at d = 64 give logits in the hundreds: exp() without the max
  // subtraction would overflow to inf and the output would be NaN.
  const AttentionProblem p = fa::make_problem(1, 2, 100, 257, 64);
  const fa::test::StageResult r = fa::test::run_and_check(p, run_naive, 5, 30.0f);
  for (float x : r.o) REQUIRE(std::isfinite(x));
  fa::test::require_passed(p, r);
}

TEST_CASE("stage 01 softmax matches the reference, including all -inf rows", "[stage01][softmax]") {
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t cols : {int64_t{1}, int64_t{5}, int64_t{255}, int64_t{257}, int64_t{4097}}) {
    const int64_t rows = 6;
    std::vector<float> x = fa::random_uniform(rows * cols, 42 + cols, 20.0f);
    for (int64_t j = 0; j < cols; ++j) x[static_cast<size_t>(j)] = -inf;          // row 0: all -inf
    for (int64_t j = 0; j < cols; j += 2) x[static_cast<size_t>(cols + j)] = -inf;  // row 1: some -inf
    for (int64_t j = 0; j < cols; ++j) x[static_cast<size_t>(2 * cols + j)] = 3.0f;  // row 2: identical
    fa::DeviceBuffer<float> in(x), out(x.size());
    out.fill_bytes(fa::kPoisonByte);
    fa::naive::softmax_rows(in.data(), out.data(), rows, cols);
    const std::vector<float> got = out.download();
    std::vector<double> want(x.size());
    fa::reference_softmax(x.data(), rows, cols, want.data(), nullptr, nullptr);
    const fa::Comparison c = fa::compare(got.data(), want.data(), rows * cols, {1e-7, 1e-5});
    INFO("cols=" << cols << ": " << fa::describe(c, nullptr));
    REQUIRE(c.passed());
  }
}

TEST_CASE("stage 01 softmax works in place", "[stage01][softmax]") {
  const int64_t rows = 3, cols = 300;
  std::vector<float> x = fa::random_uniform(rows * cols, 9, 5.0f);
  fa::DeviceBuffer<float> buf(x);
  fa::naive::softmax_rows(buf.data(), buf.data(), rows, cols);
  const std::vector<float> got = buf.download();
  std::vector<double> want(x.size());
  fa::reference_softmax(x.data(), rows, cols, want.data(), nullptr, nullptr);
  REQUIRE(fa::compare(got.data(), want.data(), rows * cols, {1e-7, 1e-5}).passed());
}
