// Stage 02: the online recurrence by hand, and the kernel against the float64
// reference: ragged row lengths, -inf entries and rows, ±1e4 values, identical values,
// and each row's m and l themselves; and stage 01's attention with this softmax inside.
#include <cmath>
#include <limits>
#include <vector>

#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "common/random.h"
#include "common/verify.h"
#include "stages/01_naive/naive_attention.h"
#include "stages/02_online_softmax/online_softmax.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

using Catch::Matchers::WithinAbs;
namespace online = fa::online;

namespace {

const float kInf = std::numeric_limits<float>::infinity();

struct Result {
  std::vector<float> p, m, l;
};

// Runs the kernel on a host matrix, with every output poisoned first.
Result run_online(const std::vector<float>& x, int64_t rows, int64_t cols, bool in_place = false) {
  fa::DeviceBuffer<float> in(x), out(x.size()), m(static_cast<size_t>(rows)), l(static_cast<size_t>(rows));
  out.fill_bytes(fa::kPoisonByte);
  m.fill_bytes(fa::kPoisonByte);
  l.fill_bytes(fa::kPoisonByte);
  online::softmax_rows(in.data(), in_place ? in.data() : out.data(), m.data(), l.data(), rows, cols);
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  return Result{in_place ? in.download() : out.download(), m.download(), l.download()};
}

void require_matches_reference(const std::vector<float>& x, int64_t rows, int64_t cols) {
  const Result r = run_online(x, rows, cols);
  const fa::SoftmaxCheck c = fa::check_softmax(x.data(), rows, cols, r.p.data(), r.m.data(), r.l.data());
  INFO("rows " << rows << " x cols " << cols);
  INFO("p: " << fa::describe(c.p, nullptr));
  INFO("m: " << fa::describe(c.m, nullptr));
  INFO("l: " << fa::describe(c.l, nullptr));
  REQUIRE(c.passed());
}

}  // namespace

TEST_CASE("the recurrence on [2, 1, 4, 1.5, 3] gives m = 4, l = 1.635", "[stage02]") {
  online::Stats s = online::empty_stats();
  for (float x : {2.0f, 1.0f, 4.0f, 1.5f, 3.0f}) online::update(s, x);
  REQUIRE(s.m == 4.0f);
  REQUIRE_THAT(s.l, WithinAbs(1.6351, 1e-4));
}

TEST_CASE("tiles of 2 over [1, 2, 3, 4] merge to the same m and l", "[stage02]") {
  online::Stats t1 = online::empty_stats(), t2 = online::empty_stats(), whole = online::empty_stats();
  online::update(t1, 1.0f);
  online::update(t1, 2.0f);
  online::update(t2, 3.0f);
  online::update(t2, 4.0f);
  for (float x : {1.0f, 2.0f, 3.0f, 4.0f}) online::update(whole, x);
  REQUIRE_THAT(t1.l, WithinAbs(1.3679, 1e-4));  // e^-1 + e^0
  const online::Stats merged = online::merge(t1, t2);
  REQUIRE(merged.m == 4.0f);
  // l = 1.3679·e^(2−4) + 1.3679 = 1.5530 (the seed post rounds 1.3679 to 1.367 and gets 1.552)
  REQUIRE_THAT(merged.l, WithinAbs(1.5530, 1e-4));
  REQUIRE_THAT(merged.l, WithinAbs(whole.l, 1e-6));
}

TEST_CASE("merging with an empty part changes nothing, and empty with empty stays empty", "[stage02]") {
  online::Stats s = online::empty_stats();
  online::update(s, 3.0f);
  const online::Stats a = online::merge(s, online::empty_stats()), b = online::merge(online::empty_stats(), s);
  REQUIRE((a.m == 3.0f && a.l == 1.0f && b.m == 3.0f && b.l == 1.0f));
  const online::Stats e = online::merge(online::empty_stats(), online::empty_stats());
  REQUIRE(e.m == -kInf);
  REQUIRE(e.l == 0.0f);
  online::update(s, -kInf);  // adds nothing
  REQUIRE(s.l == 1.0f);
}

TEST_CASE("stage 02 matches the reference for row lengths from 1 to beyond 4096", "[stage02]") {
  // Not multiples of the 256 threads per row, and one shorter than a warp.
  for (int64_t cols : {1, 2, 31, 255, 256, 257, 1000, 4097, 5000}) {
    const int64_t rows = 5;
    require_matches_reference(fa::random_uniform(rows * cols, 100 + cols, 10.0f), rows, cols);
  }
}

TEST_CASE("stage 02: rows with -inf, all -inf, identical values, and +-1e4", "[stage02]") {
  const int64_t rows = 6, cols = 777;
  std::vector<float> x = fa::random_uniform(rows * cols, 3, 5.0f);
  for (int64_t j = 0; j < cols; j += 3) x[static_cast<size_t>(j)] = -kInf;        // row 0: every third -inf
  for (int64_t j = 0; j < cols; ++j) x[static_cast<size_t>(cols + j)] = -kInf;    // row 1: all -inf
  for (int64_t j = 0; j < cols; ++j) x[static_cast<size_t>(2 * cols + j)] = 7.5f;  // row 2: identical
  for (int64_t j = 0; j < cols; ++j) {                                             // rows 3, 4: +-1e4
    x[static_cast<size_t>(3 * cols + j)] = (j % 2 ? 1e4f : -1e4f) * (1.0f - 1e-3f * static_cast<float>(j % 7));
    x[static_cast<size_t>(4 * cols + j)] = 1e4f - static_cast<float>(j % 5);
    x[static_cast<size_t>(5 * cols + j)] = -1e4f - static_cast<float>(j % 5);  // row 5: all far below zero
  }
  require_matches_reference(x, rows, cols);

  const Result r = run_online(x, rows, cols);
  for (float p : r.p) REQUIRE(std::isfinite(p));
  REQUIRE(r.m[1] == -kInf);  // the documented rule for an all -inf row
  REQUIRE(r.l[1] == 0.0f);
  for (int64_t j = 0; j < cols; ++j) REQUIRE(r.p[static_cast<size_t>(cols + j)] == 0.0f);
  REQUIRE(r.m[2] == 7.5f);
  REQUIRE_THAT(r.l[2], WithinAbs(static_cast<double>(cols), 1e-2));
  REQUIRE_THAT(r.p[static_cast<size_t>(2 * cols)], WithinAbs(1.0 / cols, 1e-7));
  REQUIRE(r.m[5] == -1e4f);  // a real score of the row, not a running max started at 0
  REQUIRE(r.l[5] >= 1.0f);
}

TEST_CASE("stage 02 works in place", "[stage02]") {
  const int64_t rows = 3, cols = 300;
  const std::vector<float> x = fa::random_uniform(rows * cols, 9, 5.0f);
  const Result r = run_online(x, rows, cols, /*in_place=*/true);
  REQUIRE(fa::check_softmax(x.data(), rows, cols, r.p.data(), r.m.data(), r.l.data()).passed());
}

TEST_CASE("stage 01's attention with the online softmax matches the reference", "[stage02]") {
  const auto run = [](const fa::AttentionProblem& p, const fa::DeviceTensors& t) {
    fa::DeviceBuffer<float> S(fa::naive::workspace_bytes(p) / sizeof(float));
    const auto f = t.f32();
    fa::naive::attention(p, f.q, f.k, f.v, f.o, S.data(), online::softmax_rows_only);
  };
  // The online softmax sees only rows of S: their lengths (Nkv) and values matter, not the
  // head dim, which changes only stage 01's products (tested at every head dim there).
  fa::test::check_attention_stage(run, /*with_lse=*/false, /*causal=*/true, fa::DType::F32, {64});
}
