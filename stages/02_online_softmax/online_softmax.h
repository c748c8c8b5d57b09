/**
 * \file online_softmax.h
 * \brief Stage 02's host interface and the online-softmax recurrence itself, shared by
 *        the kernel, the demo's --trace and the tests.
 */
#pragma once

#include <cmath>
#include <cstdint>

#include "common/host_device.h"

namespace fa {
struct StageDemo;
}  // namespace fa

namespace fa::online {

/**
 * Stage 01's three-kernel attention with this stage's softmax in the middle, as the
 * demo driver and the benchmark see it. The N×N matrix still goes to HBM: a better
 * softmax alone does not remove it (stage 03 does).
 */
StageDemo describe();

/// What the online softmax keeps per row: the running max m and running sum l, with
/// l = Σ exp(x − m) over the values seen so far.
struct Stats {
  float m;  ///< running max (−inf before any value)
  float l;  ///< running sum of exp(x − m)
};

/// The empty row: m = −inf, l = 0.
FA_HOST_DEVICE Stats empty_stats() { return Stats{-INFINITY, 0.0f}; }

/**
 * Adds one value x. The recurrence is
 *
 *     m_new = max(m, x),   l = l · exp(m − m_new) + exp(x − m_new)
 *
 * written so that each value costs one exp(): when x is not a new maximum the
 * correction exp(m − m_new) is exp(0) = 1 and only exp(x − m) remains; when it is, the
 * new term is exp(0) = 1 and only the correction remains. A −inf value adds nothing.
 */
FA_HOST_DEVICE void update(Stats& s, float x) {
  if (x > s.m) {
    s.l = s.l * expf(s.m - x) + 1.0f;  // new maximum: rescale what was summed so far
    s.m = x;
  } else if (x > -INFINITY) {
    s.l += expf(x - s.m);
  }
}

/**
 * Combines the stats of two disjoint parts of a row (two threads, two tiles):
 * m = max(a.m, b.m), l = a.l · exp(a.m − m) + b.l · exp(b.m − m). The rule is the same
 * correction as in update(), applied to a whole partial sum at once.
 */
FA_HOST_DEVICE Stats merge(Stats a, Stats b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return empty_stats();  // both empty: avoid exp(−inf − (−inf))
  return Stats{m, a.l * expf(a.m - m) + b.l * expf(b.m - m)};
}

/**
 * Row softmax in two sweeps over each row: one to find m and l together, one to write
 * exp(x − m) / l. Also writes each row's m and l (may be null). `in` and `out` may be
 * the same buffer. A row that is all −inf gets m = −inf, l = 0 and probabilities 0.
 * All pointers are device pointers.
 */
void softmax_rows(const float* in, float* out, float* m, float* l, int64_t rows, int64_t cols);

/// The same without the m and l outputs, in the form stage 01's attention() takes.
void softmax_rows_only(const float* in, float* out, int64_t rows, int64_t cols);

}  // namespace fa::online
