/**
 * \file timer.h
 * \brief Timing device work with CUDA events: warm-up, repeats, median.
 */
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
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

/// Called after each run with (runs done, runs in all), warm-up included.
using Progress = std::function<void(int, int)>;

/**
 * Runs `work` `warmup` times untimed, then `repeats` times, each between two events.
 * `work` must only enqueue device work on the default stream. `progress`, if given, is
 * called after every run (outside the timed regions).
 */
template <typename Work>
Timing time_device(Work&& work, int warmup, int repeats, const Progress& progress = nullptr) {
  for (int i = 0; i < warmup; ++i) {
    work();
    if (progress) {
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      progress(i + 1, warmup + repeats);
    }
  }
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
    if (progress) progress(warmup + i + 1, warmup + repeats);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return t;
}

}  // namespace fa
