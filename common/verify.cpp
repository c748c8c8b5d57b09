#include "common/verify.h"

#include <algorithm>

#include "common/reference.h"

namespace fa {

namespace {

// O and (optionally) lse on `rows` against a reference and a same-precision baseline.
AttentionCheck check_rows(DType dtype, int64_t d, const AttentionRows<double>& ref, const AttentionRows<float>& base,
                          const std::vector<float>& o, const std::vector<int64_t>& rows,
                          const std::vector<float>* lse) {
  std::vector<float> got(rows.size() * static_cast<size_t>(d));
  for (size_t n = 0; n < rows.size(); ++n) {
    std::copy_n(o.begin() + static_cast<std::ptrdiff_t>(rows[n]) * d, d,
                got.begin() + static_cast<std::ptrdiff_t>(n) * d);
  }
  AttentionCheck check;
  check.rows = rows;
  check.o = compare_with_baseline(dtype, got.data(), ref.o.data(), base.o.data(), static_cast<int64_t>(got.size()));
  if (lse) {
    std::vector<float> got_lse(rows.size());
    for (size_t n = 0; n < rows.size(); ++n) got_lse[n] = (*lse)[static_cast<size_t>(rows[n])];
    check.has_lse = true;
    // The log-sum-exp is fp32 in every precision (scores are accumulated in fp32).
    check.lse = compare_fp32(got_lse.data(), ref.lse.data(), base.lse.data(),
                             static_cast<int64_t>(rows.size()));
  }
  return check;
}

}  // namespace

AttentionCheck check_attention(const AttentionProblem& p, const AttentionInputs& in,
                               const std::vector<float>& o, const std::vector<int64_t>& rows,
                               const std::vector<float>* lse, const Mask* mask) {
  return check_rows(p.dtype, p.dim, reference_attention(p, in.q.data(), in.k.data(), in.v.data(), rows, mask),
                    baseline_attention(p, in.q.data(), in.k.data(), in.v.data(), rows, mask), o, rows, lse);
}

AttentionCheck check_decode(const DecodeProblem& p, const AttentionInputs& in, const std::vector<float>& o,
                            const std::vector<int64_t>& rows, const std::vector<float>* lse) {
  return check_rows(p.dtype, p.dim, reference_decode(p, in.q.data(), in.k.data(), in.v.data(), rows),
                    baseline_decode(p, in.q.data(), in.k.data(), in.v.data(), rows), o, rows, lse);
}

SoftmaxCheck check_softmax(const float* x, int64_t rows, int64_t cols, const float* p,
                           const float* m, const float* l) {
  const size_t n = static_cast<size_t>(rows * cols);
  std::vector<double> ref_p(n), ref_m(static_cast<size_t>(rows)), ref_l(static_cast<size_t>(rows));
  std::vector<float> base_p(n), base_m(static_cast<size_t>(rows)), base_l(static_cast<size_t>(rows));
  reference_softmax(x, rows, cols, ref_p.data(), ref_m.data(), ref_l.data());
  baseline_softmax_fp32(x, rows, cols, base_p.data(), base_m.data(), base_l.data());
  SoftmaxCheck check;
  check.p = compare_fp32(p, ref_p.data(), base_p.data(), rows * cols);
  if (m && l) {
    check.has_stats = true;
    check.m = compare_fp32(m, ref_m.data(), base_m.data(), rows);
    check.l = compare_fp32(l, ref_l.data(), base_l.data(), rows);
  }
  return check;
}

GradientCheck check_attention_backward(const AttentionProblem& p, const AttentionInputs& in,
                                       const std::vector<float>& d_o, const AttentionGradients<float>& got,
                                       const std::vector<int64_t>& heads) {
  AttentionProblem one = p;  // one head at a time
  one.batch = 1;
  one.heads = 1;
  const auto q_n = static_cast<std::ptrdiff_t>(p.seq_q * p.dim), kv_n = static_cast<std::ptrdiff_t>(p.seq_kv * p.dim);
  const auto head_of = [](const std::vector<float>& x, int64_t bh, std::ptrdiff_t n) {
    return std::vector<float>(x.begin() + bh * n, x.begin() + (bh + 1) * n);
  };
  struct Gathered {  // one gradient over the checked heads, laid end to end
    std::vector<float> got, base;
    std::vector<double> want;
    double terms_max = 0;  // the largest sum of |terms| behind an element
    double lse_max = 0;    // the largest |log-sum-exp| of a row
    DType dtype = DType::F32;
    void add(const std::vector<float>& all, int64_t bh, std::ptrdiff_t n, const std::vector<double>& ref,
             const std::vector<float>& baseline, const std::vector<double>& term_sums) {
      got.insert(got.end(), all.begin() + bh * n, all.begin() + (bh + 1) * n);
      want.insert(want.end(), ref.begin(), ref.end());
      base.insert(base.end(), baseline.begin(), baseline.end());
      for (double t : term_sums) terms_max = std::max(terms_max, t);
    }
    // The fp32 tolerance, plus what rebuilding P = exp(S − lse) in float32 costs where the
    // logits are large. Unless the backward pass recomputes S bit for bit as the forward
    // pass that made lse computed it (stage 10 after stage 05 does), S is rounded twice, in
    // two ways, each with errors of a few units of u·|lse| (u = 2^-24) that do not cancel,
    // and an error e in an exponent is a relative error e in P, so in every term. The fp32
    // baseline computes S once, and its rounding cancels between S and its own lse. As for
    // the baseline's error, 8 times that unit is allowed. At ordinary logits (|lse| near
    // log Nkv) this adds almost nothing; at logits in the thousands (|lse| ~ 1000, so 6e-5 a
    // unit) it is what a correct kernel needs: at B=1 H=2 Nq=100 Nkv=150 d=64 with inputs in
    // [-30, 30], stage 10 recomputing S in another order than stage 05 had dV off by 4.6e-4
    // to 7.0e-4 over eleven seeds on the CPU backend, where the fp32 tolerance alone allows
    // about 2.3e-4 (stages/10_backward/README.md, large logits).
    Comparison compare() const {
      const auto n = static_cast<int64_t>(got.size());
      Tolerance tol = cancelling_tolerance(dtype, want.data(), base.data(), n, terms_max);
      tol.atol += kBaselineErrorFactor * 0x1.0p-24 * lse_max * terms_max;
      return fa::compare(got.data(), want.data(), n, tol);
    }
  } dq, dk, dv;
  for (int64_t bh : heads) {
    const std::vector<float> q = head_of(in.q, bh, q_n), k = head_of(in.k, bh, kv_n), v = head_of(in.v, bh, kv_n),
                             g = head_of(d_o, bh, q_n);
    AttentionGradients<double> term_sums;
    double lse_max = 0;
    const AttentionGradients<double> ref =
        reference_attention_backward(one, q.data(), k.data(), v.data(), g.data(), &term_sums, &lse_max);
    for (Gathered* x : {&dq, &dk, &dv}) x->lse_max = std::max(x->lse_max, lse_max), x->dtype = p.dtype;
    const AttentionGradients<float> base =
        baseline_attention_backward(one, q.data(), k.data(), v.data(), g.data());
    dq.add(got.dq, bh, q_n, ref.dq, base.dq, term_sums.dq);
    dk.add(got.dk, bh, kv_n, ref.dk, base.dk, term_sums.dk);
    dv.add(got.dv, bh, kv_n, ref.dv, base.dv, term_sums.dv);
  }
  GradientCheck check;
  check.heads = heads;
  check.dq = dq.compare();
  check.dk = dk.compare();
  check.dv = dv.compare();
  return check;
}

IndexNamer gradient_namer(const AttentionProblem& p, const std::vector<int64_t>& heads, const std::string& what) {
  const bool queries = what == "dQ";
  const int64_t seq = queries ? p.seq_q : p.seq_kv;
  return [p, heads, what, queries, seq](int64_t k) {
    const int64_t bh = heads[static_cast<size_t>(k / (seq * p.dim))];
    return what + "[b=" + std::to_string(bh / p.heads) + ",h=" + std::to_string(bh % p.heads) +
           (queries ? ",i=" : ",j=") + std::to_string(k / p.dim % seq) + ",c=" + std::to_string(k % p.dim) + "]";
  };
}

namespace {

std::string row_coords(const AttentionProblem& p, int64_t r) {
  const int64_t bh = r / p.seq_q;
  return "b=" + std::to_string(bh / p.heads) + ",h=" + std::to_string(bh % p.heads) +
         ",i=" + std::to_string(r % p.seq_q);
}

std::string decode_coords(const DecodeProblem& p, int64_t r) {
  const int64_t bh = r / p.seq_q;
  return "b=" + std::to_string(bh / p.q_heads) + ",hq=" + std::to_string(bh % p.q_heads) +
         ",i=" + std::to_string(r % p.seq_q);
}

}  // namespace

IndexNamer decode_output_namer(const DecodeProblem& p, const std::vector<int64_t>& rows) {
  return [p, rows](int64_t k) {
    return "O[" + decode_coords(p, rows[static_cast<size_t>(k / p.dim)]) + ",c=" + std::to_string(k % p.dim) + "]";
  };
}

IndexNamer decode_row_namer(const DecodeProblem& p, const std::vector<int64_t>& rows, const char* what) {
  const std::string name = what;
  return [p, rows, name](int64_t k) { return name + "[" + decode_coords(p, rows[static_cast<size_t>(k)]) + "]"; };
}

IndexNamer output_namer(const AttentionProblem& p, const std::vector<int64_t>& rows) {
  return [p, rows](int64_t k) {
    return "O[" + row_coords(p, rows[static_cast<size_t>(k / p.dim)]) +
           ",c=" + std::to_string(k % p.dim) + "]";
  };
}

IndexNamer row_namer(const AttentionProblem& p, const std::vector<int64_t>& rows,
                     const char* what) {
  const std::string name = what;
  return [p, rows, name](int64_t k) {
    return name + "[" + row_coords(p, rows[static_cast<size_t>(k)]) + "]";
  };
}

}  // namespace fa
