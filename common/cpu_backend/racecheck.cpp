// CPU backend: the race detector (see racecheck.h for the rules).
//
// Shared memory. Happens-before is tracked with two clocks, because only two kinds of barrier exist:
// - a generation, bumped at every __syncthreads() and every new block: an access from
//   an earlier generation is ordered before everything that follows;
// - within a generation, a per-warp clock bumped at every __syncwarp, and for each lane
//   the latest clock value of each other lane of its warp that reached it through a
//   chain of __syncwarps (a vector clock of 32 entries). Lane B knows lane A's access
//   made at clock value c once know[B][A] > c.
// Each 2-byte granule of shared memory has a shadow cell: its last write (thread, clock,
// fences, code address) and its reads since then, FastTrack-style: one reader, several
// lanes of one warp (their clocks kept per lane), or several warps (every write in the
// same generation then races with one of them).
//
// Global memory. Each 2-byte granule of a cudaMalloc'd buffer has a shadow cell (made the
// first time a launch touches the buffer): the launch that last touched it, the block that
// last wrote it (and whether atomically), and up to two blocks that read it since. Two
// readers from different blocks are enough: any later writer differs from one of them.
// Each access also keeps its block's release count at the time (see flag_released): a block
// that has seen another's flag is ordered after what that block did before its release.
#include "racecheck.h"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "fa_cpu/scheduler.h"
#include "runtime_state.h"

namespace fa_cpu::race {

namespace {

constexpr std::size_t kGranule = 2;  // bytes per shadow cell (16-bit types are common)

struct Cell {
  std::uint32_t wgen = 0, wtime = 0, wfence = 0;  // last write: generation, warp clock, writer's fences
  std::int32_t wtid = -1;                         // writer (linear thread id)
  std::uint32_t rgen = 0, rtime = 0;              // reads in generation rgen:
  std::int32_t rtid = -1, otid = -1;              // first reader; first reader of another warp
  std::uint32_t rwarps = 0;                       // warps that read
  std::int32_t lanes = -1;                        // several lanes of one warp: their clocks
  const void* wpc = nullptr;
  const void* rpc = nullptr;
  const void* opc = nullptr;
};

struct LaneReads {  // clocks (+1; 0 = no read) and code addresses of each lane's last read
  std::array<std::uint32_t, 32> time;
  std::array<const void*, 32> pc;
};

struct Region {
  std::uintptr_t lo = 0, hi = 0;
  const char* name = "";
  std::vector<Cell> cells;
};

struct Race {
  const char* kind = "";
  int thread = 0, other = 0;  // the access that found it, and the earlier one
  bool write = false, other_write = false;
  const void* pc = nullptr;
  const void* other_pc = nullptr;
  std::string region;
  std::size_t offset = 0;
  // Global memory: the blocks (linear), whether each access was atomic, the buffer.
  bool global = false;
  std::uint32_t block = 0, other_block = 0;
  bool atomic = false, other_atomic = false;
  std::size_t buffer_bytes = 0;
};

constexpr std::uint16_t kNone16 = 0xFFFF;

struct GlobalCell {
  std::uint32_t launch = 0;                   // the launch these fields belong to (else empty)
  std::uint32_t writer = 0, reader = 0, reader2 = 0;  // blocks (linear + 1; 0 = none)
  std::uint16_t wthread = 0, rthread = 0, r2thread = 0;
  std::uint16_t wpc = kNone16, rpc = kNone16, r2pc = kNone16;  // code addresses (interned)
  std::uint16_t wepoch = 0, repoch = 0, r2epoch = 0;  // the accessing block's releases before it
  bool watomic = false;
};

struct Buffer {
  std::uintptr_t lo = 0, hi = 0;
  std::vector<GlobalCell> cells;  // made when a checked launch first touches the buffer
};

// Address ranges (Regions or Buffers: members lo and hi) sorted by address, and the span
// they cover, so that most addresses (the stack's) are rejected by two comparisons.
template <typename T>
struct Ranges {
  std::vector<T> items;
  std::uintptr_t lo = UINTPTR_MAX, hi = 0;

  T* find(std::uintptr_t a) {
    if (a < lo || a >= hi) return nullptr;
    auto it = std::upper_bound(items.begin(), items.end(), a, [](std::uintptr_t x, const T& r) { return x < r.lo; });
    if (it == items.begin()) return nullptr;
    --it;
    return a < it->hi ? &*it : nullptr;
  }
  void insert(T r) {
    auto at = std::upper_bound(items.begin(), items.end(), r.lo, [](std::uintptr_t x, const T& q) { return x < q.lo; });
    items.insert(at, std::move(r));
    update_span();
  }
  void erase(std::uintptr_t start) {
    auto it = std::find_if(items.begin(), items.end(), [start](const T& r) { return r.lo == start; });
    if (it == items.end()) return;
    items.erase(it);
    update_span();
  }

 private:
  void update_span() {
    lo = items.empty() ? UINTPTR_MAX : items.front().lo;
    hi = 0;
    for (const T& r : items) hi = std::max(hi, r.hi);
  }
};

struct State {
  bool enabled = false;
  int threads = 0;
  std::uint32_t gen = 1;
  std::vector<std::uint32_t> warp_time;  // per warp
  std::vector<std::uint32_t> know;       // [thread][32]
  std::vector<std::uint32_t> fences;     // per thread
  std::vector<LaneReads> lane_reads;     // pool, emptied at every generation
  Ranges<Region> statics;                // the static __shared__ variables
  Region dynamic;
  bool shared = true;  // the shared-memory rules apply to this launch
  bool interleave = false;  // blocks in flight together: global stores and atomics are switch points
  // Global memory.
  Ranges<Buffer> buffers;       // the cudaMalloc buffers
  std::uint32_t launch = 0;     // counts checked launches
  std::uint32_t block = 0;      // the running block, linear + 1
  std::vector<const void*> pointers;  // the launch's pointer arguments
  std::vector<const void*> pcs;       // interned code addresses
  std::unordered_map<const void*, std::uint16_t> pc_index;
  // Flags between blocks (flag_released, flag_acquired), this launch: each block's releases
  // so far; each flag's last release (block, its release count after it); and for a pair
  // (block, other) how many of other's releases the block has seen, as a key of the two.
  std::unordered_map<std::uint32_t, std::uint16_t> releases;
  std::unordered_map<const void*, std::pair<std::uint32_t, std::uint16_t>> flags;
  std::unordered_map<std::uint64_t, std::uint16_t> seen;
  std::uint16_t now = 0;  // the running block's releases so far (its entry in `releases`)
  bool found = false;
  Race first;
  long more = 0;
};

State& state() {
  static State s;
  return s;
}

int g_current = -1;  // the running thread, or -1: accesses are ignored (checking and interleaving off)

void new_generation(State& s) {
  ++s.gen;
  s.lane_reads.clear();
}

// Is an access by `other` at warp clock `time` in this generation ordered before now, for `t`?
bool ordered(const State& s, int t, int other, std::uint32_t time) {
  if (other == t) return true;
  if ((other >> 5) != (t >> 5)) return false;  // other warps: only __syncthreads orders them
  return s.know[static_cast<std::size_t>(t) * 32 + static_cast<std::size_t>(other & 31)] > time;
}

void report(State& s, const char* kind, int t, bool write, const void* pc, int other, bool other_write,
            const void* other_pc, const Region& r, std::uintptr_t address) {
  if (s.found) {
    ++s.more;
    return;
  }
  s.found = true;
  s.first = Race{kind, t, other, write, other_write, pc, other_pc, r.name,
                 static_cast<std::size_t>(address - r.lo)};
}

void on_access(State& s, Region& r, std::uintptr_t a, std::size_t bytes, bool write, const void* pc) {
  const int t = g_current;
  const std::uint32_t warp_bit = 1u << (t >> 5);
  const std::uint32_t now = s.warp_time[static_cast<std::size_t>(t >> 5)];
  const std::size_t first = (a - r.lo) / kGranule;
  const std::size_t last = std::min((a + bytes - 1 - r.lo) / kGranule, r.cells.size() - 1);
  for (std::size_t i = first; i <= last; ++i) {
    Cell& c = r.cells[i];
    const std::uintptr_t at = r.lo + i * kGranule;
    // The last write must be ordered before this access (read after write, write after write).
    if (c.wgen == s.gen && !ordered(s, t, c.wtid, c.wtime) && s.fences[static_cast<std::size_t>(c.wtid)] <= c.wfence) {
      report(s, write ? "write after write" : "read after write", t, write, pc, c.wtid, true, c.wpc, r, at);
    }
    if (!write) {
      if (c.rgen != s.gen) {  // the first read since the last write or barrier
        c.rgen = s.gen, c.rtid = t, c.rtime = now, c.rpc = pc, c.rwarps = warp_bit, c.lanes = -1, c.otid = -1;
      } else if (c.rwarps == warp_bit && c.lanes < 0 && c.rtid == t) {
        c.rtime = now, c.rpc = pc;
      } else if (c.rwarps == warp_bit) {  // another lane of the same warp
        if (c.lanes < 0) {
          c.lanes = static_cast<std::int32_t>(s.lane_reads.size());
          s.lane_reads.push_back(LaneReads{});
          LaneReads& l = s.lane_reads.back();
          l.time.fill(0);
          l.pc.fill(nullptr);
          l.time[static_cast<std::size_t>(c.rtid & 31)] = c.rtime + 1;
          l.pc[static_cast<std::size_t>(c.rtid & 31)] = c.rpc;
        }
        LaneReads& l = s.lane_reads[static_cast<std::size_t>(c.lanes)];
        l.time[static_cast<std::size_t>(t & 31)] = now + 1;
        l.pc[static_cast<std::size_t>(t & 31)] = pc;
      } else {  // another warp: any write in this generation now races with some reader
        if (c.otid < 0 && (t >> 5) != (c.rtid >> 5)) c.otid = t, c.opc = pc;
        c.rwarps |= warp_bit;
      }
      continue;
    }
    // A write: every read since the last write must be ordered before it (write after read).
    if (c.rgen == s.gen) {
      if (c.rwarps & ~warp_bit) {
        const bool first_other = (c.rtid >> 5) != (t >> 5);
        report(s, "write after read", t, true, pc, first_other ? c.rtid : c.otid, false, first_other ? c.rpc : c.opc,
               r, at);
      } else if (c.lanes >= 0) {
        const LaneReads& l = s.lane_reads[static_cast<std::size_t>(c.lanes)];
        for (int lane = 0; lane < 32; ++lane) {
          const int reader = (t & ~31) | lane;
          if (l.time[static_cast<std::size_t>(lane)] && !ordered(s, t, reader, l.time[static_cast<std::size_t>(lane)] - 1)) {
            report(s, "write after read", t, true, pc, reader, false, l.pc[static_cast<std::size_t>(lane)], r, at);
            break;
          }
        }
      } else if (!ordered(s, t, c.rtid, c.rtime)) {
        report(s, "write after read", t, true, pc, c.rtid, false, c.rpc, r, at);
      }
    }
    c.wgen = s.gen, c.wtid = t, c.wtime = now, c.wfence = s.fences[static_cast<std::size_t>(t)], c.wpc = pc;
    c.rgen = 0;  // earlier reads are ordered before this write, so before anything ordered after it
  }
}

Region* find_region(State& s, std::uintptr_t a) {
  if (a - s.dynamic.lo < s.dynamic.hi - s.dynamic.lo) return &s.dynamic;
  return s.statics.find(a);
}

// ---- global memory -----------------------------------------------------------------------
std::uint16_t intern(State& s, const void* pc) {
  auto it = s.pc_index.find(pc);
  if (it != s.pc_index.end()) return it->second;
  if (s.pcs.size() >= kNone16) return kNone16;
  const auto i = static_cast<std::uint16_t>(s.pcs.size());
  s.pcs.push_back(pc);
  s.pc_index.emplace(pc, i);
  return i;
}

const void* pc_of(const State& s, std::uint16_t i) { return i < s.pcs.size() ? s.pcs[i] : nullptr; }

void report_global(State& s, const char* kind, bool write, bool atomic, const void* pc, std::uint32_t other_block,
                   int other_thread, bool other_write, bool other_atomic, const void* other_pc, const Buffer& b,
                   std::uintptr_t at) {
  if (s.found) {
    ++s.more;
    return;
  }
  s.found = true;
  Race r;
  r.kind = kind;
  r.global = true;
  r.thread = g_current, r.other = other_thread;
  r.write = write, r.other_write = other_write;
  r.atomic = atomic, r.other_atomic = other_atomic;
  r.pc = pc, r.other_pc = other_pc;
  r.block = s.block - 1, r.other_block = other_block - 1;
  r.buffer_bytes = b.hi - b.lo;
  r.offset = at - b.lo;
  for (std::size_t i = 0; i < s.pointers.size(); ++i) {
    if (s.pointers[i] == reinterpret_cast<const void*>(b.lo)) {
      r.region = "argument " + std::to_string(i + 1);
      break;
    }
  }
  s.first = r;
}

// Is block `other`'s access, made after `other_epoch` of its releases, ordered before the
// running block's accesses from now on? Only if the running block has seen a later release.
bool after_release(const State& s, std::uint32_t other, std::uint16_t other_epoch) {
  if (s.seen.empty()) return false;
  const auto it = s.seen.find(static_cast<std::uint64_t>(s.block) << 32 | other);
  return it != s.seen.end() && other_epoch < it->second;
}

// `kind`: 0 a plain read, 1 a plain write, 2 an atomic read-modify-write.
void on_global(State& s, Buffer& b, std::uintptr_t a, std::size_t bytes, int kind, const void* pc) {
  if (b.cells.empty()) b.cells.resize((b.hi - b.lo + kGranule - 1) / kGranule);
  const std::uint32_t me = s.block;
  const std::uint16_t now = s.now;
  const bool write = kind != 0, atomic = kind == 2;
  const std::uint16_t pci = intern(s, pc);
  const auto thread = static_cast<std::uint16_t>(g_current);
  const std::size_t first = (a - b.lo) / kGranule;
  const std::size_t last = std::min((a + bytes - 1 - b.lo) / kGranule, b.cells.size() - 1);
  for (std::size_t i = first; i <= last; ++i) {
    GlobalCell& c = b.cells[i];
    const std::uintptr_t at = b.lo + i * kGranule;
    if (c.launch != s.launch) c = GlobalCell{}, c.launch = s.launch;
    // Another block's write races with anything but an atomic against an atomic.
    if (c.writer && c.writer != me && !(atomic && c.watomic) && !after_release(s, c.writer, c.wepoch)) {
      report_global(s, write ? "write after write" : "read after write", write, atomic, pc, c.writer, c.wthread,
                    true, c.watomic, pc_of(s, c.wpc), b, at);
    }
    if (!write) {
      if (!c.reader || c.reader == me) {
        c.reader = me, c.rthread = thread, c.rpc = pci, c.repoch = now;
      } else if (!c.reader2 || c.reader2 == me) {
        c.reader2 = me, c.r2thread = thread, c.r2pc = pci, c.r2epoch = now;
      }
      continue;
    }
    // A write (plain or atomic) races with another block's plain read.
    if (c.reader && c.reader != me && !after_release(s, c.reader, c.repoch)) {
      report_global(s, "write after read", true, atomic, pc, c.reader, c.rthread, false, false, pc_of(s, c.rpc), b, at);
    } else if (c.reader2 && c.reader2 != me && !after_release(s, c.reader2, c.r2epoch)) {
      report_global(s, "write after read", true, atomic, pc, c.reader2, c.r2thread, false, false, pc_of(s, c.r2pc), b,
                    at);
    }
    c.writer = me, c.wthread = thread, c.wpc = pci, c.watomic = atomic, c.wepoch = now;
    c.reader = c.reader2 = 0;
  }
}

inline void hook_kind(const void* address, std::size_t bytes, int kind, const void* pc) {
  if (g_current < 0) return;  // host code, or checking and interleaving are off
  State& s = state();
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  if (Region* r = find_region(s, a)) {
    if (s.enabled && s.shared && kind != 2) on_access(s, *r, a, bytes, kind == 1, pc);  // shared atomics are exempt
  } else if (Buffer* b = s.buffers.find(a)) {
    // Another block may run first: between a thread's load and its store of the same
    // value, so a read-modify-write without an atomic loses the other block's update.
    if (s.interleave && kind == 1) fa_cpu::interleave_point();  // (atomics: in fa_cpu::note_atomic)
    if (s.enabled) on_global(s, *b, a, bytes, kind, pc);
  }
}

inline void hook(const void* address, std::size_t bytes, bool write, const void* pc) {
  hook_kind(address, bytes, write ? 1 : 0, pc);
}

// "file.cu:123" for a code address, from the debug line table (addr2line), or the
// binary and offset when there is none.
std::string source_line(const void* pc) {
  if (!pc) return "?";
  Dl_info info{};
  if (!dladdr(pc, &info) || !info.dli_fname) return "?";
  auto address = reinterpret_cast<std::uintptr_t>(pc) - 1;  // inside the call, not after it
  const auto* elf = static_cast<const ElfW(Ehdr)*>(info.dli_fbase);
  if (elf && elf->e_type == ET_DYN) address -= reinterpret_cast<std::uintptr_t>(info.dli_fbase);
  std::string file = info.dli_fname;
  if (file.empty()) file = "/proc/self/exe";
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%" PRIxPTR, address);
  const std::string command = "addr2line -e '" + file + "' " + hex + " 2>/dev/null";
  std::string line;
  if (FILE* p = popen(command.c_str(), "r")) {
    char buf[4096];
    if (std::fgets(buf, sizeof buf, p)) line = buf;
    pclose(p);
  }
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  if (const auto paren = line.find(" (discriminator"); paren != std::string::npos) line.resize(paren);
  if (line.empty() || line[0] == '?') return file + "+" + hex + " (no line table: build with -g)";
  return line;
}

std::string who(int linear) {
  const unsigned x = fa_cpu_blockDim.x, y = fa_cpu_blockDim.y;
  const auto l = static_cast<unsigned>(linear);
  return "thread (" + std::to_string(l % x) + "," + std::to_string(l / x % y) + "," + std::to_string(l / (x * y)) +
         ") (warp " + std::to_string(linear / 32) + ", lane " + std::to_string(linear % 32) + ")";
}

std::string which_block(std::uint32_t linear) {
  const unsigned x = fa_cpu_gridDim.x, y = fa_cpu_gridDim.y;
  return "block (" + std::to_string(linear % x) + "," + std::to_string(linear / x % y) + "," +
         std::to_string(linear / (x * y)) + ")";
}

}  // namespace

bool built() {
#ifdef FA_CPU_RACECHECK
  return true;
#else
  return false;
#endif
}

void launch_begins(bool enabled, bool shared, bool interleaved, int threads, const void* dynamic_smem,
                   std::size_t dynamic_bytes, const void* const* pointers, int count) {
  State& s = state();
  s.enabled = enabled && built();
  s.shared = shared;
  s.interleave = interleaved && built();
  s.threads = threads;
  s.found = false;
  s.more = 0;
  g_current = -1;
  s.dynamic.lo = s.dynamic.hi = 0;
  if (!s.enabled) return;
  if (++s.launch == 0) {  // the counter wrapped: forget every cell, so none looks current
    for (Buffer& b : s.buffers.items) std::fill(b.cells.begin(), b.cells.end(), GlobalCell{});
    s.launch = 1;
  }
  s.releases.clear();
  s.flags.clear();
  s.seen.clear();
  s.now = 0;
  s.pointers.assign(pointers, pointers + count);
  s.warp_time.assign(static_cast<std::size_t>((threads + 31) / 32), 0);
  s.know.assign(static_cast<std::size_t>(threads) * 32, 0);
  s.fences.assign(static_cast<std::size_t>(threads), 0);
  s.dynamic.lo = reinterpret_cast<std::uintptr_t>(dynamic_smem);
  s.dynamic.hi = s.dynamic.lo + (dynamic_smem ? dynamic_bytes : 0);
  s.dynamic.name = "extern __shared__ memory";
  s.dynamic.cells.assign(dynamic_smem ? (dynamic_bytes + kGranule - 1) / kGranule : 0, Cell{});
}

void launch_ends() {
  State& s = state();
  s.enabled = false;
  s.interleave = false;
  s.dynamic.lo = s.dynamic.hi = 0;
  g_current = -1;
}

void flag_released(const void* flag) {
  State& s = state();
  if (!s.enabled || g_current < 0) return;
  std::uint16_t& n = s.releases[s.block];
  if (n < 0xFFFF) ++n;  // (saturated: later accesses look unordered, never ordered by mistake)
  s.now = n;
  s.flags[flag] = {s.block, n};
}

void flag_acquired(const void* flag) {
  State& s = state();
  if (!s.enabled || g_current < 0) return;
  const auto it = s.flags.find(flag);
  if (it == s.flags.end() || it->second.first == s.block) return;
  std::uint16_t& seen = s.seen[static_cast<std::uint64_t>(s.block) << 32 | it->second.first];
  seen = std::max(seen, it->second.second);
}

void block_resumes() {
  State& s = state();
  if (!s.enabled) return;
  s.block = 1 + fa_cpu_blockIdx.x + fa_cpu_gridDim.x * (fa_cpu_blockIdx.y + fa_cpu_gridDim.y * fa_cpu_blockIdx.z);
  const auto it = s.releases.find(s.block);
  s.now = it == s.releases.end() ? 0 : it->second;
}

void block_begins() {
  State& s = state();
  if (!s.enabled) return;
  block_resumes();
  new_generation(s);
  std::fill(s.warp_time.begin(), s.warp_time.end(), 0);
  std::fill(s.know.begin(), s.know.end(), 0);
}

void set_current(int thread) { g_current = state().enabled || state().interleave ? thread : -1; }

void barrier() {
  State& s = state();
  if (s.enabled) new_generation(s);
}

void warp_sync(int warp, unsigned mask) {
  State& s = state();
  if (!s.enabled) return;
  const std::uint32_t t = ++s.warp_time[static_cast<std::size_t>(warp)];
  std::array<std::uint32_t, 32> joined{};
  const auto row = [&](int lane) { return s.know.begin() + (static_cast<std::ptrdiff_t>(warp) * 32 + lane) * 32; };
  for (int lane = 0; lane < 32; ++lane) {
    if (!(mask >> lane & 1u)) continue;
    for (int k = 0; k < 32; ++k) joined[static_cast<std::size_t>(k)] = std::max(joined[static_cast<std::size_t>(k)], row(lane)[k]);
  }
  for (int k = 0; k < 32; ++k) {
    if (mask >> k & 1u) joined[static_cast<std::size_t>(k)] = t;  // every participant's accesses so far
  }
  for (int lane = 0; lane < 32; ++lane) {
    if (mask >> lane & 1u) std::copy(joined.begin(), joined.end(), row(lane));
  }
}

void fence() {
  State& s = state();
  if (s.enabled && g_current >= 0) ++s.fences[static_cast<std::size_t>(g_current)];
}

void add_region(const void* address, std::size_t bytes, const char* name) {
  State& s = state();
  Region r;
  r.lo = reinterpret_cast<std::uintptr_t>(address);
  r.hi = r.lo + bytes;
  r.name = name;
  r.cells.assign((bytes + kGranule - 1) / kGranule, Cell{});
  s.statics.insert(std::move(r));
}

void access(const void* address, std::size_t bytes, bool write, const void* pc) { hook(address, bytes, write, pc); }

void atomic_access(const void* address, std::size_t bytes, const void* pc) { hook_kind(address, bytes, 2, pc); }

void add_buffer(const void* address, std::size_t bytes) {
  if (!built() || bytes == 0 || bytes > kMaxTrackedBytes) return;
  Buffer b;
  b.lo = reinterpret_cast<std::uintptr_t>(address);
  b.hi = b.lo + bytes;
  state().buffers.insert(std::move(b));
}

void remove_buffer(const void* address) { state().buffers.erase(reinterpret_cast<std::uintptr_t>(address)); }

bool pending() { return state().found; }

std::string take_report() {
  State& s = state();
  const Race& r = s.first;
  if (r.global) {
    const auto verb = [](bool write, bool atomic, bool past) {
      return std::string(atomic ? (past ? " added atomically" : " adds atomically")
                                : write ? (past ? " wrote" : " writes") : (past ? " read" : " reads"));
    };
    std::string text = std::string("global-memory race between blocks (") + r.kind + ") at byte " +
                       std::to_string(r.offset) + " of the " + std::to_string(r.buffer_bytes) +
                       "-byte cudaMalloc buffer" + (r.region.empty() ? "" : " passed as " + r.region) + "\n    " +
                       which_block(r.block) + ", " + who(r.thread) + verb(r.write, r.atomic, false) + " at " +
                       source_line(r.pc) + "\n    " + which_block(r.other_block) + ", " + who(r.other) +
                       verb(r.other_write, r.other_atomic, true) + " at " + source_line(r.other_pc) +
                       "\n    blocks of one launch are not ordered with each other: a value that several blocks "
                       "update needs an atomic, or a separate kernel to combine their parts";
    if (s.more) text += "\n    (" + std::to_string(s.more) + " more conflicting accesses in this block)";
    s.found = false;
    s.more = 0;
    return text;
  }
  const std::string where = r.region.rfind("extern", 0) == 0 ? r.region : "__shared__ " + r.region;
  std::string text = std::string("shared-memory race (") + r.kind + ") at byte " + std::to_string(r.offset) + " of " +
                     where + "\n    " +
                     who(r.thread) + (r.write ? " writes" : " reads") + " at " + source_line(r.pc) + "\n    " +
                     who(r.other) + (r.other_write ? " wrote" : " read") + " at " + source_line(r.other_pc) +
                     "\n    with no barrier between them that both took part in: __syncthreads(), or __syncwarp() "
                     "with both lanes in its mask (a shuffle or vote synchronises lanes but orders no memory)";
  if (s.more) text += "\n    (" + std::to_string(s.more) + " more conflicting accesses in this block)";
  s.found = false;
  s.more = 0;
  return text;
}

}  // namespace fa_cpu::race

#ifdef FA_CPU_RACECHECK
// ---- the compiler's instrumentation calls ------------------------------------------------
// Kernel files are compiled with -fsanitize=thread; these replace ThreadSanitizer's
// runtime, which is never linked. Each passes the access on with the kernel code's address.
#define FA_RACE_HOOK(kind, n, write)                                                        \
  extern "C" void __tsan_##kind##n(void* p) { fa_cpu::race::hook(p, n, write, __builtin_return_address(0)); } \
  extern "C" void __tsan_unaligned_##kind##n(void* p) { fa_cpu::race::hook(p, n, write, __builtin_return_address(0)); }
FA_RACE_HOOK(read, 1, false)
FA_RACE_HOOK(read, 2, false)
FA_RACE_HOOK(read, 4, false)
FA_RACE_HOOK(read, 8, false)
FA_RACE_HOOK(read, 16, false)
FA_RACE_HOOK(write, 1, true)
FA_RACE_HOOK(write, 2, true)
FA_RACE_HOOK(write, 4, true)
FA_RACE_HOOK(write, 8, true)
FA_RACE_HOOK(write, 16, true)
#undef FA_RACE_HOOK
extern "C" {
void __tsan_volatile_read1(void* p) { fa_cpu::race::hook(p, 1, false, __builtin_return_address(0)); }
void __tsan_volatile_read2(void* p) { fa_cpu::race::hook(p, 2, false, __builtin_return_address(0)); }
void __tsan_volatile_read4(void* p) { fa_cpu::race::hook(p, 4, false, __builtin_return_address(0)); }
void __tsan_volatile_read8(void* p) { fa_cpu::race::hook(p, 8, false, __builtin_return_address(0)); }
void __tsan_volatile_read16(void* p) { fa_cpu::race::hook(p, 16, false, __builtin_return_address(0)); }
void __tsan_volatile_write1(void* p) { fa_cpu::race::hook(p, 1, true, __builtin_return_address(0)); }
void __tsan_volatile_write2(void* p) { fa_cpu::race::hook(p, 2, true, __builtin_return_address(0)); }
void __tsan_volatile_write4(void* p) { fa_cpu::race::hook(p, 4, true, __builtin_return_address(0)); }
void __tsan_volatile_write8(void* p) { fa_cpu::race::hook(p, 8, true, __builtin_return_address(0)); }
void __tsan_volatile_write16(void* p) { fa_cpu::race::hook(p, 16, true, __builtin_return_address(0)); }
void __tsan_read_range(void* p, unsigned long n) { fa_cpu::race::hook(p, n, false, __builtin_return_address(0)); }
void __tsan_write_range(void* p, unsigned long n) { fa_cpu::race::hook(p, n, true, __builtin_return_address(0)); }
// Clang turns memcpy, memmove and memset in instrumented code into these.
void* __tsan_memcpy(void* d, const void* s, unsigned long n) {
  fa_cpu::race::hook(s, n, false, __builtin_return_address(0));
  fa_cpu::race::hook(d, n, true, __builtin_return_address(0));
  return std::memcpy(d, s, n);
}
void* __tsan_memmove(void* d, const void* s, unsigned long n) {
  fa_cpu::race::hook(s, n, false, __builtin_return_address(0));
  fa_cpu::race::hook(d, n, true, __builtin_return_address(0));
  return std::memmove(d, s, n);
}
void* __tsan_memset(void* d, int c, unsigned long n) {
  fa_cpu::race::hook(d, n, true, __builtin_return_address(0));
  return std::memset(d, c, n);
}
}
// Atomic loads and stores (the guard of a function-local static is one): done as asked,
// sequentially consistent, and not checked (atomics do not race with each other).
#define FA_RACE_ATOMIC(bits, type)                                                              \
  extern "C" type __tsan_atomic##bits##_load(const volatile type* p, int) {                     \
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);                                                 \
  }                                                                                              \
  extern "C" void __tsan_atomic##bits##_store(volatile type* p, type v, int) {                  \
    __atomic_store_n(p, v, __ATOMIC_SEQ_CST);                                                    \
  }
FA_RACE_ATOMIC(8, std::uint8_t)
FA_RACE_ATOMIC(16, std::uint16_t)
FA_RACE_ATOMIC(32, std::uint32_t)
FA_RACE_ATOMIC(64, std::uint64_t)
#undef FA_RACE_ATOMIC
extern "C" {
// Function entry and exit, virtual-table pointers, start-up: nothing to do.
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void*, void*) {}
void __tsan_vptr_read(void*) {}
void __tsan_init() {}
}
#endif
