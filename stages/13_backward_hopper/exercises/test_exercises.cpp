// Grades stage 13's exercises: the learner's copy of hopper_backward.cu, its dQ, dK and dV
// against the float64 reference gradients (every head, whole), from the reference forward
// pass's O and log-sum-exp, in fp16 and bf16 at d = 64 and 128, lengths that are not multiples
// of a tile (1 × 1 included), with and without the causal mask, the gradients and workspace
// poisoned before each run; and the deterministic mode's dQ with atomics (d = 64), the same
// bits under three shuffled orders of four blocks in flight. On the CPU backend, through its
// emulation of TMA, mbarriers, wgmma, named barriers and flags. `cmake --workflow --preset
// exercises` runs them.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/problem.h"
#include "stages/13_backward_hopper/hopper_backward.h"
#include "tests/backward_check.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

namespace {

fa::test::BackwardRun run(const fa::AttentionProblem& p, uint64_t seed, const fa::test::Backward16& backward) {
  return fa::test::run_backward_check(p, seed, backward, fa::hopper_backward::workspace_bytes(p));
}

void gradients_battery() {
  fa::test::require_gradients_battery(fa::hopper_backward::attention_backward, fa::hopper_backward::workspace_bytes,
                                      1300);
}

// The first index at which two runs' values differ (bits), or -1.
int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  }
  return -1;
}

// 13-turn's handover is in the atomics path (d = 64), which the deterministic mode with atomics
// runs (the finished deterministic mode adds dQ by bulk reductions).
void deterministic_battery() {
  const fa::test::Backward16 deterministic = [](const fa::AttentionProblem& p, const fa::tc_backward::Tensors& t,
                                                void* ws) {
    fa::hopper_backward::attention_backward_deterministic_atomics(p, t, ws, fa::Layout::contiguous(p));
  };
  const fa::AttentionProblem p = fa::make_problem(1, 2, 130, 700, 64, 0.0, false, fa::DType::F16);
  INFO(fa::describe(p));
  std::vector<float> first;
  for (unsigned order : {1u, 2u, 3u}) {
    fa::test::BlocksInFlight shake(4, order);
    const fa::test::BackwardRun r = run(p, 7, deterministic);
    fa::test::require_passed(p, r.check);
    if (order == 1) {
      first = r.got.dq;
      continue;
    }
    const int64_t at = first_difference(first, r.got.dq);
    INFO("blocks in another order (shuffle seed " << order << "): dQ element " << at << " is " << r.got.dq[at < 0 ? 0 : at]
                                                   << ", was " << first[at < 0 ? 0 : at]);
    REQUIRE(at == -1);
  }
}

}  // namespace

TEST_CASE("13-ds-store: dS into its swizzled tile", "[13-ds-store]") { gradients_battery(); }

TEST_CASE("13-turn: the deterministic mode's handover", "[13-turn]") { deterministic_battery(); }

TEST_CASE("13-bug: find the bug", "[13-bug]") { gradients_battery(); }
