#include "common/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/errors.h"

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

// Σ_c a[c]·b[c] over d values, in precision Real.
template <typename Real>
Real dot(const float* a, const float* b, int64_t d) {
  Real sum = 0;
  for (int64_t c = 0; c < d; ++c) sum += static_cast<Real>(a[c]) * static_cast<Real>(b[c]);
  return sum;
}

// The scaled scores of one query row against its first `visible` keys, s[j] = scale·qi·k_j
// (`s` is scratch of at least `visible` values); returns their max.
template <typename Real>
Real scores(const float* qi, const float* kh, int64_t visible, int64_t d, Real scale, std::vector<Real>& s) {
  Real m = -std::numeric_limits<Real>::infinity();
  for (int64_t j = 0; j < visible; ++j) {
    s[static_cast<size_t>(j)] = scale * dot<Real>(qi, kh + j * d, d);
    m = std::max(m, s[static_cast<size_t>(j)]);
  }
  return m;
}

// The first two steps of stage 01 for one query row against its first `visible` keys:
// s[j] = exp(scale·qi·k_j − m) with m the largest scaled score (written to *m_out);
// returns l = Σ_j s[j]. `s` is scratch of at least `visible` values.
template <typename Real>
Real exp_scores(const float* qi, const float* kh, int64_t visible, int64_t d, Real scale, std::vector<Real>& s,
                Real* m_out) {
  const Real m = scores(qi, kh, visible, d, scale, s);
  Real l = 0;
  for (int64_t j = 0; j < visible; ++j) {
    s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - m);
    l += s[static_cast<size_t>(j)];
  }
  *m_out = m;
  return l;
}

// One query row against its first `visible` keys, in every precision: scores, max,
// exp-sum, weighted sum of V, exactly the three steps of stage 01. With `lowp` F16 or BF16
// (Real = float), the probabilities are rounded to that type before P·V and the output
// after, as a plain fp16/bf16 matmul-softmax-matmul with fp32 accumulation does.
// `s` is scratch of at least `visible` values; `o` receives d values.
template <typename Real>
void attend_row(const float* qi, const float* kh, const float* vh, int64_t visible, int64_t d, Real scale,
                DType lowp, std::vector<Real>& s, Real* o, Real* m_out, Real* lse_out) {
  Real m;
  const Real l = exp_scores(qi, kh, visible, d, scale, s, &m);
  for (int64_t j = 0; j < visible; ++j) {
    Real pj = s[static_cast<size_t>(j)] / l;
    if (lowp != DType::F32) pj = static_cast<Real>(round_to(lowp, static_cast<float>(pj)));
    for (int64_t c = 0; c < d; ++c) o[c] += pj * static_cast<Real>(vh[j * d + c]);
  }
  if (lowp != DType::F32) {
    for (int64_t c = 0; c < d; ++c) o[c] = static_cast<Real>(round_to(lowp, static_cast<float>(o[c])));
  }
  *m_out = m;
  *lse_out = m + std::log(l);
}

// The rows of a result, allocated: O zero, m and lse −inf.
template <typename Real>
AttentionRows<Real> empty_rows(const std::vector<int64_t>& rows, int64_t d) {
  const Real neg_inf = -std::numeric_limits<Real>::infinity();
  AttentionRows<Real> out;
  out.rows = rows;
  out.o.assign(rows.size() * static_cast<size_t>(d), Real(0));
  out.m.assign(rows.size(), neg_inf);
  out.lse.assign(rows.size(), neg_inf);
  return out;
}

template <typename Real>
AttentionRows<Real> attention_rows(const AttentionProblem& p, const float* q, const float* k,
                                   const float* v, const std::vector<int64_t>& rows,
                                   DType lowp = DType::F32, const Mask* mask = nullptr) {
  const int64_t d = p.dim;
  AttentionRows<Real> out = empty_rows<Real>(rows, d);
  std::vector<Real> s(static_cast<size_t>(p.seq_kv));
  std::vector<float> k_seen, v_seen;  // with a mask: the keys a row sees, gathered
  const std::vector<KeyRange> ranges = mask ? mask->key_ranges(p) : std::vector<KeyRange>{};
  for (size_t n = 0; n < rows.size(); ++n) {
    const int64_t r = rows[n];
    const int64_t bh = r / p.seq_q;  // which (batch, head)
    const int64_t i = r % p.seq_q;   // query position within the head
    const float* kh = k + bh * p.seq_kv * d;
    const float* vh = v + bh * p.seq_kv * d;
    Real* o = out.o.data() + n * static_cast<size_t>(d);
    if (!mask) {
      // The causal mask (top-left) hides keys j > i; key 0 is always visible.
      const int64_t visible = p.causal ? std::min(p.seq_kv, i + 1) : p.seq_kv;
      attend_row<Real>(q + r * d, kh, vh, visible, d, static_cast<Real>(p.scale), lowp, s, o, &out.m[n], &out.lse[n]);
      continue;
    }
    // The keys the mask leaves, in order: the same three steps over them alone.
    k_seen.clear();
    v_seen.clear();
    const KeyRange range = ranges[static_cast<size_t>(i)];
    for (int64_t j = range.first; j <= range.last; ++j) {
      if (mask->blocks && !mask->blocks->keeps(i, j)) continue;
      k_seen.insert(k_seen.end(), kh + j * d, kh + (j + 1) * d);
      v_seen.insert(v_seen.end(), vh + j * d, vh + (j + 1) * d);
    }
    const int64_t seen = static_cast<int64_t>(k_seen.size()) / d;
    if (seen == 0) continue;  // no key: O stays 0, m and lse −inf
    attend_row<Real>(q + r * d, k_seen.data(), v_seen.data(), seen, d, static_cast<Real>(p.scale), lowp, s, o,
                     &out.m[n], &out.lse[n]);
  }
  return out;
}

template <typename Real>
AttentionRows<Real> decode_rows(const DecodeProblem& p, const float* q, const float* k, const float* v,
                                const std::vector<int64_t>& rows, DType lowp = DType::F32) {
  const int64_t d = p.dim;
  AttentionRows<Real> out = empty_rows<Real>(rows, d);
  std::vector<Real> s(static_cast<size_t>(p.max_seq_kv));
  for (size_t n = 0; n < rows.size(); ++n) {
    const int64_t r = rows[n];
    const int64_t bh = r / p.seq_q, i = r % p.seq_q;  // (sequence, query head), new query
    const int64_t b = bh / p.q_heads, hkv = (bh % p.q_heads) / p.group();
    const int64_t cache = (b * p.kv_heads + hkv) * p.max_seq_kv * d;  // that KV head's first row
    attend_row<Real>(q + r * d, k + cache, v + cache, p.visible_keys(b, i), d, static_cast<Real>(p.scale), lowp, s,
                     out.o.data() + n * static_cast<size_t>(d), &out.m[n], &out.lse[n]);
  }
  return out;
}

}  // namespace

AttentionRows<double> reference_attention(const AttentionProblem& p, const float* q,
                                          const float* k, const float* v,
                                          const std::vector<int64_t>& rows, const Mask* mask) {
  return attention_rows<double>(p, q, k, v, rows, DType::F32, mask);
}

AttentionRows<float> baseline_attention_fp32(const AttentionProblem& p, const float* q,
                                             const float* k, const float* v,
                                             const std::vector<int64_t>& rows) {
  return attention_rows<float>(p, q, k, v, rows);
}

AttentionRows<float> baseline_attention(const AttentionProblem& p, const float* q, const float* k,
                                        const float* v, const std::vector<int64_t>& rows, const Mask* mask) {
  return attention_rows<float>(p, q, k, v, rows, p.dtype, mask);
}

AttentionRows<double> reference_decode(const DecodeProblem& p, const float* q, const float* k, const float* v,
                                       const std::vector<int64_t>& rows) {
  return decode_rows<double>(p, q, k, v, rows);
}

AttentionRows<float> baseline_decode(const DecodeProblem& p, const float* q, const float* k, const float* v,
                                     const std::vector<int64_t>& rows) {
  return decode_rows<float>(p, q, k, v, rows, p.dtype);
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

namespace {

// The backward pass in precision Real, from the formulas (see reference.h).
// With `lowp` (fp16 or bf16), as a tensor-core backward pass rounds: D from O rounded to
// that type, P rounded before dV = Pᵀ·dO, dS rounded before dQ and dK, the gradients rounded.
template <typename Real>
AttentionGradients<Real> backward_rows(const AttentionProblem& p, const float* q, const float* k, const float* v,
                                       const float* d_o, AttentionGradients<Real>* term_sums,
                                       double* lse_max_abs = nullptr, DType lowp = DType::F32) {
  const auto rnd = [lowp](Real x) { return lowp == DType::F32 ? x : static_cast<Real>(round_to(lowp, static_cast<float>(x))); };
  const int64_t d = p.dim, nq = p.seq_q, nkv = p.seq_kv;
  const Real scale = static_cast<Real>(p.scale);
  AttentionGradients<Real> g;
  g.dq.assign(static_cast<size_t>(p.q_elems()), Real(0));
  g.dk.assign(static_cast<size_t>(p.kv_elems()), Real(0));
  g.dv.assign(static_cast<size_t>(p.kv_elems()), Real(0));
  if (term_sums) *term_sums = g;
  std::vector<Real> prob(static_cast<size_t>(nkv)), dp(static_cast<size_t>(nkv));
  for (int64_t bh = 0; bh < p.batch_heads(); ++bh) {
    const float* kh = k + bh * nkv * d;
    const float* vh = v + bh * nkv * d;
    Real* dk = g.dk.data() + bh * nkv * d;
    Real* dv = g.dv.data() + bh * nkv * d;
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t r = bh * nq + i;
      const float* qi = q + r * d;
      const float* doi = d_o + r * d;
      Real* dqi = g.dq.data() + r * d;
      const int64_t visible = p.causal ? std::min(nkv, i + 1) : nkv;
      // P_i: the forward row softmax again, rebuilt as a FlashAttention backward pass
      // rebuilds it, from the row's log-sum-exp held in precision Real: P_ij = exp(S_ij − lse_i).
      // (In float32, lse_i is rounded at its magnitude, which logits in the thousands make
      // 1e-4: every P of the row moves by that fraction. A baseline that divided by l instead
      // would not see that error, which any kernel recomputing P from a float lse has.)
      const Real m = scores(qi, kh, visible, d, scale, prob);
      Real l = 0;
      for (int64_t j = 0; j < visible; ++j) l += std::exp(prob[static_cast<size_t>(j)] - m);
      const Real lse = m + std::log(l);
      if (lse_max_abs) *lse_max_abs = std::max(*lse_max_abs, static_cast<double>(std::fabs(lse)));
      // dP_ij = dO_i · V_j, and D_i = Σ_j P_ij·dP_ij.
      Real big_d = 0;
      for (int64_t j = 0; j < visible; ++j) {
        prob[static_cast<size_t>(j)] = std::exp(prob[static_cast<size_t>(j)] - lse);
        dp[static_cast<size_t>(j)] = dot<Real>(doi, vh + j * d, d);
        big_d += prob[static_cast<size_t>(j)] * dp[static_cast<size_t>(j)];
      }
      if (lowp != DType::F32) {  // D = rowsum(dO ∘ O), with O as the forward pass stored it
        big_d = 0;
        for (int64_t c = 0; c < d; ++c) {
          Real o = 0;
          for (int64_t j = 0; j < visible; ++j) o += prob[static_cast<size_t>(j)] * static_cast<Real>(vh[j * d + c]);
          big_d += static_cast<Real>(doi[c]) * rnd(o);
        }
      }
      // dV_j += P_ij·dO_i;  dS_ij = P_ij·(dP_ij − D_i);  dQ_i += scale·dS_ij·K_j;  dK_j += scale·dS_ij·Q_i.
      for (int64_t j = 0; j < visible; ++j) {
        const Real pij = prob[static_cast<size_t>(j)];
        const Real ds = rnd(pij * (dp[static_cast<size_t>(j)] - big_d));
        for (int64_t c = 0; c < d; ++c) {
          dv[j * d + c] += rnd(pij) * static_cast<Real>(doi[c]);
          dqi[c] += scale * ds * static_cast<Real>(kh[j * d + c]);
          dk[j * d + c] += scale * ds * static_cast<Real>(qi[c]);
        }
      }
      if (term_sums) {  // the same sums over |terms|; dP and D as sums over |dO|·|V|
        Real* dv_abs = term_sums->dv.data() + bh * nkv * d;
        Real* dk_abs = term_sums->dk.data() + bh * nkv * d;
        Real* dq_abs = term_sums->dq.data() + r * d;
        Real big_d_abs = 0;
        for (int64_t j = 0; j < visible; ++j) {
          Real dp_abs = 0;
          for (int64_t c = 0; c < d; ++c) dp_abs += std::fabs(static_cast<Real>(doi[c]) * vh[j * d + c]);
          dp[static_cast<size_t>(j)] = dp_abs;  // dP itself is no longer needed
          big_d_abs += prob[static_cast<size_t>(j)] * dp_abs;
        }
        for (int64_t j = 0; j < visible; ++j) {
          const Real pij = prob[static_cast<size_t>(j)];
          const Real ds = scale * pij * (dp[static_cast<size_t>(j)] + big_d_abs);
          for (int64_t c = 0; c < d; ++c) {
            dv_abs[j * d + c] += pij * std::fabs(static_cast<Real>(doi[c]));
            dq_abs[c] += ds * std::fabs(static_cast<Real>(kh[j * d + c]));
            dk_abs[j * d + c] += ds * std::fabs(static_cast<Real>(qi[c]));
          }
        }
      }
    }
  }
  if (lowp != DType::F32) {
    for (std::vector<Real>* x : {&g.dq, &g.dk, &g.dv})
      for (Real& e : *x) e = rnd(e);
  }
  return g;
}

}  // namespace

AttentionGradients<double> reference_attention_backward(const AttentionProblem& p, const float* q, const float* k,
                                                        const float* v, const float* d_o,
                                                        AttentionGradients<double>* term_sums, double* lse_max_abs) {
  if (lse_max_abs) *lse_max_abs = 0.0;
  return backward_rows<double>(p, q, k, v, d_o, term_sums, lse_max_abs);
}

AttentionGradients<float> baseline_attention_backward_fp32(const AttentionProblem& p, const float* q,
                                                           const float* k, const float* v, const float* d_o) {
  return backward_rows<float>(p, q, k, v, d_o, nullptr);
}

AttentionGradients<float> baseline_attention_backward(const AttentionProblem& p, const float* q, const float* k,
                                                      const float* v, const float* d_o) {
  return backward_rows<float>(p, q, k, v, d_o, nullptr, nullptr, p.dtype);
}

}  // namespace fa
