// CPU backend: the fiber scheduler. Each CUDA thread is a Boost.Context fiber that runs
// until it reaches __syncthreads(), a warp collective, or its end, then hands control
// back here. Blocks run one at a time, in order; or, with Options::blocks_at_once above
// one, several blocks are in flight together and take turns in a shuffled order, so that
// their accesses to global memory interleave as they may on a GPU.
#include "fa_cpu/scheduler.h"

#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/fiber.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fa_cpu/async_copy.h"
#include "fa_cpu/hopper.h"
#include "racecheck.h"
#include "runtime_state.h"

#if defined(__SANITIZE_ADDRESS__)
#define FA_CPU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FA_CPU_ASAN 1
#endif
#endif
#ifdef FA_CPU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

uint3 fa_cpu_threadIdx{0, 0, 0};
uint3 fa_cpu_blockIdx{0, 0, 0};
uint3 fa_cpu_blockDim{1, 1, 1};
uint3 fa_cpu_gridDim{1, 1, 1};

namespace fa_cpu {

namespace ctx = boost::context;

Options& options() {
  static Options opts = [] {
    Options o;
    const char* shake = std::getenv("FA_CPU_SHAKE");
    if (shake && std::strcmp(shake, "0") != 0 && *shake) {
      o.reverse_threads = o.poison_shared = true;
      o.blocks_at_once = 4;
    }
    if (const char* blocks = std::getenv("FA_CPU_SHAKE_BLOCKS")) o.blocks_at_once = std::max(1, std::atoi(blocks));
    if (const char* seed = std::getenv("FA_CPU_SHAKE_SEED")) o.shake_seed = static_cast<unsigned>(std::strtoul(seed, nullptr, 10));
    const char* race = std::getenv("FA_CPU_RACECHECK");
    if (race && std::strcmp(race, "0") == 0) o.racecheck = false;
    return o;
  }();
  return opts;
}

namespace {

// ---- fiber stacks: mmap'd once with a guard page below, then recycled -----------------
class StackPool {
 public:
  StackPool() {
    const char* kib = std::getenv("FA_CPU_STACK_KB");
    size_ = static_cast<std::size_t>(kib ? std::atol(kib) : 256) * 1024;
    if (size_ < 64 * 1024) size_ = 64 * 1024;
    page_ = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    size_ = (size_ + page_ - 1) / page_ * page_;
  }
  ~StackPool() {
    for (void* base : free_) munmap(base, size_ + page_);
  }
  ctx::stack_context allocate() {
    void* base;
    if (!free_.empty()) {
      base = free_.back();
      free_.pop_back();
    } else {
      base = mmap(nullptr, size_ + page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (base == MAP_FAILED) throw std::bad_alloc();
      mprotect(base, page_, PROT_NONE);  // a stack overflow faults instead of corrupting memory
    }
    ctx::stack_context sc;
    sc.size = size_;
    sc.sp = static_cast<char*>(base) + page_ + size_;
    return sc;
  }
  void deallocate(ctx::stack_context& sc) {
    void* base = static_cast<char*>(sc.sp) - size_ - page_;
#ifdef FA_CPU_ASAN
    // The next fiber on this stack must not inherit the old frames' redzones.
    __asan_unpoison_memory_region(static_cast<char*>(base) + page_, size_);
#endif
    free_.push_back(base);
  }

 private:
  std::size_t size_ = 0, page_ = 4096;
  std::vector<void*> free_;
};

StackPool& stack_pool() {
  static StackPool pool;
  return pool;
}


// ---- per-thread and per-block state ---------------------------------------------------
enum class State { Ready, Barrier, Warp, Blocked, Done };

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::Sync: return "__syncwarp";
    case WarpOp::Shfl: return "__shfl_sync";
    case WarpOp::ShflUp: return "__shfl_up_sync";
    case WarpOp::ShflDown: return "__shfl_down_sync";
    case WarpOp::ShflXor: return "__shfl_xor_sync";
    case WarpOp::Ballot: return "__ballot_sync";
    case WarpOp::Any: return "__any_sync";
    case WarpOp::All: return "__all_sync";
    case WarpOp::Matrix: return "a warp matrix instruction";
  }
  return "?";
}

struct Thread {
  ctx::fiber fiber;      // resumes this CUDA thread
  ctx::fiber scheduler;  // resumes the scheduler (set while this thread runs)
  uint3 idx{0, 0, 0};
  int linear = 0;
  State state = State::Ready;
  const char* file = "";  // where it waits
  int line = 0;
  WarpOp op = WarpOp::Sync;  // the collective it waits in
  unsigned mask = 0;
  std::uint64_t value = 0, result = 0;
  int param = 0, width = 32;
  MatrixOp matrix_op = nullptr;   // WarpOp::Matrix: the instruction,
  const char* matrix_name = "";   // its name,
  void* matrix_data = nullptr;    // and this lane's operands and results
  std::function<bool()> ready;  // State::Blocked: what lets it go on,
  std::function<std::string()> blocked_on;  // and what that is, in words
  std::exception_ptr error;
  const void* stack_bottom = nullptr;  // for AddressSanitizer's fiber annotations
  std::size_t stack_size = 0;
};

struct Block {
  const LaunchConfig* config = nullptr;
  const std::function<void()>* body = nullptr;
  uint3 idx{0, 0, 0};  // its blockIdx
  int slot = 0;        // which of the blocks in flight (0 when one runs at a time)
  bool busy = false;   // holds a block of the grid that has not finished
  std::unique_ptr<void, void (*)(void*)> smem{nullptr, std::free};  // its dynamic shared memory
  // Blocks in flight together: the static __shared__ variables' contents while another
  // block runs (one entry per registered variable; empty: never held any).
  std::vector<std::vector<unsigned char>> statics;
  std::vector<Thread> threads;
  int live = 0;        // threads that have not exited
  int at_barrier = 0;  // threads waiting in __syncthreads()
  std::vector<int> warp_waiting;  // each warp's lanes waiting in a collective
  Thread* current = nullptr;
  bool aborting = false;  // a fault: every suspended thread unwinds its own stack
  void* fake_stack = nullptr;  // AddressSanitizer bookkeeping for the scheduler's stack
  const void* sched_bottom = nullptr;
  std::size_t sched_size = 0;
};

Block* g_block = nullptr;  // the running block (its blockIdx and shared memory are in place)

// The allocator Boost.Context calls when it creates a fiber; it also tells the thread
// where its stack is, for AddressSanitizer's switch annotations.
struct PooledStack {
  Thread* thread;
  ctx::stack_context allocate() {
    ctx::stack_context sc = stack_pool().allocate();
    thread->stack_bottom = static_cast<char*>(sc.sp) - sc.size;
    thread->stack_size = sc.size;
    return sc;
  }
  void deallocate(ctx::stack_context& sc) { stack_pool().deallocate(sc); }
};

// Thrown inside a suspended thread when its block is aborted, so that its stack unwinds
// normally (destructors run, and AddressSanitizer sees every switch).
struct AbortBlock {};

// Every static __shared__ variable seen so far, for poison_shared and for blocks in flight
// together. `launch` is the last launch whose code passed the variable's declaration: a
// launch saves, restores and poisons only its own kernel's variables, not every one that an
// earlier kernel declared.
struct Region {
  void* address;
  std::size_t bytes;
  unsigned long long launch = 0;
};
std::vector<Region>& shared_regions() {
  static std::vector<Region> regions;
  return regions;
}
unsigned long long g_launch = 0;  // launches so far (run_kernel): the running one's number

void* g_dynamic_smem = nullptr;

// ---- AddressSanitizer: tell it which stack is live at every switch --------------------
void asan_enter_fiber(Block& b, Thread& t) {
#ifdef FA_CPU_ASAN
  __sanitizer_start_switch_fiber(&b.fake_stack, t.stack_bottom, t.stack_size);
#else
  (void)b, (void)t;
#endif
}
void asan_back_in_scheduler(Block& b) {
#ifdef FA_CPU_ASAN
  __sanitizer_finish_switch_fiber(b.fake_stack, nullptr, nullptr);
#else
  (void)b;
#endif
}
void asan_started_in_fiber(Block& b) {
#ifdef FA_CPU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &b.sched_bottom, &b.sched_size);
#else
  (void)b;
#endif
}
void asan_leave_fiber(Block& b, bool exiting) {
#ifdef FA_CPU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(exiting ? nullptr : &fake, b.sched_bottom, b.sched_size);
#else
  (void)b, (void)exiting;
#endif
}

// The collective a waiting thread is in, by name: "__shfl_xor_sync", "mma.sync", ...
std::string wait_name(const Thread& t) { return t.op == WarpOp::Matrix ? t.matrix_name : op_name(t.op); }

std::string xyz(uint3 v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

void switch_to(Block& b, Thread& t);

// Resumes every thread that has not finished once more, with `aborting` set: a thread
// that never started skips the kernel, a suspended one unwinds from its wait.
void abort_block(Block& b) {
  b.aborting = true;
  for (Thread& t : b.threads) {
    if (t.fiber) switch_to(b, t);
  }
}

// Throws KernelFault. Called from the scheduler, it first aborts the block, so no fiber
// switch happens while the exception is in flight. Called from a fiber, the exception
// travels to the fiber's entry and the scheduler rethrows it from there.
[[noreturn]] void fault(Block& b, const std::string& what) {
  if (!b.current) abort_block(b);
  std::ostringstream s;
  s << "kernel " << b.config->name << " (launched at " << b.config->file << ":" << b.config->line
    << "), block " << xyz(fa_cpu_blockIdx) << ": " << what;
  throw KernelFault(s.str());
}

std::string thread_name(const Block& b, const Thread& t) {
  return "thread " + xyz(t.idx) + (b.config->block.y * b.config->block.z > 1 ? " (linear " + std::to_string(t.linear) + ")" : "");
}

// Hands control from the running CUDA thread back to the scheduler.
void yield(Block& b, Thread& t) {
  if (b.aborting) throw AbortBlock{};  // a thread let run on after an abort (interleave_point)
  asan_leave_fiber(b, false);
  t.scheduler = std::move(t.scheduler).resume();
  asan_started_in_fiber(b);
  if (b.aborting) throw AbortBlock{};
}

Block& running_block(const char* what) {
  if (!g_block || !g_block->current) {
    std::fprintf(stderr, "fa_cpu: %s called outside a kernel\n", what);
    std::abort();
  }
  return *g_block;
}

void switch_to(Block& b, Thread& t) {
  b.current = &t;
  fa_cpu_threadIdx = t.idx;
  race::set_current(t.linear);
  asan_enter_fiber(b, t);
  t.fiber = std::move(t.fiber).resume();
  asan_back_in_scheduler(b);
  race::set_current(-1);
  b.current = nullptr;
}

// Releases __syncthreads() once every live thread waits there (exited threads do not
// count, as on the hardware). All must wait at the same call site.
bool try_release_barrier(Block& b) {
  if (b.at_barrier == 0 || b.at_barrier != b.live) return false;
  const Thread* first = nullptr;
  for (Thread& t : b.threads) {
    if (t.state != State::Barrier) continue;
    if (!first) {
      first = &t;
    } else if (t.line != first->line || std::strcmp(t.file, first->file) != 0) {
      fault(b, "threads wait at different __syncthreads() (" + std::string(first->file) + ":" +
                   std::to_string(first->line) + " for " + thread_name(b, *first) + ", " + t.file +
                   ":" + std::to_string(t.line) + " for " + thread_name(b, t) +
                   "): a barrier inside divergent code");
    }
  }
  for (Thread& t : b.threads) {
    if (t.state == State::Barrier) t.state = State::Ready;
  }
  b.at_barrier = 0;
  race::barrier();
  return true;
}

std::string lane_list(unsigned mask) {
  std::string s;
  for (int lane = 0; lane < 32;) {
    if (!(mask >> lane & 1u)) {
      ++lane;
      continue;
    }
    int end = lane;
    while (end + 1 < 32 && (mask >> (end + 1) & 1u)) ++end;
    s += (s.empty() ? "" : ",") + std::to_string(lane) + (end > lane ? "-" + std::to_string(end) : "");
    lane = end + 1;
  }
  return s;
}

std::string describe_wait(const Block& b, const Thread& t) {
  switch (t.state) {
    case State::Done: return "exited";
    case State::Ready: return "ready";
    case State::Barrier: return "waiting in __syncthreads() at " + std::string(t.file) + ":" + std::to_string(t.line);
    case State::Blocked: return "waiting for " + t.blocked_on() + " at " + t.file + ":" + std::to_string(t.line);
    case State::Warp: {
      const int base = t.linear / 32 * 32;
      unsigned missing = 0;
      for (int lane = 0; lane < 32; ++lane) {
        if ((t.mask >> lane & 1u) && b.threads[static_cast<std::size_t>(base + lane)].state != State::Warp) missing |= 1u << lane;
      }
      char mask[16];
      std::snprintf(mask, sizeof mask, "0x%08x", t.mask);
      return "waiting in " + wait_name(t) + "(mask " + mask + ") at " + t.file + ":" +
             std::to_string(t.line) + " for lanes " + lane_list(missing) + " of warp " +
             std::to_string(t.linear / 32) + ", which never arrive";
    }
  }
  return "?";
}

[[noreturn]] void report_deadlock(Block& b) {
  std::ostringstream s;
  s << "deadlock: no thread can make progress";
  int lines = 0;
  for (std::size_t i = 0; i < b.threads.size();) {
    const std::string what = describe_wait(b, b.threads[i]);
    std::size_t j = i;
    while (j + 1 < b.threads.size() && describe_wait(b, b.threads[j + 1]) == what) ++j;
    if (lines++ < 16) {
      s << "\n    threads " << b.threads[i].linear;
      if (j > i) s << "-" << b.threads[j].linear;
      s << ": " << what;
    }
    i = j + 1;
  }
  if (lines > 16) s << "\n    ... (" << lines - 16 << " more groups)";
  fault(b, s.str());
}

// If every lane named in `t`'s mask now waits in the same collective, computes every
// lane's result and lets them all go on. Returns whether it completed.
bool try_complete_warp(Block& b, Thread& t) {
  const int base = t.linear / 32 * 32;
  Thread* lanes[32] = {};
  for (int lane = 0; lane < 32; ++lane) {
    if (!(t.mask >> lane & 1u)) continue;
    Thread& o = b.threads[static_cast<std::size_t>(base + lane)];
    if (o.state != State::Warp) return false;  // not there yet
    if (o.op != t.op || o.mask != t.mask || o.matrix_op != t.matrix_op) {
      char m1[16], m2[16];
      std::snprintf(m1, sizeof m1, "0x%08x", t.mask);
      std::snprintf(m2, sizeof m2, "0x%08x", o.mask);
      fault(b, "warp " + std::to_string(t.linear / 32) + ": lane " + std::to_string(t.linear % 32) + " is in " +
                   wait_name(t) + "(mask " + m1 + ") at " + t.file + ":" + std::to_string(t.line) +
                   " but lane " + std::to_string(lane) + " is in " + wait_name(o) + "(mask " + m2 + ") at " +
                   o.file + ":" + std::to_string(o.line) + ": collectives of one warp must match");
    }
    lanes[lane] = &o;
  }
  b.warp_waiting[static_cast<std::size_t>(t.linear / 32)] -= __builtin_popcount(t.mask);  // all go on now
  if (t.op == WarpOp::Matrix) {
    // The instruction sees every lane's operands at once and writes every lane's results.
    void* data[32] = {};
    for (int lane = 0; lane < 32; ++lane) {
      if (lanes[lane]) data[lane] = lanes[lane]->matrix_data;
    }
    t.matrix_op(data);
    for (Thread* o : lanes) {
      if (o) o->state = State::Ready;
    }
    return true;
  }
  if (t.op == WarpOp::Sync) race::warp_sync(t.linear / 32, t.mask);  // shuffles and votes order no memory
  std::uint64_t ballot = 0;
  for (int lane = 0; lane < 32; ++lane) {
    if (lanes[lane] && lanes[lane]->value) ballot |= 1ull << lane;
  }
  for (int lane = 0; lane < 32; ++lane) {
    Thread* o = lanes[lane];
    if (!o) continue;
    const int w = o->width, seg = lane & ~(w - 1);
    int src = lane;
    switch (o->op) {
      case WarpOp::Shfl: src = seg + (o->param & (w - 1)); break;
      case WarpOp::ShflUp: src = (lane - seg) >= o->param ? lane - o->param : lane; break;
      case WarpOp::ShflDown: src = (lane - seg) + o->param < w ? lane + o->param : lane; break;
      case WarpOp::ShflXor: src = ((lane ^ o->param) & ~(w - 1)) == seg ? lane ^ o->param : lane; break;
      default: break;
    }
    switch (o->op) {
      case WarpOp::Sync: o->result = 0; break;
      case WarpOp::Ballot: o->result = ballot; break;
      case WarpOp::Any: o->result = ballot != 0; break;
      case WarpOp::All: o->result = ballot == (t.mask & 0xffffffffull); break;
      default:
        if (src < 0 || src > 31 || !lanes[src]) {
          fault(b, std::string(op_name(o->op)) + " at " + o->file + ":" + std::to_string(o->line) + ": lane " +
                       std::to_string(lane) + " reads lane " + std::to_string(src) +
                       ", which is not in the mask (its value is undefined on a GPU)");
        }
        o->result = lanes[src]->value;
    }
  }
  for (Thread* o : lanes) {
    if (o) o->state = State::Ready;
  }
  return true;
}

int g_slot = 0;             // the running block's slot (block_slot())
bool g_interleaved = false;  // several blocks are in flight

// Puts block `b`'s state in place: blockIdx, dynamic shared memory, and (when blocks are in
// flight together) the static __shared__ variables, saving the previous block's.
void install(Block& b, bool interleaved) {
  if (interleaved && g_block != &b) {
    const std::vector<Region>& regions = shared_regions();
    if (g_block) {
      g_block->statics.resize(regions.size());
      for (std::size_t i = 0; i < regions.size(); ++i) {
        if (regions[i].launch != g_launch) continue;  // not this kernel's
        const auto* bytes = static_cast<const unsigned char*>(regions[i].address);
        g_block->statics[i].assign(bytes, bytes + regions[i].bytes);
      }
    }
    for (std::size_t i = 0; i < regions.size(); ++i) {
      if (regions[i].launch != g_launch) continue;
      if (i < b.statics.size() && !b.statics[i].empty()) {
        std::memcpy(regions[i].address, b.statics[i].data(), regions[i].bytes);
      } else {
        std::memset(regions[i].address, 0xFF, regions[i].bytes);  // never written by this block: garbage
      }
    }
  }
  g_block = &b;
  g_slot = b.slot;
  g_dynamic_smem = b.smem.get();
  fa_cpu_blockIdx = b.idx;
  race::block_resumes();
}

// Block `b` starts as grid block `idx`: its threads are made, none has run yet.
void start_block(Block& b, uint3 idx, bool interleaved) {
  b.idx = idx;
  b.busy = true;
  b.statics.clear();
  if (g_block == &b) g_block = nullptr;  // install() afresh: this Block held the block before, now finished
  install(b, interleaved);
  const LaunchConfig& c = *b.config;
  if (options().poison_shared) {
    if (c.smem) std::memset(b.smem.get(), 0xFF, c.smem);
    // This kernel's variables that an earlier block declared; the rest are poisoned as
    // their declarations are first passed (SharedRegion::use).
    for (const Region& r : shared_regions()) {
      if (r.launch == g_launch) std::memset(r.address, 0xFF, r.bytes);
    }
  }
  b.warp_waiting.assign((b.threads.size() + 31) / 32, 0);
  race::block_begins();
  async_copy_block_begins(static_cast<int>(b.threads.size()));
  hopper_block_begins(static_cast<int>(b.threads.size()));
  b.live = static_cast<int>(b.threads.size());
  b.at_barrier = 0;
  b.aborting = false;
  const std::function<void()>* body = b.body;
  for (Thread& t : b.threads) {
    t.state = State::Ready;
    t.error = nullptr;
    Thread* self = &t;
    Block* block = &b;
    t.fiber = ctx::fiber(std::allocator_arg, PooledStack{self}, [self, block, body](ctx::fiber&& sched) {
      self->scheduler = std::move(sched);
      asan_started_in_fiber(*block);
      try {
        if (!block->aborting) (*body)();
      } catch (const AbortBlock&) {
        // unwound on purpose: another thread faulted
      } catch (const ctx::detail::forced_unwind&) {
        throw;  // Boost.Context unwinding an abandoned fiber: let it through
      } catch (...) {
        self->error = std::current_exception();  // rethrown by the scheduler, outside this catch
      }
      self->state = State::Done;
      asan_leave_fiber(*block, true);
      return std::move(self->scheduler);
    });
  }
}

// One round over the installed block `b`: each thread that can go on runs to its next
// wait. Returns whether any thread ran or a barrier completed. A fault throws KernelFault;
// when the last thread ends, so does a race. A round with no progress is a deadlock when
// the block runs alone (`alone`); with blocks in flight together the caller decides, since
// another block may release what this one waits for (a flag in global memory).
bool step_block(Block& b, const std::vector<int>& order, bool alone) {
  bool progressed = false;
  // Options::lead_warpgroup: the one warpgroup whose threads run this round.
  int group = -1;
  if (const int lead = options().lead_warpgroup; lead >= 0) {
    const int threads = static_cast<int>(b.threads.size()), groups = (threads + 127) / 128;
    for (int k = 0; k < groups && group < 0; ++k) {
      const int g = (lead + k) % groups;
      for (int i = 128 * g; i < std::min(threads, 128 * (g + 1)); ++i) {
        Thread& t = b.threads[static_cast<std::size_t>(i)];
        if (t.state == State::Blocked && t.ready()) t.state = State::Ready;
        if (t.state == State::Ready) {
          group = g;
          break;
        }
      }
    }
  }
  for (int i : order) {
    if (group >= 0 && i / 128 != group) continue;
    Thread& t = b.threads[static_cast<std::size_t>(i)];
    if (t.state == State::Blocked && t.ready()) t.state = State::Ready;
    if (t.state != State::Ready) continue;
    switch_to(b, t);
    progressed = true;
    if (t.error) {
      std::string what = "an exception of unknown type";
      bool named = false;  // a KernelFault already names the kernel
      try {
        std::rethrow_exception(t.error);
      } catch (const KernelFault& e) {
        what = e.what();
        named = true;
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      t.error = nullptr;
      if (named) {
        abort_block(b);
        throw KernelFault(what);
      }
      fault(b, thread_name(b, t) + " threw: " + what);
    }
    if (t.state == State::Done) {
      --b.live;
      if (!b.aborting) {
        race::set_current(t.linear);
        async_copy_thread_exits(t.linear);  // copies it never waited for land now
        race::set_current(-1);
        const std::string why = hopper_thread_exits(t.linear);
        if (!why.empty()) fault(b, thread_name(b, t) + ": " + why);
      }
    }
    try_release_barrier(b);
  }
  if (b.live > 0 && !progressed && !try_release_barrier(b)) {
    if (alone) report_deadlock(b);
    return false;
  }
  if (b.live == 0) {
    b.busy = false;
    if (race::pending()) fault(b, race::take_report());
  }
  return true;
}

// The grid's blocks, each exactly once: in order, or (shuffled) as i -> (a·i + o) mod n
// with a prime to n.
class BlockOrder {
 public:
  BlockOrder(unsigned long long n, bool shuffled, std::mt19937_64& rng) : n_(n) {
    if (!shuffled || n < 2) return;
    offset_ = rng() % n;
    do {
      stride_ = 1 + rng() % (n - 1);
    } while (std::gcd(stride_, n) != 1);
  }
  unsigned long long operator()(unsigned long long i) const {
    return static_cast<unsigned long long>((static_cast<unsigned __int128>(stride_) * i + offset_) % n_);
  }

 private:
  unsigned long long n_, stride_ = 1, offset_ = 0;
};

// Seeded from Options::shake_seed, and again whenever the seed is changed.
std::mt19937_64& shake_rng() {
  static unsigned seed = options().shake_seed;
  static std::mt19937_64 rng(seed);
  if (options().shake_seed != seed) rng.seed(seed = options().shake_seed);
  return rng;
}

}  // namespace

void syncthreads(const char* file, int line) {
  Block& b = running_block("__syncthreads()");
  Thread& t = *b.current;
  t.state = State::Barrier;
  t.file = file;
  t.line = line;
  ++b.at_barrier;
  yield(b, t);
}

void block_until(const std::function<bool()>& ready, const std::function<std::string()>& what, const char* file,
                 int line) {
  if (ready()) return;
  Block& b = running_block("a wait");
  Thread& t = *b.current;
  t.state = State::Blocked;
  t.ready = ready;
  t.blocked_on = what;
  t.file = file;
  t.line = line;
  yield(b, t);
  t.ready = nullptr;
  t.blocked_on = nullptr;
}

void reschedule() {
  Block& b = running_block("reschedule()");
  yield(b, *b.current);  // still State::Ready: the scheduler comes back in its next round
}

void interleave_point() {
  Block* b = g_block;
  if (!g_interleaved || !b || !b->current || b->aborting) return;
  Thread& t = *b->current;
  // As yield(), but never throws: the caller is compiler instrumentation, which unwinding
  // may not pass. A thread stopped here when its launch faults runs on to its next wait,
  // barrier or collective, and unwinds there.
  asan_leave_fiber(*b, false);
  t.scheduler = std::move(t.scheduler).resume();
  asan_started_in_fiber(*b);
}

int block_slot() { return g_slot; }

namespace {

// Checks the mask, records what the calling lane waits in, and waits for its warp.
void enter_collective(Block& b, Thread& t, WarpOp op, const char* name, unsigned mask, int width, const char* file,
                      int line) {
  const int lane = t.linear % 32, base = t.linear / 32 * 32;
  const auto where = [&] { return std::string(name) + " at " + file + ":" + std::to_string(line) + ": "; };
  if (!(mask >> lane & 1u)) {
    fault(b, where() + thread_name(b, t) + " (lane " + std::to_string(lane) + ") is not in its own mask");
  }
  if (width < 1 || width > 32 || (width & (width - 1)) != 0) fault(b, where() + "width must be a power of 2 up to 32");
  const int lanes = static_cast<int>(b.threads.size()) - base;  // of this warp (the last may be short)
  if (lanes < 32 && (mask >> lanes) != 0u) {
    fault(b, where() + "the mask names lane " + std::to_string(lanes + __builtin_ctz(mask >> lanes)) +
                 ", which does not exist in this block");
  }
  t.state = State::Warp;
  t.op = op;
  t.mask = mask;
  t.width = width;
  t.file = file;
  t.line = line;
  // The last lane to arrive completes it. Until as many lanes of the warp wait as the mask
  // names, some lane of the mask cannot be there yet: no need to look.
  int& waiting = b.warp_waiting[static_cast<std::size_t>(t.linear / 32)];
  ++waiting;
  if (waiting < __builtin_popcount(mask) || !try_complete_warp(b, t)) yield(b, t);
}

}  // namespace

void warp_matrix(MatrixOp op, const char* name, unsigned mask, void* lane_data, const char* file, int line) {
  Block& b = running_block(name);
  Thread& t = *b.current;
  t.matrix_op = op;
  t.matrix_name = name;
  t.matrix_data = lane_data;
  enter_collective(b, t, WarpOp::Matrix, name, mask, 32, file, line);
  t.matrix_op = nullptr;
}

std::uint64_t warp_collective(WarpOp op, unsigned mask, std::uint64_t value, int param, int width,
                              const char* file, int line) {
  Block& b = running_block(op_name(op));
  Thread& t = *b.current;
  t.value = value;
  t.param = param;
  enter_collective(b, t, op, op_name(op), mask, width, file, line);
  return t.result;
}

unsigned active_mask() {
  Block& b = running_block("__activemask()");
  const int base = b.current->linear / 32 * 32;
  unsigned mask = 0;
  for (int l = 0; l < 32 && base + l < static_cast<int>(b.threads.size()); ++l) {
    if (b.threads[static_cast<std::size_t>(base + l)].state != State::Done) mask |= 1u << l;
  }
  return mask;
}

int current_thread() { return running_block("cp.async or ldmatrix").current->linear; }

void* dynamic_shared_memory(std::size_t alignment) {
  if (reinterpret_cast<std::uintptr_t>(g_dynamic_smem) % alignment != 0) {
    std::fprintf(stderr, "fa_cpu: dynamic shared memory is not aligned to %zu\n", alignment);
    std::abort();
  }
  return g_dynamic_smem;
}

void* dynamic_shared_base() { return g_block ? g_dynamic_smem : nullptr; }

std::size_t dynamic_shared_bytes() { return g_block && g_dynamic_smem ? g_block->config->smem : 0; }

void fence() { race::fence(); }

void note_atomic(const void* address, std::size_t bytes, const void* pc) {
  interleave_point();  // another block may add first
  race::atomic_access(address, bytes, pc);
}

bool racecheck_built() { return race::built(); }

SharedRegion::SharedRegion(void* address, std::size_t bytes, const char* name)
    : index_(shared_regions().size()) {
  shared_regions().push_back({address, bytes, 0});
  race::add_region(address, bytes, name);
}

void SharedRegion::use() const {
  Region& r = shared_regions()[index_];
  if (r.launch == g_launch) return;
  r.launch = g_launch;  // the first pass in this launch: from now on its blocks save, restore and poison it
  if (options().poison_shared) std::memset(r.address, 0xFF, r.bytes);
}

void run_kernel(const LaunchConfig& c, const std::function<void()>& body) {
  if (g_block) {
    set_last_error(cudaErrorLaunchFailure);
    throw KernelFault(std::string("kernel ") + c.name + " launched from inside a kernel (not supported)");
  }
  const unsigned long long threads = 1ull * c.block.x * c.block.y * c.block.z;
  std::size_t smem_limit = kSharedMemDefault;
  auto it = kernel_smem_limits().find(c.kernel);
  if (it != kernel_smem_limits().end()) smem_limit = static_cast<std::size_t>(it->second);
  if (threads == 0 || threads > 1024 || c.block.z > 64 || c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 ||
      c.grid.x > 2147483647u || c.grid.y > 65535 || c.grid.z > 65535 || c.smem > smem_limit) {
    set_last_error(cudaErrorInvalidConfiguration);
    return;
  }

  ++g_launch;
  const unsigned long long blocks = 1ull * c.grid.x * c.grid.y * c.grid.z;
  const auto in_flight = static_cast<std::size_t>(
      std::min<unsigned long long>(blocks, static_cast<unsigned long long>(std::max(1, options().blocks_at_once))));
  const bool interleaved = in_flight > 1;
  std::vector<Block> slots(in_flight);
  for (std::size_t s = 0; s < in_flight; ++s) {
    Block& b = slots[s];
    b.config = &c;
    b.body = &body;
    b.slot = static_cast<int>(s);
    b.threads.resize(threads);
    for (unsigned i = 0; i < threads; ++i) {
      Thread& t = b.threads[i];
      t.linear = static_cast<int>(i);
      t.idx = uint3{i % c.block.x, i / c.block.x % c.block.y, i / (c.block.x * c.block.y)};
    }
    // Exactly c.smem bytes, so AddressSanitizer catches an access past the end.
    if (c.smem > 0) {
      void* p = nullptr;
      if (posix_memalign(&p, 1024, c.smem) != 0) {  // 1024: a 128-byte swizzle atom (fa_cpu/hopper.h)
        set_last_error(cudaErrorMemoryAllocation);
        return;
      }
      b.smem.reset(p);
    }
  }
  std::vector<int> order(threads);
  for (unsigned i = 0; i < threads; ++i) {
    order[i] = options().reverse_threads ? static_cast<int>(threads - 1 - i) : static_cast<int>(i);
  }
  fa_cpu_blockDim = uint3{c.block.x, c.block.y, c.block.z};
  fa_cpu_gridDim = uint3{c.grid.x, c.grid.y, c.grid.z};

  struct Reset {  // leave no dangling state behind, also when a fault is thrown
    ~Reset() {
      g_block = nullptr;
      g_dynamic_smem = nullptr;
      g_slot = 0;
      g_interleaved = false;
      race::launch_ends();
    }
  } reset;
  // Blocks in flight together: the shared-memory rules are not checked (their clocks are
  // per block), the global ones are, and stores to global memory become switch points.
  race::launch_begins(options().racecheck, c.shared_racecheck && !interleaved, interleaved,
                      static_cast<int>(threads), interleaved ? nullptr : slots[0].smem.get(), c.smem, c.pointers,
                      c.arguments);
  g_interleaved = interleaved;
  const BlockOrder grid_order(blocks, interleaved, shake_rng());
  unsigned long long next = 0;
  std::vector<std::size_t> turns(in_flight);
  for (std::size_t s = 0; s < in_flight; ++s) turns[s] = s;
  try {
    for (;;) {
      bool any = false;
      for (Block& b : slots) {
        if (!b.busy && next < blocks) {
          const unsigned long long linear = grid_order(next++);
          start_block(b, uint3{static_cast<unsigned>(linear % c.grid.x),
                               static_cast<unsigned>(linear / c.grid.x % c.grid.y),
                               static_cast<unsigned>(linear / c.grid.x / c.grid.y)},
                      interleaved);
        }
        any = any || b.busy;
      }
      if (!any) break;
      if (interleaved) std::shuffle(turns.begin(), turns.end(), shake_rng());
      bool progressed = false;
      Block* stuck = nullptr;
      for (std::size_t s : turns) {
        Block& b = slots[s];
        if (!b.busy) continue;
        install(b, interleaved);
        if (step_block(b, order, !interleaved)) {
          progressed = true;
        } else if (!stuck) {
          stuck = &b;
        }
      }
      // Blocks in flight together: a deadlock only when none of them could go on in a whole
      // round (a block not yet started cannot help: it starts only when one in flight ends).
      if (!progressed && stuck) {
        install(*stuck, interleaved);
        report_deadlock(*stuck);
      }
    }
  } catch (...) {
    // One block faulted (and was aborted): the others in flight unwind too.
    for (Block& b : slots) {
      if (!b.busy || b.aborting) continue;
      install(b, interleaved);
      abort_block(b);
    }
    throw;
  }
}

}  // namespace fa_cpu
