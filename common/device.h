/**
 * \file device.h
 * \brief Which device runs the kernels, and whether a problem fits in its memory.
 */
#pragma once

#include <cstddef>
#include <string>

namespace fa {

/// Facts about the device in use.
struct DeviceInfo {
  std::string name;           ///< e.g. "NVIDIA H100 80GB HBM3"
  std::string backend;        ///< "cuda" for a GPU, "cpu" for the CPU backend
  int cc_major = 0;           ///< compute capability
  int cc_minor = 0;           ///< compute capability
  int sm_count = 0;           ///< multiprocessors
  std::size_t free_bytes = 0;   ///< free device memory when queried
  std::size_t total_bytes = 0;  ///< total device memory
};

/**
 * A deliberately low forward-pass rate (FLOP/s, counted as 4·B·H·Nq·Nkv·d) for `device`,
 * to warn before a run that would take long: 1 TFLOP/s per 132 multiprocessors on a GPU
 * (the slowest stage measured 5 TFLOP/s on an H100), 10 MFLOP/s on the CPU backend (its
 * slowest stage measured about 12 MFLOP/s). A run is unlikely to take longer than the
 * estimate made from it.
 */
double conservative_flops_per_second(const DeviceInfo& device);

/// A duration for people: "42 s", "3.5 min", "2.1 h", "4.0 days".
std::string format_duration(double seconds);

/// True when this program was built for the CPU backend.
bool is_cpu_backend();

/// The current device. \throws NoGpuError when there is none (GPU build only).
DeviceInfo require_device();

/// Whether `bytes` fit in the device's free memory, keeping a margin for the context.
bool fits(const DeviceInfo& device, std::size_t bytes);

/**
 * Throws ResourceError, before anything is allocated, when `bytes` do not fit in the
 * device's free memory. `what` explains the bytes (e.g. "Q, K, V, O 1.00 GiB + S 8.00 GiB").
 */
void require_fits(const DeviceInfo& device, std::size_t bytes, const std::string& what);

}  // namespace fa
