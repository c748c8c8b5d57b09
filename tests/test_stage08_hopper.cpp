// Stage 08 against the float64 reference in fp16 and bf16: the standard battery at d = 64
// and 128, the log-sum-exp included, and shapes that wrap the K/V ring many times, that
// give a block several Q tiles, and that run a block for each tile (at d = 128). On a GPU
// they need a Hopper (skipped, never passed, without one); on the CPU backend they run
// through its emulation of TMA, mbarriers and wgmma, on fewer heads (its one
// "multiprocessor" makes every persistent block take all the tiles anyway), and a planted
// copy of the kernel that releases a K/V slot too early must be reported there.
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "common/dtype.h"
#include "common/problem.h"
#include "stages/08_hopper/hopper_attention.h"
#include "stages/08_hopper/tuning.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

#if FA_CPU_BACKEND
namespace fa::hopper::planted {
// The planted copy (stages/08_hopper/CMakeLists.txt): a K/V slot handed back before the
// P·V product that reads its V is retired.
void attention(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse);
}  // namespace fa::hopper::planted
#endif

namespace {

void run_stage08(const fa::AttentionProblem& p, const fa::DeviceTensors& t) {
  fa::hopper::attention(p, t.q, t.k, t.v, t.o, t.lse);
}

const std::vector<int64_t> kDims = {64, 128};

// Heads (per batch entry) of the "several Q tiles" problems and query rows of the "long"
// ones: on an H100, 80 heads × 5 tiles, more tiles than it has multiprocessors; on the CPU
// backend's one multiprocessor 2 heads × 5 tiles are already several a block.
constexpr int64_t kManyHeads = FA_CPU_BACKEND ? 1 : 40;
constexpr int64_t kLongRows = FA_CPU_BACKEND ? 130 : 300;

}  // namespace

TEST_CASE("stage 08 matches the reference in fp16, log-sum-exp included", "[stage08][fp16]") {
  fa::test::check_attention_stage(run_stage08, /*with_lse=*/true, /*causal=*/true, fa::DType::F16, kDims);
}

TEST_CASE("stage 08 matches the reference in bf16, log-sum-exp included", "[stage08][bf16]") {
  fa::test::check_attention_stage(run_stage08, /*with_lse=*/true, /*causal=*/true, fa::DType::BF16, kDims);
}

// Runs stage 08 against the reference on make(dtype, d, causal)'s problem in fp16 and bf16,
// at both head dims, with and without the causal mask, a fresh seed each; `check` sees each
// problem first.
template <typename Make, typename Check>
void check_each(uint64_t seed, Make make, Check check) {
  for (fa::DType dtype : {fa::DType::F16, fa::DType::BF16}) {
    for (int64_t d : kDims) {
      for (bool causal : {false, true}) {
        const fa::AttentionProblem p = make(dtype, d, causal);
        check(p);
        fa::test::require_passed(p, fa::test::run_and_check(p, run_stage08, ++seed, 1.0f, true));
      }
    }
  }
}

// Many K/V tiles a block: the ring of slots wraps around several times, and each slot's
// barriers go through several phases; causal too, with Nq != Nkv and ragged ends.
TEST_CASE("stage 08 over many K/V tiles: the ring wraps around", "[stage08][ring]") {
  check_each(
      40,
      [](fa::DType dtype, int64_t d, bool causal) {
        return FA_CPU_BACKEND ? fa::make_problem(1, 2, 300, 1500, d, 0.0, causal, dtype)
                              : fa::make_problem(2, 3, 700, 1500, d, 0.0, causal, dtype);
      },
      [](const fa::AttentionProblem&) {});
}

// More Q tiles than a GPU has multiprocessors (on an H100, 80 heads × 5 tiles): with one
// block a multiprocessor each block takes several, one after another, its K/V ring and
// barriers carrying on from one to the next; under the causal mask, in pairs (5 tiles: the
// middle one pairs with itself).
TEST_CASE("stage 08 with more Q tiles than multiprocessors: a block takes several", "[stage08][persistent]") {
  check_each(
      60,
      [](fa::DType dtype, int64_t d, bool causal) {
        return fa::make_problem(2, kManyHeads, 600, 700, d, 0.0, causal, dtype);
      },
      [](const fa::AttentionProblem& p) { REQUIRE(fa::hopper::persistent(p)); });
}

// Over 64 K/V tiles a head, at d = 128 the kernel runs a block for each Q tile instead
// (persistent()); at d = 64 one block a multiprocessor still takes tile after tile, each of
// them long. Causal too, with Nq < Nkv, so that every row sees many tiles.
TEST_CASE("stage 08 over a long K/V sequence: a block for each Q tile at d = 128", "[stage08][long]") {
  check_each(
      80,
      [](fa::DType dtype, int64_t d, bool causal) {
        return fa::make_problem(1, FA_CPU_BACKEND ? 1 : 2, kLongRows, 8300, d, 0.0, causal, dtype);
      },
      [](const fa::AttentionProblem& p) { REQUIRE(fa::hopper::persistent(p) == (p.dim == 64)); });
}

// Lazy rescaling (tests/stage_check.h): Nkv = 600 spans five K/V tiles.
TEST_CASE("stage 08 at d = 128 with large logits, lazy rescaling at work", "[stage08][lazy]") {
  fa::test::check_lazy_rescaling(run_stage08, 600);
}

// Each variant undoes or changes one step of LOG.md; each must still compute attention.
TEST_CASE("every variant of stage 08 matches the reference", "[stage08][variants]") {
  const std::vector<fa::StageVariant> variants = fa::hopper::variants();
  CHECK(variants.size() == std::tuple_size_v<fa::hopper::Variants>);
  fa::test::check_variants(variants, /*with_lse=*/true);
  const fa::AttentionProblem bf16 = fa::make_problem(1, 1, 8, 8, 64, 0.0, false, fa::DType::BF16);
  REQUIRE_THROWS_WITH(fa::find_variant(variants, "ring2", "08").run(bf16, {nullptr, nullptr, nullptr, nullptr}, nullptr),
                      fa::test::HasSubstring("fp16 only"));
}

// Stage 08 reading Q, K and V and writing O where the layout `name` of
// fa::test::test_layout says, every element between them poisoned (and checked untouched).
fa::test::StageFn strided_stage08(const std::string& name) {
  return [name](const fa::AttentionProblem& p, const fa::DeviceTensors& t) {
    const fa::Layout layout = fa::test::test_layout(name, p);
    const auto q = fa::test::scatter(p, p.seq_q, t.q, layout.q);
    const auto k = fa::test::scatter(p, p.seq_kv, t.k, layout.k);
    const auto v = fa::test::scatter(p, p.seq_kv, t.v, layout.v);
    fa::DeviceBuffer<uint16_t> o(static_cast<size_t>(fa::test::strided_extent(p, p.seq_q, layout.o)));
    o.fill_bytes(fa::kPoisonByte);
    fa::hopper::attention_strided(p, q.data(), k.data(), v.data(), o.data(), t.lse, layout);
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    fa::test::gather(p, p.seq_q, o, layout.o, t.o);
  };
}

// What the Python module hands stage 08: views of one buffer, heads side by side in each
// row, and O written the same way; and tensors with spare elements between rows and heads.
TEST_CASE("stage 08 reads Q, K and V where their strides say and writes O where its strides say", "[stage08]") {
  uint64_t seed = 800;
  for (const std::string layout : {"interleaved", "padded"}) {
    for (fa::DType dtype : {fa::DType::F16, fa::DType::BF16}) {
      for (int64_t d : kDims) {
        for (auto [b, h, nq, nkv] : std::vector<std::array<int64_t, 4>>{{2, 3, 70, 130}, {1, 2, 1, 1}, {3, 1, 65, 64}}) {
          const fa::AttentionProblem p = fa::make_problem(b, h, nq, nkv, d, 0.0, nq == 70, dtype);
          INFO(layout);
          fa::test::require_passed(p, fa::test::run_and_check(p, strided_stage08(layout), ++seed, 1.0f, true));
        }
      }
    }
  }
}

// At d = 128 a row of O goes out 16 bytes a store where O is 16-byte aligned, and 4 bytes a
// store where it is not: both ways checked, the second at 4 and 8 bytes past a boundary.
TEST_CASE("stage 08 writes O at an address that is not 16-byte aligned", "[stage08]") {
  uint64_t seed = 880;
  for (const int64_t o_offset : {0, 2, 4}) {
    for (fa::DType dtype : {fa::DType::F16, fa::DType::BF16}) {
      for (int64_t d : kDims) {
        const fa::AttentionProblem p = fa::make_problem(2, 2, 77, 150, d, 0.0, o_offset == 2, dtype);
        INFO("O at element " << o_offset);
        const fa::test::StageFn stage = fa::test::with_o_offset(
            o_offset, [](const fa::AttentionProblem& q, const fa::DeviceTensors& t, void* o) {
              fa::hopper::attention_strided(q, t.q, t.k, t.v, o, t.lse, fa::Layout::contiguous(q));
            });
        fa::test::require_passed(p, fa::test::run_and_check(p, stage, ++seed, 1.0f, true));
      }
    }
  }
}

TEST_CASE("stage 08 refuses strides TMA cannot follow", "[stage08]") {
  const fa::AttentionProblem p = fa::make_problem(2, 2, 8, 8, 64, 0.0, false, fa::DType::F16);
  fa::DeviceBuffer<uint16_t> x(static_cast<size_t>(p.q_elems()));
  fa::Layout broadcast = fa::Layout::contiguous(p);
  broadcast.k.batch = 0;  // every batch reads one K
  REQUIRE_THROWS_WITH(fa::hopper::attention_strided(p, x.data(), x.data(), x.data(), x.data(), nullptr, broadcast),
                      fa::test::HasSubstring("stride of 0"));
  fa::Layout odd = fa::Layout::contiguous(p);
  odd.v.row = 68;  // 136 bytes: not a whole number of 16
  REQUIRE_THROWS_WITH(fa::hopper::attention_strided(p, x.data(), x.data(), x.data(), x.data(), nullptr, odd),
                      fa::test::HasSubstring("v's strides (1024, 512, 68 elements) must be whole multiples of 16 bytes"));
}

TEST_CASE("stage 08 refuses fp32 and other head dims with a clear message", "[stage08]") {
  const fa::DeviceTensors none{nullptr, nullptr, nullptr, nullptr};
  REQUIRE_THROWS_WITH(run_stage08(fa::make_problem(1, 1, 8, 8, 64), none), fa::test::HasSubstring("fp16 or bf16"));
  const fa::AttentionProblem p32 = fa::make_problem(1, 1, 8, 8, 32, 0.0, false, fa::DType::F16);
  REQUIRE_THROWS_WITH(run_stage08(p32, none), fa::test::HasSubstring("head dim 32 is not supported"));
  // What the demo's description asks of a head dim, too.
  REQUIRE_THROWS_WITH(fa::hopper::shared_bytes(32), fa::test::HasSubstring("head dim 32 is not supported"));
  REQUIRE_THROWS_WITH(fa::hopper::block_rows(256), fa::test::HasSubstring("head dim 256 is not supported"));
}

#if FA_CPU_BACKEND
// On a GPU the planted kernel is wrong only when the producer's next copy into the slot
// lands before the tensor cores have read V. The CPU backend lets the producer run first
// when the slot is released, and reports its copy into memory an unretired wgmma reads.
TEST_CASE("a K/V slot released before P·V is retired is reported on the CPU backend", "[stage08][planted]") {
  for (int64_t d : kDims) {
    // More K/V tiles than the ring has slots, so that the producer reuses a slot.
    const fa::AttentionProblem p = fa::make_problem(1, 1, 64, 600, d, 0.0, false, fa::DType::F16);
    const fa::test::StageFn planted = [](const fa::AttentionProblem& q, const fa::DeviceTensors& t) {
      fa::hopper::planted::attention(q, t.q, t.k, t.v, t.o, t.lse);
    };
    REQUIRE_THROWS_WITH(fa::test::run_and_check(p, planted, 9, 1.0f, true),
                        fa::test::HasSubstring("overwrites shared memory") &&
                            fa::test::HasSubstring("still reads"));
    fa::test::require_passed(p, fa::test::run_and_check(p, run_stage08, 9, 1.0f, true));
  }
}
#endif
