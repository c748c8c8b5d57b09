/**
 * \file pipelined_attention.h
 * \brief Stage 07's host interface: stage 06's tensor-core FlashAttention-2 with the
 *        memory pipeline of production kernels (cp.async double buffering, swizzled tiles,
 *        Q in registers, causal in two phases).
 */
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/problem.h"

namespace fa {
struct StageDemo;
}  // namespace fa

namespace fa::pipeline {

/// This stage as the shared demo driver sees it.
StageDemo describe();

constexpr int Br = 128;  ///< query rows per tile: 32 per warp, two 16-row m-tiles

/// Bc, the key/value rows per tile, for head dimension d: 128 up to d = 64, 64 at d = 128.
int key_tile_rows(int64_t d);

/// Shared memory one block uses for head dimension d: a Q tile and two K and V tiles.
std::size_t shared_bytes(int64_t d);

/**
 * O = softmax(scale·Q·Kᵀ)·V in fp16 or bf16 (fp32 is refused), as stage 06 computes it,
 * with K/V tile j+1 copied by cp.async while tile j is computed.
 * \param p the problem; \param Q, K, V the inputs; \param O the output; \param lse if
 * not null, receives each query row's log-sum-exp in fp32 (B·H·Nq floats).
 * \throws InputError for fp32 or an unsupported head dimension.
 */
void attention(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O,
               float* lse = nullptr);

/// HBM bytes this kernel moves according to the IO model: stage 06's.
double hbm_bytes_model(const AttentionProblem& p);

}  // namespace fa::pipeline
