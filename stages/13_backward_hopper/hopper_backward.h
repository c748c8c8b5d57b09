/**
 * \file hopper_backward.h
 * \brief Stage 13's host interface: the backward pass on Hopper's own machinery (wgmma, TMA,
 *        mbarriers, warp specialisation), fp16 or bf16 operands with fp32 accumulation.
 *        Built for sm_90a on the GPU; the CPU backend runs it through its emulation of
 *        those instructions.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/host_device.h"
#include "common/problem.h"
#include "stages/11_backward_tensor_cores/tensor_core_backward.h"

namespace fa::hopper_backward {

// A block owns Bc keys; a Q tile, the inner loop, has 64 or 128 rows (tuning.h chooses per
// head dim; q_tile_rows() says which).
constexpr int Bc = 128;  ///< key rows a block owns: 64 for each of its two consumer warpgroups

/// The tensors of one backward pass: stage 11's (Q, K, V, O, dO in p.dtype, lse in fp32,
/// dQ, dK and dV written contiguous).
using Tensors = tc_backward::Tensors;

/// The block of the main kernel's grid that block number n works on.
struct BlockCoords {
  int bh;       ///< batch·head
  int kv_tile;  ///< its K/V tile: keys kv_tile·Bc .. kv_tile·Bc + Bc − 1
};

/**
 * The head and K/V tile of block number n (0 .. heads·kv_tiles − 1) of the main kernel, with
 * `kv_tiles` K/V tiles a head and `heads` heads (B·H). The GPU starts blocks about in number
 * order as multiprocessors free up (CUDA does not promise it), so this is the order the work
 * is dealt in. Head by head, so that the blocks running at one time share a few heads' Q and
 * dO in L2, and in a head the first K/V tile first: under the causal mask it sees the most Q
 * tiles. The last `tail_heads` heads go K/V tile by K/V tile across those heads instead
 * (tile 0 of each, then tile 1 of each, ...), so that under the causal mask the grid ends on
 * light blocks, not on the last head's heaviest (LOG.md: "The causal grid's tail").
 */
FA_HOST_DEVICE BlockCoords block_coords(int n, int kv_tiles, int heads, int tail_heads) {
  const int first_tail = (heads - tail_heads) * kv_tiles;  // the first block of the tail's heads
  if (n < first_tail) return {n / kv_tiles, n % kv_tiles};
  const int r = n - first_tail;
  return {heads - tail_heads + r % tail_heads, r / tail_heads};
}

/**
 * How the main kernel's grid ends without the causal mask. Every block of block_coords() then
 * has the same work, and a multiprocessor runs one at a time: they go in rounds, and a last
 * round of R blocks leaves the other multiprocessors idle (at d = 128 the bar's 1,024 blocks
 * are 7.76 rounds of 132 and took as long as 8, LOG.md: "The grid's last round"). So the R
 * blocks of the last round are each cut in two along their Q tiles: R grid blocks take their
 * first `big` Q tiles, then R more take the rest, and the two parts of a block meet in the
 * workspace to sum its dK and dV. The big parts start first, on R multiprocessors; the small
 * ones fill the others, several in turn: `big` is chosen so that both end together.
 */
struct TailSplit {
  int whole;  ///< grid blocks 0 .. whole − 1 run blocks 0 .. whole − 1 of block_coords() whole
  int split;  ///< R: the blocks after them, each run as two grid blocks (0: none cut)
  int big;    ///< the Q tiles of a cut block's first part; its second part has the rest
};

/**
 * The split for `sms` multiprocessors, with `q_tiles` Q tiles a block: none (every block
 * whole) when `allowed` is false, under the causal mask, when the blocks fill whole rounds,
 * when a block has fewer than two Q tiles, or when cutting would save less than a tenth of a
 * block's time. Otherwise R = blocks mod sms; the sms − R idle multiprocessors take the R small
 * parts in r = ⌈R / (sms − R)⌉ turns, so a big part of r/(r + 1) of the Q tiles ends with them.
 */
TailSplit tail_split(const AttentionProblem& p, int q_tiles, int sms, bool allowed);

/// The most blocks a TailSplit cuts: a last round leaves at most 131 on a GPU of 132
/// multiprocessors, the most a Hopper has. workspace_bytes() holds their meeting places.
constexpr int kMaxSplit = 131;

/// The grid block's work under a TailSplit: a block of block_coords(), its Q tiles
/// n_begin .. n_end − 1 (whole: all), and, for a cut block, its slot in the workspace.
struct Piece {
  int block;    ///< the block of block_coords()
  int n_begin;  ///< its first Q tile (of the block's loop)
  int n_end;    ///< one past its last (whole blocks: q_tiles)
  int slot;     ///< −1 for a whole block; 0 .. split − 1 where a cut block's two parts meet
};

/// The piece of grid block `g` under `t`, for blocks of `q_tiles` Q tiles.
FA_HOST_DEVICE Piece piece(int g, TailSplit t, int q_tiles) {
  if (g < t.whole) return {g, 0, q_tiles, -1};
  const int j = g - t.whole;
  return j < t.split ? Piece{t.whole + j, 0, t.big, j} : Piece{t.whole + j - t.split, t.big, q_tiles, j - t.split};
}

/**
 * How many heads block_coords() deals K/V tile by K/V tile: none without the causal mask
 * (every block has the same work); under it, enough heads to hold `rounds` blocks for each
 * of `sms` multiprocessors, and at least two where there are two (so that the CPU backend's
 * one multiprocessor runs that order too).
 */
int tail_heads(const AttentionProblem& p, int sms, int rounds);

/// Whether this build has stage 13's kernels and this process's GPU can run them (a Hopper,
/// compute capability 9.0; the CPU backend reports 9.0 and emulates them).
/// \returns an empty string if so, else why not.
std::string unavailable_reason();

/// Shared memory one block of the main kernel uses for head dimension d (64 or 128).
std::size_t shared_bytes(int64_t d);

/// Query rows of the finished kernel's Q tile for head dimension d (64 or 128).
int q_tile_rows(int64_t d);

/// Device bytes the backward pass needs beyond its inputs and gradients: each query row's
/// D and log-sum-exp (padded to whole Q tiles) and dQ's fp32 accumulator (stage 11's), then
/// the deterministic mode's flags (two ints a Q tile), then where the two parts of each block
/// cut by a TailSplit meet (two ints and 256·d floats a block, for up to kMaxSplit blocks;
/// none under the causal mask).
/// \throws InputError for a head dimension other than 64 and 128.
std::size_t workspace_bytes(const AttentionProblem& p);

/**
 * The gradients of attention on a Hopper GPU, d = 64 or 128: D = rowsum(dO ∘ O) in one
 * kernel (which also zeroes dQ's fp32 accumulator), then one block per (K/V tile of Bc keys,
 * batch·head) whose producer warpgroup copies K_j, V_j once and Q_i, dO_i tile after tile by
 * TMA, and whose two consumer warpgroups run the five products of each tile pair as wgmma,
 * keep dK_j and dV_j in registers and put each tile's dQ_i into shared memory, which one
 * bulk reduction adds into the accumulator; then one kernel that rounds dQ to p.dtype.
 * Causal is top-left; tiles above the diagonal are skipped.
 * \param p the problem (fp16 or bf16); \param t the tensors, contiguous;
 * \param workspace workspace_bytes(p) bytes of device memory, 16-byte aligned.
 * \throws InputError for fp32 or another head dimension; NoGpuError on a GPU that is not a Hopper.
 */
void attention_backward(const AttentionProblem& p, const Tensors& t, void* workspace);

/**
 * attention_backward() with Q, K, V, O and dO where `layout` says (the last dimension
 * contiguous, each stride a multiple of 16 bytes): TMA reads Q, K, V and dO through their
 * strides, and kernel 1 reads O through its own. dQ, dK and dV are written contiguous.
 * \throws InputError for strides TMA cannot follow, and as above.
 */
void attention_backward_strided(const AttentionProblem& p, const Tensors& t, void* workspace, const Layout& layout);

/**
 * attention_backward_strided() with dQ's additions in a fixed order: each Q tile's, K/V tile
 * by K/V tile, a block adding only when a flag in the workspace says its turn has come. dQ
 * is then the same bit for bit on every run, at a cost (LOG.md). (dK and dV are the same on
 * every run in both modes: each block sums its own keys' in a fixed order.)
 */
void attention_backward_deterministic(const AttentionProblem& p, const Tensors& t, void* workspace,
                                      const Layout& layout);

/**
 * attention_backward_deterministic() as it was before the bulk reduction took over at d = 64:
 * there, each thread adds its dQ values by atomics, with a barrier of the warpgroup on each
 * side of each turn (the bulk reduction takes 11-13% less time, LOG.md; d = 128 is the same).
 * Kept for exercise 13-turn, which writes that handover, and for the tests.
 */
void attention_backward_deterministic_atomics(const AttentionProblem& p, const Tensors& t, void* workspace,
                                              const Layout& layout);

/// HBM bytes one backward pass moves according to the IO model (as stage 11's, with Bc
/// keys a block).
double hbm_bytes_model(const AttentionProblem& p);

}  // namespace fa::hopper_backward
