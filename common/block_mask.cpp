#include "common/block_mask.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>

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

void Mask::check(const AttentionProblem& p) const {
  if (blocks && (blocks->q_blocks != (p.seq_q + blocks->block_q - 1) / blocks->block_q ||
                 blocks->kv_blocks != (p.seq_kv + blocks->block_kv - 1) / blocks->block_kv ||
                 static_cast<int64_t>(blocks->keep.size()) != blocks->q_blocks * blocks->kv_blocks)) {
    throw InputError("the block mask does not match the problem's lengths");
  }
  if (window_left < -1 || window_right < -1) throw InputError("a window's bounds must be -1 (none) or at least 0");
  if (!doc_lengths.empty()) {
    if (p.seq_q != p.seq_kv) throw InputError("packed documents need Nq = Nkv (one packed sequence of both)");
    int64_t total = 0;
    for (int64_t n : doc_lengths) {
      if (n < 1) throw InputError("a packed document needs at least one row; got " + std::to_string(n));
      total += n;
    }
    if (total != p.seq_q) {
      throw InputError("the packed documents' lengths sum to " + std::to_string(total) + ", not to N = " +
                       std::to_string(p.seq_q));
    }
  }
}

std::vector<KeyRange> Mask::key_ranges(const AttentionProblem& p) const {
  check(p);
  std::vector<KeyRange> ranges(static_cast<size_t>(p.seq_q));
  int64_t doc = 0, doc_first = 0, doc_end = doc_lengths.empty() ? p.seq_kv : doc_lengths[0];
  for (int64_t i = 0; i < p.seq_q; ++i) {
    while (!doc_lengths.empty() && i >= doc_end) {  // the row's document: [doc_first, doc_end)
      doc_first = doc_end;
      doc_end += doc_lengths[static_cast<size_t>(++doc)];
    }
    KeyRange r{doc_first, doc_end - 1};
    if (p.causal) r.last = std::min(r.last, i);
    if (window_left >= 0) r.first = std::max(r.first, i - window_left);
    if (window_right >= 0) r.last = std::min(r.last, i + window_right);
    ranges[static_cast<size_t>(i)] = r;
  }
  return ranges;
}

double Mask::work_fraction(const AttentionProblem& p) const {
  if (only_blocks()) return blocks->density();
  double seen = 0;
  const std::vector<KeyRange> ranges = key_ranges(p);
  for (int64_t i = 0; i < p.seq_q; ++i) {
    const KeyRange r = ranges[static_cast<size_t>(i)];
    if (!blocks) {
      seen += static_cast<double>(std::max<int64_t>(0, r.last - r.first + 1));
      continue;
    }
    for (int64_t j0 = r.first; j0 <= r.last;) {  // a block column at a time
      const int64_t j1 = std::min(r.last, (j0 / blocks->block_kv + 1) * blocks->block_kv - 1);
      if (blocks->keeps(i, j0)) seen += static_cast<double>(j1 - j0 + 1);
      j0 = j1 + 1;
    }
  }
  return seen / (static_cast<double>(p.seq_q) * static_cast<double>(p.seq_kv));
}

std::string Mask::describe() const {
  std::ostringstream s;
  const char* sep = "";
  if (window_left >= 0 || window_right >= 0) {
    s << "window";
    if (window_left >= 0) s << " " << window_left << " left";
    if (window_right >= 0) s << " " << window_right << " right";
    sep = ", ";
  }
  if (!doc_lengths.empty()) s << sep << doc_lengths.size() << " documents", sep = ", ";
  if (blocks) {
    s << sep << "block mask of " << blocks->block_q << "x" << blocks->block_kv << " blocks, "
      << std::llround(100 * blocks->density()) << "% kept";
  }
  return none() ? "none" : s.str();
}

std::vector<int64_t> random_doc_lengths(int64_t n, int64_t count, uint64_t seed) {
  if (n < 1 || count < 1 || count > n) throw InputError("documents: need 1 <= count <= N");
  // count − 1 distinct cut points in 1 .. n − 1, the first two chosen to leave a document of
  // one row where there is room for it.
  std::mt19937_64 rng(seed);
  std::vector<int64_t> cuts(static_cast<size_t>(n - 1));
  std::iota(cuts.begin(), cuts.end(), int64_t{1});
  std::shuffle(cuts.begin(), cuts.end(), rng);
  cuts.resize(static_cast<size_t>(count - 1));
  if (count >= 3 && n >= 4) {
    cuts[0] = n / 2;
    cuts[1] = n / 2 + 1;  // [n/2, n/2 + 1): one row
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    while (static_cast<int64_t>(cuts.size()) < count - 1) {  // refill any duplicates
      const int64_t c = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(n - 1));
      if (!std::binary_search(cuts.begin(), cuts.end(), c)) cuts.insert(std::upper_bound(cuts.begin(), cuts.end(), c), c);
    }
  }
  std::sort(cuts.begin(), cuts.end());
  std::vector<int64_t> lengths;
  int64_t at = 0;
  for (int64_t c : cuts) lengths.push_back(c - at), at = c;
  lengths.push_back(n - at);
  return lengths;
}

}  // namespace fa
