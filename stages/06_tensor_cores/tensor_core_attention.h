/**
 * \file tensor_core_attention.h
 * \brief Stage 06's host interface: FlashAttention-2 on tensor cores (mma.sync), fp16 or bf16.
 */
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/problem.h"

namespace fa {
struct StageDemo;
}  // namespace fa

namespace fa::tensor_core {

/// This stage as the shared demo driver sees it (stageNN demo, and --compare in later stages).
StageDemo describe();

constexpr int Br = 64;  ///< query rows per tile: one warp per 16 rows (the mma's M)
constexpr int Bc = 64;  ///< key/value rows per tile

/// Shared memory one block uses for head dimension d: Q, K and V tiles of 16-bit values.
std::size_t shared_bytes(int64_t d);

/**
 * O = softmax(scale·Q·Kᵀ)·V with Q, K, V and O of type p.dtype (fp16 or bf16; fp32 is
 * refused), FlashAttention-2's loop on tensor cores: one block per (Q tile, batch·head),
 * each warp owning 16 query rows; Q·Kᵀ and P·V as mma.sync with fp32 accumulation.
 * \param p the problem (its dtype says how to read the pointers); \param Q, K, V the
 * inputs; \param O the output; \param lse if not null, receives each query row's
 * log-sum-exp m + log(l) in fp32 (B·H·Nq floats).
 * \throws InputError for fp32 or an unsupported head dimension.
 */
void attention(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O,
               float* lse = nullptr);

/// HBM bytes this kernel moves according to the IO model: stage 05's, at 2 bytes an element.
double hbm_bytes_model(const AttentionProblem& p);

}  // namespace fa::tensor_core
