// Grades stage 07's exercises: the learner's copy of pipelined_attention.cu through the
// battery every attention stage passes (tests/stage_check.h: ragged lengths, every head dim,
// many heads, causal, logits in the hundreds; outputs poisoned), in fp16 and bf16, O and each
// row's log-sum-exp against the float64 reference. `cmake --workflow --preset exercises`
// runs them.
#include "common/dtype.h"
#include "stages/07_memory_pipeline/pipelined_attention.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

namespace {

void attention_battery() {
  const fa::test::StageFn run = [](const fa::AttentionProblem& p, const fa::DeviceTensors& t) {
    fa::pipeline::attention(p, t.q, t.k, t.v, t.o, t.lse);
  };
  fa::test::check_attention_stage(run, /*with_lse=*/true, /*causal=*/true, fa::DType::F16);
  fa::test::check_attention_stage(run, /*with_lse=*/true, /*causal=*/true, fa::DType::BF16);
}

}  // namespace

TEST_CASE("07-prefetch: tile j+1 copied while tile j is computed", "[07-prefetch]") { attention_battery(); }

TEST_CASE("07-bug: find the bug", "[07-bug]") { attention_battery(); }
