/**
 * \file naive_attention.h
 * \brief Stage 01's host interface: naive three-kernel attention and its row softmax.
 */
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/problem.h"

namespace fa {
struct StageDemo;
}  // namespace fa

namespace fa::naive {

/// This stage as the shared demo driver sees it (stageNN demo, and --compare in later stages).
StageDemo describe();

/// Bytes of the N×N buffer S (= P after the softmax, in place): B·H·Nq·Nkv floats.
std::size_t workspace_bytes(const AttentionProblem& p);

/**
 * O = softmax(scale·Q·Kᵀ)·V in three kernel launches on the default stream.
 * \param p the problem; \param Q, K, V the inputs; \param O the output;
 * \param S device buffer of workspace_bytes(p) bytes; holds S, then P.
 * All pointers are device pointers; shapes as in problem.h.
 */
void attention(const AttentionProblem& p, const float* Q, const float* K, const float* V,
               float* O, float* S);

/**
 * Row softmax, three sweeps over each row (max, sum of exponentials, normalise).
 * `in` and `out` may be the same buffer. A row that is all −inf becomes all zeros.
 * Stage 02 reuses this kernel as its baseline.
 */
void softmax_rows(const float* in, float* out, int64_t rows, int64_t cols);

}  // namespace fa::naive
