// Stage 07 against the float64 reference in fp16 and bf16 (the standard battery, the
// log-sum-exp included), every variant of its typed configuration (tuning.h), and a copy of the kernel with its cp.async wait planted out,
// which the same checks must reject on the CPU backend (built by
// stages/07_memory_pipeline/CMakeLists.txt).
#include <vector>

#include "common/dtype.h"
#include "common/problem.h"
#include "stages/07_memory_pipeline/pipelined_attention.h"
#include "stages/07_memory_pipeline/tuning.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

namespace fa::pipeline::planted {
// The planted copy: no cp_async_wait before a tile is used (but for the last tile).
void attention(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse);
}  // namespace fa::pipeline::planted

namespace {

void run_stage07(const fa::AttentionProblem& p, const fa::DeviceTensors& t) {
  fa::pipeline::attention(p, t.q, t.k, t.v, t.o, t.lse);
}

}  // namespace

TEST_CASE("stage 07 matches the reference in fp16, log-sum-exp included", "[stage07][fp16]") {
  fa::test::check_attention_stage(run_stage07, /*with_lse=*/true, /*causal=*/true, fa::DType::F16);
}

TEST_CASE("stage 07 matches the reference in bf16, log-sum-exp included", "[stage07][bf16]") {
  fa::test::check_attention_stage(run_stage07, /*with_lse=*/true, /*causal=*/true, fa::DType::BF16);
}

// Lazy rescaling (tests/stage_check.h): Nkv = 300 spans five K/V tiles at d = 128.
TEST_CASE("stage 07 at d = 128 with large logits, lazy rescaling at work", "[stage07][lazy]") {
  fa::test::check_lazy_rescaling(run_stage07, 300);
}

// Each variant undoes one step of LOG.md; each must still compute attention.
TEST_CASE("every variant of stage 07 matches the reference", "[stage07][variants]") {
  const std::vector<fa::StageVariant> variants = fa::pipeline::variants();
  CHECK(variants.size() == std::tuple_size_v<fa::pipeline::Variants>);
  fa::test::check_variants(variants, /*with_lse=*/true);
}

TEST_CASE("stage 07's variants refuse what they are not built for, and --variant an unknown name",
          "[stage07][variants]") {
  const fa::StageDemo stage = fa::pipeline::describe();
  const fa::StageDemo v = fa::with_variant(stage, "no_swizzle");
  CHECK(v.id == "07_memory_pipeline:no_swizzle");
  const fa::AttentionProblem p = fa::make_problem(1, 1, 8, 8, 32, 0.0, false, fa::DType::F16);
  REQUIRE_THROWS_WITH(v.run(p, fa::DeviceTensors{nullptr, nullptr, nullptr, nullptr}, nullptr),
                      fa::test::HasSubstring("fp16 at d = 64 and 128 only"));
  REQUIRE_THROWS_AS(fa::with_variant(stage, "nope"), fa::UsageError);
  REQUIRE_THROWS_WITH(fa::with_variant(stage, "nope"), fa::test::HasSubstring("no_prefetch, no_swizzle"));
}

TEST_CASE("stage 07 refuses fp32 with a clear message", "[stage07]") {
  const fa::AttentionProblem p = fa::make_problem(1, 1, 8, 8, 64);
  REQUIRE_THROWS_WITH(run_stage07(p, fa::DeviceTensors{nullptr, nullptr, nullptr, nullptr}),
                      fa::test::HasSubstring("fp16 or bf16"));
}

#if FA_CPU_BACKEND
// On a GPU the planted kernel may or may not be caught: whether a copy lands before the
// tile is read depends on timing. On the CPU backend cp.async data lands only at its
// wait, so a missing wait is wrong on every run.
TEST_CASE("a missing cp.async wait gives wrong results on the CPU backend", "[stage07][planted]") {
  const fa::test::StageFn planted = [](const fa::AttentionProblem& p, const fa::DeviceTensors& t) {
    fa::pipeline::planted::attention(p, t.q, t.k, t.v, t.o, t.lse);
  };
  for (fa::DType dtype : {fa::DType::F16, fa::DType::BF16}) {
    for (bool causal : {false, true}) {
      // Every Q tile spans several K/V tiles (Bc = 128 at d = 64), and under the causal
      // mask every one but the first: only the last tile of each is waited for.
      const fa::AttentionProblem p = fa::make_problem(1, 2, 300, 400, 64, 0.0, causal, dtype);
      const fa::test::StageResult bad = fa::test::run_and_check(p, planted, 3, 1.0f, true);
      INFO(fa::describe(p) << "\n" << fa::describe(bad.check.o, fa::output_namer(p, bad.check.rows)));
      REQUIRE_FALSE(bad.check.passed());
      fa::test::require_passed(p, fa::test::run_and_check(p, run_stage07, 3, 1.0f, true));
    }
  }
}
#endif
