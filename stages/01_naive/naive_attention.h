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

/// A row softmax over a device matrix: `in` and `out` (which may be the same buffer)
/// hold `rows` rows of `cols` floats.
using RowSoftmax = void (*)(const float* in, float* out, int64_t rows, int64_t cols);

/**
 * Row softmax, three sweeps over each row (max, sum of exponentials, normalise).
 * `in` and `out` may be the same buffer. A row that is all −inf becomes all zeros.
 * Stage 02 reuses this kernel as its baseline.
 */
void softmax_rows(const float* in, float* out, int64_t rows, int64_t cols);

/**
 * O = softmax(scale·Q·Kᵀ)·V in three kernel launches, on fa::stream() (common/stream.h: the
 * default stream unless the caller names another).
 * \param p the problem; \param Q, K, V the inputs; \param O the output;
 * \param S device buffer of workspace_bytes(p) bytes; holds S, then P.
 * \param softmax the middle step; stage 02 passes its online softmax here to show
 *        that a better softmax alone still leaves the N×N matrix in HBM.
 * All pointers are device pointers; shapes as in problem.h.
 */
void attention(const AttentionProblem& p, const float* Q, const float* K, const float* V,
               float* O, float* S, RowSoftmax softmax = softmax_rows);

}  // namespace fa::naive
