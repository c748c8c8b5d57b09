// Shared by every stage's tests: run a stage on fresh seeded inputs with a poisoned
// output, and compare every row with the float64 reference.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/demo.h"
#include "common/device_buffer.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/verify.h"
#include "tests/catch.h"

namespace fa::test {

/// Enqueues one forward pass of the stage under test.
using StageFn = std::function<void(const AttentionProblem&, const DeviceTensors&)>;

/// What one run produced, and how it compared.
struct StageResult {
  std::vector<float> o;  ///< the full output
  AttentionCheck check;  ///< against the reference, every row
};

/// Runs `stage` once on random inputs (seed, magnitude) and checks every row.
inline StageResult run_and_check(const AttentionProblem& p, const StageFn& stage, uint64_t seed,
                                 float magnitude = 1.0f) {
  const AttentionInputs in = random_inputs(p, seed, magnitude);
  DeviceBuffer<float> q(in.q), k(in.k), v(in.v), o(static_cast<size_t>(p.q_elems()));
  o.fill_bytes(kPoisonByte);  // an element the stage never writes stays NaN and fails
  stage(p, DeviceTensors{q.data(), k.data(), v.data(), o.data()});
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  StageResult r;
  r.o = o.download();
  r.check = check_attention(p, in, r.o, all_rows(p));
  return r;
}

/// REQUIREs that the check passed, printing the figures and first mismatches if not.
inline void require_passed(const AttentionProblem& p, const StageResult& r) {
  INFO(describe(p));
  INFO(describe(r.check.o, output_namer(p, r.check.rows)));
  REQUIRE(r.check.passed());
}

}  // namespace fa::test
