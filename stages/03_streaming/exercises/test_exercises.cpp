// Grades stage 03's exercises: the learner's copy of streaming_attention.cu through the
// battery every attention stage passes (tests/stage_check.h: ragged lengths, every head
// dim, causal, logits in the hundreds; outputs poisoned), O and log-sum-exp checked.
// `cmake --workflow --preset exercises` runs them.
#include "stages/03_streaming/streaming_attention.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

namespace {

void attention_battery() {
  const fa::test::StageFn run = [](const fa::AttentionProblem& p, const fa::DeviceTensors& t) {
    const auto f = t.f32();
    fa::streaming::attention(p, f.q, f.k, f.v, f.o, f.lse);
  };
  fa::test::check_attention_stage(run, /*with_lse=*/true, /*causal=*/true);
}

}  // namespace

TEST_CASE("03-rescale: each key folded into m, l and the accumulator", "[03-rescale]") { attention_battery(); }

TEST_CASE("03-finalise: O divided by l, and the log-sum-exp", "[03-finalise]") { attention_battery(); }

TEST_CASE("03-bug: find the bug", "[03-bug]") { attention_battery(); }
