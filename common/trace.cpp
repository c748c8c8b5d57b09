#include "common/trace.h"

namespace fa::trace {

namespace {

struct State {
  int64_t rows_per_head = 0;
  std::map<int64_t, BlockTrace> blocks;
};

State& state() {
  static State s;
  return s;
}

}  // namespace

void start(int64_t rows_per_head) {
  state().rows_per_head = rows_per_head;
  state().blocks.clear();
}

const std::map<int64_t, BlockTrace>& blocks() { return state().blocks; }

void record_event(int64_t block, Event e) { state().blocks[block].events.push_back(std::move(e)); }

void record_value(int64_t block, int64_t j, int64_t i, int64_t row, const std::string& name, int index, int size,
                  double value) {
  if (row >= state().rows_per_head) return;
  std::vector<double>& v = state().blocks[block].steps[{j, i}][row][name];
  if (static_cast<int>(v.size()) != size) v.assign(static_cast<std::size_t>(size), 0.0);
  v[static_cast<std::size_t>(index)] = value;
}

}  // namespace fa::trace
