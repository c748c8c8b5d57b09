// CPU backend: Hopper's mbarriers, named barriers, TMA copies and warpgroup matrix
// products (see fa_cpu/hopper.h for what is emulated and when each step happens).
#include "fa_cpu/hopper.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <sstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "cuda.h"
#include "fa_cpu/scheduler.h"
#include "racecheck.h"
#include "runtime_state.h"

namespace fa_cpu {

namespace {

constexpr int kWarpgroup = 128;

std::string where(const char* file, int line) { return std::string(file) + ":" + std::to_string(line); }

std::string hex(std::uint64_t v) {
  char s[24];
  std::snprintf(s, sizeof s, "0x%llx", static_cast<unsigned long long>(v));
  return s;
}

// ---- the block's state ------------------------------------------------------------------

struct Mbarrier {
  unsigned expected = 0;  // arrivals a phase needs
  unsigned pending = 0;   // arrivals still missing in the phase in progress
  long long tx = 0;       // bytes expected and not yet landed (may dip below 0, as in PTX)
  unsigned phase = 0;     // phases completed
};

// A TMA copy whose bytes have not landed: its image in shared memory, already swizzled.
struct Landing {
  std::uint32_t bar;
  std::uint32_t dst;
  std::vector<unsigned char> image;
};

struct NamedBarrier {
  int arrived = 0, expected = 0;
  unsigned generation = 0;
  /// What each warp's lanes executed at this generation: 0 nothing yet, 1 bar.sync, 2 bar.arrive.
  std::vector<unsigned char> warp_op;
};

// Shared bytes [lo, hi) that an operand reads.
struct Span {
  std::uint32_t lo = 0, hi = 0;
  bool overlaps(std::uint32_t a, std::uint32_t b) const { return lo < b && a < hi; }
};

// One wgmma as issued: everything it will read, and where each thread's D lives.
struct Product {
  int group;  // the warpgroup
  MmaType type;
  int n;
  bool accumulate;
  std::vector<std::uint32_t> a_at;     // shared address of A's element (m, k) at m·16 + k; empty: A from registers
  std::vector<std::uint32_t> b_at;     // of B's element (k, col) at k·n + col
  Span a_span, b_span;                 // the shared bytes those cover (a_span empty with A from registers)
  const std::uint32_t* a[kWarpgroup];  // each thread's four A registers (read at the wait)
  float* d[kWarpgroup];                // each thread's n/2 accumulators
};

// The arguments one thread brings to a warpgroup instruction.
struct Issue {
  MmaType type;
  int n;
  float* d;
  const std::uint32_t* a;
  std::uint64_t a_desc, b_desc;
  bool b_mn_major, accumulate;
  int count;  // setmaxnreg's registers, or wait_group's N
};

struct Warpgroup {
  // the rendezvous of a .sync.aligned instruction
  int arrived = 0;
  unsigned generation = 0;
  const char* what = "";  // the instruction the first thread to arrive is in,
  const char* file = "";  // and where
  int line = 0;
  const Issue* args[kWarpgroup] = {};
  // wgmma
  bool fenced = false;                        // a wgmma.fence has been executed
  std::vector<Product> open;                  // issued since the last commit
  std::deque<std::vector<Product>> committed; // oldest first
};

// One cp.reduce.async.bulk: where it adds, and which shared bytes it reads (when it runs).
struct BulkReduce {
  float* dst;
  std::uint32_t src;  // shared address
  unsigned bytes;
  const void* pc;
};

// A thread's bulk operations (cp.async.bulk.commit_group and wait_group are per thread).
struct BulkGroups {
  std::vector<BulkReduce> open;                   // issued since the last commit
  std::deque<std::vector<BulkReduce>> committed;  // oldest first
};

struct BlockState {
  std::unordered_map<std::uint32_t, Mbarrier> bars;
  std::deque<Landing> landings;  // issue order
  NamedBarrier named[16];
  std::vector<Warpgroup> groups;
  std::vector<BulkGroups> bulk;  // a thread's, by thread index
};

// One per block in flight (a deque: growing keeps references valid).
BlockState& block() {
  static std::deque<BlockState> slots;
  const auto slot = static_cast<std::size_t>(block_slot());
  if (slots.size() <= slot) slots.resize(slot + 1);
  return slots[slot];
}

unsigned char* shared_bytes(std::uint32_t address, std::size_t bytes, const char* who) {
  const std::size_t size = dynamic_shared_bytes();
  if (static_cast<std::size_t>(address) + bytes > size) {
    throw std::runtime_error(std::string(who) + ": shared address " + hex(address) + " (+" + std::to_string(bytes) +
                             " bytes) is outside the block's " + std::to_string(size) + " bytes of dynamic shared memory");
  }
  return static_cast<unsigned char*>(dynamic_shared_base()) + address;
}

// Threads of the running block.
int block_threads() { return static_cast<int>(fa_cpu_blockDim.x * fa_cpu_blockDim.y * fa_cpu_blockDim.z); }

// ---- mbarrier ---------------------------------------------------------------------------

Mbarrier& barrier_at(std::uint32_t address, const char* op) {
  auto it = block().bars.find(address);
  if (it == block().bars.end()) {
    throw std::runtime_error(std::string(op) + ": no mbarrier was initialised at shared address " + hex(address) +
                             " (mbarrier.init)");
  }
  return it->second;
}

std::uint32_t barrier_address(void* bar, const char* op) {
  const std::uint32_t a = shared_address(bar, 8);
  if (a % 8 != 0) throw std::runtime_error(std::string(op) + ": an mbarrier must be 8-byte aligned");
  return a;
}

// Completes the phase if nothing is missing; returns whether it did.
bool complete_if_done(Mbarrier& b) {
  if (b.pending != 0 || b.tx != 0) return false;
  ++b.phase;
  b.pending = b.expected;
  return true;
}

bool phase_done(const Mbarrier& b, unsigned parity) { return (b.phase & 1u) != parity; }

// Lands the oldest copy still in flight on barrier `bar`; false if there is none.
bool land_one(std::uint32_t bar) {
  auto& landings = block().landings;
  for (auto it = landings.begin(); it != landings.end(); ++it) {
    if (it->bar != bar) continue;
    std::memcpy(static_cast<unsigned char*>(dynamic_shared_base()) + it->dst, it->image.data(), it->image.size());
    Mbarrier& b = block().bars.at(bar);
    b.tx -= static_cast<long long>(it->image.size());
    landings.erase(it);
    complete_if_done(b);
    return true;
  }
  return false;
}

// ---- warpgroups -------------------------------------------------------------------------

// Every thread of the caller's warpgroup calls this for the same instruction `what`; the
// last to arrive runs `last` with all 128 threads' arguments, then all go on.
void warpgroup(const char* what, const Issue& mine, const std::function<void(Warpgroup&)>& last, const char* file,
               int line) {
  const int thread = current_thread();
  const int threads = block_threads();
  if (threads % kWarpgroup != 0) {
    throw std::runtime_error(std::string(what) + " at " + where(file, line) + ": the block has " +
                             std::to_string(threads) + " threads, not whole warpgroups of 128");
  }
  Warpgroup& g = block().groups.at(static_cast<std::size_t>(thread / kWarpgroup));
  if (g.arrived > 0 && std::strcmp(g.what, what) != 0) {
    throw std::runtime_error(std::string(what) + " at " + where(file, line) + ": thread " + std::to_string(thread) +
                             " is here while others of its warpgroup are in " + g.what + " at " +
                             where(g.file, g.line) +
                             ": a .sync.aligned instruction must be executed by the whole warpgroup together");
  }
  if (g.arrived == 0) {
    g.what = what;
    g.file = file;
    g.line = line;
  }
  g.args[thread % kWarpgroup] = &mine;
  if (++g.arrived == kWarpgroup) {
    last(g);
    g.arrived = 0;
    ++g.generation;
    return;
  }
  const unsigned generation = g.generation;
  // Both lambdas capture 16 bytes or less, which std::function keeps without allocating:
  // this runs for 127 of every 128 threads at each warpgroup instruction.
  const int group = thread / kWarpgroup;
  block_until([&g, generation] { return g.generation != generation; },
              [&g, group] {
                return std::string(g.what) + " with the rest of warpgroup " + std::to_string(group) + " (" +
                       std::to_string(g.arrived) + " of its 128 threads there)";
              },
              file, line);
}

// ---- wgmma ------------------------------------------------------------------------------

double from_bits(MmaType type, std::uint16_t bits) {
  return type == MmaType::F16 ? fa::half_bits_to_float(bits) : fa::bf16_bits_to_float(bits);
}

double shared_element(MmaType type, std::uint32_t address) {
  std::uint16_t bits;
  std::memcpy(&bits, shared_bytes(address, 2, "wgmma.mma_async"), 2);
  return from_bits(type, bits);
}

// The shared bytes that 16-bit elements at addresses `at` cover (empty for none).
Span span_of(const std::vector<std::uint32_t>& at) {
  if (at.empty()) return Span{};
  const auto [lo, hi] = std::minmax_element(at.begin(), at.end());
  return Span{*lo, *hi + 2};
}

std::string span_name(Span s) { return "[" + hex(s.lo) + ", " + hex(s.hi) + ")"; }

// Runs one product: reads A, B and D now, writes D. A TMA copy still in flight into what
// it reads means no thread waited for that copy's mbarrier: a race on the GPU, an error here.
void execute(const Product& p) {
  for (const Landing& l : block().landings) {
    const auto n = static_cast<std::uint32_t>(l.image.size());
    for (Span s : {p.a_span, p.b_span}) {
      if (s.overlaps(l.dst, l.dst + n)) {
        throw std::runtime_error("a wgmma of warpgroup " + std::to_string(p.group) + " reads shared memory " +
                                 span_name(s) + " while a TMA copy into " + span_name(Span{l.dst, l.dst + n}) +
                                 " is in flight: no thread has waited on its mbarrier (shared address " + hex(l.bar) +
                                 ")");
      }
    }
  }
  double a[64][16], b[16][256];
  for (int m = 0; m < 64; ++m) {
    for (int k = 0; k < 16; ++k) {
      if (p.a_at.empty()) {
        // mma.sync's A fragment for the warp's 16 rows: thread (g, t) of warp w holds
        // rows 16w + g (registers 0, 2) and + 8 (1, 3), columns 2t, 2t + 1 (+ 8 in 2, 3).
        const int w = m / 16, r = m % 16, g = r % 8, kk = k % 8, t = kk / 2;
        const int thread = 32 * w + 4 * g + t;
        const int reg = (r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
        const std::uint32_t word = p.a[thread][reg];
        a[m][k] = from_bits(p.type, static_cast<std::uint16_t>(kk % 2 == 0 ? word & 0xffffu : word >> 16));
      } else {
        a[m][k] = shared_element(p.type, p.a_at[static_cast<std::size_t>(m * 16 + k)]);
      }
    }
  }
  for (int k = 0; k < 16; ++k) {
    for (int col = 0; col < p.n; ++col) b[k][col] = shared_element(p.type, p.b_at[static_cast<std::size_t>(k * p.n + col)]);
  }
  // D: thread (g, t) of warp w holds, for each 8 columns j, rows 16w + g (values 4j, 4j + 1)
  // and 16w + g + 8 (4j + 2, 4j + 3), columns 8j + 2t and 8j + 2t + 1. Each element's sum is
  // taken in double (products of 16-bit values are exact), D first and then the 16 products in
  // order of k, and rounded once; a row at a time, k outside the columns, so that its sums
  // advance side by side (the order within each is the same).
  const auto element = [&p](int row, int col) -> float& {
    const int w = row / 16, g = row % 8, half = row % 16 / 8, t = col % 8 / 2;
    return p.d[32 * w + 4 * g + t][4 * (col / 8) + 2 * half + col % 2];
  };
  double sum[256];
  for (int row = 0; row < 64; ++row) {
    for (int col = 0; col < p.n; ++col) sum[col] = p.accumulate ? static_cast<double>(element(row, col)) : 0.0;
    for (int k = 0; k < 16; ++k) {
      const double x = a[row][k];
      for (int col = 0; col < p.n; ++col) sum[col] += x * b[k][col];
    }
    for (int col = 0; col < p.n; ++col) element(row, col) = static_cast<float>(sum[col]);
  }
}

// ---- tensor maps ------------------------------------------------------------------------

// What cuTensorMapEncodeTiled records in a CUtensorMap's 128 bytes.
struct TensorMapRecord {
  std::uint32_t magic;
  std::uint8_t rank, element_bytes, swizzle, nan_fill;
  const unsigned char* address;
  std::uint64_t dims[5];
  std::uint64_t strides[4];  // bytes, dimensions 1..rank-1
  std::uint16_t box[5];
};
static_assert(sizeof(TensorMapRecord) <= sizeof(CUtensorMap), "the record must fit a CUtensorMap");
constexpr std::uint32_t kMapMagic = 0x54'4D'41'50;  // "TMAP"

int element_bytes(CUtensorMapDataType type) {
  switch (type) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8: return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16: return 2;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32: return 4;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64: return 8;
  }
  return 0;
}

bool is_float(CUtensorMapDataType type) {
  return type == CU_TENSOR_MAP_DATA_TYPE_FLOAT16 || type == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 ||
         type == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 || type == CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
}

// The row width in bytes of a CUtensorMapSwizzle mode (0 for none).
int swizzle_span(int mode) { return mode == 3 ? 128 : mode == 2 ? 64 : mode == 1 ? 32 : 0; }

}  // namespace

// ---- the public functions -----------------------------------------------------------------

std::uint32_t shared_address(const void* p, std::size_t bytes) {
  const auto* base = static_cast<const unsigned char*>(dynamic_shared_base());
  const auto* q = static_cast<const unsigned char*>(p);
  const std::size_t size = dynamic_shared_bytes();
  if (!base || q < base || static_cast<std::size_t>(q - base) + bytes > size) {
    throw std::runtime_error("a shared-memory instruction got an address outside the block's dynamic shared memory");
  }
  return static_cast<std::uint32_t>(q - base);
}

void mbarrier_init(void* bar, unsigned count) {
  const std::uint32_t a = barrier_address(bar, "mbarrier.init");
  if (count == 0 || count >= (1u << 20)) throw std::runtime_error("mbarrier.init: the count must be 1 to 2^20 - 1");
  Mbarrier b;
  b.expected = b.pending = count;
  block().bars[a] = b;
  for (auto it = block().landings.begin(); it != block().landings.end();) {  // copies on the old barrier are lost
    it = it->bar == a ? block().landings.erase(it) : it + 1;
  }
}

void mbarrier_arrive(void* bar, unsigned tx_bytes) {
  const std::uint32_t a = barrier_address(bar, "mbarrier.arrive");
  Mbarrier& b = barrier_at(a, "mbarrier.arrive");
  // Every arrival of the phase is in and only bytes are missing: on the GPU they land by
  // themselves, waited for or not, so land them now and let this arrival start the next phase.
  while (b.pending == 0 && land_one(a)) {
  }
  if (b.pending == 0) {
    throw std::runtime_error("mbarrier.arrive on the mbarrier at shared address " + hex(a) +
                             ": more arrivals than its count in one phase (" + std::to_string(b.tx) +
                             " bytes still expected)");
  }
  b.tx += tx_bytes;
  --b.pending;
  // The threads waiting for this phase may now run ahead of this one, as on a GPU: if this
  // thread still has a product in flight on memory they will overwrite, that shows.
  if (complete_if_done(b)) reschedule();
}

void mbarrier_wait(void* bar, unsigned parity, const char* file, int line) {
  const std::uint32_t a = barrier_address(bar, "mbarrier.try_wait");
  Mbarrier& b = barrier_at(a, "mbarrier.try_wait");
  parity &= 1u;
  // The copies counted on this barrier land only now, and only as many as the phase needs.
  const auto done = [a, &b, parity] {
    while (!phase_done(b, parity) && land_one(a)) {
    }
    return phase_done(b, parity);
  };
  if (done()) return;
  block_until(done,
              [a, &b, parity] {
                return "mbarrier.try_wait.parity " + std::to_string(parity) + " on the mbarrier at shared address " +
                       hex(a) + " (phases completed: " + std::to_string(b.phase) + "; the phase in progress misses " +
                       std::to_string(b.pending) + " arrivals and " + std::to_string(b.tx) + " bytes)";
              },
              file, line);
}

bool mbarrier_test_wait(void* bar, unsigned parity) {
  const std::uint32_t a = barrier_address(bar, "mbarrier.test_wait");
  Mbarrier& b = barrier_at(a, "mbarrier.test_wait");
  parity &= 1u;
  while (!phase_done(b, parity) && land_one(a)) {
  }
  if (phase_done(b, parity)) return true;
  reschedule();
  return false;
}

void named_barrier(int id, int threads, bool wait, const char* file, int line) {
  const char* op = wait ? "bar.sync" : "bar.arrive";
  if (id < 1 || id > 15) {
    throw std::runtime_error(std::string(op) + " at " + where(file, line) +
                             ": barrier ids are 1-15 here (0 is __syncthreads())");
  }
  if (threads <= 0 || threads % 32 != 0 || threads > block_threads()) {
    throw std::runtime_error(std::string(op) + " at " + where(file, line) + ": " + std::to_string(threads) +
                             " threads: the count must be a multiple of 32, at most the block's");
  }
  NamedBarrier& nb = block().named[id];
  if (nb.arrived > 0 && nb.expected != threads) {
    throw std::runtime_error(std::string(op) + " at " + where(file, line) + ": barrier " + std::to_string(id) +
                             " is counting to " + std::to_string(nb.expected) + ", this thread says " +
                             std::to_string(threads));
  }
  // A barrier instruction marks its warp's arrival (PTX ISA, barrier): the lanes of a warp
  // must all execute the same one. A warp split between bar.sync and bar.arrive at one barrier
  // would count as a whole warp at the first, and on a GPU the barrier completes without the
  // others, or never.
  nb.warp_op.resize(static_cast<std::size_t>((block_threads() + 31) / 32));
  unsigned char& mine = nb.warp_op[static_cast<std::size_t>(current_thread() / 32)];
  const unsigned char kind = wait ? 1 : 2;
  if (mine != 0 && mine != kind) {
    throw std::runtime_error(std::string(op) + " at " + where(file, line) + ": lanes of warp " +
                             std::to_string(current_thread() / 32) +
                             " execute both bar.sync and bar.arrive at barrier " + std::to_string(id) +
                             "; a barrier instruction marks a whole warp's arrival, so a warp's lanes must all "
                             "execute the same one");
  }
  mine = kind;
  nb.expected = threads;
  if (++nb.arrived == threads) {
    nb.arrived = 0;
    ++nb.generation;
    std::fill(nb.warp_op.begin(), nb.warp_op.end(), 0);
    return;
  }
  if (!wait) return;
  const unsigned generation = nb.generation;
  block_until([&nb, generation] { return nb.generation != generation; },
              [id, threads, &nb] {
                return "bar.sync " + std::to_string(id) + ", " + std::to_string(threads) + " (" +
                       std::to_string(nb.arrived) + " arrived)";
              },
              file, line);
}

void tma_load(void* dst, const void* map, void* bar, const int* coords, int rank) {
  const void* pc = __builtin_return_address(0);  // the kernel code that issued it (race reports)
  TensorMapRecord m;
  std::memcpy(&m, map, sizeof m);
  if (m.magic != kMapMagic) throw std::runtime_error("cp.async.bulk.tensor: the tensor map was not made by cuTensorMapEncodeTiled");
  if (rank != m.rank) {
    throw std::runtime_error("cp.async.bulk.tensor." + std::to_string(rank) + "d with a tensor map of rank " +
                             std::to_string(m.rank));
  }
  std::size_t elements = 1;
  for (int i = 0; i < rank; ++i) elements *= m.box[i];
  const std::size_t bytes = elements * m.element_bytes;
  const std::uint32_t d = shared_address(dst, bytes);
  if (d % 128 != 0) throw std::runtime_error("cp.async.bulk.tensor: the destination must be 128-byte aligned");
  const std::uint32_t b = barrier_address(bar, "cp.async.bulk.tensor");
  barrier_at(b, "cp.async.bulk.tensor");
  // A product in flight must not have its operands overwritten (PTX: until wgmma.wait_group).
  const Span to{d, d + static_cast<std::uint32_t>(bytes)};
  for (const Warpgroup& g : block().groups) {
    auto check = [&](const Product& p) {
      for (Span s : {p.a_span, p.b_span}) {
        if (s.overlaps(to.lo, to.hi)) {
          throw std::runtime_error("cp.async.bulk.tensor into " + span_name(to) + " overwrites shared memory " +
                                   span_name(s) + " that a wgmma of warpgroup " + std::to_string(p.group) +
                                   " still reads: its group has not been retired by wgmma.wait_group");
        }
      }
    };
    for (const Product& p : g.open) check(p);
    for (const auto& group : g.committed) {
      for (const Product& p : group) check(p);
    }
  }

  // The box, innermost dimension first, dense in shared memory, then swizzled; elements
  // outside the tensor are zeros (or NaN with the NaN fill).
  Landing copy{b, d, std::vector<unsigned char>(bytes)};
  std::vector<unsigned char> fill(m.element_bytes, 0);
  if (m.nan_fill) std::memset(fill.data(), 0xFF, fill.size());
  int at[5] = {0, 0, 0, 0, 0};  // position in the box
  for (std::size_t e = 0; e < elements; ++e) {
    bool inside = true;
    std::size_t offset = 0;
    for (int i = 0; i < rank; ++i) {
      const long long x = static_cast<long long>(coords[i]) + at[i];
      if (x < 0 || static_cast<std::uint64_t>(x) >= m.dims[i]) inside = false;
      offset += static_cast<std::size_t>(inside ? x : 0) * (i == 0 ? m.element_bytes : m.strides[i - 1]);
    }
    const std::uint32_t to = swizzle(d + static_cast<std::uint32_t>(e * m.element_bytes), m.swizzle) - d;
    if (inside) race::access(m.address + offset, m.element_bytes, false, pc);  // a read of global memory
    std::memcpy(copy.image.data() + to, inside ? m.address + offset : fill.data(), m.element_bytes);
    for (int i = 0; i < rank && ++at[i] == m.box[i]; ++i) at[i] = 0;
  }
  block().landings.push_back(std::move(copy));
}

std::uint32_t swizzle(std::uint32_t address, int mode) {
  const std::uint32_t mask = mode == 1 ? 7u : mode == 2 ? 3u : mode == 3 ? 1u : 0u;
  return address ^ (((address >> 7) & mask) << 4);
}

std::uint32_t operand_address(std::uint64_t desc, bool mn_major, int mn, int k) {
  const std::uint32_t start = static_cast<std::uint32_t>(desc & 0x3FFF) << 4;
  const std::uint32_t leading = static_cast<std::uint32_t>((desc >> 16) & 0x3FFF) << 4;
  const std::uint32_t stride = static_cast<std::uint32_t>((desc >> 32) & 0x3FFF) << 4;
  const int mode = static_cast<int>(desc >> 62);
  if ((desc >> 49) & 7) throw std::runtime_error("wgmma: a descriptor's base offset (bits 49-51) is not emulated");
  const std::uint32_t m = static_cast<std::uint32_t>(mn), kk = static_cast<std::uint32_t>(k);
  std::uint32_t offset;
  if (mode == 0) {
    // Core matrices of 8 rows × 16 bytes, each contiguous. K-major: rows along MN, the two
    // core matrices along k `leading` apart, groups of 8 rows `stride` apart. MN-major:
    // the roles of the two offsets swap.
    offset = mn_major ? (m % 8) * 2 + (m / 8) * stride + (kk % 8) * 16 + (kk / 8) * leading
                      : (m % 8) * 16 + (m / 8) * stride + (kk / 8) * leading + (kk % 8) * 2;
  } else {
    // Rows of `row` bytes (128, 64 or 32), eight rows an atom. K-major: a row holds the k
    // of one MN index; atoms along MN `stride` apart. MN-major: a row holds row/2 MN
    // indices of one k; atoms along k `stride` apart, along MN `leading` apart.
    const std::uint32_t row = mode == 1 ? 128 : mode == 2 ? 64 : 32;
    offset = mn_major ? (m % (row / 2)) * 2 + (m / (row / 2)) * leading + (kk % 8) * row + (kk / 8) * stride
                      : (m % 8) * row + (m / 8) * stride + kk * 2;
  }
  return swizzle(start + offset, mode);
}

void wgmma(MmaType type, int n, float* d, const std::uint32_t* a_regs, std::uint64_t a_desc, std::uint64_t b_desc,
           bool b_mn_major, bool accumulate, const char* file, int line) {
  if (n < 8 || n > 256 || n % 8 != 0) throw std::runtime_error("wgmma: N must be 8 to 256, a multiple of 8");
  const Issue mine{type, n, d, a_regs, a_desc, b_desc, b_mn_major, accumulate, 0};
  warpgroup("wgmma.mma_async", mine, [file, line](Warpgroup& g) {
    const Issue& first = *g.args[0];
    if (!g.fenced) {
      throw std::runtime_error("wgmma.mma_async at " + where(file, line) +
                               ": no wgmma.fence before the warpgroup's first wgmma (the PTX ISA requires one)");
    }
    const bool a_from_registers = first.a != nullptr;
    Product p{current_thread() / kWarpgroup, first.type, first.n, first.accumulate, {}, {}, {}, {}, {}, {}};
    // The descriptors are read now, the memory they point at when the product runs.
    if (!a_from_registers) p.a_at.reserve(64 * 16);
    p.b_at.reserve(static_cast<std::size_t>(16 * p.n));
    for (int m = 0; m < 64 && !a_from_registers; ++m) {
      for (int k = 0; k < 16; ++k) p.a_at.push_back(operand_address(first.a_desc, false, m, k));
    }
    for (int k = 0; k < 16; ++k) {
      for (int col = 0; col < p.n; ++col) p.b_at.push_back(operand_address(first.b_desc, first.b_mn_major, col, k));
    }
    p.a_span = span_of(p.a_at);
    p.b_span = span_of(p.b_at);
    for (int i = 0; i < kWarpgroup; ++i) {
      const Issue& x = *g.args[i];
      if (x.type != first.type || x.n != first.n || (x.a != nullptr) != a_from_registers || x.b_desc != first.b_desc ||
          (!a_from_registers && x.a_desc != first.a_desc) || x.b_mn_major != first.b_mn_major ||
          x.accumulate != first.accumulate) {
        throw std::runtime_error("wgmma.mma_async at " + where(file, line) + ": thread " + std::to_string(i) +
                                 " of the warpgroup gives other operands (descriptors, shape or flags) than thread 0");
      }
      p.a[i] = x.a;
      p.d[i] = x.d;
    }
    g.open.push_back(std::move(p));
  }, file, line);
}

void wgmma_fence(const char* file, int line) {
  warpgroup("wgmma.fence", Issue{}, [](Warpgroup& g) { g.fenced = true; }, file, line);
}

void wgmma_commit(const char* file, int line) {
  warpgroup("wgmma.commit_group", Issue{}, [](Warpgroup& g) {
    g.committed.push_back(std::move(g.open));
    g.open.clear();
  }, file, line);
}

void wgmma_wait(int n, const char* file, int line) {
  Issue mine{};
  mine.count = n;
  warpgroup("wgmma.wait_group", mine, [file, line, n](Warpgroup& g) {
    for (int i = 0; i < kWarpgroup; ++i) {
      if (g.args[i]->count != n) throw std::runtime_error("wgmma.wait_group at " + where(file, line) + ": threads disagree on N");
    }
    while (static_cast<int>(g.committed.size()) > n) {
      for (const Product& p : g.committed.front()) execute(p);
      g.committed.pop_front();
    }
  }, file, line);
}

void setmaxnreg(int regs, const char* file, int line) {
  if (regs < 24 || regs > 256 || regs % 8 != 0) {
    throw std::runtime_error("setmaxnreg at " + where(file, line) + ": " + std::to_string(regs) +
                             " registers (24 to 256, a multiple of 8)");
  }
  Issue mine{};
  mine.count = regs;
  warpgroup("setmaxnreg", mine, [file, line](Warpgroup& g) {
    for (int i = 0; i < kWarpgroup; ++i) {
      if (g.args[i]->count != g.args[0]->count) {
        throw std::runtime_error("setmaxnreg at " + where(file, line) + ": threads of a warpgroup disagree on the count");
      }
    }
  }, file, line);
}

void bulk_reduce_add(float* dst, const void* src, unsigned bytes, const char* file, int line) {
  const std::uint32_t from = shared_address(src, bytes);
  if (bytes == 0 || bytes % 16 != 0 || from % 16 != 0 || reinterpret_cast<std::uintptr_t>(dst) % 16 != 0) {
    throw std::runtime_error("cp.reduce.async.bulk at " + where(file, line) +
                             ": the size and both addresses must be multiples of 16 bytes");
  }
  BlockState& s = block();
  s.bulk.resize(static_cast<std::size_t>(block_threads()));
  s.bulk[static_cast<std::size_t>(current_thread())].open.push_back({dst, from, bytes, __builtin_return_address(0)});
}

void bulk_commit() {
  BlockState& s = block();
  s.bulk.resize(static_cast<std::size_t>(block_threads()));
  BulkGroups& mine = s.bulk[static_cast<std::size_t>(current_thread())];
  mine.committed.push_back(std::move(mine.open));
  mine.open.clear();
}

void bulk_wait(int n) {
  BlockState& s = block();
  s.bulk.resize(static_cast<std::size_t>(block_threads()));
  BulkGroups& mine = s.bulk[static_cast<std::size_t>(current_thread())];
  while (static_cast<int>(mine.committed.size()) > n) {
    for (const BulkReduce& r : mine.committed.front()) {
      // Shared memory as it is now (a write since the issue shows), added element by
      // element; each addition is atomic, as the reduction's are on the GPU.
      const unsigned char* from = shared_bytes(r.src, r.bytes, "cp.reduce.async.bulk");
      note_atomic(r.dst, r.bytes, r.pc);
      for (unsigned i = 0; i < r.bytes / 4; ++i) {
        float add;
        std::memcpy(&add, from + 4 * i, 4);
        r.dst[i] += add;
      }
    }
    mine.committed.pop_front();
  }
}

void flag_wait(const int* flag, int value, const char* file, int line) {
  block_until([flag, value] { return __atomic_load_n(flag, __ATOMIC_ACQUIRE) == value; },
              [flag, value] {
                std::ostringstream s;
                s << "the flag at " << static_cast<const void*>(flag) << " to read " << value << " (it reads "
                  << __atomic_load_n(flag, __ATOMIC_ACQUIRE) << ")";
                return s.str();
              },
              file, line);
  race::flag_acquired(flag);
}

void flag_release(int* flag, int value) {
  // Every addition of this emulation is done by the time its call returns (a bulk
  // reduction's at its wait), so a release store orders them all before the flag.
  __atomic_store_n(flag, value, __ATOMIC_RELEASE);
  race::flag_released(flag);
}

std::string hopper_thread_exits(int thread) {
  BlockState& s = block();
  if (static_cast<std::size_t>(thread) >= s.bulk.size()) return "";
  const BulkGroups& g = s.bulk[static_cast<std::size_t>(thread)];
  if (g.open.empty() && g.committed.empty()) return "";
  return "it ended with bulk reductions (cp.reduce.async.bulk) it never waited for "
         "(cp.async.bulk.wait_group): the shared memory they read goes with the block";
}

void hopper_block_begins(int threads) {
  BlockState& s = block();
  s.bars.clear();
  s.landings.clear();
  for (NamedBarrier& nb : s.named) nb = NamedBarrier{};
  s.groups.assign(static_cast<std::size_t>((threads + kWarpgroup - 1) / kWarpgroup), Warpgroup{});
  s.bulk.assign(static_cast<std::size_t>(threads), BulkGroups{});
}

}  // namespace fa_cpu

// ---- the driver function ------------------------------------------------------------------

CUresult cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* address,
                                const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                                CUtensorMapSwizzle swizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill fill) {
  using namespace fa_cpu;
  const int bytes = element_bytes(type);
  // The driver's rules (CUDA driver API, cuTensorMapEncodeTiled), and what is emulated.
  if (!map || !address || !dims || !box || !element_strides || bytes == 0 || rank < 1 || rank > 5) return CUDA_ERROR_INVALID_VALUE;
  if (rank > 1 && !strides) return CUDA_ERROR_INVALID_VALUE;
  if (reinterpret_cast<std::uintptr_t>(address) % 16 != 0) return CUDA_ERROR_INVALID_VALUE;
  if (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE) return CUDA_ERROR_INVALID_VALUE;  // not emulated
  if (fill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA && !is_float(type)) return CUDA_ERROR_INVALID_VALUE;
  TensorMapRecord m{};
  m.magic = kMapMagic;
  m.rank = static_cast<std::uint8_t>(rank);
  m.element_bytes = static_cast<std::uint8_t>(bytes);
  m.swizzle = static_cast<std::uint8_t>(swizzle == CU_TENSOR_MAP_SWIZZLE_128B ? 1
                                        : swizzle == CU_TENSOR_MAP_SWIZZLE_64B ? 2
                                        : swizzle == CU_TENSOR_MAP_SWIZZLE_32B ? 3 : 0);  // descriptor numbering
  m.nan_fill = fill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA;
  m.address = static_cast<const unsigned char*>(address);
  for (cuuint32_t i = 0; i < rank; ++i) {
    if (dims[i] == 0 || dims[i] > (1ull << 32)) return CUDA_ERROR_INVALID_VALUE;
    if (box[i] == 0 || box[i] > 256) return CUDA_ERROR_INVALID_VALUE;
    if (element_strides[i] != 1) return CUDA_ERROR_INVALID_VALUE;  // strided boxes: not emulated
    m.dims[i] = dims[i];
    m.box[i] = static_cast<std::uint16_t>(box[i]);
    if (i + 1 < rank) {
      if (strides[i] % 16 != 0 || strides[i] >= (1ull << 40)) return CUDA_ERROR_INVALID_VALUE;
      m.strides[i] = strides[i];
    }
  }
  const cuuint64_t row = static_cast<cuuint64_t>(box[0]) * static_cast<cuuint64_t>(bytes);
  if (row % 16 != 0) return CUDA_ERROR_INVALID_VALUE;
  // Swizzled boxes: rows exactly as wide as the swizzle span (narrower rows: not emulated).
  if (m.swizzle != 0 && row != static_cast<cuuint64_t>(fa_cpu::swizzle_span(swizzle))) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(map, &m, sizeof m);
  return CUDA_SUCCESS;
}
