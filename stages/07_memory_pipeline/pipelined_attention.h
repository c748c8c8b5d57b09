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

// Tile sizes, and the switches that turn each step of the optimisation log off, for
// benchmarks/tune_stage07.sh (which builds and times the variants side by side). The
// defaults are the finished kernel.
#ifndef FA07_BR
/// Br, unless the build overrides it.
#define FA07_BR 128
#endif
#ifndef FA07_M_TILES
/// 16-row m-tiles per warp, unless the build overrides it: Br / (16·M_TILES) warps a block.
#define FA07_M_TILES 2
#endif
#ifndef FA07_BC
/// Bc for every head dimension, if the build sets it; 0: chosen per head dimension (key_tile).
#define FA07_BC 0
#endif
constexpr int Br = FA07_BR;  ///< query rows per tile: 16·FA07_M_TILES per warp

/// Bc, the key/value rows per tile, for head dimension D, chosen by measurement (the
/// README's log): 128 up to d = 64, 64 at d = 128, where the scores of a 128-key tile
/// and O's accumulators no longer fit in registers together.
template <int D>
constexpr int key_tile() {
  return FA07_BC > 0 ? FA07_BC : (D <= 64 ? 128 : 64);
}

/// \name The optimisation log's steps, each on (1) unless the build turns it off (0)
///@{
#ifndef FA07_PREFETCH
#define FA07_PREFETCH 1  ///< copy K/V tile j+1 while tile j is computed (0: copy, wait, compute)
#endif
#ifndef FA07_SWIZZLE
#define FA07_SWIZZLE 1  ///< XOR-swizzled tiles (0: plain unpadded rows, bank conflicts and all)
#endif
#ifndef FA07_Q_IN_REGISTERS
#define FA07_Q_IN_REGISTERS 1  ///< Q's fragments loaded once where they fit (0: ldmatrix'd for every tile)
#endif
#ifndef FA07_TWO_PHASE
#define FA07_TWO_PHASE 1  ///< mask only the tiles that need it (0: mask arithmetic on every tile)
#endif
#ifndef FA07_HEAVY_FIRST
#define FA07_HEAVY_FIRST 1  ///< each head's last Q tile first (0: first tile first)
#endif
#ifndef FA07_FAST_EXP
#define FA07_FAST_EXP 1  ///< 2^x by ex2.approx (0: exp2f, which adds range handling)
#endif
#ifndef FA07_LANE_OFFSETS
#define FA07_LANE_OFFSETS 1  ///< swizzled offsets computed once per lane (0: at every copy and ldmatrix)
#endif
#ifndef FA07_LAZY_RESCALE
/// Move a row's max only when it grows by more than 2^8, and skip O's rescale when no row
/// moved: 1 at d = 128, where it pays; 2 at every head dimension; 0 nowhere (at every new max)
#define FA07_LAZY_RESCALE 1
#endif
#ifndef FA07_MIN_BLOCKS
#define FA07_MIN_BLOCKS 0  ///< blocks per SM for __launch_bounds__ (0: the kernel's choice, min_blocks)
#endif
///@}

/// Bc for head dimension d (key_tile), for the host.
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
