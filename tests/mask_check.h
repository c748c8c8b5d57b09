// Shared by stage 12's tests and its exercises' tests: the stage as a test's StageFn under a
// mask, the masks of a window and of packed documents, and the check of one masked problem
// against the float64 reference of the masked problem, every row and its log-sum-exp.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "common/block_mask.h"
#include "common/problem.h"
#include "common/random.h"
#include "stages/12_masks/masked_attention.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

namespace fa::test {

/// Stage 12 under `mask`, its plan made for each call.
inline StageFn masked_stage(const Mask& mask) {
  return [mask](const AttentionProblem& p, const DeviceTensors& t) {
    masks::attention(p, t.q, t.k, t.v, t.o, t.lse, mask);
  };
}

/// Runs stage 12 under `mask` on fresh inputs (seed) and REQUIREs that it matches the
/// reference of the masked problem, every row and its log-sum-exp.
inline void check_mask(const AttentionProblem& p, const Mask& mask, uint64_t seed, float magnitude = 1.0f) {
  INFO("mask: " << mask.describe());
  const AttentionInputs in = random_inputs(p, seed, magnitude);
  require_passed(p, run_and_check_inputs(p, in, masked_stage(mask), true, &mask));
}

/// A sliding window: keys at most `left` before the row and `right` after it (−1: any).
inline Mask window(int64_t left, int64_t right) {
  Mask m;
  m.window_left = left;
  m.window_right = right;
  return m;
}

/// Packed documents of these lengths.
inline Mask documents(std::vector<int64_t> lengths) {
  Mask m;
  m.doc_lengths = std::move(lengths);
  return m;
}

}  // namespace fa::test
