// The CPU backend itself: barrier semantics, every shuffle kind, votes, dynamic shared
// memory, launch checks, the Hopper emulation, and the failures it must report instead of
// hanging.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <regex>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "common/dtype.h"
#include "common/random.h"
#include "fa_cpu/hopper.h"
#include "fa_cpu/scheduler.h"
#include "tests/catch.h"
#include "tests/cpu_backend_kernels.h"
#include "tests/hopper_emulation_kernels.h"
#include "tests/race_probe.h"

using fa::test::HasSubstring;
namespace k = fa::cpu_test;

namespace {

// CUDA's shuffle rules, written out on the host: the source lane, or -1 for "own value".
int expected_source(int kind, int lane, int param, int width) {
  const int seg = lane / width * width, pos = lane % width;
  switch (kind) {
    case 0: return seg + param % width;
    case 1: return pos >= param ? lane - param : -1;
    case 2: return pos + param < width ? lane + param : -1;
    default: return ((lane ^ param) / width == lane / width) ? (lane ^ param) : -1;
  }
}

struct ShakeGuard {  // restores the options a test changes
  fa_cpu::Options saved = fa_cpu::options();
  ~ShakeGuard() { fa_cpu::options() = saved; }
};

}  // namespace

TEST_CASE("__syncthreads waits for every thread that has not exited", "[cpu_backend]") {
  for (int active : {1, 31, 33, 100, 128}) {
    const std::vector<int> out = k::barrier_with_early_exit(128, active);
    for (int t = 0; t < active; ++t) REQUIRE(out[t] == (t + 1) % active);
    for (int t = active; t < 128; ++t) REQUIRE(out[t] == -1);  // never written
  }
}

TEST_CASE("every shuffle kind follows CUDA's lane rules", "[cpu_backend]") {
  struct Case { int kind, param, width; };
  const std::vector<Case> cases = {{0, 5, 32}, {0, 37, 32}, {0, 3, 8}, {1, 1, 32}, {1, 4, 16},
                                   {2, 1, 32}, {2, 16, 32}, {2, 3, 8}, {3, 1, 32}, {3, 16, 32}, {3, 5, 4}};
  for (const Case& c : cases) {
    const std::vector<float> out = k::shuffle(c.kind, c.param, c.width);
    for (int t = 0; t < 64; ++t) {
      const int lane = t % 32, warp = t / 32;
      const int src = expected_source(c.kind, lane, c.param, c.width);
      const float want = 100.0f * warp + (src < 0 ? lane : src);
      INFO("kind " << c.kind << " param " << c.param << " width " << c.width << " thread " << t);
      REQUIRE(out[t] == want);
    }
  }
}

TEST_CASE("votes: __ballot_sync, __any_sync, __all_sync, partial masks", "[cpu_backend]") {
  const std::vector<unsigned> v = k::votes();
  unsigned every_third = 0;
  for (int lane = 0; lane < 32; lane += 3) every_third |= 1u << lane;
  REQUIRE(v[0] == every_third);
  REQUIRE(v[1] == 1u);
  REQUIRE(v[2] == 0u);
  REQUIRE(v[3] == 1u);
  REQUIRE(v[5] == 0x0000aaaau);  // odd lanes among 0-15
}

TEST_CASE("extern __shared__ memory is sized at launch", "[cpu_backend]") {
  std::vector<float> in(250);
  std::iota(in.begin(), in.end(), 0.0f);
  const std::vector<float> out = k::reverse_in_dynamic_shared(in);
  for (int i = 0; i < 250; ++i) {
    const int block = i / 100, last = std::min(250 - block * 100, 100) - 1;
    REQUIRE(out[block * 100 + last - i % 100] == in[i]);
  }
}

TEST_CASE("3-D grids and blocks see the right indices", "[cpu_backend]") {
  const std::vector<int> out = k::indices_3d();
  size_t n = 0;
  for (int bz = 0; bz < 2; ++bz)
    for (int by = 0; by < 3; ++by)
      for (int bx = 0; bx < 2; ++bx)
        for (int tz = 0; tz < 2; ++tz)
          for (int ty = 0; ty < 3; ++ty)
            for (int tx = 0; tx < 4; ++tx) REQUIRE(out[n++] == ((bz * 10 + by) * 10 + bx) * 1000 + (tz * 10 + ty) * 10 + tx);
}

TEST_CASE("a bad launch configuration sets the error, as in CUDA", "[cpu_backend]") {
  REQUIRE(k::bad_configuration(2048, 0, false) == cudaErrorInvalidConfiguration);
  REQUIRE(k::bad_configuration(32, 100 * 1024, false) == cudaErrorInvalidConfiguration);
  REQUIRE(k::bad_configuration(32, 100 * 1024, true) == cudaSuccess);  // after opting in
  REQUIRE(cudaGetLastError() == cudaSuccess);
  REQUIRE(std::string(cudaGetErrorName(cudaErrorInvalidConfiguration)) == "cudaErrorInvalidConfiguration");
  REQUIRE(std::string(cudaGetErrorString(cudaErrorInvalidConfiguration)) == "invalid configuration argument");
}

TEST_CASE("a missing barrier shows up: as a race, as wrong values, as NaN in shake mode", "[cpu_backend]") {
  ShakeGuard guard;
  fa_cpu::options() = fa_cpu::Options{};
  fa_cpu::options().racecheck = false;
  std::vector<float> out = k::missing_barrier(256);
  bool wrong = false;
  for (int t = 0; t < 256; ++t) wrong |= out[t] != static_cast<float>((t + 1) % 256);
  REQUIRE(wrong);  // in thread order, thread t reads s[t + 1] before thread t + 1 wrote it

  fa_cpu::options().poison_shared = true;
  out = k::missing_barrier(256);
  REQUIRE(std::isnan(out[0]));  // read before written: the poison shows through

  if (fa_cpu::racecheck_built()) {
    // The race detector names it, whatever values shared memory happens to hold.
    fa_cpu::options() = fa_cpu::Options{};
    REQUIRE_THROWS_WITH(k::missing_barrier(256),
                        HasSubstring("missing_barrier_kernel") && HasSubstring("shared-memory race") &&
                            HasSubstring("of __shared__ s") && HasSubstring("cpu_backend_kernels.cu:"));
  }
}

TEST_CASE("a barrier in divergent code is reported, not hung on", "[cpu_backend]") {
  REQUIRE_THROWS_WITH(k::divergent_barrier(),
                      HasSubstring("divergent_barrier_kernel") && HasSubstring("different __syncthreads()") &&
                          HasSubstring("cpu_backend_kernels.cu:"));
}

TEST_CASE("a shuffle in a divergent branch is reported as a deadlock", "[cpu_backend]") {
  REQUIRE_THROWS_WITH(k::shuffle_in_divergent_branch(),
                      HasSubstring("deadlock") && HasSubstring("divergent_shuffle_kernel") &&
                          HasSubstring("__shfl_xor_sync") && HasSubstring("for lanes 16-31") &&
                          HasSubstring("threads 0-15"));
  REQUIRE_THROWS_WITH(k::shuffle_against_barrier(),
                      HasSubstring("deadlock") && HasSubstring("waiting in __syncthreads()") &&
                          HasSubstring("__shfl_down_sync"));
}

TEST_CASE("float4 and float2 atomicAdd add element by element and fault when misaligned", "[cpu_backend]") {
  const std::vector<float> out = k::vector_atomics(0);
  const float sum = 2 * (64 * 65 / 2);  // two blocks of t = 1 .. 64
  REQUIRE(out == std::vector<float>{1 + sum, 1 + 2 * sum, 1 + 3 * sum, 1 + 4 * sum, 1 + sum, 1 - sum, 1, 1});
  REQUIRE_THROWS_WITH(k::vector_atomics(2), HasSubstring("atomicAdd of a float4: misaligned address"));
  REQUIRE_THROWS_WITH(k::vector_atomics(1), HasSubstring("misaligned address"));
}

TEST_CASE("an exception thrown in a kernel thread reaches the host", "[cpu_backend]") {
  REQUIRE_THROWS_AS(k::throw_in_kernel(77), fa_cpu::KernelFault);
  REQUIRE_THROWS_WITH(k::throw_in_kernel(5), HasSubstring("thread (5,0,0) threw: boom from a kernel thread") &&
                                                 HasSubstring("throwing_kernel"));
  // The backend is usable again afterwards.
  REQUIRE(k::barrier_with_early_exit(64, 64)[0] == 1);
}

TEST_CASE("the Hopper swizzle and descriptor layouts are the PTX ISA's", "[cpu_backend][hopper]") {
  // 128-byte mode: chunk c of row r of an atom lands at chunk c ^ (r % 8); 64 and 32: fewer bits.
  for (uint32_t r = 0; r < 16; ++r) {
    for (uint32_t c = 0; c < 8; ++c) REQUIRE(fa_cpu::swizzle(r * 128 + c * 16 + 6, 1) == r * 128 + (c ^ (r % 8)) * 16 + 6);
  }
  REQUIRE(fa_cpu::swizzle(3 * 128 + 16, 2) == 3 * 128 + (1 ^ 3) * 16);  // bits 4-5 ^= bits 7-8
  REQUIRE(fa_cpu::swizzle(5 * 128, 3) == 5 * 128 + 16);           // bit 4 ^= bit 7
  REQUIRE(fa_cpu::swizzle(5 * 128 + 48, 0) == 5 * 128 + 48);
  // A K-major descriptor, 128-byte mode, start 0x400 + 32, SBO 1024: element (m, k) is
  // byte 2k + 32 of row m % 8 of atom m / 8, swizzled.
  const uint64_t desc = ((0x400 + 32) >> 4) | (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
  REQUIRE(fa_cpu::operand_address(desc, false, 0, 0) == 0x420);
  REQUIRE(fa_cpu::operand_address(desc, false, 9, 3) == fa_cpu::swizzle(0x400 + 1024 + 128 + 32 + 6, 1));
  // MN-major, 128-byte mode, LBO 4096, SBO 1024: (n, k) is byte 2(n % 64) of row k % 8 of
  // atom k / 8, blocks of 64 columns 4096 apart.
  const uint64_t mn = (0x400 >> 4) | (uint64_t{4096 >> 4} << 16) | (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
  REQUIRE(fa_cpu::operand_address(mn, true, 70, 9) == fa_cpu::swizzle(0x400 + 4096 + 1024 + 128 + 12, 1));
}

TEST_CASE("TMA and wgmma: S = Q·Kᵀ from shared memory, then P·V with P in registers", "[cpu_backend][hopper]") {
  // Values that are multiples of 1/2 in [-2, 2]: every sum below is exact in fp32.
  const auto halves = [](uint64_t seed) {
    std::vector<float> x = fa::random_uniform(64 * 64, seed, 2.0f);
    for (float& v : x) v = std::round(v * 2.0f) / 2.0f;
    return x;
  };
  const std::vector<float> q = halves(1), kt = halves(2), v = halves(3);
  for (bool bf16 : {false, true}) {
    const k::RoundTrip r = k::tma_wgmma_round_trip(bf16, q, kt, v);
    // Thread (warp w, lane 4g + t) holds, for each 8 columns j, rows 16w + g and + 8,
    // columns 8j + 2t and + 1: the mma.sync accumulator layout, four warps deep.
    std::vector<double> s(64 * 64), p(64 * 64);
    for (int th = 0; th < 128; ++th) {
      const int w = th / 32, g = th % 32 / 4, t = th % 4;
      for (int i = 0; i < 32; ++i) {
        const int row = 16 * w + g + 8 * (i % 4 / 2), col = 8 * (i / 4) + 2 * t + i % 2;
        double ref = 0;
        for (int kk = 0; kk < 64; ++kk) ref += static_cast<double>(q[row * 64 + kk]) * kt[col * 64 + kk];
        REQUIRE(r.s[th * 32 + i] == ref);
        p[row * 64 + col] = fa::from_bits16(bf16 ? fa::DType::BF16 : fa::DType::F16,
                                            fa::to_bits16(bf16 ? fa::DType::BF16 : fa::DType::F16, static_cast<float>(ref)));
      }
      REQUIRE(r.s_before_wait[th] == 12345.0f);  // read before wgmma.wait_group: the old value
    }
    for (int th = 0; th < 128; ++th) {
      const int w = th / 32, g = th % 32 / 4, t = th % 4;
      for (int i = 0; i < 32; ++i) {
        const int row = 16 * w + g + 8 * (i % 4 / 2), col = 8 * (i / 4) + 2 * t + i % 2;
        double ref = 0;
        for (int kk = 0; kk < 64; ++kk) ref += p[row * 64 + kk] * v[kk * 64 + col];
        REQUIRE(r.o[th * 32 + i] == ref);
      }
    }
  }
}

TEST_CASE("an mbarrier's phases follow the PTX ISA's parity rule", "[cpu_backend][hopper]") {
  // A fresh barrier is in phase 0, and the phase before it (parity 1) counts as complete.
  // Two arrivals complete a phase; the phase in progress then has the other parity.
  const std::vector<unsigned> want = {0, 1, 0, 1, 1, 0, 1, 0, 0, 1, 0, 1};
  REQUIRE(k::mbarrier_parities() == want);
}

TEST_CASE("misused Hopper instructions are reported, not run", "[cpu_backend][hopper]") {
  REQUIRE_THROWS_WITH(k::wgmma_without_fence(), HasSubstring("no wgmma.fence before"));
  REQUIRE_THROWS_WITH(k::mbarrier_never_completes(),
                      HasSubstring("deadlock") && HasSubstring("mbarrier.try_wait.parity 0") &&
                          HasSubstring("misses 1 arrivals"));
  REQUIRE_THROWS_WITH(k::named_barrier_disagreement(),  // 64 first, or 96 first with threads in reverse
                      HasSubstring("barrier 1 is counting to") && HasSubstring("this thread says"));
  REQUIRE_THROWS_WITH(k::warpgroup_split(), HasSubstring("must be executed by the whole warpgroup together"));
  REQUIRE_THROWS_WITH(k::copy_over_product_in_flight(),
                      HasSubstring("overwrites shared memory") && HasSubstring("has not been retired"));
  REQUIRE_THROWS_WITH(k::product_before_copy_lands(), HasSubstring("no thread has waited on its mbarrier"));
  // A barrier instruction marks a whole warp's arrival: on the H100 a warp split this way hung.
  REQUIRE_THROWS_WITH(k::named_barrier_split_warp(), HasSubstring("execute both bar.sync and bar.arrive at barrier 1"));
  REQUIRE(k::barrier_with_early_exit(64, 64)[0] == 1);  // and the backend goes on working
}

TEST_CASE("a bulk reduction adds shared memory as it is when its group is retired", "[cpu_backend][hopper]") {
  // Each sum is one fp32 addition; tests/hopper_probe.cu holds the same against the H100.
  std::vector<float> want(64);
  for (int i = 0; i < 64; ++i) want[static_cast<size_t>(i)] = 0.5f + static_cast<float>(i);
  REQUIRE(k::bulk_reduce(false) == want);
  // The PTX ISA lets the reduction read the tile until cp.async.bulk.wait_group.read retires
  // it; the emulation reads it then, so a kernel that writes the tile sooner adds what it wrote.
  want[0] = 1000.5f;
  REQUIRE(k::bulk_reduce(true) == want);
  REQUIRE_THROWS_WITH(k::bulk_reduce_misaligned(), HasSubstring("multiples of 16 bytes"));
  REQUIRE_THROWS_WITH(k::bulk_reduce_never_waited(), HasSubstring("never waited for"));
}

TEST_CASE("flags between blocks: a wait ends when another block in flight releases it", "[cpu_backend][hopper]") {
  ShakeGuard guard;
  // One block at a time: in grid order, each finds its turn already come.
  fa_cpu::options() = fa_cpu::Options{};
  std::vector<int> in_order(12);
  for (int i = 0; i < 12; ++i) in_order[static_cast<size_t>(i)] = i;
  REQUIRE(k::flag_chain(12) == in_order);
  // Four in flight, started in a shuffled order: a block waits while the others run, and the
  // turns still go by ticket, which is the order the blocks started in.
  fa_cpu::options().blocks_at_once = 4;
  const std::vector<int> shuffled = k::flag_chain(12);
  REQUIRE(shuffled != in_order);
  REQUIRE(std::is_permutation(shuffled.begin(), shuffled.end(), in_order.begin()));
  // A turn never passed on: the blocks after it wait for ever, which is reported.
  REQUIRE_THROWS_WITH(k::flag_chain(12, 5), HasSubstring("deadlock") && HasSubstring("(it reads 5)"));
  fa_cpu::options().blocks_at_once = 1;
  REQUIRE_THROWS_WITH(k::flag_chain(12, 5), HasSubstring("deadlock") && HasSubstring("(it reads 5)"));
}

// The race detector: CUDA's ordering rules, not the fiber schedule's. (Absent from the
// AddressSanitizer build, whose kernels cannot carry both instrumentations.)
#ifdef FA_TEST_RACECHECK
TEST_CASE("the race detector follows CUDA's ordering rules", "[cpu_backend][racecheck]") {
  ShakeGuard guard;
  fa_cpu::options() = fa_cpu::Options{};  // thread order, so each case's schedule is known
  REQUIRE(fa_cpu::racecheck_built());
  for (int rule : {0, 1, 2, 4, 6}) {
    INFO("rule " << rule << " orders the write before the read");
    REQUIRE_NOTHROW(k::ordering_rule(rule));
  }
  for (int rule : {3, 5, 8}) {
    INFO("rule " << rule << " leaves the read unordered");
    REQUIRE_THROWS_WITH(k::ordering_rule(rule), HasSubstring("shared-memory race (read after write)") &&
                                                    HasSubstring("at byte 0 of __shared__ s") &&
                                                    HasSubstring("thread (0,0,0) (warp 0, lane 0) wrote at"));
  }
  REQUIRE_THROWS_WITH(k::ordering_rule(7), HasSubstring("shared-memory race (write after read)") &&
                                               HasSubstring("thread (1,0,0) (warp 0, lane 1) read at"));
  // Off, the same kernel runs without a report.
  fa_cpu::options().racecheck = false;
  REQUIRE_NOTHROW(k::ordering_rule(5));
}

TEST_CASE("races between blocks in global memory are reported; atomics and kernel boundaries order them",
          "[cpu_backend][racecheck]") {
  ShakeGuard guard;
  fa_cpu::options() = fa_cpu::Options{};
  // Right: atomics, a slot per block, a second launch reading the first's output.
  std::vector<float> sum = k::blocks_add(1);
  for (int t = 0; t < 32; ++t) REQUIRE(sum[t] == 4.0f * static_cast<float>(t + 1));
  sum = k::blocks_add(3);
  for (int i = 0; i < 128; ++i) REQUIRE(sum[i] == static_cast<float>(i % 32 + 1));
  REQUIRE(k::two_launches() == std::vector<float>(64, 1.0f));
  // Wrong: each names the kind, both blocks, the threads and lines, the buffer and offset.
  const auto report = [](int rule) {
    try {
      k::blocks_add(rule);
    } catch (const fa_cpu::KernelFault& e) {
      return std::string(e.what());
    }
    return std::string("no report");
  };
  const auto line = [](const std::string& text, const std::string& verb) {  // "<verb> at ...kernels.cu:<n>"
    return std::regex_search(text, std::regex(verb + " at [^\\n]*cpu_backend_kernels\\.cu:[0-9]+"));
  };
  std::string r = report(0);
  INFO(r);
  REQUIRE_THAT(r, HasSubstring("kernel blocks_add_kernel") &&
                      HasSubstring("global-memory race between blocks (read after write) at byte 0 of the 512-byte "
                                   "cudaMalloc buffer passed as argument 2") &&
                      HasSubstring("block (1,0,0), thread (0,0,0) (warp 0, lane 0) reads at") &&
                      HasSubstring("block (0,0,0), thread (0,0,0) (warp 0, lane 0) wrote at") &&
                      HasSubstring("more conflicting accesses"));
  REQUIRE(line(r, "reads"));
  REQUIRE(line(r, "wrote"));
  r = report(2);
  INFO(r);
  REQUIRE_THAT(r, HasSubstring("(write after write)") && HasSubstring("adds atomically at"));
  REQUIRE(line(r, "adds atomically"));
  REQUIRE(line(r, "wrote"));
  r = report(4);
  INFO(r);
  REQUIRE_THAT(r, HasSubstring("(read after write)") && HasSubstring("block (1,0,0)") && HasSubstring("block (0,0,0)"));
  r = report(5);
  INFO(r);
  REQUIRE_THAT(r, HasSubstring("(write after read) at byte 0 of the 512-byte cudaMalloc buffer passed as argument 1") &&
                      HasSubstring("block (3,0,0), thread (0,0,0) (warp 0, lane 0) writes at") &&
                      HasSubstring(", thread (0,0,0) (warp 0, lane 0) read at"));
  // Off, the plain += runs without a report (and, blocks running one at a time, even adds
  // up right here: only the detector tells).
  fa_cpu::options().racecheck = false;
  sum = k::blocks_add(0);
  for (int t = 0; t < 32; ++t) REQUIRE(sum[t] == 4.0f * static_cast<float>(t + 1));
}

TEST_CASE("blocks in flight together: a plain += loses updates, each block keeps its shared memory",
          "[cpu_backend][racecheck]") {
  ShakeGuard guard;
  for (unsigned seed : {1u, 2u, 3u}) {
    INFO("seed " << seed);
    fa_cpu::options() = fa_cpu::Options{};
    fa_cpu::options().blocks_at_once = 4;
    fa_cpu::options().shake_seed = seed;
    fa_cpu::options().racecheck = false;
    // Right kernels: the same answers in every order.
    std::vector<float> sum = k::blocks_add(1);
    for (int t = 0; t < 32; ++t) REQUIRE(sum[t] == 4.0f * static_cast<float>(t + 1));
    sum = k::blocks_add(3);
    for (int i = 0; i < 128; ++i) REQUIRE(sum[i] == static_cast<float>(i % 32 + 1));
    REQUIRE(k::two_launches() == std::vector<float>(64, 1.0f));
    const std::vector<float> own = k::own_shared(7);
    for (int i = 0; i < 7 * 32; ++i) REQUIRE(own[i] == static_cast<float>(i / 32 * 1100 + 2 * ((i % 32 + 1) % 32)));
    // A fault in one block unwinds the others in flight, and the next launch runs.
    REQUIRE_THROWS_WITH(k::one_block_faults(6, 2), HasSubstring("one_block_faults_kernel") &&
                                                       HasSubstring("block (2,0,0)") &&
                                                       HasSubstring("different __syncthreads()"));
    REQUIRE(k::two_launches() == std::vector<float>(64, 1.0f));
    if (!fa_cpu::racecheck_built()) continue;  // stores are no switch points in this build
    // The plain +=: every block loads sum[t] before any stores it, and all but one update
    // are lost, as on a GPU. With the race detector on, it is reported instead.
    sum = k::blocks_add(0);
    for (int t = 0; t < 32; ++t) REQUIRE(sum[t] < 4.0f * static_cast<float>(t + 1));
    fa_cpu::options().racecheck = true;
    REQUIRE_THROWS_WITH(k::blocks_add(0), HasSubstring("global-memory race between blocks"));
  }
}

namespace {
// Whether `text` says "<verb> at .../race_probe.cu:<line>" with some line number.
bool names_line(const std::string& text, const std::string& verb) {
  return std::regex_search(text, std::regex(verb + " at [^\\n]*race_probe\\.cu:[0-9]+"));
}
}  // namespace

TEST_CASE("a missing __syncwarp behind a shuffle is a race, though the results are right", "[cpu_backend][racecheck]") {
  ShakeGuard guard;
  for (bool reverse : {false, true}) {
    fa_cpu::options() = fa_cpu::Options{};
    fa_cpu::options().reverse_threads = reverse;
    INFO((reverse ? "threads in reverse order" : "threads in order"));
    // Correct kernel: clean, and right.
    const std::vector<float> out = fa::race_probe::shuffle_then_read(false);
    for (int lane = 0; lane < 32; ++lane) REQUIRE(out[lane] == static_cast<float>(2 * (31 - lane) + (lane ^ 16)));
    // Planted: the detector names both accesses, with their source lines.
    std::string report;
    try {
      fa::race_probe::shuffle_then_read(true);
    } catch (const fa_cpu::KernelFault& e) {
      report = e.what();
    }
    INFO(report);
    REQUIRE_THAT(report, HasSubstring("shuffle_then_read_kernel") && HasSubstring("of __shared__ s") &&
                             HasSubstring("shared-memory race (read after write)"));
    REQUIRE(names_line(report, "reads"));
    REQUIRE(names_line(report, "wrote"));
    // With the detector off, the planted kernel's results come out right: only the
    // detector can tell.
    fa_cpu::options().racecheck = false;
    const std::vector<float> unchecked = fa::race_probe::shuffle_then_read(true);
    REQUIRE(unchecked == out);
  }
}

TEST_CASE("ldmatrix's reads of shared memory are checked too", "[cpu_backend][racecheck]") {
  ShakeGuard guard;
  fa_cpu::options() = fa_cpu::Options{};
  const std::vector<std::uint32_t> out = fa::race_probe::store_then_ldmatrix(false);
  for (unsigned lane = 0; lane < 32; ++lane) {
    const unsigned lo = 8u * (lane / 4) + 2u * (lane % 4);
    REQUIRE(out[lane] == (lo | (lo + 1) << 16));
  }
  REQUIRE_THROWS_WITH(fa::race_probe::store_then_ldmatrix(true),
                      HasSubstring("store_then_ldmatrix_kernel") && HasSubstring("shared-memory race") &&
                          HasSubstring("mma.cuh:") && HasSubstring("race_probe.cu:"));
}
#endif

// Hidden (run only by the AddressSanitizer build's CTest entry): the write one past a
// __shared__ array must be reported by ASan at the kernel's line.
TEST_CASE("an out-of-bounds shared write is caught by AddressSanitizer", "[.][asan]") {
  k::out_of_bounds_shared_write();
  FAIL("the out-of-bounds write was not detected (is this an AddressSanitizer build?)");
}
