/**
 * \file flash2_attention.h
 * \brief Stage 05's host interface: FlashAttention-2, the loops of stage 04 swapped.
 */
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/problem.h"

namespace fa {
struct StageDemo;
}  // namespace fa

namespace fa::flash2 {

/// This stage as the shared demo driver sees it (stageNN demo, and --compare in later stages).
StageDemo describe();

constexpr int Br = 64;  ///< query rows per tile
constexpr int Bc = 64;  ///< key/value rows per tile

/// Shared memory one block uses for head dimension d: Q, K, V and P tiles.
std::size_t shared_bytes(int64_t d);

/**
 * One query row's softmax statistics as this stage ends with them: the largest score m, in
 * the base-2 units the kernel scores in (Q pre-scaled by scale·log2(e)), and 1/l, with l =
 * Σ 2^(S − m). Stage 10 rebuilds P = 2^(S − m)·(1/l) from them, exact to float32's rounding
 * of its own S even at large logits, where a float32 log-sum-exp m·ln 2 + ln l rounds m away
 * (stage 10's README: large logits). A row left with no key gets m = 0 and 1/l = 0.
 */
struct RowStats {
  float m;      ///< the row's largest score, base 2: max_j scale·log2(e)·q·k_j as the kernel rounds it
  float inv_l;  ///< 1 / Σ_j 2^(S_j − m)
};

/**
 * O = softmax(scale·Q·Kᵀ)·V, FlashAttention-2 style: one block per (Q tile, batch·head),
 * all independent; Q tile loaded once, K/V tiles streamed through shared memory; m, l
 * and the unnormalised O stay on chip; O divided by l once at the end.
 * \param p the problem; \param Q, K, V the inputs; \param O the output;
 * \param lse if not null, receives each query row's log-sum-exp m + log(l) (B·H·Nq floats).
 * \param block_mask if not null, block-sparse attention (common/block_mask.h) with blocks of
 *        Br × Bc, the tiles: ⌈Nq/Br⌉·⌈Nkv/Bc⌉ flags in device memory, row-major, shared by
 *        every head; a K/V tile whose flag is 0 is skipped for that Q tile. A row left with
 *        no key gets O = 0 and log-sum-exp −inf.
 * \param stats if not null, receives each query row's RowStats (B·H·Nq of them), for stage 10.
 */
void attention(const AttentionProblem& p, const float* Q, const float* K, const float* V, float* O,
               float* lse = nullptr, const uint8_t* block_mask = nullptr, RowStats* stats = nullptr);

/// HBM bytes this loop order moves according to the IO model (see the README).
double hbm_bytes_model(const AttentionProblem& p);

}  // namespace fa::flash2
