// Grades stage 05's exercises: the learner's copy of flash2_attention.cu through the battery
// every attention stage passes (tests/stage_check.h: ragged lengths, every head dim, causal,
// logits in the hundreds; outputs poisoned), O and log-sum-exp checked; block-sparse attention
// against the reference of the masked problem (random block masks of several densities).
// `cmake --workflow --preset exercises` runs them.
#include "stages/05_flash2/flash2_attention.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

namespace {

void attention_battery() {
  const fa::test::StageFn run = [](const fa::AttentionProblem& p, const fa::DeviceTensors& t) {
    const auto f = t.f32();
    fa::flash2::attention(p, f.q, f.k, f.v, f.o, f.lse);
  };
  fa::test::check_attention_stage(run, /*with_lse=*/true, /*causal=*/true);
}

}  // namespace

TEST_CASE("05-rescale-o: the accumulated O rescaled by alpha at every tile", "[05-rescale-o]") { attention_battery(); }

TEST_CASE("05-normalise: O divided by l once, and the log-sum-exp", "[05-normalise]") { attention_battery(); }

TEST_CASE("05-bug: find the bug", "[05-bug]") { attention_battery(); }

TEST_CASE("05-block-sparse: K/V tiles the block mask drops are skipped", "[05-block-sparse]") {
  const fa::test::MaskedStageFn run = [](const fa::AttentionProblem& p, const fa::DeviceTensors& t,
                                         const uint8_t* mask) {
    const auto f = t.f32();
    fa::flash2::attention(p, f.q, f.k, f.v, f.o, f.lse, mask);
  };
  fa::test::check_block_sparse_stage(run, fa::flash2::Br, fa::flash2::Bc, fa::DType::F32, fa::supported_head_dims());
}
