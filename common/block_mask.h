/**
 * \file block_mask.h
 * \brief Masks of the score matrix: block-sparse attention (which query block and key block
 *        pairs are computed), and with it sliding windows and packed documents (Mask).
 *
 * A block mask splits the Nq×Nkv score matrix of every head into blocks of `block_q` query
 * rows by `block_kv` keys (the last ones cut short by Nq and Nkv) and keeps or drops each
 * block whole. A dropped block's scores count as −inf: its keys get no weight, and a kernel
 * can skip its tiles without loading them. One mask serves every batch entry and head. It
 * combines with the causal mask: a key is seen when both allow it. A query row that sees no
 * key at all has O = 0 and log-sum-exp −inf.
 */
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/problem.h"

namespace fa {

/// Kept or dropped blocks of the score matrix, row-major over [q_blocks][kv_blocks].
struct BlockMask {
  int64_t block_q = 64;   ///< query rows of a block
  int64_t block_kv = 64;  ///< keys of a block
  int64_t q_blocks = 0;   ///< ⌈Nq / block_q⌉
  int64_t kv_blocks = 0;  ///< ⌈Nkv / block_kv⌉
  std::vector<uint8_t> keep;  ///< 1: computed, 0: dropped; q_blocks·kv_blocks flags

  /// Whether query row i sees key j as far as this mask goes (the causal mask aside).
  bool keeps(int64_t i, int64_t j) const { return keep[static_cast<size_t>(i / block_q * kv_blocks + j / block_kv)] != 0; }
  /// The fraction of blocks kept.
  double density() const;
};

/// A mask for p's lengths with every block kept (`keep_all`) or none.
BlockMask full_block_mask(const AttentionProblem& p, int64_t block_q, int64_t block_kv, bool keep_all = true);

/// A mask for p's lengths keeping each block with probability `density` (0 to 1), the same
/// for the same seed everywhere.
BlockMask random_block_mask(const AttentionProblem& p, int64_t block_q, int64_t block_kv, double density,
                            uint64_t seed);

/// The keys a query row sees besides any block mask: first to last, inclusive (none when
/// first > last).
struct KeyRange {
  int64_t first = 0;  ///< the first key the row sees
  int64_t last = -1;  ///< the last key the row sees
  bool empty() const { return first > last; }  ///< whether the row sees no key
};

/**
 * Everything that hides scores, together: query row i sees key j when all of these allow it:
 * - the causal mask (the problem's `causal`, top-left: j ≤ i);
 * - a sliding window: i − window_left ≤ j ≤ i + window_right (each −1: no bound on that side;
 *   window_right = 0 is the causal mask);
 * - packed documents: sequences of doc_lengths[0], doc_lengths[1], ... rows laid end to end in
 *   one of Nq = Nkv rows, as FlashAttention's variable-length interface packs them; a row sees
 *   the keys of its own document only;
 * - a block mask (`blocks`), dropping blocks whole.
 * The first three leave each row one range of keys (key_ranges()). A row that sees no key
 * has O = 0 and log-sum-exp −inf. One mask serves every batch entry and head.
 */
struct Mask {
  std::optional<BlockMask> blocks;    ///< blocks dropped whole (none: all kept)
  int64_t window_left = -1;           ///< keys at most this far before the row (−1: any)
  int64_t window_right = -1;          ///< keys at most this far after the row (−1: any)
  std::vector<int64_t> doc_lengths;   ///< packed documents' lengths, in order (empty: one)

  /// \throws InputError if the mask does not fit p: a block mask for other lengths, windows
  /// below −1, documents of no rows or not summing to Nq = Nkv.
  void check(const AttentionProblem& p) const;
  /// The keys each of p's query rows sees under p.causal, the window and the documents (the
  /// block mask aside); Nq ranges.
  std::vector<KeyRange> key_ranges(const AttentionProblem& p) const;
  /// Whether the mask hides nothing beyond p.causal.
  bool none() const { return !blocks && window_left < 0 && window_right < 0 && doc_lengths.empty(); }
  /// Whether the mask is a block mask and nothing else.
  bool only_blocks() const { return blocks && window_left < 0 && window_right < 0 && doc_lengths.empty(); }
  /// The share of 4·B·H·Nq·Nkv·d FLOPs the mask leaves: a block mask alone, the fraction of
  /// blocks kept (the causal mask is not subtracted, as in AttentionProblem::flops()); any
  /// other mask, the fraction of scores some row sees (causal mask included).
  double work_fraction(const AttentionProblem& p) const;
  /// The mask in a few words ("window 256 left, 4 documents, block mask of 128x128 blocks, 50% kept").
  std::string describe() const;
};

/// A mask with nothing but the block mask `blocks`.
inline Mask block_sparse(BlockMask blocks) {
  Mask m;
  m.blocks = std::move(blocks);
  return m;
}

/// `count` document lengths summing to n, between 1 and n, drawn from `seed` (the same
/// everywhere): some long, some short, some of a single row.
std::vector<int64_t> random_doc_lengths(int64_t n, int64_t count, uint64_t seed);

}  // namespace fa
