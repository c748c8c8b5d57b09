// CPU backend: cp.async with commit and wait groups (see fa_cpu/async_copy.h).
#include "fa_cpu/async_copy.h"

#include <cstdint>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include "fa_cpu/scheduler.h"
#include "racecheck.h"
#include "runtime_state.h"

namespace fa_cpu {

namespace {

struct Copy {
  void* dst;
  std::size_t bytes;
  unsigned char data[16];  // the source as read at issue, zero-filled past src_bytes
  const void* pc;          // the kernel code that issued it (for the race detector)
};

struct ThreadCopies {
  std::vector<Copy> open;                  // issued since the last commit
  std::deque<std::vector<Copy>> groups;    // committed, oldest first
};

// One vector of threads per block in flight (a deque: growing keeps references valid).
std::vector<ThreadCopies>& per_thread() {
  static std::deque<std::vector<ThreadCopies>> slots;
  const auto slot = static_cast<std::size_t>(block_slot());
  if (slots.size() <= slot) slots.resize(slot + 1);
  return slots[slot];
}

ThreadCopies& mine() { return per_thread().at(static_cast<std::size_t>(current_thread())); }

void land(const std::vector<Copy>& group) {
  for (const Copy& c : group) {
    race::access(c.dst, c.bytes, true, c.pc);
    std::memcpy(c.dst, c.data, c.bytes);
  }
}

}  // namespace

void cp_async(void* dst, const void* src, std::size_t bytes, std::size_t src_bytes) {
  if (bytes != 4 && bytes != 8 && bytes != 16) throw std::runtime_error("cp.async copies 4, 8 or 16 bytes");
  if (src_bytes > bytes) throw std::runtime_error("cp.async: src-size exceeds cp-size");
  if (reinterpret_cast<std::uintptr_t>(dst) % bytes != 0 || reinterpret_cast<std::uintptr_t>(src) % bytes != 0) {
    throw std::runtime_error("cp.async: addresses must be aligned to the copy size (" + std::to_string(bytes) + ")");
  }
  Copy c{dst, bytes, {}, __builtin_return_address(0)};
  if (src_bytes) race::access(src, src_bytes, false, c.pc);  // a read of global memory, now
  std::memcpy(c.data, src, src_bytes);  // the rest stays zero
  mine().open.push_back(c);
}

void cp_async_commit() {
  ThreadCopies& t = mine();
  t.groups.push_back(std::move(t.open));  // an empty group is a group too, as in PTX
  t.open.clear();
}

void cp_async_wait(int n) {
  ThreadCopies& t = mine();
  while (static_cast<int>(t.groups.size()) > n) {
    land(t.groups.front());
    t.groups.pop_front();
  }
}

void async_copy_block_begins(int threads) {
  per_thread().assign(static_cast<std::size_t>(threads), ThreadCopies{});
}

void async_copy_thread_exits(int thread) {
  ThreadCopies& t = per_thread().at(static_cast<std::size_t>(thread));
  for (const auto& group : t.groups) land(group);
  land(t.open);
  t.groups.clear();
  t.open.clear();
}

}  // namespace fa_cpu
