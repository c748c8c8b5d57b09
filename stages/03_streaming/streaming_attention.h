/**
 * \file streaming_attention.h
 * \brief Stage 03's host interface: one thread per query row, streaming over all keys.
 */
#pragma once

#include <cstdint>

#include "common/problem.h"

namespace fa {
struct StageDemo;
}  // namespace fa

namespace fa::streaming {

/// This stage as the shared demo driver sees it (stageNN demo, and --compare in later stages).
StageDemo describe();

/**
 * O = softmax(scale·Q·Kᵀ)·V with one CUDA thread per (batch, head, query row), and no
 * workspace: each thread keeps m, l and its d-wide accumulator in registers.
 * \param p the problem; \param Q, K, V the inputs; \param O the output;
 * \param lse if not null, receives each query row's log-sum-exp m + log(l) (B·H·Nq floats).
 * All pointers are device pointers.
 */
void attention(const AttentionProblem& p, const float* Q, const float* K, const float* V, float* O,
               float* lse = nullptr);

/// Global-memory bytes one query row's thread reads: its q row plus all of K and V.
inline double bytes_read_per_query(const AttentionProblem& p) {
  return (static_cast<double>(p.dim) + 2.0 * static_cast<double>(p.seq_kv) * static_cast<double>(p.dim)) * 4.0;
}

}  // namespace fa::streaming
