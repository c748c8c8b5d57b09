/**
 * \file random.h
 * \brief Seeded, reproducible random inputs.
 */
#pragma once

#include <cstdint>
#include <vector>

#include "common/decode_problem.h"
#include "common/problem.h"

namespace fa {

/// `n` values uniform in [−magnitude, magnitude], the same for the same seed everywhere.
std::vector<float> random_uniform(int64_t n, uint64_t seed, float magnitude = 1.0f);

/// Host copies of Q, K and V for a problem.
struct AttentionInputs {
  std::vector<float> q;  ///< [B, H, Nq, d]
  std::vector<float> k;  ///< [B, H, Nkv, d]
  std::vector<float> v;  ///< [B, H, Nkv, d]
};

/**
 * Random Q, K and V drawn from independent streams of one seed. With magnitude M the
 * logits scale·q·k reach about M²·sqrt(d)/3 in size: M = 30 at d = 64 gives logits in
 * the hundreds, where exp() without max subtraction overflows fp32.
 * For an fp16 or bf16 problem the values are rounded to that type (round_inputs), so
 * the host copies hold exactly what the kernel reads.
 */
AttentionInputs random_inputs(const AttentionProblem& p, uint64_t seed, float magnitude = 1.0f);

/// A random dO for the backward pass ([B, H, Nq, d], uniform in [−1, 1]), from a stream of
/// `seed` that none of random_inputs()' tensors uses.
std::vector<float> random_output_gradient(const AttentionProblem& p, uint64_t seed);

/**
 * Random Q ([B, Hq, Nq, d]) and cache K, V ([B, Hkv, Nmax, d]) for a decoding problem, drawn
 * as random_inputs() draws them and rounded to p.dtype. The cache rows past each
 * sequence's length hold NaN: a kernel that reads them produces NaN and fails its check.
 */
AttentionInputs random_decode_inputs(const DecodeProblem& p, uint64_t seed, float magnitude = 1.0f);

/**
 * Moves every logit of `in` far below zero, to about `logit` (e.g. −300): coordinate 0 of
 * every key gets +64 and of every query −logit/(64·scale), so scale·q·k ≈ logit, give or
 * take the rest of the dot product (about ±15). Values are rounded to `t` again. No such
 * row's softmax changes a kernel that subtracts each row's true maximum, but
 * exp(s − m) underflows to 0 for every key when m is not a real score: a running maximum
 * started at 0, or a padded key column of a ragged tile scored 0 instead of −inf. In the
 * backward pass, exp(0 − lse) of such a padded column overflows to inf.
 */
void shift_logits(AttentionInputs& in, int64_t dim, float scale, DType t, double logit);

/// Rounds every value of Q, K and V to the nearest value of type `t` (fp32: unchanged).
void round_inputs(AttentionInputs& in, DType t);

}  // namespace fa
