#include "common/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fa {

std::vector<int64_t> all_rows(const AttentionProblem& p) {
  std::vector<int64_t> rows(static_cast<size_t>(p.rows()));
  for (int64_t r = 0; r < p.rows(); ++r) rows[static_cast<size_t>(r)] = r;
  return rows;
}

std::vector<int64_t> sample_rows(const AttentionProblem& p, int64_t count) {
  return sample_indices(p.rows(), count);
}

std::vector<int64_t> sample_indices(int64_t total, int64_t count) {
  std::vector<int64_t> rows;
  if (count >= total) {
    for (int64_t r = 0; r < total; ++r) rows.push_back(r);
    return rows;
  }
  if (count < 2) return {0};
  rows.reserve(static_cast<size_t>(count));
  // Evenly spaced, so the rows land on every head and on varied positions within it.
  for (int64_t k = 0; k < count; ++k) {
    rows.push_back(static_cast<int64_t>(static_cast<double>(k) * static_cast<double>(total - 1) /
                                        static_cast<double>(count - 1)));
  }
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

namespace {

// One algorithm for every precision: scores, max, exp-sum, weighted sum of V, exactly
// the three steps of stage 01, one row at a time. With `lowp` F16 or BF16 (Real =
// float), the probabilities are rounded to that type before P·V and the output after,
// as a plain fp16/bf16 matmul-softmax-matmul with fp32 accumulation does.
template <typename Real>
AttentionRows<Real> attention_rows(const AttentionProblem& p, const float* q, const float* k,
                                   const float* v, const std::vector<int64_t>& rows,
                                   DType lowp = DType::F32) {
  const int64_t d = p.dim;
  const Real scale = static_cast<Real>(p.scale);
  const Real neg_inf = -std::numeric_limits<Real>::infinity();
  AttentionRows<Real> out;
  out.rows = rows;
  out.o.assign(rows.size() * static_cast<size_t>(d), Real(0));
  out.m.assign(rows.size(), neg_inf);
  out.lse.assign(rows.size(), neg_inf);
  std::vector<Real> s(static_cast<size_t>(p.seq_kv));
  for (size_t n = 0; n < rows.size(); ++n) {
    const int64_t r = rows[n];
    const int64_t bh = r / p.seq_q;  // which (batch, head)
    const int64_t i = r % p.seq_q;   // query position within the head
    const float* qi = q + r * d;
    const float* kh = k + bh * p.seq_kv * d;
    const float* vh = v + bh * p.seq_kv * d;
    // The causal mask (top-left) hides keys j > i; key 0 is always visible.
    const int64_t visible = p.causal ? std::min(p.seq_kv, i + 1) : p.seq_kv;
    Real m = neg_inf;
    for (int64_t j = 0; j < visible; ++j) {
      Real dot = 0;
      for (int64_t c = 0; c < d; ++c) dot += static_cast<Real>(qi[c]) * static_cast<Real>(kh[j * d + c]);
      s[static_cast<size_t>(j)] = scale * dot;
      m = std::max(m, s[static_cast<size_t>(j)]);
    }
    Real l = 0;
    for (int64_t j = 0; j < visible; ++j) {
      s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - m);
      l += s[static_cast<size_t>(j)];
    }
    Real* o = out.o.data() + n * static_cast<size_t>(d);
    for (int64_t j = 0; j < visible; ++j) {
      Real pj = s[static_cast<size_t>(j)] / l;
      if (lowp != DType::F32) pj = static_cast<Real>(round_to(lowp, static_cast<float>(pj)));
      for (int64_t c = 0; c < d; ++c) o[c] += pj * static_cast<Real>(vh[j * d + c]);
    }
    if (lowp != DType::F32) {
      for (int64_t c = 0; c < d; ++c) o[c] = static_cast<Real>(round_to(lowp, static_cast<float>(o[c])));
    }
    out.m[n] = m;
    out.lse[n] = m + std::log(l);
  }
  return out;
}

}  // namespace

AttentionRows<double> reference_attention(const AttentionProblem& p, const float* q,
                                          const float* k, const float* v,
                                          const std::vector<int64_t>& rows) {
  return attention_rows<double>(p, q, k, v, rows);
}

AttentionRows<float> baseline_attention_fp32(const AttentionProblem& p, const float* q,
                                             const float* k, const float* v,
                                             const std::vector<int64_t>& rows) {
  return attention_rows<float>(p, q, k, v, rows);
}

AttentionRows<float> baseline_attention(const AttentionProblem& p, const float* q, const float* k,
                                        const float* v, const std::vector<int64_t>& rows) {
  return attention_rows<float>(p, q, k, v, rows, p.dtype);
}

namespace {

template <typename Real>
void softmax_rows(const float* x, int64_t rows, int64_t cols, Real* p, Real* m, Real* l) {
  const Real neg_inf = -std::numeric_limits<Real>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    Real* pr = p + r * cols;
    Real mr = neg_inf;
    for (int64_t j = 0; j < cols; ++j) mr = std::max(mr, static_cast<Real>(xr[j]));
    Real lr = 0;
    if (mr == neg_inf) {
      // All −inf: the documented rule, zeros instead of exp(−inf − (−inf)) = NaN.
      std::fill(pr, pr + cols, Real(0));
    } else {
      for (int64_t j = 0; j < cols; ++j) lr += std::exp(static_cast<Real>(xr[j]) - mr);
      for (int64_t j = 0; j < cols; ++j) pr[j] = std::exp(static_cast<Real>(xr[j]) - mr) / lr;
    }
    if (m) m[r] = mr;
    if (l) l[r] = lr;
  }
}

}  // namespace

void reference_softmax(const float* x, int64_t rows, int64_t cols, double* p, double* m,
                       double* l) {
  softmax_rows<double>(x, rows, cols, p, m, l);
}

void baseline_softmax_fp32(const float* x, int64_t rows, int64_t cols, float* p, float* m,
                           float* l) {
  softmax_rows<float>(x, rows, cols, p, m, l);
}

}  // namespace fa
