// Stage 06 against the float64 reference in fp16 and bf16 (the standard battery, the
// log-sum-exp included), and a copy of the kernel with two lanes' fragment coordinates
// swapped, which the same checks must reject (built by stages/06_tensor_cores/CMakeLists.txt).
#include <cmath>
#include <vector>

#include "common/dtype.h"
#include "common/problem.h"
#include "stages/06_tensor_cores/tensor_core_attention.h"
#include "stages/06_tensor_cores/tuning.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

namespace fa::tensor_core::planted {
// The planted copy: lanes 0 and 1 swap their column coordinate t.
void attention(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse);
}  // namespace fa::tensor_core::planted

namespace {

void run_stage06(const fa::AttentionProblem& p, const fa::DeviceTensors& t) {
  fa::tensor_core::attention(p, t.q, t.k, t.v, t.o, t.lse);
}

}  // namespace

TEST_CASE("stage 06 matches the reference in fp16, log-sum-exp included", "[stage06][fp16]") {
  fa::test::check_attention_stage(run_stage06, /*with_lse=*/true, /*causal=*/true, fa::DType::F16);
}

TEST_CASE("stage 06 matches the reference in bf16, log-sum-exp included", "[stage06][bf16]") {
  fa::test::check_attention_stage(run_stage06, /*with_lse=*/true, /*causal=*/true, fa::DType::BF16);
}

// Each variant is the kernel with other tiles or launch bound; each must still compute attention.
TEST_CASE("every variant of stage 06 matches the reference", "[stage06][variants]") {
  const std::vector<fa::StageVariant> variants = fa::tensor_core::variants();
  CHECK(variants.size() == std::tuple_size_v<fa::tensor_core::Variants>);
  fa::test::check_variants(variants, /*with_lse=*/true);
}

TEST_CASE("stage 06 refuses fp32 with a clear message", "[stage06]") {
  const fa::AttentionProblem p = fa::make_problem(1, 1, 8, 8, 64);
  REQUIRE_THROWS_WITH(run_stage06(p, fa::DeviceTensors{nullptr, nullptr, nullptr, nullptr}),
                      fa::test::HasSubstring("fp16 or bf16"));
  // The variants are built for what the tuning runs measured: fp16 at d = 64 and 128.
  const std::vector<fa::StageVariant> variants = fa::tensor_core::variants();
  const fa::StageVariant& v = fa::find_variant(variants, "min2", "06_tensor_cores");
  for (const fa::AttentionProblem& q : {fa::make_problem(1, 1, 8, 8, 32, 0.0, false, fa::DType::F16),
                                        fa::make_problem(1, 1, 8, 8, 64, 0.0, false, fa::DType::BF16)}) {
    REQUIRE_THROWS_WITH(v.run(q, fa::DeviceTensors{nullptr, nullptr, nullptr, nullptr}, nullptr),
                        fa::test::HasSubstring("runs fp16 at d = 64 and 128 only"));
  }
}

TEST_CASE("the checks catch a kernel with two lanes of the fragment mapping swapped", "[stage06][planted]") {
  const fa::test::StageFn planted = [](const fa::AttentionProblem& p, const fa::DeviceTensors& t) {
    fa::tensor_core::planted::attention(p, t.q, t.k, t.v, t.o, t.lse);
  };
  for (fa::DType dtype : {fa::DType::F16, fa::DType::BF16}) {
    for (bool causal : {false, true}) {
      const fa::AttentionProblem p = fa::make_problem(1, 2, 100, 70, 64, 0.0, causal, dtype);
      const fa::test::StageResult bad = fa::test::run_and_check(p, planted, 3, 1.0f, true);
      INFO(fa::describe(p) << "\n" << fa::describe(bad.check.o, fa::output_namer(p, bad.check.rows)));
      REQUIRE_FALSE(bad.check.passed());
      // And the real kernel passes on the very same inputs.
      fa::test::require_passed(p, fa::test::run_and_check(p, run_stage06, 3, 1.0f, true));
    }
  }
}
