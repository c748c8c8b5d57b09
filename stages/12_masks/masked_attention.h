/**
 * \file masked_attention.h
 * \brief Stage 12's host interface: attention under masks that skip work (sliding windows,
 *        packed documents, block-sparse masks), on stage 08's Hopper machinery. Built for
 *        sm_90a on the GPU; the CPU backend runs it through its emulation.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/block_mask.h"
#include "common/device_buffer.h"
#include "common/problem.h"

namespace fa {
struct StageDemo;
}  // namespace fa

namespace fa::masks {

/// This stage as the shared demo driver sees it.
StageDemo describe();

constexpr int Br = 128;  ///< query rows of a Q tile (stage 08's, at d = 64 and 128)
constexpr int Bc = 128;  ///< keys of a K/V tile

/// What a mask leaves of one (Q tile, K/V tile) block.
enum class BlockKind : uint8_t {
  empty,    ///< every score hidden: skipped
  partial,  ///< some scores hidden: computed, each score tested
  full,     ///< no score hidden: computed with no test
};

/// The grid of (Q tile, K/V tile) blocks of one head, each classified.
struct BlockClasses {
  int64_t q_tiles = 0;            ///< ⌈Nq / Br⌉
  int64_t kv_tiles = 0;           ///< ⌈Nkv / Bc⌉
  std::vector<BlockKind> kinds;   ///< [q_tiles][kv_tiles], row-major
  /// How many blocks are of `kind`.
  int64_t count(BlockKind kind) const;
  /// The grid, a line a Q tile, a character a block: '#' full, '+' partial, '.' empty.
  std::string draw() const;
};

/// The most blocks a head a plan holds (2^28: Nq = Nkv = 2M tokens): its classification is a
/// byte a block on the host.
constexpr int64_t kMaxPlanBlocks = int64_t{1} << 28;

/**
 * Classifies p's blocks under `mask` (and p.causal): a block is empty if the block mask
 * drops it or no row of it sees any of its keys, full if every row of it (up to Nq) sees
 * every one of its keys (up to Bc, so a tile cut short by Nkv is at most partial), and
 * partial otherwise. Its work is O(Nq + blocks).
 * \throws InputError if the mask does not fit p, its blocks are not whole tiles, or there are
 * more than kMaxPlanBlocks blocks a head.
 */
BlockClasses classify(const AttentionProblem& p, const Mask& mask);

/// Which Q tiles each block of a persistent grid takes, in the order it takes them.
struct Schedule {
  std::vector<int> at;     ///< [blocks + 1]: block b takes tiles[at[b] .. at[b + 1])
  std::vector<int> tiles;  ///< each Q tile of each head once: bh · q_tiles + Q tile
};

/**
 * Hands `heads` heads' Q tiles to `blocks` blocks, one a multiprocessor, so that they finish
 * together. `work[qt]` is Q tile qt's modelled time (any unit): the blocks of its list, with
 * its fixed work and its partial blocks' tests. The tiles are dealt in turn, each to the
 * block that the model says is free first (ties to the lowest block): head by head, so that
 * the blocks running at one time share a few heads' K and V in L2, a head's heaviest tiles
 * first, and the last 2 · blocks tiles of all, heaviest first, so that the grid ends on
 * light tiles. With equal work it is round robin: block b takes tiles b, b + blocks, ...
 * \throws InputError if blocks < 1 or heads < 1.
 */
Schedule schedule_tiles(const std::vector<int64_t>& work, int64_t heads, int blocks);

/**
 * Everything the kernel needs to know of a mask, made once on the host and kept on the
 * device: each query row's range of keys, and each Q tile's list of blocks that are not
 * empty, with the Q tiles ranked by the length of their lists. A plan serves any batch,
 * heads, head dim and element type with the lengths and causal flag it was made for.
 */
class Plan {
 public:
  /// The plan of `mask` for p's lengths and causal flag. \throws InputError as classify().
  Plan(const AttentionProblem& p, const Mask& mask);
  ~Plan();
  Plan(Plan&&) noexcept;             ///< takes over the tables and schedules
  Plan& operator=(Plan&&) noexcept;  ///< \copydoc Plan(Plan&&)

  /// The tables in device memory.
  struct DeviceTables {
    const int* keys;     ///< [Nq][2]: each row's first and last key
    const int* list_at;  ///< [q_tiles + 1]: where each Q tile's list starts in `list`
    const int* list;     ///< 2·j + 1 for a partial block of K/V tile j, 2·j for a full one
    const int* rank;     ///< [q_tiles]: Q tiles by the length of their lists, longest first
  };
  DeviceTables tables() const;                              ///< the tables, on the device
  const BlockClasses& classes() const { return classes_; }  ///< the classification
  int64_t q_tiles() const { return classes_.q_tiles; }      ///< Q tiles a head
  int64_t visited() const { return visited_; }              ///< blocks not empty, a head
  int64_t longest() const { return longest_; }              ///< the longest list
  /// Whether the kernel runs one block a multiprocessor at head dim d (stage 08's rule: at
  /// d = 64 always; at d = 128 when no list is longer than 64 blocks).
  bool persistent(int64_t d) const;
  /// \throws InputError if p's lengths or causal flag are not the plan's.
  void require_fits(const AttentionProblem& p) const;
  /// Each Q tile's modelled time, in tenths of a full block: its blocks, 0.3 more for each
  /// partial one, and 1.6 for the tile's own work (the wait for Q, the first S and the last
  /// P·V with nothing to overlap them, the write of O), as LOG.md's model fitted them at d = 64.
  const std::vector<int64_t>& work() const { return work_; }
  /**
   * schedule_tiles(work(), heads, blocks) on the device: [blocks + 1] offsets, then the tiles.
   * Made on first use for each (heads, blocks) and kept with the plan; safe to call from
   * several threads. With `may_make` false, only one made before: null if there is none
   * (while a CUDA graph is captured nothing may be copied to the device).
   */
  const int* schedule(int64_t heads, int blocks, bool may_make = true) const;

 private:
  BlockClasses classes_;
  int64_t seq_q_ = 0, seq_kv_ = 0, visited_ = 0, longest_ = 0;
  bool causal_ = false;
  DeviceBuffer<int> keys_, list_at_, list_, rank_;
  std::vector<int64_t> work_;
  struct Schedules;  // the schedules made so far, and a mutex (plan.cpp)
  std::unique_ptr<Schedules> schedules_;  // a pointer: the mutex would pin a Plan in place
};

/// Whether this build has stage 12's kernels (nvcc with sm_90a) and this process's GPU can
/// run them (compute capability 9.0; the CPU backend emulates one).
/// \returns an empty string if so, else why not.
std::string unavailable_reason();

/**
 * O = softmax(scale·Q·Kᵀ under the plan's mask)·V in fp16 or bf16 on a Hopper GPU, d = 64 or
 * 128: stage 08's kernel, visiting only the blocks the plan lists. A row that sees no key
 * gets O = 0 and lse −inf. \param p the problem; \param Q, K, V the inputs; \param O the
 * output; \param lse if not null, each query row's log-sum-exp (B·H·Nq floats); \param plan
 * the mask's plan for p's lengths and causal flag.
 * \throws InputError for fp32, another head dim, a plan for other lengths, or a plan's first
 * call for p's B·H made while the stream captures a CUDA graph (the call makes the plan's
 * schedule for those heads, a copy to the device: call once before capturing); NoGpuError on
 * a GPU that is not a Hopper.
 */
void attention(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse,
               const Plan& plan);

/// The same, making the plan of `mask` for this one call (a plan made once is cheaper).
void attention(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse,
               const Mask& mask);

/// attention() on tensors that lie where `layout` says, as stage 08's attention_strided().
void attention_strided(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse,
                       const Layout& layout, const Plan& plan);

/// HBM bytes the kernel moves according to the IO model: Q and O once, K and V once for
/// each block visited.
double hbm_bytes_model(const AttentionProblem& p, const Plan& plan);

}  // namespace fa::masks
