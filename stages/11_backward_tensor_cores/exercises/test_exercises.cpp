// Grades stage 11's exercises: the learner's copy of tensor_core_backward.cu, its dQ, dK and dV
// against the float64 reference gradients (every head, whole), from the reference forward
// pass's O and log-sum-exp, in fp16 and bf16 at d = 64 and 128 (where pairs of warps
// split d), lengths that are not multiples of a tile (1 × 1 included), with and without the
// causal mask, the gradients and workspace poisoned before each run. On the CPU backend.
// `cmake --workflow --preset exercises` runs them.
#include "stages/11_backward_tensor_cores/tensor_core_backward.h"
#include "tests/backward_check.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

namespace {

void gradients_battery() {
  fa::test::require_gradients_battery(fa::tc_backward::attention_backward, fa::tc_backward::workspace_bytes, 1100);
}

}  // namespace

TEST_CASE("11-p-ds: P and dS in the C fragments", "[11-p-ds]") { gradients_battery(); }

TEST_CASE("11-dq-add: dQ's atomics", "[11-dq-add]") { gradients_battery(); }

TEST_CASE("11-bug: find the bug", "[11-bug]") { gradients_battery(); }
