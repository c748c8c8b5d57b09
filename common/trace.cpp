#include "common/trace.h"

namespace fa::trace {

namespace {

struct State {
  int64_t rows_per_head = 0;
  std::map<int64_t, BlockTrace> blocks;
  std::map<std::string, LaneRecords> lanes;
  std::map<std::string, std::vector<double>> tiles;
  Keyed keyed;
};

State& state() {
  static State s;
  return s;
}

}  // namespace

void start(int64_t rows_per_head) {
  state().rows_per_head = rows_per_head;
  state().blocks.clear();
  state().lanes.clear();
  state().tiles.clear();
  state().keyed.clear();
}

const std::map<int64_t, BlockTrace>& blocks() { return state().blocks; }
const std::map<std::string, LaneRecords>& lanes() { return state().lanes; }
const std::map<std::string, std::vector<double>>& tiles() { return state().tiles; }
const Keyed& keyed() { return state().keyed; }

void record_keyed(const std::string& name, const std::vector<int64_t>& key, int index, int size, double value) {
  std::vector<double>& v = state().keyed[name][key];
  if (static_cast<int>(v.size()) != size) v.assign(static_cast<std::size_t>(size), 0.0);
  v[static_cast<std::size_t>(index)] = value;
}

void record_lane(const std::string& name, int lane, LaneRecord r) { state().lanes[name].emplace(lane, std::move(r)); }
void record_tile(const std::string& name, std::vector<double> values) {
  state().tiles.emplace(name, std::move(values));
}

void record_event(int64_t block, Event e) { state().blocks[block].events.push_back(std::move(e)); }

void record_value(int64_t block, int64_t j, int64_t i, int64_t row, const std::string& name, int index, int size,
                  double value) {
  if (row >= state().rows_per_head) return;
  std::vector<double>& v = state().blocks[block].steps[{j, i}][row][name];
  if (static_cast<int>(v.size()) != size) v.assign(static_cast<std::size_t>(size), 0.0);
  v[static_cast<std::size_t>(index)] = value;
}

}  // namespace fa::trace
