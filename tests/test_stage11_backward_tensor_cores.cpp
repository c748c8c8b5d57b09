// Stage 11 against the float64 reference gradients, in fp16 and bf16: the standard battery
// of shapes (ragged lengths, 1 included, every head dim; many heads and batches; causal;
// large logits; logits far below zero), dQ, dK and dV poisoned before each run, every element
// compared. The tolerance is the type's, from a same-precision baseline's own error
// (baseline_attention_backward: 16-bit operands and P, dS, fp32 sums), as FlashAttention's
// tests hold its gradients to PyTorch's in the same precision. O (rounded to the type) and
// the log-sum-exp come from the float64 reference, so these checks see the backward pass
// alone; one more runs stage 07's forward kernel first, as training does. Planted copies
// of the kernel (stages/11_backward_tensor_cores/CMakeLists.txt) must fail.
#include <cuda_runtime.h>

#include <array>
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "common/demo.h"
#include "common/device.h"
#include "common/device_buffer.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/verify.h"
#include "stages/07_memory_pipeline/pipelined_attention.h"
#include "stages/11_backward_tensor_cores/tensor_core_backward.h"
#include "stages/11_backward_tensor_cores/tuning.h"
#include "tests/backward_check.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

namespace fa::tc_backward::planted {
// The planted copy: the dS written for dQ is P's, not dS's.
void attention_backward(const AttentionProblem& p, const Tensors& t, void* workspace);
}  // namespace fa::tc_backward::planted
namespace fa::tc_backward::no_wait {
// The second: the loop uses Q tile i without waiting for its copies.
void attention_backward(const AttentionProblem& p, const Tensors& t, void* workspace);
}  // namespace fa::tc_backward::no_wait
#if FA_CPU_BACKEND
namespace fa::tc_backward::no_wait_next {
// The third (CPU backend only): at d = 128 the one barrier a tile comes without the wait for
// tile i+1's copies.
void attention_backward(const AttentionProblem& p, const Tensors& t, void* workspace);
}  // namespace fa::tc_backward::no_wait_next
#endif

namespace {

using fa::test::require_finite;
using fa::test::require_passed;
using Backward = std::function<void(const fa::AttentionProblem&, const fa::tc_backward::Tensors&, void*)>;

const std::vector<fa::DType> kTypes = {fa::DType::F16, fa::DType::BF16};

using Run = fa::test::BackwardRun;

// One backward pass of `backward` on fresh inputs, checked (fa::test::run_backward_check).
// With `forward_on_device` O and lse come from stage 07's kernel, else from the float64
// reference. A non-zero `logit`: every logit moved to about that value.
Run run_and_check(const fa::AttentionProblem& p, uint64_t seed, float magnitude = 1.0f,
                  const Backward& backward = fa::tc_backward::attention_backward, bool forward_on_device = false,
                  double logit = 0.0) {
  const fa::test::Forward16 forward = [](const fa::AttentionProblem& fp, const void* q, const void* k, const void* v,
                                         void* o, float* lse) { fa::pipeline::attention(fp, q, k, v, o, lse); };
  return fa::test::run_backward_check(p, seed, backward, fa::tc_backward::workspace_bytes(p), magnitude,
                                      forward_on_device ? forward : fa::test::Forward16{}, logit);
}

fa::AttentionProblem problem(int64_t b, int64_t h, int64_t nq, int64_t nkv, int64_t d, bool causal, fa::DType t) {
  return fa::make_problem(b, h, nq, nkv, d, 0.0, causal, t);
}

}  // namespace

TEST_CASE("stage 11: ragged lengths and every head dim, fp16 and bf16", "[stage11]") {
  // On the CPU backend the two longest pairs run at d = 64 in fp16 only; every head dim and
  // type still meets several tiles in both directions at (100, 100). On a GPU everything runs.
  uint64_t seed = 1000;
  for (fa::DType t : kTypes) {
    for (int64_t d : fa::supported_head_dims()) {
      if (!fa::test::dtype_case_runs(t, d)) continue;  // under ASan, one type a head dim
      for (auto [nq, nkv] : fa::test::ragged_lengths()) {
        if (fa::is_cpu_backend() && nq * nkv > 100 * 1000 / 2 && (d != 64 || t != fa::DType::F16)) continue;
        const fa::AttentionProblem p = problem(1, 2, nq, nkv, d, false, t);
        require_passed(p, run_and_check(p, ++seed).check);
      }
    }
  }
}

TEST_CASE("stage 11: many heads and batches", "[stage11]") {
  for (fa::DType t : kTypes) {
    const fa::AttentionProblem p = problem(3, 5, 64, 100, 32, false, t);
    require_passed(p, run_and_check(p, 7).check);
  }
}

TEST_CASE("stage 11: causal mask, tiles above the diagonal skipped", "[stage11][causal]") {
  // Nq = Nkv; Nq < Nkv (the last keys are seen by no query: their dK and dV are zero, and
  // still written); Nq > Nkv (the last queries see every key); at d = 64 and 128.
  uint64_t seed = 1100;
  for (fa::DType t : kTypes) {
    for (int64_t d : {64, 128}) {
      if (!fa::test::dtype_case_runs(t, d)) continue;  // under ASan, one type a head dim
      for (auto [nq, nkv] : std::vector<std::pair<int64_t, int64_t>>{{257, 257}, {100, 257}, {257, 100}}) {
        const fa::AttentionProblem p = problem(2, 2, nq, nkv, d, true, t);
        const Run r = run_and_check(p, ++seed);
        require_passed(p, r.check);
        fa::test::require_unseen_keys_zero(p, r.got);
      }
    }
  }
}

TEST_CASE("stage 11: large-magnitude logits stay finite and accurate", "[stage11]") {
  // Inputs in [-8, 8] at d = 64: logits in the hundreds, P close to one-hot, products of
  // 16-bit operands still finite.
  for (fa::DType t : kTypes) {
    const fa::AttentionProblem p = problem(1, 2, 100, 257, 64, false, t);
    const Run r = run_and_check(p, 5, 8.0f);
    require_finite(r.got);
    require_passed(p, r.check);
  }
}

TEST_CASE("stage 11: rows whose logits are all far below zero, over ragged key tiles", "[stage11]") {
  // Every logit near −300, so lse ≈ −300: a key column past the end of a ragged tile, were it
  // scored (its zero-filled K gives S = 0), would give P = e^300 = inf. O and lse from the
  // reference, then from stage 07's kernel.
  uint64_t seed = 1200;
  for (fa::DType t : kTypes) {
    for (bool on_device : {false, true}) {
      for (bool causal : {false, true}) {
        for (int64_t d : {64, 128}) {
          const fa::AttentionProblem p = problem(1, 2, 70, causal ? 70 : 130, d, causal, t);
          const Run r = run_and_check(p, ++seed, 1.0f, fa::tc_backward::attention_backward, on_device, -300.0);
          require_finite(r.got);
          require_passed(p, r.check);
        }
      }
    }
  }
}

TEST_CASE("stage 11: after stage 07's forward kernel, as in training", "[stage11]") {
  uint64_t seed = 21;
  for (fa::DType t : kTypes) {
    for (bool causal : {false, true}) {
      const fa::AttentionProblem p = problem(2, 3, 200, 150, 64, causal, t);
      require_passed(p, run_and_check(p, ++seed, 1.0f, fa::tc_backward::attention_backward, true).check);
    }
  }
}

TEST_CASE("stage 11: the checks catch planted bugs", "[stage11][planted]") {
  const fa::AttentionProblem p = problem(1, 2, 100, 130, 64, false, fa::DType::F16);
  // dQ from P instead of dS: dK and dV are right, dQ is not.
  {
    const fa::GradientCheck c = run_and_check(p, 3, 1.0f, fa::tc_backward::planted::attention_backward).check;
    CHECK_FALSE(c.dq.passed());
    CHECK(c.dk.passed());
    CHECK(c.dv.passed());
  }
  // Q tiles used before their copies land. On the CPU backend the race detector reports the
  // copy's write and the ldmatrix's read with no wait between them; without it, a copy lands
  // only at its wait, so the gradients come from stale tiles. On a GPU the copies often win.
  if (fa::is_cpu_backend()) {
    if (fa::test::shared_race_rules_on()) {
      REQUIRE_THROWS_WITH(run_and_check(p, 3, 1.0f, fa::tc_backward::no_wait::attention_backward),
                          fa::test::HasSubstring("shared-memory race") && fa::test::HasSubstring("cp_async.cuh"));
    }
    fa::test::BlocksInFlight shake(1);  // the race detector off, one block at a time
    CHECK_FALSE(run_and_check(p, 3, 1.0f, fa::tc_backward::no_wait::attention_backward).check.passed());
  }
#if FA_CPU_BACKEND
  // At d = 128, tile i+1 used after the barrier but with no wait for its copies: 4 Q tiles.
  const fa::AttentionProblem p128 = problem(1, 2, 200, 130, 128, false, fa::DType::F16);
  if (fa::test::shared_race_rules_on()) {
    REQUIRE_THROWS_WITH(run_and_check(p128, 4, 1.0f, fa::tc_backward::no_wait_next::attention_backward),
                        fa::test::HasSubstring("shared-memory race") && fa::test::HasSubstring("cp_async.cuh"));
  }
  fa::test::BlocksInFlight shake(1);
  CHECK_FALSE(run_and_check(p128, 4, 1.0f, fa::tc_backward::no_wait_next::attention_backward).check.passed());
#endif
}

TEST_CASE("stage 11: dQ's atomics are needed, blocks in flight together", "[stage11]") {
  // Many K/V tiles a head, each a block adding to the same rows of dQ's accumulator. On the
  // CPU backend, with four blocks in flight taking turns at every atomic and store.
  const fa::AttentionProblem p = fa::is_cpu_backend() ? problem(1, 2, 96, 1024, 64, false, fa::DType::BF16)
                                                      : problem(1, 2, 256, 8192, 64, false, fa::DType::BF16);
  fa::test::BlocksInFlight shake(4);
  require_passed(p, run_and_check(p, 8).check);
}

// Each variant of tuning.h is another choice of LOG.md (fa::test::check_backward_variants).
TEST_CASE("stage 11: every variant matches the reference", "[stage11][variants]") {
  const std::vector<fa::Variant<fa::BackwardStageRun>> variants = fa::tc_backward::variants();
  CHECK(variants.size() == std::tuple_size_v<fa::tc_backward::Variants>);
  fa::test::check_backward_variants(variants, 40, run_and_check);
  REQUIRE_THROWS_WITH(fa::find_variant(variants, "nope", "11_backward_tensor_cores"),
                      fa::test::HasSubstring("tuned, warp16, no_split, dq_mt1, min3"));
  const fa::AttentionProblem p32 = problem(1, 1, 4, 4, 32, false, fa::DType::F16);
  REQUIRE_THROWS_WITH(fa::find_variant(variants, "warp16", "11_backward_tensor_cores").run(p32, {}, nullptr),
                      fa::test::HasSubstring("d = 64 and 128 only"));
}

// The layouts the Python module hands stage 11 (fa::test::check_strided_backward).
TEST_CASE("stage 11: Q, K, V, O and dO read where their strides say", "[stage11]") {
  fa::test::check_strided_backward(1200, run_and_check, fa::tc_backward::attention_backward_strided);
}

// Kernels 1 and 3 take 16 bytes at a time where O, dO and dQ allow it, else 4 bytes.
TEST_CASE("stage 11: O read and dQ written at addresses that are not 16-byte aligned", "[stage11]") {
  uint64_t seed = 1300;
  const fa::test::Backward16 misaligned = fa::test::misaligned_o_dq_backward(fa::tc_backward::attention_backward);
  for (int64_t d : {32, 64, 128}) {
    const fa::AttentionProblem p = problem(2, 3, 70, 130, d, d == 64, d == 128 ? fa::DType::BF16 : fa::DType::F16);
    require_passed(p, run_and_check(p, ++seed, 1.0f, misaligned).check);
  }
}

TEST_CASE("stage 11: bad input is refused with a message", "[stage11]") {
  const fa::AttentionProblem p32 = problem(1, 1, 4, 4, 64, false, fa::DType::F32);
  REQUIRE_THROWS_WITH(fa::tc_backward::attention_backward(p32, {}, nullptr),
                      fa::test::HasSubstring("runs in fp16 or bf16 (tensor cores), not fp32"));
  fa::AttentionProblem p48 = problem(1, 1, 4, 4, 64, false, fa::DType::F16);
  p48.dim = 48;  // past make_problem's own check: the stage must refuse it too
  REQUIRE_THROWS_WITH(fa::tc_backward::attention_backward(p48, {}, nullptr),
                      fa::test::HasSubstring("head dim 48 is not supported"));
  // 2^20 heads of 2^18 keys: 2^32 K/V blocks, more than one grid holds (refused before any
  // memory is touched).
  const fa::AttentionProblem huge = problem(1024, 1024, 1, int64_t{1} << 18, 64, false, fa::DType::F16);
  REQUIRE_THROWS_WITH(fa::tc_backward::attention_backward(huge, {}, nullptr),
                      fa::test::HasSubstring("the grid would exceed 2^31 - 1 blocks"));
  // Strides the 16-byte copies cannot follow, or rows further apart than its 32-bit offsets reach.
  const fa::AttentionProblem p = problem(2, 2, 8, 8, 64, false, fa::DType::BF16);
  fa::Layout odd = fa::Layout::contiguous(p);
  odd.d_o.head = 12;
  REQUIRE_THROWS_WITH(fa::tc_backward::attention_backward_strided(p, {}, nullptr, odd),
                      fa::test::HasSubstring("d_o's strides (1024, 12, 64 elements) must be whole multiples of 16"));
  fa::Layout far = fa::Layout::contiguous(p);
  far.k.row = int64_t{1} << 24;
  REQUIRE_THROWS_WITH(fa::tc_backward::attention_backward_strided(p, {}, nullptr, far),
                      fa::test::HasSubstring("a row stride of 16777216 elements is beyond this kernel's 2^24"));
}
