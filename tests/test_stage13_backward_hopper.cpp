// Stage 13 against the float64 reference gradients, in fp16 and bf16: ragged lengths, 1
// included, at d = 64 and 128; many heads and batches; the causal mask; large logits; logits
// far below zero; after stage 08's forward kernel; blocks in flight together; strided inputs.
// dQ, dK, dV and the workspace are poisoned before each run and every element is compared,
// within the type's tolerance from a same-precision baseline's own error (as stage 11's).
// On a GPU the tests need a Hopper (skipped, never passed, without one); on the CPU backend
// they run through its emulation of TMA, mbarriers and wgmma, on fewer and shorter shapes.
// Planted copies of the kernel (stages/13_backward_hopper/CMakeLists.txt) must fail.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/device.h"
#include "common/dtype.h"
#include "common/problem.h"
#include "stages/08_hopper/hopper_attention.h"
#include "stages/13_backward_hopper/hopper_backward.h"
#include "stages/13_backward_hopper/tuning.h"
#include "tests/backward_check.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

namespace fa::hopper_backward::planted {
// The planted copy: the dS written for dQ is P's, not dS's.
void attention_backward(const AttentionProblem& p, const Tensors& t, void* workspace);
}  // namespace fa::hopper_backward::planted
#if FA_CPU_BACKEND
namespace fa::hopper_backward::early_release {
// The second: a Q buffer handed back to the producer before the products that read it are retired.
void attention_backward(const AttentionProblem& p, const Tensors& t, void* workspace);
}  // namespace fa::hopper_backward::early_release
namespace fa::hopper_backward::early_release_d64 {
// The third: the same on the d = 64 path, where the tile waits for all three products at once.
void attention_backward(const AttentionProblem& p, const Tensors& t, void* workspace);
}  // namespace fa::hopper_backward::early_release_d64
namespace fa::hopper_backward::no_dq_barrier {
// The fourth: no named barrier of the two consumers before dQ's product.
void attention_backward(const AttentionProblem& p, const Tensors& t, void* workspace);
}  // namespace fa::hopper_backward::no_dq_barrier
#endif

namespace {

using fa::test::require_finite;
using fa::test::require_passed;

const std::vector<fa::DType> kTypes = {fa::DType::F16, fa::DType::BF16};
const std::vector<int64_t> kDims = {64, 128};

// One backward pass of `backward` on fresh inputs, checked (fa::test::run_backward_check).
// With `forward_on_device` O and lse come from stage 08's kernel, else from the reference.
fa::test::BackwardRun run_and_check(const fa::AttentionProblem& p, uint64_t seed, float magnitude = 1.0f,
                                    const fa::test::Backward16& backward = fa::hopper_backward::attention_backward,
                                    bool forward_on_device = false, double logit = 0.0) {
  const fa::test::Forward16 forward = [](const fa::AttentionProblem& fp, const void* q, const void* k, const void* v,
                                         void* o, float* lse) { fa::hopper::attention(fp, q, k, v, o, lse); };
  return fa::test::run_backward_check(p, seed, backward, fa::hopper_backward::workspace_bytes(p), magnitude,
                                      forward_on_device ? forward : fa::test::Forward16{}, logit);
}

fa::AttentionProblem problem(int64_t b, int64_t h, int64_t nq, int64_t nkv, int64_t d, bool causal, fa::DType t) {
  return fa::make_problem(b, h, nq, nkv, d, 0.0, causal, t);
}

}  // namespace

TEST_CASE("stage 13: ragged lengths at d = 64 and 128, fp16 and bf16", "[stage13]") {
  // On the CPU backend the longest pairs run at d = 64 in fp16 only; both head dims and types
  // still meet several tiles in both directions at (100, 100). On a GPU everything runs.
  uint64_t seed = 1300;
  for (fa::DType t : kTypes) {
    for (int64_t d : kDims) {
      if (!fa::test::dtype_case_runs(t, d)) continue;  // under ASan, one type a head dim
      for (auto [nq, nkv] : fa::test::ragged_lengths()) {
        if (fa::is_cpu_backend() && nq * nkv > 100 * 1000 / 2 && (d != 64 || t != fa::DType::F16)) continue;
        const fa::AttentionProblem p = problem(1, 2, nq, nkv, d, false, t);
        require_passed(p, run_and_check(p, ++seed).check);
      }
    }
  }
}

TEST_CASE("stage 13: many heads and batches", "[stage13]") {
  for (fa::DType t : kTypes) {
    const fa::AttentionProblem p = problem(3, 5, 64, 200, 64, false, t);
    require_passed(p, run_and_check(p, 7).check);
  }
}

TEST_CASE("stage 13: causal mask, tiles above the diagonal skipped", "[stage13][causal]") {
  // Nq = Nkv; Nq < Nkv (the last keys are seen by no query: their dK and dV are zero, and
  // still written); Nq > Nkv (the last queries see every key); at d = 64 and 128.
  uint64_t seed = 1400;
  for (fa::DType t : kTypes) {
    for (int64_t d : kDims) {
      if (!fa::test::dtype_case_runs(t, d)) continue;  // under ASan, one type a head dim
      for (auto [nq, nkv] : std::vector<std::pair<int64_t, int64_t>>{{257, 257}, {100, 300}, {257, 100}}) {
        const fa::AttentionProblem p = problem(2, 1, nq, nkv, d, true, t);
        const fa::test::BackwardRun r = run_and_check(p, ++seed);
        require_passed(p, r.check);
        fa::test::require_unseen_keys_zero(p, r.got);
      }
    }
  }
}

TEST_CASE("stage 13: large-magnitude logits stay finite and accurate", "[stage13]") {
  // Inputs in [-8, 8]: logits in the hundreds, P close to one-hot.
  for (fa::DType t : kTypes) {
    for (int64_t d : kDims) {
      const fa::AttentionProblem p = problem(1, 2, 100, 257, d, false, t);
      const fa::test::BackwardRun r = run_and_check(p, 5, 8.0f);
      require_finite(r.got);
      require_passed(p, r.check);
    }
  }
}

TEST_CASE("stage 13: rows whose logits are all far below zero, over ragged key tiles", "[stage13]") {
  // Every logit near −300, so lse ≈ −300: a key past the end of a ragged tile, were it scored
  // (its zero-filled K gives S = 0), would give P = e^300 = inf. O and lse from the
  // reference, then from stage 08's kernel.
  uint64_t seed = 1500;
  for (fa::DType t : kTypes) {
    for (bool on_device : {false, true}) {
      for (bool causal : {false, true}) {
        for (int64_t d : kDims) {
          const fa::AttentionProblem p = problem(1, 1, 70, causal ? 70 : 130, d, causal, t);
          const fa::test::BackwardRun r =
              run_and_check(p, ++seed, 1.0f, fa::hopper_backward::attention_backward, on_device, -300.0);
          require_finite(r.got);
          require_passed(p, r.check);
        }
      }
    }
  }
}

TEST_CASE("stage 13: after stage 08's forward kernel, as in training", "[stage13]") {
  uint64_t seed = 31;
  for (fa::DType t : kTypes) {
    for (bool causal : {false, true}) {
      const fa::AttentionProblem p = problem(2, 2, 200, 150, 64, causal, t);
      require_passed(p, run_and_check(p, ++seed, 1.0f, fa::hopper_backward::attention_backward, true).check);
    }
  }
}

TEST_CASE("stage 13: dQ's atomics are needed, blocks in flight together", "[stage13]") {
  // Many K/V tiles a head, each a block adding to the same rows of dQ's accumulator. On the
  // CPU backend, with four blocks in flight taking turns at every atomic and store.
  const fa::AttentionProblem p = fa::is_cpu_backend() ? problem(1, 1, 96, 640, 64, false, fa::DType::BF16)
                                                      : problem(1, 2, 256, 8192, 64, false, fa::DType::BF16);
  fa::test::BlocksInFlight shake(4);
  require_passed(p, run_and_check(p, 8).check);
}

// Each variant of tuning.h is another choice of LOG.md (fa::test::check_backward_variants).
TEST_CASE("stage 13: every variant matches the reference", "[stage13][variants]") {
  const std::vector<fa::Variant<fa::BackwardStageRun>> variants = fa::hopper_backward::variants();
  CHECK(variants.size() == std::tuple_size_v<fa::hopper_backward::Variants>);
  fa::test::check_backward_variants(variants, 1700, run_and_check);
  REQUIRE_THROWS_WITH(fa::find_variant(variants, "nope", "13_backward_hopper"),
                      fa::test::HasSubstring("tuned, atomics, bulk, deterministic"));
}

// The deterministic mode: blocks add to each Q tile's dQ in the order of their K/V tiles, so dQ
// has the same bits however the blocks are scheduled. On the CPU backend each run takes
// another shuffled order of four blocks in flight, and the finished kernel's dQ (additions in
// whatever order the blocks reach them) is shown to differ in one of three other orders, so the
// comparison could fail. On a GPU, 256 blocks (more than run at once) are run three times as
// they come. The finished mode adds by bulk reductions at both head dims, the atomics mode by
// atomics at d = 64; causal and not; strided inputs. The first run of each is checked against
// the reference, the others bit for bit against it (under AddressSanitizer one other order,
// and the finished kernel's differing dQ is left to the release run).
TEST_CASE("stage 13: the deterministic mode's dQ has the same bits whatever the block order", "[stage13]") {
  const bool cpu = fa::is_cpu_backend();
  const std::vector<std::pair<std::string, fa::test::Backward16>> modes = {
      {"deterministic", fa::test::strided_backward("padded", fa::hopper_backward::attention_backward_deterministic)},
      {"deterministic_atomics",
       fa::test::strided_backward("padded", fa::hopper_backward::attention_backward_deterministic_atomics)}};
  for (const auto& [name, deterministic] : modes) {
    for (int64_t d : kDims) {
      if (name == "deterministic_atomics" && d != 64) continue;  // d = 128 is the finished mode's
      for (bool causal : {false, true}) {
        const fa::AttentionProblem p = cpu ? problem(1, 2, 130, 700, d, causal, fa::DType::F16)
                                           : problem(1, 4, 256, 8192, d, causal, fa::DType::F16);
        INFO(name << ": " << fa::describe(p));
        const std::size_t ws = fa::hopper_backward::workspace_bytes(p);
        const auto gradients = [&](unsigned order, const fa::test::Backward16& backward) {
          fa::test::BlocksInFlight shake(4, order);
          return fa::test::run_backward(p, 11, backward, ws).got;
        };
        fa::AttentionGradients<float> first;
        {
          fa::test::BlocksInFlight shake(4, 1);
          const fa::test::BackwardRun r = run_and_check(p, 11, 1.0f, deterministic);
          require_passed(p, r.check);
          first = r.got;
        }
        for (unsigned order : {2u, 3u}) {
          if (order == 3u && fa::test::under_address_sanitizer()) break;  // one other order under ASan
          const fa::AttentionGradients<float> again = gradients(order, deterministic);
          REQUIRE(again.dq == first.dq);
          REQUIRE(again.dk == first.dk);
          REQUIRE(again.dv == first.dv);
        }
        // Some two orders of four give another dQ (the release run shows it; ASan need not).
        if (cpu && !causal && name == "deterministic" && !fa::test::under_address_sanitizer()) {
          const auto base = gradients(1, fa::hopper_backward::attention_backward).dq;
          bool differs = false;
          for (unsigned order : {2u, 3u, 4u}) {
            differs = differs || gradients(order, fa::hopper_backward::attention_backward).dq != base;
          }
          CHECK(differs);
        }
      }
    }
  }
}

// The layouts the Python module hands a backward stage (fa::test::check_strided_backward).
TEST_CASE("stage 13: Q, K, V, O and dO read where their strides say", "[stage13]") {
  fa::test::check_strided_backward(1600, run_and_check, fa::hopper_backward::attention_backward_strided);
}

// The order blocks are dealt in: every (head, K/V tile) exactly once; head by head, then the
// last tail_heads() heads K/V tile by K/V tile; the tail only under the causal mask, at least
// two heads of it where there are two.
TEST_CASE("stage 13: the grid deals every block once, the causal tail K/V tile by K/V tile", "[stage13]") {
  for (const auto& [kv_tiles, heads, tail] : std::vector<std::tuple<int, int, int>>{
           {1, 1, 0}, {1, 1, 1}, {3, 1, 1}, {1, 4, 2}, {5, 4, 0}, {5, 4, 2}, {5, 4, 4}, {32, 128, 9}}) {
    INFO(kv_tiles << " K/V tiles, " << heads << " heads, " << tail << " in the tail");
    std::vector<int> seen(static_cast<size_t>(kv_tiles * heads), 0);
    for (int n = 0; n < kv_tiles * heads; ++n) {
      const fa::hopper_backward::BlockCoords c = fa::hopper_backward::block_coords(n, kv_tiles, heads, tail);
      REQUIRE(c.bh >= 0);
      REQUIRE(c.bh < heads);
      REQUIRE(c.kv_tile >= 0);
      REQUIRE(c.kv_tile < kv_tiles);
      ++seen[static_cast<size_t>(c.bh * kv_tiles + c.kv_tile)];
      const int first_tail = (heads - tail) * kv_tiles;
      if (n < first_tail) {
        REQUIRE(c.bh == n / kv_tiles);  // head by head, K/V tile 0 first
        REQUIRE(c.kv_tile == n % kv_tiles);
      } else {
        REQUIRE(c.kv_tile == (n - first_tail) / tail);  // tile 0 of each tail head, then tile 1, ...
      }
    }
    REQUIRE(std::count(seen.begin(), seen.end(), 1) == static_cast<std::ptrdiff_t>(seen.size()));
  }
  const auto tail = [](int64_t bh, int64_t nkv, bool causal, int sms, int rounds) {
    return fa::hopper_backward::tail_heads(problem(1, bh, 64, nkv, 64, causal, fa::DType::F16), sms, rounds);
  };
  REQUIRE(tail(128, 4096, false, 132, 2) == 0);  // every block the same work: head by head
  REQUIRE(tail(128, 4096, true, 132, 0) == 0);
  REQUIRE(tail(128, 4096, true, 132, 2) == 9);   // 264 blocks of 32 K/V tiles a head
  REQUIRE(tail(16, 8192, true, 132, 8) == 16);   // no more than there are
  REQUIRE(tail(4, 4096, true, 1, 2) == 2);       // at least two
  REQUIRE(tail(1, 4096, true, 1, 2) == 1);
}

// The last round cut in two (tail_split(), piece()): every (block, Q tile) run exactly once,
// a cut block's two parts in the same slot, big parts first; the cut where it should be.
TEST_CASE("stage 13: the grid's last round is cut in two, every Q tile of a block run once", "[stage13]") {
  namespace bw = fa::hopper_backward;
  // (B·H, Nkv, q_tiles, multiprocessors): blocks = B·H·⌈Nkv/128⌉.
  for (const auto& [bh, nkv, q_tiles, sms] : std::vector<std::tuple<int, int, int, int>>{
           {16, 8192, 128, 132}, {128, 4096, 32, 132}, {2, 4096, 64, 132}, {2, 390, 3, 3}, {5, 300, 2, 4},
           {3, 1000, 7, 5}, {16, 8448, 128, 132}, {128, 4096, 1, 132}}) {
    const fa::AttentionProblem p = problem(1, bh, 64, nkv, 64, false, fa::DType::F16);
    const int blocks = bh * ((nkv + 127) / 128);
    INFO(blocks << " blocks of " << q_tiles << " Q tiles, " << sms << " multiprocessors");
    const bw::TailSplit t = bw::tail_split(p, q_tiles, sms, true);
    REQUIRE(t.whole + t.split == blocks);
    if (t.split > 0) {
      REQUIRE(t.whole % sms == 0);  // whole rounds, then the cut blocks
      REQUIRE(t.split == blocks % sms);
      REQUIRE(t.split <= bw::kMaxSplit);
      REQUIRE(t.big >= 1);
      REQUIRE(t.big < q_tiles);
    }
    std::vector<int> runs(static_cast<size_t>(blocks) * static_cast<size_t>(q_tiles), 0);
    std::vector<int> parts(static_cast<size_t>(t.split), 0);
    for (int g = 0; g < t.whole + 2 * t.split; ++g) {
      const bw::Piece c = bw::piece(g, t, q_tiles);
      REQUIRE(c.block >= 0);
      REQUIRE(c.block < blocks);
      REQUIRE(c.n_begin < c.n_end);
      REQUIRE(c.n_end <= q_tiles);
      REQUIRE((c.slot >= 0) == (g >= t.whole));
      if (c.slot >= 0) {
        REQUIRE(c.slot == c.block - t.whole);
        REQUIRE((c.n_begin == 0) == (g < t.whole + t.split));  // the big parts first
        ++parts[static_cast<size_t>(c.slot)];
      }
      for (int n = c.n_begin; n < c.n_end; ++n) ++runs[static_cast<size_t>(c.block) * q_tiles + n];
    }
    REQUIRE(std::count(runs.begin(), runs.end(), 1) == static_cast<std::ptrdiff_t>(runs.size()));
    REQUIRE(std::count(parts.begin(), parts.end(), 2) == static_cast<std::ptrdiff_t>(parts.size()));
  }
  const auto split = [](int64_t bh, int64_t nkv, bool causal, int q_tiles, int sms, bool allowed = true) {
    return fa::hopper_backward::tail_split(problem(1, bh, 64, nkv, 64, causal, fa::DType::F16), q_tiles, sms, allowed);
  };
  // d = 128's bar: 1,024 blocks, 100 in the last round; 32 idle multiprocessors take the small
  // parts in 4 turns, so the big parts have 4/5 of the 128 Q tiles.
  REQUIRE(split(16, 8192, false, 128, 132).split == 100);
  REQUIRE(split(16, 8192, false, 128, 132).big == 102);
  REQUIRE(split(2, 4096, false, 64, 132).big == 32);          // 64 blocks: halves
  REQUIRE(split(16, 8192, true, 128, 132).split == 0);        // the causal mask: none
  REQUIRE(split(16, 8192, false, 128, 132, false).split == 0);  // not allowed
  REQUIRE(split(16, 8448, false, 128, 132).split == 0);       // 1,056 blocks: whole rounds
  REQUIRE(split(128, 4096, false, 1, 132).split == 0);        // one Q tile: nothing to cut
  REQUIRE(split(4, 4096, false, 32, 1).split == 0);           // the CPU backend's one multiprocessor
  REQUIRE(split(1, 16384, false, 32, 132).split == 0);        // 128 blocks: 32 turns, little to win
}

// Stage 11's kernels 1 and 3 take 16 bytes at a time where O and dQ allow it, else 4 bytes.
TEST_CASE("stage 13: O read and dQ written at addresses that are not 16-byte aligned", "[stage13]") {
  uint64_t seed = 1380;
  const fa::test::Backward16 misaligned =
      fa::test::misaligned_o_dq_backward(fa::hopper_backward::attention_backward);
  for (int64_t d : {64, 128}) {
    const fa::AttentionProblem p =
        fa::make_problem(1, 2, 70, 130, d, 0.0, d == 64, d == 128 ? fa::DType::BF16 : fa::DType::F16);
    require_passed(p, run_and_check(p, ++seed, 1.0f, misaligned).check);
  }
}

TEST_CASE("stage 13: bad input is refused with a message", "[stage13]") {
  const fa::AttentionProblem p32 = problem(1, 1, 4, 4, 64, false, fa::DType::F32);
  REQUIRE_THROWS_WITH(fa::hopper_backward::attention_backward(p32, {}, nullptr),
                      fa::test::HasSubstring("runs in fp16 or bf16 (tensor cores), not fp32"));
  const fa::AttentionProblem p32d = problem(1, 1, 4, 4, 32, false, fa::DType::F16);
  REQUIRE_THROWS_WITH(fa::hopper_backward::attention_backward(p32d, {}, nullptr),
                      fa::test::HasSubstring("stage 13: head dim 32 is not supported (64 or 128)"));
  // 2^20 heads of 2^18 keys: 2^32 K/V blocks, more than one grid holds (refused before any
  // memory is touched).
  const fa::AttentionProblem huge = problem(1024, 1024, 1, int64_t{1} << 18, 64, false, fa::DType::F16);
  REQUIRE_THROWS_WITH(fa::hopper_backward::attention_backward(huge, {}, nullptr),
                      fa::test::HasSubstring("the grid would exceed 2^31 - 1 blocks"));
  const fa::AttentionProblem p = problem(2, 2, 8, 8, 64, false, fa::DType::BF16);
  fa::Layout odd = fa::Layout::contiguous(p);
  odd.d_o.head = 12;
  REQUIRE_THROWS_WITH(fa::hopper_backward::attention_backward_strided(p, {}, nullptr, odd),
                      fa::test::HasSubstring("d_o's strides (1024, 12, 64 elements) must be whole multiples of 16"));
  // A workspace off its 16-byte alignment (TMA reads lse and D from it), refused before any
  // memory is touched.
  REQUIRE_THROWS_WITH(fa::hopper_backward::attention_backward(p, {}, reinterpret_cast<void*>(uintptr_t{8})),
                      fa::test::HasSubstring("the workspace must be 16-byte aligned"));
}

TEST_CASE("stage 13: the checks catch planted bugs", "[stage13][planted]") {
  // dQ from P instead of dS: dK and dV are right, dQ is not.
  for (int64_t d : kDims) {
    const fa::AttentionProblem p = problem(1, 1, 100, 130, d, false, fa::DType::F16);
    const fa::GradientCheck c = run_and_check(p, 3, 1.0f, fa::hopper_backward::planted::attention_backward).check;
    CHECK_FALSE(c.dq.passed());
    CHECK(c.dk.passed());
    CHECK(c.dv.passed());
  }
#if FA_CPU_BACKEND
  // A Q buffer handed back before dK += dSᵀ·Q is retired (at d = 128, where dK is issued
  // last): with more Q tiles than buffers the producer's next copy overwrites Q while that
  // product still reads it, which the emulation reports. (On a GPU such a copy is wrong only
  // when it is early.) Four Q tiles of 64 rows at d = 128.
  const fa::AttentionProblem p = problem(1, 1, 256, 64, 128, false, fa::DType::F16);
  REQUIRE_THROWS_WITH(run_and_check(p, 4, 1.0f, fa::hopper_backward::early_release::attention_backward),
                      fa::test::HasSubstring("overwrites shared memory") && fa::test::HasSubstring("still reads"));
  // The same at d = 64, where the buffer is handed back once all three products are waited
  // for: four Q tiles of 128 rows.
  const fa::AttentionProblem p64 = problem(1, 1, 512, 64, 64, false, fa::DType::F16);
  REQUIRE_THROWS_WITH(run_and_check(p64, 4, 1.0f, fa::hopper_backward::early_release_d64::attention_backward),
                      fa::test::HasSubstring("overwrites shared memory") && fa::test::HasSubstring("still reads"));
#endif
}

#if FA_CPU_BACKEND
// The emulation's usual schedule takes every thread to its next wait in turn, so the two
// consumer warpgroups reach dQ's product together and each one's half of dS is written
// before the other reads it, barrier or not. Here one consumer runs ahead until it waits for
// something the other must do (fa_cpu::Options::lead_warpgroup), each of them in turn, and so
// does the producer: the kernel must pass, and the copy without the barrier before dQ must
// not.
TEST_CASE("stage 13: a consumer ahead of the other (the CPU backend's skewed schedule)", "[stage13]") {
  for (int group : {0, 1, 2}) {
    const fa::test::WarpgroupAhead ahead(group);
    for (int64_t d : kDims) {
      const bool causal = (group + d / 64) % 2 == 1;  // each head dim with and without the mask
      INFO("warpgroup " << group << " ahead, d = " << d << (causal ? ", causal" : ""));
      const fa::AttentionProblem p = problem(1, 2, 300, 200, d, causal, fa::DType::F16);
      require_passed(p, run_and_check(p, 11 + group).check);
    }
  }
  for (int group : {1, 2}) {
    const fa::test::WarpgroupAhead ahead(group);
    for (int64_t d : kDims) {
      INFO("warpgroup " << group << " ahead, d = " << d << ", no barrier before dQ");
      const fa::AttentionProblem p = problem(1, 1, 200, 130, d, false, fa::DType::F16);
      const fa::GradientCheck c = run_and_check(p, 5, 1.0f, fa::hopper_backward::no_dq_barrier::attention_backward).check;
      CHECK_FALSE(c.dq.passed());
      CHECK(c.dk.passed());
      CHECK(c.dv.passed());
    }
  }
}
#endif
