// Grades stage 12's exercises: the learner's copy of masked_attention.cu, its O and
// log-sum-exp of every row against the float64 reference of the masked problem, in fp16 and
// bf16 at d = 64 and 128, under the causal mask, sliding windows (causal and two-sided),
// packed documents, a block mask, and a window that leaves rows and whole Q tiles with no key
// at all (O = 0, lse −inf); lengths that are not multiples of a tile, O poisoned before each
// run. On the CPU backend, through its emulation of TMA, mbarriers and wgmma.
// `cmake --workflow --preset exercises` runs them.
#include <cstdint>
#include <vector>

#include "common/block_mask.h"
#include "common/dtype.h"
#include "common/problem.h"
#include "stages/12_masks/masked_attention.h"
#include "tests/catch.h"
#include "tests/mask_check.h"

namespace {

using fa::test::check_mask;
using fa::test::documents;
using fa::test::window;

void masks_battery() {
  uint64_t seed = 1200;
  for (fa::DType t : {fa::DType::F16, fa::DType::BF16}) {
    for (int64_t d : {64, 128}) {
      // The causal mask alone: the diagonal blocks are partial.
      check_mask(fa::make_problem(1, 2, 200, 200, d, 0.0, true, t), fa::Mask{}, ++seed);
      // Windows narrower than a tile: at a window's far end a block's lower rows see none of
      // its keys, so their max is still −inf after it.
      const fa::AttentionProblem causal = fa::make_problem(1, 2, 300, 300, d, 0.0, true, t);
      check_mask(causal, window(100, -1), ++seed);
      const fa::AttentionProblem both = fa::make_problem(1, 2, 300, 260, d, 0.0, false, t);
      check_mask(both, window(60, 30), ++seed);
      // Packed documents, one of them a single row.
      check_mask(causal, documents({90, 1, 150, 59}), ++seed);
      // A block mask: dropped tiles are skipped, kept ones are full.
      check_mask(both, fa::block_sparse(fa::random_block_mask(both, 128, 128, 0.6, ++seed)), seed);
      // Nkv = 150, a window of 10 either side: rows past 160 see no key, Q tiles 2 and 3 nothing.
      check_mask(fa::make_problem(1, 2, 400, 150, d, 0.0, false, t), window(10, 10), ++seed);
    }
  }
}

}  // namespace

TEST_CASE("12-partial: a partial block's hidden scores", "[12-partial]") { masks_battery(); }

TEST_CASE("12-no-key: a row that has seen no key yet", "[12-no-key]") { masks_battery(); }

TEST_CASE("12-bug: find the bug", "[12-bug]") { masks_battery(); }
