// Grades stage 08's exercises: the learner's copy of hopper_attention.cu through the battery
// every attention stage passes (tests/stage_check.h: ragged lengths, many heads, causal,
// logits in the hundreds; outputs poisoned) at d = 64 and 128, in fp16 and bf16, O and each
// row's log-sum-exp against the float64 reference; and a problem whose K/V tiles wrap the
// ring of slots several times, for a block that takes several Q tiles. On the CPU backend
// (its one "multiprocessor" gives every Q tile to one block) through its emulation of TMA,
// mbarriers and wgmma, which reports a deadlock, and a copy into a slot the tensor cores
// still read, instead of hanging or racing. `cmake --workflow --preset exercises` runs them.
#include "common/dtype.h"
#include "common/problem.h"
#include "stages/08_hopper/hopper_attention.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

namespace {

void attention_battery() {
  const fa::test::StageFn run = [](const fa::AttentionProblem& p, const fa::DeviceTensors& t) {
    fa::hopper::attention(p, t.q, t.k, t.v, t.o, t.lse);
  };
  const std::vector<int64_t> dims = {64, 128};
  fa::test::check_attention_stage(run, /*with_lse=*/true, /*causal=*/true, fa::DType::F16, dims);
  fa::test::check_attention_stage(run, /*with_lse=*/true, /*causal=*/true, fa::DType::BF16, dims);
  SECTION("the ring wraps around, over several Q tiles") {
    uint64_t seed = 40;
    for (int64_t d : dims) {
      for (bool causal : {false, true}) {
        // 2 heads × 3 Q tiles, 5 K/V tiles each: slots reused across tiles and rounds.
        const fa::AttentionProblem p = fa::make_problem(1, 2, 300, 600, d, 0.0, causal, fa::DType::F16);
        fa::test::require_passed(p, fa::test::run_and_check(p, run, ++seed, 1.0f, true));
      }
    }
  }
}

}  // namespace

TEST_CASE("08-parity: the producer waits for an empty slot", "[08-parity]") { attention_battery(); }

TEST_CASE("08-desc: the wgmma descriptor of a slice of V", "[08-desc]") { attention_battery(); }

TEST_CASE("08-bug: find the bug", "[08-bug]") { attention_battery(); }
