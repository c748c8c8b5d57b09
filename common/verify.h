/**
 * \file verify.h
 * \brief Checking a stage's attention output against the float64 reference.
 */
#pragma once

#include <cstdint>
#include <vector>

#include "common/compare.h"
#include "common/problem.h"
#include "common/random.h"
#include "common/reference.h"

namespace fa {

/// What a check of O (and optionally each row's log-sum-exp) found.
struct AttentionCheck {
  std::vector<int64_t> rows;  ///< query rows that were checked
  Comparison o;               ///< O on those rows
  bool has_lse = false;       ///< whether lse was checked
  Comparison lse;             ///< log-sum-exp on those rows, when has_lse
  bool passed() const { return o.passed() && (!has_lse || lse.passed()); }  ///< everything within tolerance
};

/**
 * Compares `o` (the full [B, H, Nq, d] output) on `rows` with the float64 reference,
 * using the tolerance of `p.dtype` from compare.h (the stage's output, converted to
 * float, against a same-precision baseline's error). If `lse` is given (one value per query row,
 * B·H·Nq in total) it is checked too. With `mask`, against the masked problem (block_mask.h).
 */
AttentionCheck check_attention(const AttentionProblem& p, const AttentionInputs& in,
                               const std::vector<float>& o, const std::vector<int64_t>& rows,
                               const std::vector<float>* lse = nullptr, const Mask* mask = nullptr);

/**
 * The same for a decoding problem: `o` is the full [B, Hq, Nq, d] output, `rows` flat
 * over [B, Hq, Nq], `lse` (if given) one value per row.
 */
AttentionCheck check_decode(const DecodeProblem& p, const AttentionInputs& in, const std::vector<float>& o,
                            const std::vector<int64_t>& rows, const std::vector<float>* lse = nullptr);

/// What a check of the backward pass found: each gradient on the heads that were checked.
struct GradientCheck {
  std::vector<int64_t> heads;  ///< the heads checked, as flat indices b·H + h
  Comparison dq;               ///< dQ on those heads
  Comparison dk;               ///< dK on those heads
  Comparison dv;               ///< dV on those heads
  bool passed() const { return dq.passed() && dk.passed() && dv.passed(); }  ///< all within tolerance
};

/**
 * Compares the gradients `got` (full [B, H, N, d] tensors) on `heads` with the float64
 * reference gradients of the same Q, K, V and dO `d_o`: the tolerance of p.dtype from the
 * same-precision baseline's error (baseline_attention_backward()), its floor from the size of
 * the gradients' terms (cancelling_tolerance() with the reference's term sums). For fp16 and
 * bf16 the inputs and `d_o` are the values the kernel read, already rounded. Heads are checked whole, because dK and dV of one
 * key depend on every query row of its head; a head's gradients depend on that head's
 * tensors only, so each is computed as a problem of its own.
 */
GradientCheck check_attention_backward(const AttentionProblem& p, const AttentionInputs& in,
                                       const std::vector<float>& d_o, const AttentionGradients<float>& got,
                                       const std::vector<int64_t>& heads);

/// Names element k of a gradient check's heads, laid end to end, as "dK[b=..,h=..,j=..,c=..]":
/// `what` is "dQ" (rows of Nq queries, named i) or "dK"/"dV" (rows of Nkv keys, named j).
IndexNamer gradient_namer(const AttentionProblem& p, const std::vector<int64_t>& heads, const std::string& what);

/// What a check of row-softmax output found.
struct SoftmaxCheck {
  Comparison p;            ///< the probabilities
  bool has_stats = false;  ///< whether m and l were checked
  Comparison m;            ///< each row's max, when has_stats
  Comparison l;            ///< each row's sum of exp(x − m), when has_stats
  bool passed() const { return p.passed() && (!has_stats || (m.passed() && l.passed())); }  ///< all within tolerance
};

/**
 * Compares a row softmax of `rows` rows of `cols` inputs `x` with the float64 reference
 * (fp32 tolerance). `m` and `l` (one per row) are checked too when both are given.
 */
SoftmaxCheck check_softmax(const float* x, int64_t rows, int64_t cols, const float* p,
                           const float* m = nullptr, const float* l = nullptr);

/// Names element k of the gathered rows as "O[b=..,h=..,i=..,c=..]".
IndexNamer output_namer(const AttentionProblem& p, const std::vector<int64_t>& rows);

/// Names element k of a per-row statistic as "lse[b=..,h=..,i=..]".
IndexNamer row_namer(const AttentionProblem& p, const std::vector<int64_t>& rows,
                     const char* what);

/// Names element k of a decoding check's gathered rows as "O[b=..,hq=..,i=..,c=..]".
IndexNamer decode_output_namer(const DecodeProblem& p, const std::vector<int64_t>& rows);

/// Names element k of a decoding check's per-row statistic as "lse[b=..,hq=..,i=..]".
IndexNamer decode_row_namer(const DecodeProblem& p, const std::vector<int64_t>& rows, const char* what);

}  // namespace fa
