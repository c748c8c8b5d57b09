// Stage 01 against the float64 reference: the standard battery (ragged shapes, every
// head dim, B·H > 1, causal, large-magnitude logits); and its row softmax on its own.
#include <cmath>
#include <limits>
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
  const auto f = t.f32();
  fa::naive::attention(p, f.q, f.k, f.v, f.o, S.data());
}

}  // namespace

TEST_CASE("stage 01 matches the reference", "[stage01]") {
  fa::test::check_attention_stage(run_naive, /*with_lse=*/false, /*causal=*/true);
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
