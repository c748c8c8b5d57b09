/**
 * \file block_mask.h
 * \brief Block-sparse attention: which (query block, key block) pairs are computed.
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

}  // namespace fa
