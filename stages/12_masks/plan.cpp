// Stage 12's plan: a mask's blocks classified on the host, and the tables the kernel reads
// (masked_attention.h says what each holds).
#include <algorithm>
#include <cstddef>
#include <mutex>
#include <numeric>
#include <queue>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/errors.h"
#include "stages/12_masks/masked_attention.h"

namespace fa::masks {

int64_t BlockClasses::count(BlockKind kind) const {
  return static_cast<int64_t>(std::count(kinds.begin(), kinds.end(), kind));
}

std::string BlockClasses::draw() const {
  std::string out;
  for (int64_t qt = 0; qt < q_tiles; ++qt) {
    for (int64_t j = 0; j < kv_tiles; ++j) {
      const BlockKind k = kinds[static_cast<size_t>(qt * kv_tiles + j)];
      out += k == BlockKind::full ? '#' : k == BlockKind::partial ? '+' : '.';
    }
    out += '\n';
  }
  return out;
}

namespace {

// Checks the mask against p and stage 12's limits, and returns each row's keys.
std::vector<KeyRange> checked_ranges(const AttentionProblem& p, const Mask& mask) {
  mask.check(p);
  if (mask.blocks && (mask.blocks->block_q % Br != 0 || mask.blocks->block_kv % Bc != 0)) {
    throw InputError("stage 12: a block mask's blocks must be whole tiles: " + std::to_string(mask.blocks->block_q) +
                     "x" + std::to_string(mask.blocks->block_kv) + " is not a multiple of " + std::to_string(Br) + "x" +
                     std::to_string(Bc));
  }
  const int64_t q_tiles = (p.seq_q + Br - 1) / Br, kv_tiles = (p.seq_kv + Bc - 1) / Bc;
  if (q_tiles * kv_tiles > kMaxPlanBlocks) {
    throw InputError("stage 12: " + std::to_string(q_tiles) + " x " + std::to_string(kv_tiles) +
                     " blocks a head are more than a plan holds (" + std::to_string(kMaxPlanBlocks) + ")");
  }
  return mask.key_ranges(p);
}

// classify() on ranges from checked_ranges(p, mask).
BlockClasses classify_ranges(const AttentionProblem& p, const Mask& mask, const std::vector<KeyRange>& keys) {
  BlockClasses c;
  c.q_tiles = (p.seq_q + Br - 1) / Br;
  c.kv_tiles = (p.seq_kv + Bc - 1) / Bc;
  c.kinds.assign(static_cast<size_t>(c.q_tiles * c.kv_tiles), BlockKind::empty);
  std::vector<int64_t> rows_at(static_cast<size_t>(c.kv_tiles + 1));  // rows of the Q tile seeing K tile j, as steps
  for (int64_t qt = 0; qt < c.q_tiles; ++qt) {
    const int64_t i0 = qt * Br, i1 = std::min(i0 + Br, p.seq_q);  // the tile's rows (those past Nq aside)
    // Full: every row sees every key of the tile, so the largest first ≤ c0 and the smallest
    // last ≥ c1 (a row that sees nothing has first > last and can be neither). Any: some row's
    // range meets the tile; each row meets the tiles first / Bc .. last / Bc, counted with +1
    // and −1 steps and summed, so the work is a row plus a tile, not a row times a tile.
    int64_t max_first = 0, min_last = p.seq_kv;
    std::fill(rows_at.begin(), rows_at.end(), 0);
    for (int64_t i = i0; i < i1; ++i) {
      const KeyRange r = keys[static_cast<size_t>(i)];
      max_first = std::max(max_first, r.first);
      min_last = std::min(min_last, r.last);
      if (r.empty()) continue;
      ++rows_at[static_cast<size_t>(r.first / Bc)];
      --rows_at[static_cast<size_t>(r.last / Bc + 1)];
    }
    int64_t rows = 0;
    for (int64_t j = 0; j < c.kv_tiles; ++j) {
      rows += rows_at[static_cast<size_t>(j)];
      if (mask.blocks && !mask.blocks->keeps(i0, j * Bc)) continue;  // dropped whole
      const int64_t c0 = j * Bc, c1 = c0 + Bc - 1;  // the tile's keys (those past Nkv are hidden)
      const bool all = max_first <= c0 && min_last >= c1;
      c.kinds[static_cast<size_t>(qt * c.kv_tiles + j)] =
          all ? BlockKind::full : rows > 0 ? BlockKind::partial : BlockKind::empty;
    }
  }
  return c;
}

}  // namespace

Schedule schedule_tiles(const std::vector<int64_t>& work, int64_t heads, int blocks) {
  if (blocks < 1 || heads < 1) {
    throw InputError("stage 12: a schedule needs blocks and heads (" + std::to_string(blocks) + " blocks, " +
                     std::to_string(heads) + " heads)");
  }
  const int64_t q_tiles = static_cast<int64_t>(work.size());
  if (q_tiles > 0 && heads > 2147483647 / q_tiles) throw InputError("stage 12: too many query tiles to schedule");
  // The order tiles are dealt in: head by head, each head's heaviest first (among equals,
  // the later tile first, as rank has them); then the last 2 · blocks of all, heaviest first.
  std::vector<int> rank(static_cast<size_t>(q_tiles));
  std::iota(rank.begin(), rank.end(), 0);
  std::stable_sort(rank.begin(), rank.end(), [&](int a, int b) {
    return work[static_cast<size_t>(a)] != work[static_cast<size_t>(b)]
               ? work[static_cast<size_t>(a)] > work[static_cast<size_t>(b)]
               : a > b;
  });
  std::vector<int> order;
  order.reserve(static_cast<size_t>(heads * q_tiles));
  for (int64_t bh = 0; bh < heads; ++bh) {
    for (int qt : rank) order.push_back(static_cast<int>(bh * q_tiles + qt));
  }
  const auto work_of = [&](int tile) { return work[static_cast<size_t>(tile % q_tiles)]; };
  const auto heavier = [&](int a, int b) { return work_of(a) > work_of(b); };
  const size_t tail = std::min(order.size(), 2 * static_cast<size_t>(blocks));
  std::stable_sort(order.end() - static_cast<std::ptrdiff_t>(tail), order.end(), heavier);

  // Deal: each tile to the block free first (the lowest of equals), as a heap of (time, block).
  std::priority_queue<std::pair<int64_t, int>, std::vector<std::pair<int64_t, int>>, std::greater<>> free_at;
  for (int b = 0; b < blocks; ++b) free_at.emplace(0, b);
  std::vector<int> block_of(order.size());
  std::vector<int> count(static_cast<size_t>(blocks), 0);
  for (size_t u = 0; u < order.size(); ++u) {
    auto [at, b] = free_at.top();
    free_at.pop();
    block_of[u] = b;
    ++count[static_cast<size_t>(b)];
    free_at.emplace(at + work_of(order[u]), b);
  }
  Schedule s;
  s.at.assign(static_cast<size_t>(blocks) + 1, 0);
  for (size_t b = 0; b < count.size(); ++b) s.at[b + 1] = s.at[b] + count[b];
  s.tiles.resize(order.size());
  std::vector<int> next(s.at.begin(), s.at.end() - 1);  // each block's next place, in dealing order
  for (size_t u = 0; u < order.size(); ++u) {
    s.tiles[static_cast<size_t>(next[static_cast<size_t>(block_of[u])]++)] = order[u];
  }
  return s;
}

BlockClasses classify(const AttentionProblem& p, const Mask& mask) {
  return classify_ranges(p, mask, checked_ranges(p, mask));
}

Plan::Plan(const AttentionProblem& p, const Mask& mask) {
  if (p.seq_q > 2147483647 - Br || p.seq_kv > 2147483647 - Bc) throw InputError("stage 12: sequences too long");
  const std::vector<KeyRange> ranges = checked_ranges(p, mask);
  classes_ = classify_ranges(p, mask, ranges);
  seq_q_ = p.seq_q;
  seq_kv_ = p.seq_kv;
  causal_ = p.causal;
  std::vector<int> keys(2 * ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    keys[2 * i] = static_cast<int>(std::max<int64_t>(ranges[i].first, 0));
    keys[2 * i + 1] = static_cast<int>(ranges[i].last);
  }
  std::vector<int> list_at{0}, list;
  for (int64_t qt = 0; qt < classes_.q_tiles; ++qt) {
    for (int64_t j = 0; j < classes_.kv_tiles; ++j) {
      const BlockKind k = classes_.kinds[static_cast<size_t>(qt * classes_.kv_tiles + j)];
      if (k != BlockKind::empty) list.push_back(static_cast<int>(2 * j + (k == BlockKind::partial ? 1 : 0)));
    }
    list_at.push_back(static_cast<int>(list.size()));
    longest_ = std::max<int64_t>(longest_, list_at.back() - list_at[list_at.size() - 2]);
  }
  // Heaviest first; among equals, the later tile first (under the causal mask, as stage 08).
  std::vector<int> rank(static_cast<size_t>(classes_.q_tiles));
  std::iota(rank.begin(), rank.end(), 0);
  std::stable_sort(rank.begin(), rank.end(), [&](int a, int b) {
    const int wa = list_at[a + 1] - list_at[a], wb = list_at[b + 1] - list_at[b];
    return wa != wb ? wa > wb : a > b;
  });
  work_.resize(static_cast<size_t>(classes_.q_tiles));
  for (int64_t qt = 0; qt < classes_.q_tiles; ++qt) {
    int64_t w = 16;  // the tile's own work: 1.6 blocks
    for (int u = list_at[static_cast<size_t>(qt)]; u < list_at[static_cast<size_t>(qt) + 1]; ++u) {
      w += list[static_cast<size_t>(u)] % 2 ? 13 : 10;  // a full block, or a partial one with its tests
    }
    work_[static_cast<size_t>(qt)] = w;
  }
  schedules_ = std::make_unique<Schedules>();
  keys_ = DeviceBuffer<int>(keys);
  list_at_ = DeviceBuffer<int>(list_at);
  list_ = DeviceBuffer<int>(list.empty() ? std::vector<int>{0} : list);
  rank_ = DeviceBuffer<int>(rank);
  visited_ = static_cast<int64_t>(list.size());
}

Plan::DeviceTables Plan::tables() const { return {keys_.data(), list_at_.data(), list_.data(), rank_.data()}; }

/// The schedules a plan has made, one for each (heads, blocks) it was asked for.
struct Plan::Schedules {
  std::mutex mutex;  ///< held while one is looked up or made
  /// (heads, blocks, the schedule's offsets and tiles on the device): kept while the plan
  /// lives, so that a pointer handed out stays valid.
  std::vector<std::tuple<int64_t, int, DeviceBuffer<int>>> made;
};

Plan::~Plan() = default;
Plan::Plan(Plan&&) noexcept = default;
Plan& Plan::operator=(Plan&&) noexcept = default;

const int* Plan::schedule(int64_t heads, int blocks, bool may_make) const {
  const std::lock_guard<std::mutex> lock(schedules_->mutex);
  for (const auto& [h, b, table] : schedules_->made) {
    if (h == heads && b == blocks) return table.data();
  }
  if (!may_make) return nullptr;
  Schedule s = schedule_tiles(work_, heads, blocks);
  s.at.insert(s.at.end(), s.tiles.begin(), s.tiles.end());
  schedules_->made.emplace_back(heads, blocks, DeviceBuffer<int>(s.at));
  return std::get<2>(schedules_->made.back()).data();
}

bool Plan::persistent(int64_t d) const {
  // As stage 08: d = 64 always; d = 128 where a Q tile's run is short (at most 64 K/V tiles).
  return d == 64 || longest_ <= 64;
}

void Plan::require_fits(const AttentionProblem& p) const {
  if (p.seq_q != seq_q_ || p.seq_kv != seq_kv_ || p.causal != causal_) {
    throw InputError("stage 12: the plan was made for Nq = " + std::to_string(seq_q_) + ", Nkv = " +
                     std::to_string(seq_kv_) + (causal_ ? ", causal" : ", not causal") + ": make one for this problem");
  }
}

double hbm_bytes_model(const AttentionProblem& p, const Plan& plan) {
  // Q read and O written once; K and V read once for every block visited, in every head.
  const double bytes = static_cast<double>(dtype_bytes(p.dtype));
  return static_cast<double>(p.batch_heads()) * bytes *
         (2.0 * static_cast<double>(p.seq_q * p.dim) + 2.0 * static_cast<double>(plan.visited() * Bc * p.dim));
}

}  // namespace fa::masks
