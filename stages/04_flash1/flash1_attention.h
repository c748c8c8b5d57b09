/**
 * \file flash1_attention.h
 * \brief Stage 04's host interface: tiled, fused FlashAttention-1 (Algorithm 1 order).
 */
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/problem.h"

namespace fa {
struct StageDemo;
}  // namespace fa

namespace fa::flash1 {

/// This stage as the shared demo driver sees it (stageNN demo, and --compare in later stages).
StageDemo describe();

constexpr int Br = 64;  ///< query rows per tile
constexpr int Bc = 64;  ///< key/value rows per tile

/// Shared memory one block uses for head dimension d: Q, K, V and P tiles.
std::size_t shared_bytes(int64_t d);

/// Bytes of the running statistics m and l kept in HBM: 2 · B·H·Nq floats.
std::size_t workspace_bytes(const AttentionProblem& p);

/**
 * O = softmax(scale·Q·Kᵀ)·V, FlashAttention-1 style: one block per (batch, head); K/V
 * tiles in the outer loop, Q tiles in the inner loop; the running m, l and the partial
 * O live in HBM between K/V tiles.
 * \param p the problem; \param Q, K, V the inputs; \param O the output;
 * \param m, l device arrays of B·H·Nq floats: on return, each query row's max score
 *        and its sum of exp(score − m) (so log-sum-exp = m + log l).
 */
void attention(const AttentionProblem& p, const float* Q, const float* K, const float* V, float* O,
               float* m, float* l);

/// HBM bytes this loop order moves according to the IO model (see the README).
double hbm_bytes_model(const AttentionProblem& p);

}  // namespace fa::flash1
