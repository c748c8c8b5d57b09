/**
 * \file timer.h
 * \brief Timing device work with CUDA events: warm-up, repeats, median.
 */
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "common/cuda_check.h"

namespace fa {

/// Per-run times of a timed region, in milliseconds.
struct Timing {
  std::vector<float> ms;  ///< one entry per timed repeat, in run order
  /// The median of the repeats (the figure reported everywhere).
  double median_ms() const {
    if (ms.empty()) return 0.0;
    std::vector<float> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  }
};

/**
 * Runs `work` `warmup` times untimed, then `repeats` times, each between two events.
 * `work` must only enqueue device work on the default stream.
 */
template <typename Work>
Timing time_device(Work&& work, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) work();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  FA_CUDA_CHECK(cudaEventCreate(&start));
  FA_CUDA_CHECK(cudaEventCreate(&stop));
  Timing t;
  for (int i = 0; i < repeats; ++i) {
    FA_CUDA_CHECK(cudaEventRecord(start));
    work();
    FA_CUDA_CHECK(cudaEventRecord(stop));
    FA_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    FA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    t.ms.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return t;
}

}  // namespace fa
