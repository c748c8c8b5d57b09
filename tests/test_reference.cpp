// The reference itself, against values checked by hand, and its fp32 baseline.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "common/problem.h"
#include "common/random.h"
#include "common/reference.h"
#include "tests/catch.h"

using Catch::Matchers::WithinAbs;

TEST_CASE("reference softmax of [2, 1, 4, 1.5, 3]", "[reference]") {
  const std::vector<float> x = {2, 1, 4, 1.5f, 3};
  std::vector<double> p(5);
  double m = 0, l = 0;
  fa::reference_softmax(x.data(), 1, 5, p.data(), &m, &l);
  // m = 4; l = e^-2 + e^-3 + e^0 + e^-2.5 + e^-1 = 0.1353 + 0.0498 + 1 + 0.0821 + 0.3679
  REQUIRE(m == 4.0);
  REQUIRE_THAT(l, WithinAbs(1.6351, 1e-4));
  REQUIRE_THAT(p[2], WithinAbs(1.0 / 1.6351, 1e-4));  // the max gets e^0 / l ≈ 0.6116
  double sum = 0;
  for (double v : p) sum += v;
  REQUIRE_THAT(sum, WithinAbs(1.0, 1e-12));
}

TEST_CASE("reference softmax of an all -inf row is zeros with m = -inf, l = 0", "[reference]") {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {-inf, -inf, -inf};
  std::vector<double> p(3, 123.0);
  double m = 0, l = 1;
  fa::reference_softmax(x.data(), 1, 3, p.data(), &m, &l);
  REQUIRE(m == -std::numeric_limits<double>::infinity());
  REQUIRE(l == 0.0);
  for (double v : p) REQUIRE(v == 0.0);
}

TEST_CASE("reference attention: scores [2, 3, 5, 4] over values [10, 20, 30, 40]", "[reference]") {
  // d = 1, scale = 1, q = 1: the scores are the keys themselves.
  fa::AttentionProblem p;
  p.seq_q = 1;
  p.seq_kv = 4;
  p.dim = 1;
  p.scale = 1.0f;
  const std::vector<float> q = {1}, k = {2, 3, 5, 4}, v = {10, 20, 30, 40};
  const auto r = fa::reference_attention(p, q.data(), k.data(), v.data(), {0});
  // weights e^(s-5) = 0.0498, 0.1353, 1, 0.3679; l = 1.5530; O = 47.92 / 1.5530
  REQUIRE_THAT(r.o[0], WithinAbs(30.86, 0.005));
  REQUIRE(r.m[0] == 5.0);
  REQUIRE_THAT(r.lse[0], WithinAbs(5.0 + std::log(1.5530), 1e-4));
}

TEST_CASE("reference causal mask: query 0 sees only key 0", "[reference]") {
  fa::AttentionProblem p;
  p.seq_q = 3;
  p.seq_kv = 3;
  p.dim = 1;
  p.scale = 1.0f;
  p.causal = true;
  const std::vector<float> q = {1, 1, 1}, k = {5, 1, 9}, v = {10, 20, 30};
  const auto r = fa::reference_attention(p, q.data(), k.data(), v.data(), fa::all_rows(p));
  REQUIRE(r.o[0] == 10.0);                       // only key 0
  REQUIRE_THAT(r.o[1], WithinAbs((10 * std::exp(0.0) + 20 * std::exp(-4.0)) / (1 + std::exp(-4.0)), 1e-12));
  REQUIRE(r.m[2] == 9.0);                        // key 2 is visible to query 2
}

TEST_CASE("reference rows are independent of which rows are asked for", "[reference]") {
  const fa::AttentionProblem p = fa::make_problem(2, 3, 17, 29, 16);
  const fa::AttentionInputs in = fa::random_inputs(p, 3);
  const auto all = fa::reference_attention(p, in.q.data(), in.k.data(), in.v.data(), fa::all_rows(p));
  const std::vector<int64_t> some = fa::sample_rows(p, 10);
  REQUIRE(some.front() == 0);
  REQUIRE(some.back() == p.rows() - 1);
  const auto part = fa::reference_attention(p, in.q.data(), in.k.data(), in.v.data(), some);
  for (size_t n = 0; n < some.size(); ++n) {
    for (int64_t c = 0; c < p.dim; ++c) {
      REQUIRE(part.o[n * 16 + static_cast<size_t>(c)] == all.o[static_cast<size_t>(some[n] * 16 + c)]);
    }
  }
}

TEST_CASE("the fp32 baseline is close to, but not the same as, float64", "[reference]") {
  const fa::AttentionProblem p = fa::make_problem(1, 2, 33, 300, 64);
  const fa::AttentionInputs in = fa::random_inputs(p, 8);
  const auto rows = fa::all_rows(p);
  const auto ref = fa::reference_attention(p, in.q.data(), in.k.data(), in.v.data(), rows);
  const auto base = fa::baseline_attention_fp32(p, in.q.data(), in.k.data(), in.v.data(), rows);
  double max_err = 0;
  for (size_t i = 0; i < ref.o.size(); ++i) max_err = std::max(max_err, std::fabs(ref.o[i] - base.o[i]));
  REQUIRE(max_err > 0.0);
  REQUIRE(max_err < 1e-5);
}

// The decoding reference is the attention reference re-indexed: a query head reads KV head
// hq / G, sequence b's first L_b cache rows, under a mask aligned bottom-right.
TEST_CASE("the decoding reference is attention over each sequence's own cache", "[reference][decode]") {
  const int64_t d = 16, hq = 4, hkv = 2, nq = 3, cap = 20;
  const fa::DecodeProblem p = fa::make_decode_problem(2, hq, hkv, nq, cap, {20, 7}, d, 0.0, true, fa::DType::F32);
  const fa::AttentionInputs in = fa::random_decode_inputs(p, 5);
  const std::vector<int64_t> rows = fa::sample_indices(p.rows(), p.rows());
  const auto got = fa::reference_decode(p, in.q.data(), in.k.data(), in.v.data(), rows);
  for (int64_t b = 0; b < 2; ++b) {
    const int64_t len = p.kv_lens[static_cast<size_t>(b)];
    // Spare rows are NaN: the reference never reads them.
    if (len < cap) REQUIRE(std::isnan(in.k[static_cast<size_t>(((b * hkv + 1) * cap + len) * d)]));
    for (int64_t h = 0; h < hq; ++h) {
      // One head as an ordinary problem: Nq = L_b queries, of which the last nq are ours,
      // top-left causal over them is bottom-right causal over our nq.
      const fa::AttentionProblem one = fa::make_problem(1, 1, len, len, d, 0.0, true);
      std::vector<float> q(static_cast<size_t>(len * d), 0.0f), k(static_cast<size_t>(len * d)), v(k.size());
      const int64_t cache = (b * hkv + h / (hq / hkv)) * cap * d;
      std::copy_n(in.k.begin() + cache, len * d, k.begin());
      std::copy_n(in.v.begin() + cache, len * d, v.begin());
      const int64_t first = (b * hq + h) * nq;  // our first row, flat over [B, Hq, Nq]
      std::copy_n(in.q.begin() + first * d, nq * d, q.begin() + (len - nq) * d);
      std::vector<int64_t> last;
      for (int64_t i = len - nq; i < len; ++i) last.push_back(i);
      const auto want = fa::reference_attention(one, q.data(), k.data(), v.data(), last);
      for (int64_t i = 0; i < nq; ++i) {
        REQUIRE(got.lse[static_cast<size_t>(first + i)] == want.lse[static_cast<size_t>(i)]);
        for (int64_t c = 0; c < d; ++c) {
          REQUIRE(got.o[static_cast<size_t>((first + i) * d + c)] == want.o[static_cast<size_t>(i * d + c)]);
        }
      }
    }
  }
}

namespace {

// Σ O ∘ dO in float64: the loss whose gradients reference_attention_backward gives.
double loss(const fa::AttentionProblem& p, const std::vector<float>& q, const std::vector<float>& k,
            const std::vector<float>& v, const std::vector<float>& d_o) {
  const fa::AttentionRows<double> o = fa::reference_attention(p, q.data(), k.data(), v.data(), fa::all_rows(p));
  double sum = 0;
  for (size_t n = 0; n < o.o.size(); ++n) sum += o.o[n] * d_o[n];
  return sum;
}

}  // namespace

TEST_CASE("the backward reference matches central finite differences of the forward one", "[reference][backward]") {
  // Inputs on a grid of 2^-10 in [-2, 2] and a step h = 2^-10, so x ± h is exact in float:
  // the differences see only the forward reference's float64 arithmetic. Their error is
  // about h²/6 times a third derivative, far below the tolerance.
  std::mt19937 rng(20261123);
  std::uniform_int_distribution<int> grid(-2048, 2048);
  auto draw = [&](int64_t n) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& e : x) e = static_cast<float>(grid(rng)) / 1024.0f;
    return x;
  };
  const float h = 1.0f / 1024.0f;
  for (bool causal : {false, true}) {
    // Nq > Nkv and Nq < Nkv, so the causal mask leaves some keys unseen and some rows full.
    for (auto [nq, nkv] : {std::pair<int64_t, int64_t>{5, 3}, {3, 6}}) {
      const fa::AttentionProblem p = fa::make_problem(1, 2, nq, nkv, 16, 0.0, causal);
      std::vector<float> q = draw(p.q_elems()), k = draw(p.kv_elems()), v = draw(p.kv_elems());
      const std::vector<float> d_o = draw(p.q_elems());
      const fa::AttentionGradients<double> g = fa::reference_attention_backward(p, q.data(), k.data(), v.data(), d_o.data());
      int64_t nonzero = 0;
      for (auto [x, dx, name] : {std::tuple{&q, &g.dq, "dQ"}, {&k, &g.dk, "dK"}, {&v, &g.dv, "dV"}}) {
        REQUIRE(dx->size() == x->size());
        for (size_t n = 0; n < x->size(); ++n) {
          const float keep = (*x)[n];
          (*x)[n] = keep + h;
          const double up = loss(p, q, k, v, d_o);
          (*x)[n] = keep - h;
          const double down = loss(p, q, k, v, d_o);
          (*x)[n] = keep;
          const double fd = (up - down) / (2.0 * h);
          INFO(name << "[" << n << "] causal " << causal << " Nq " << nq << " Nkv " << nkv << ": formula "
                    << (*dx)[n] << ", finite difference " << fd);
          REQUIRE_THAT((*dx)[n], WithinAbs(fd, 1e-5 + 1e-4 * std::abs(fd)));
          nonzero += std::abs(fd) > 1e-3;
        }
      }
      REQUIRE(nonzero > static_cast<int64_t>(q.size()));  // most gradients are far from zero
    }
  }
}

TEST_CASE("the fp32 backward baseline is close to, but not the same as, float64", "[reference][backward]") {
  const fa::AttentionProblem p = fa::make_problem(1, 2, 40, 50, 32, 0.0, true);
  const fa::AttentionInputs in = fa::random_inputs(p, 7);
  const std::vector<float> d_o = fa::random_inputs(p, 8).q;  // any values shaped like O
  const fa::AttentionGradients<double> want = fa::reference_attention_backward(p, in.q.data(), in.k.data(),
                                                                               in.v.data(), d_o.data());
  const fa::AttentionGradients<float> got = fa::baseline_attention_backward_fp32(p, in.q.data(), in.k.data(),
                                                                                 in.v.data(), d_o.data());
  for (auto [g, w] : {std::pair{&got.dq, &want.dq}, {&got.dk, &want.dk}, {&got.dv, &want.dv}}) {
    REQUIRE(g->size() == w->size());
    double max_err = 0, max_ref = 0;
    for (size_t n = 0; n < g->size(); ++n) {
      max_err = std::max(max_err, std::abs((*g)[n] - (*w)[n]));
      max_ref = std::max(max_ref, std::abs((*w)[n]));
    }
    CHECK(max_ref > 0.01);
    CHECK(max_err > 0);               // fp32 rounds ...
    CHECK(max_err < 1e-5 * max_ref);  // ... a little
  }
}

TEST_CASE("the backward reference's term sums bound the gradients, and are not zero where they are", "[reference][backward]") {
  // One key: the softmax is constant, so dQ and dK are exactly zero, yet the terms they sum
  // (dP and D, equal but computed apart) are not: the rounding error of a kernel follows them.
  for (int64_t nkv : {1, 37}) {
    const fa::AttentionProblem p = fa::make_problem(1, 2, 9, nkv, 16, 0.0, /*causal=*/false);
    const fa::AttentionInputs in = fa::random_inputs(p, 12);
    const std::vector<float> d_o = fa::random_output_gradient(p, 12);
    fa::AttentionGradients<double> sums;
    const fa::AttentionGradients<double> g =
        fa::reference_attention_backward(p, in.q.data(), in.k.data(), in.v.data(), d_o.data(), &sums);
    for (auto [grad, sum] : {std::pair{&g.dq, &sums.dq}, {&g.dk, &sums.dk}, {&g.dv, &sums.dv}}) {
      REQUIRE(sum->size() == grad->size());
      for (size_t n = 0; n < grad->size(); ++n) {
        REQUIRE((*sum)[n] > 0);
        REQUIRE(std::abs((*grad)[n]) <= (*sum)[n] * (1 + 1e-12));
        if (nkv == 1 && grad != &g.dv) REQUIRE(std::abs((*grad)[n]) < 1e-12 * (*sum)[n]);
      }
    }
  }
}
