/**
 * \file reference.h
 * \brief The CPU reference every stage is checked against: attention and row softmax
 *        in float64, plus the same attention in float32 as a same-precision baseline.
 *
 * The float32 baseline runs the identical algorithm with float arithmetic. Its error
 * against float64 measures how much error plain fp32 has on this input, which is what
 * the comparison tolerance is built from (see compare.h). For fp16 and bf16 problems
 * the baseline also rounds P and O to that type, as a plain low-precision
 * matmul-softmax-matmul with fp32 accumulation does.
 *
 * Inputs are always the float values the stage reads: for fp16 and bf16 problems,
 * values already rounded to that type (round_inputs() in random.h), so the reference
 * computes exactly the attention of the tensors the kernel sees.
 */
#pragma once

#include <cstdint>
#include <vector>

#include "common/block_mask.h"
#include "common/decode_problem.h"
#include "common/problem.h"

namespace fa {

/// Reference results for a selection of query rows (flat row index r = (b·H + h)·Nq + i).
template <typename Real>
struct AttentionRows {
  std::vector<int64_t> rows;  ///< which query rows these are
  std::vector<Real> o;        ///< [rows.size(), d]: the output rows
  std::vector<Real> m;        ///< per row: max of the (masked) scaled scores
  std::vector<Real> lse;      ///< per row: log-sum-exp of the scaled scores = m + log(l)
};

/// At most `count` indices spread evenly over [0, total), always including the first
/// and the last; all of them when count >= total.
std::vector<int64_t> sample_indices(int64_t total, int64_t count);

/// Every query row, in order: 0, 1, ..., B·H·Nq − 1.
std::vector<int64_t> all_rows(const AttentionProblem& p);

/**
 * At most `count` query rows spread evenly over all heads and positions, always
 * including the first and last row. Used where the full reference would take too long.
 */
std::vector<int64_t> sample_rows(const AttentionProblem& p, int64_t count);

/// Attention for the given rows in float64 (inputs are the fp32 tensors the stages read);
/// with `mask`, of the masked problem (block_mask.h: keys the mask hides get no weight, and
/// a row that sees no key has O = 0, m and lse −inf).
AttentionRows<double> reference_attention(const AttentionProblem& p, const float* q,
                                          const float* k, const float* v,
                                          const std::vector<int64_t>& rows, const Mask* mask = nullptr);

/// The same algorithm in float32: the same-precision baseline for tolerances.
AttentionRows<float> baseline_attention_fp32(const AttentionProblem& p, const float* q,
                                             const float* k, const float* v,
                                             const std::vector<int64_t>& rows);

/**
 * The same-precision baseline of `p.dtype`: baseline_attention_fp32() for fp32; for fp16
 * and bf16, fp32 arithmetic with P rounded to that type before P·V and O after. With
 * `mask`, of the masked problem.
 */
AttentionRows<float> baseline_attention(const AttentionProblem& p, const float* q, const float* k,
                                        const float* v, const std::vector<int64_t>& rows,
                                        const Mask* mask = nullptr);

/**
 * Decoding (decode_problem.h) for the given rows in float64: GQA, each sequence's own
 * cache length, the bottom-right causal mask. Rows are flat over [B, Hq, Nq]; q is
 * [B, Hq, Nq, d], k and v the whole cache [B, Hkv, Nmax, d] (rows past a sequence's
 * length are never read).
 */
AttentionRows<double> reference_decode(const DecodeProblem& p, const float* q, const float* k, const float* v,
                                       const std::vector<int64_t>& rows);

/// The same in float32, with P and O rounded to p.dtype: the same-precision baseline.
AttentionRows<float> baseline_decode(const DecodeProblem& p, const float* q, const float* k, const float* v,
                                     const std::vector<int64_t>& rows);

/// The gradients of attention with respect to its inputs, each shaped like that input.
template <typename Real>
struct AttentionGradients {
  std::vector<Real> dq;  ///< [B, H, Nq, d]
  std::vector<Real> dk;  ///< [B, H, Nkv, d]
  std::vector<Real> dv;  ///< [B, H, Nkv, d]
};

/**
 * The backward pass of attention in float64, from the formulas: given dO (the gradient
 * of some loss with respect to O), the gradients of that loss with respect to Q, K and V.
 * Per (batch, head), with P the row softmax of S = scale·Q·Kᵀ (causal mask as in
 * reference_attention: top-left):
 *
 *     dV = Pᵀ·dO,   dP = dO·Vᵀ,   D_i = Σ_j P_ij·dP_ij  (= rowsum(dO ∘ O)),
 *     dS = P ∘ (dP − D),   dQ = scale·dS·K,   dK = scale·dSᵀ·Q
 *
 * Masked entries have P = 0, so they add nothing. Cost O(B·H·Nq·Nkv·d): for tests.
 *
 * If `term_sums` is given it receives, for each gradient element, the same sum taken over
 * the absolute values of its terms (dP and D, too, summed over |dO|·|V|). Rounding errors
 * scale with these, not with the gradient: where dP and D nearly cancel (always, when a
 * row sees a single key) the gradient is tiny or zero while its rounding error is not.
 * If `lse_max_abs` is given it receives the largest |log-sum-exp| of a row: a kernel that
 * rebuilds P = exp(S − lse) in float32 carries an error in each exponent of about that size
 * times float32's unit roundoff, which is every P's relative error.
 */
AttentionGradients<double> reference_attention_backward(const AttentionProblem& p, const float* q, const float* k,
                                                        const float* v, const float* d_o,
                                                        AttentionGradients<double>* term_sums = nullptr,
                                                        double* lse_max_abs = nullptr);

/// The same formulas in float32: the same-precision baseline for the gradients' tolerances.
AttentionGradients<float> baseline_attention_backward_fp32(const AttentionProblem& p, const float* q,
                                                           const float* k, const float* v, const float* d_o);

/**
 * The same-precision baseline of `p.dtype`: baseline_attention_backward_fp32() for fp32; for
 * fp16 and bf16, float32 arithmetic with the roundings of a tensor-core backward pass (16-bit
 * operands, fp32 accumulation): D from O rounded to that type, P rounded before dV = Pᵀ·dO,
 * dS rounded before dQ = scale·dS·K and dK = scale·dSᵀ·Q, and the gradients rounded.
 */
AttentionGradients<float> baseline_attention_backward(const AttentionProblem& p, const float* q, const float* k,
                                                      const float* v, const float* d_o);

/**
 * Row softmax in float64: for each of `rows` rows of `cols` values, m = max(x),
 * l = Σ exp(x − m), p = exp(x − m) / l.
 *
 * A row whose values are all −inf has no maximum to subtract. Rule used throughout the
 * project: such a row gets m = −inf, l = 0 and probabilities 0 (nothing is attended),
 * never NaN.
 * \param x rows·cols inputs; \param rows rows; \param cols values per row;
 * \param p rows·cols probabilities (out); \param m row maxima (out, may be null);
 * \param l row sums (out, may be null).
 */
void reference_softmax(const float* x, int64_t rows, int64_t cols, double* p, double* m,
                       double* l);

/// The same row softmax in float32: the same-precision baseline for tolerances.
void baseline_softmax_fp32(const float* x, int64_t rows, int64_t cols, float* p, float* m,
                           float* l);

}  // namespace fa
