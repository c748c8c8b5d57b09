// Grades stage 06's exercises: the learner's copy of tensor_core_attention.cu through the
// battery every attention stage passes (tests/stage_check.h: ragged lengths, every head dim,
// many heads, causal, logits in the hundreds; outputs poisoned), in fp16 and bf16, O and each
// row's log-sum-exp against the float64 reference. `cmake --workflow --preset exercises`
// runs them.
#include "common/dtype.h"
#include "stages/06_tensor_cores/tensor_core_attention.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

namespace {

void attention_battery() {
  const fa::test::StageFn run = [](const fa::AttentionProblem& p, const fa::DeviceTensors& t) {
    fa::tensor_core::attention(p, t.q, t.k, t.v, t.o, t.lse);
  };
  fa::test::check_attention_stage(run, /*with_lse=*/true, /*causal=*/true, fa::DType::F16);
  fa::test::check_attention_stage(run, /*with_lse=*/true, /*causal=*/true, fa::DType::BF16);
}

}  // namespace

TEST_CASE("06-ldmatrix-rows: each lane's row address for ldmatrix", "[06-ldmatrix-rows]") { attention_battery(); }

TEST_CASE("06-row-max: the mask and the row max over a quad", "[06-row-max]") { attention_battery(); }

TEST_CASE("06-bug: find the bug", "[06-bug]") { attention_battery(); }
