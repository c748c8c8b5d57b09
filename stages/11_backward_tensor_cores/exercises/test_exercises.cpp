// Grades stage 11's exercises: the learner's copy of tensor_core_backward.cu, its dQ, dK and dV
// against the float64 reference gradients (every head, whole), from the reference forward
// pass's O and log-sum-exp, in fp16 and bf16 at d = 64 and 128 (where pairs of warps
// split d), lengths that are not multiples of a tile (1 × 1 included), with and without the
// causal mask, the gradients and workspace poisoned before each run. On the CPU backend.
// `cmake --workflow --preset exercises` runs them.
#include <cstdint>
#include <tuple>
#include <vector>

#include "common/dtype.h"
#include "common/problem.h"
#include "stages/11_backward_tensor_cores/tensor_core_backward.h"
#include "tests/backward_check.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

namespace {

void gradients_battery() {
  uint64_t seed = 1100;
  for (fa::DType t : {fa::DType::F16, fa::DType::BF16}) {
    for (int64_t d : {64, 128}) {
      for (auto [nq, nkv, causal] : std::vector<std::tuple<int64_t, int64_t, bool>>{
               {1, 1, false}, {70, 130, false}, {130, 70, true}, {100, 300, true}}) {
        const fa::AttentionProblem p = fa::make_problem(1, 2, nq, nkv, d, 0.0, causal, t);
        const fa::test::BackwardRun r = fa::test::run_backward_check(p, ++seed, fa::tc_backward::attention_backward,
                                                                     fa::tc_backward::workspace_bytes(p));
        fa::test::require_passed(p, r.check);
      }
    }
  }
}

}  // namespace

TEST_CASE("11-p-ds: P and dS in the C fragments", "[11-p-ds]") { gradients_battery(); }

TEST_CASE("11-dq-add: dQ's atomics", "[11-dq-add]") { gradients_battery(); }

TEST_CASE("11-bug: find the bug", "[11-bug]") { gradients_battery(); }
