// Grades stage 01's exercises: the learner's copy of naive_attention.cu through the battery
// every attention stage passes (tests/stage_check.h: ragged lengths, every head dim, many
// heads, causal, logits in the hundreds; outputs poisoned), and its row softmax on rows of
// every awkward length, an all -inf row among them. `cmake --workflow --preset exercises`
// runs them.
#include <cmath>
#include <limits>
#include <vector>

#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "common/random.h"
#include "common/verify.h"
#include "stages/01_naive/naive_attention.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

namespace {

void run_naive(const fa::AttentionProblem& p, const fa::DeviceTensors& t) {
  fa::DeviceBuffer<float> S(fa::naive::workspace_bytes(p) / sizeof(float));
  const auto f = t.f32();
  fa::naive::attention(p, f.q, f.k, f.v, f.o, S.data());
}

// Rows of 1 to 4097 values in [-20, 20]: one all -inf, one half -inf, one of equal values.
void softmax_battery() {
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t cols : {int64_t{1}, int64_t{255}, int64_t{257}, int64_t{4097}}) {
    const int64_t rows = 5;
    std::vector<float> x = fa::random_uniform(rows * cols, 60 + cols, 20.0f);
    for (int64_t j = 0; j < cols; ++j) x[static_cast<size_t>(j)] = -inf;
    for (int64_t j = 0; j < cols; j += 2) x[static_cast<size_t>(cols + j)] = -inf;
    for (int64_t j = 0; j < cols; ++j) x[static_cast<size_t>(2 * cols + j)] = 3.0f;
    fa::DeviceBuffer<float> in(x), out(x.size());
    out.fill_bytes(fa::kPoisonByte);
    fa::naive::softmax_rows(in.data(), out.data(), rows, cols);
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> p = out.download();
    const fa::SoftmaxCheck c = fa::check_softmax(x.data(), rows, cols, p.data());
    INFO(rows << " rows x " << cols << " columns");
    INFO("p: " << fa::describe(c.p, nullptr));
    REQUIRE(c.passed());
  }
}

}  // namespace

TEST_CASE("01-tile-loads: S = scale*Q*K^T and O = P*V from tiles in shared memory", "[01-tile-loads]") {
  fa::test::check_attention_stage(run_naive, /*with_lse=*/false, /*causal=*/true);
}

TEST_CASE("01-softmax: the row softmax on its own", "[01-softmax]") { softmax_battery(); }

TEST_CASE("01-softmax: inside attention", "[01-softmax]") {
  fa::test::check_attention_stage(run_naive, /*with_lse=*/false, /*causal=*/true);
}
