#include "common/block_mask.h"

#include <random>

#include "common/errors.h"

namespace fa {

double BlockMask::density() const {
  if (keep.empty()) return 0.0;
  int64_t kept = 0;
  for (uint8_t k : keep) kept += k != 0;
  return static_cast<double>(kept) / static_cast<double>(keep.size());
}

BlockMask full_block_mask(const AttentionProblem& p, int64_t block_q, int64_t block_kv, bool keep_all) {
  if (block_q < 1 || block_kv < 1) throw InputError("a block mask's blocks need at least one row and one key");
  BlockMask m;
  m.block_q = block_q;
  m.block_kv = block_kv;
  m.q_blocks = (p.seq_q + block_q - 1) / block_q;
  m.kv_blocks = (p.seq_kv + block_kv - 1) / block_kv;
  m.keep.assign(static_cast<size_t>(m.q_blocks * m.kv_blocks), keep_all ? 1 : 0);
  return m;
}

BlockMask random_block_mask(const AttentionProblem& p, int64_t block_q, int64_t block_kv, double density,
                            uint64_t seed) {
  if (!(density >= 0.0 && density <= 1.0)) throw InputError("a block mask's density must be between 0 and 1");
  BlockMask m = full_block_mask(p, block_q, block_kv, false);
  std::mt19937_64 rng(seed);
  for (uint8_t& k : m.keep) k = static_cast<double>(rng() >> 11) * 0x1.0p-53 < density ? 1 : 0;
  return m;
}

}  // namespace fa
