// Stage 03 against the float64 reference: the standard battery, with each row's
// log-sum-exp checked too.
#include "stages/03_streaming/streaming_attention.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

TEST_CASE("stage 03 matches the reference, log-sum-exp included", "[stage03]") {
  const fa::test::StageFn run = [](const fa::AttentionProblem& p, const fa::DeviceTensors& t) {
    const auto f = t.f32();
    fa::streaming::attention(p, f.q, f.k, f.v, f.o, f.lse);
  };
  fa::test::check_attention_stage(run, /*with_lse=*/true, /*causal=*/true);
}
