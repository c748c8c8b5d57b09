// Grades stage 02's exercises: the learner's copy of online_softmax.cu against the float64
// reference, rows of every awkward length, -inf entries and rows, large values; every
// output poisoned before the run. `cmake --workflow --preset exercises` runs them.
#include <cmath>
#include <limits>
#include <vector>

#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "common/random.h"
#include "common/verify.h"
#include "stages/02_online_softmax/online_softmax.h"
#include "tests/catch.h"

namespace {

void require_softmax(const std::vector<float>& x, int64_t rows, int64_t cols) {
  fa::DeviceBuffer<float> in(x), out(x.size()), m(static_cast<size_t>(rows)), l(static_cast<size_t>(rows));
  for (auto* b : {&out, &m, &l}) b->fill_bytes(fa::kPoisonByte);
  fa::online::softmax_rows(in.data(), out.data(), m.data(), l.data(), rows, cols);
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> p = out.download(), mm = m.download(), ll = l.download();
  const fa::SoftmaxCheck c = fa::check_softmax(x.data(), rows, cols, p.data(), mm.data(), ll.data());
  INFO(rows << " rows x " << cols << " columns");
  INFO("p: " << fa::describe(c.p, nullptr));
  INFO("m: " << fa::describe(c.m, nullptr));
  INFO("l: " << fa::describe(c.l, nullptr));
  REQUIRE(c.passed());
}

// Row lengths below, at and past a block's 256 threads and a warp's 32; values up to 1e4,
// whose exp() overflows without the max; a row with -inf entries and one all -inf.
void softmax_battery() {
  uint64_t seed = 40;
  for (int64_t cols : {1, 31, 256, 257, 1000}) {
    require_softmax(fa::random_uniform(3 * cols, ++seed, 5.0f), 3, cols);
  }
  require_softmax(fa::random_uniform(2 * 300, 7, 1e4f), 2, 300);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = fa::random_uniform(2 * 100, 9, 3.0f);
  for (int j = 0; j < 100; j += 3) x[j] = -inf;  // row 0: every third entry masked
  for (int j = 100; j < 200; ++j) x[j] = -inf;   // row 1: all masked
  require_softmax(x, 2, 100);
}

}  // namespace

TEST_CASE("02-block-merge: the row's m and l merged from every thread's", "[02-block-merge]") { softmax_battery(); }

TEST_CASE("02-normalise: every probability written, an all -inf row as zeros", "[02-normalise]") { softmax_battery(); }

TEST_CASE("02-bug: find the bug", "[02-bug]") { softmax_battery(); }
