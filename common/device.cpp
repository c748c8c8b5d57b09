#include "common/device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>

#include "common/cuda_check.h"
#include "common/errors.h"
#include "common/problem.h"

#ifndef FA_CPU_BACKEND
#define FA_CPU_BACKEND 0
#endif

namespace fa {

bool is_cpu_backend() { return FA_CPU_BACKEND != 0; }

double conservative_flops_per_second(const DeviceInfo& device) {
  if (device.backend == "cpu") return 1e7;
  return 1e12 * std::max(device.sm_count, 8) / 132.0;
}

std::string format_duration(double seconds) {
  char buf[32];
  if (seconds < 90) {
    std::snprintf(buf, sizeof buf, "%.0f s", seconds);
  } else if (seconds < 5400) {
    std::snprintf(buf, sizeof buf, "%.1f min", seconds / 60);
  } else if (seconds < 172800) {
    std::snprintf(buf, sizeof buf, "%.1f h", seconds / 3600);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f days", seconds / 86400);
  }
  return buf;
}

DeviceInfo require_device() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky error
    throw NoGpuError(std::string("no CUDA GPU is available (") +
                     (err != cudaSuccess ? cudaGetErrorString(err) : "device count is 0") +
                     "); the stages with a CPU twin (this program's name + _cpu) run on the CPU backend");
  }
  int dev = 0;
  FA_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  FA_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  DeviceInfo info;
  info.name = prop.name;
  info.backend = is_cpu_backend() ? "cpu" : "cuda";
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  FA_CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

bool fits(const DeviceInfo& device, std::size_t bytes) {
  // Keep a margin for the CUDA context and allocator granularity.
  return static_cast<double>(bytes) <= 0.95 * static_cast<double>(device.free_bytes);
}

void require_fits(const DeviceInfo& device, std::size_t bytes, const std::string& what) {
  if (!fits(device, bytes)) {
    throw ResourceError("this problem needs " + format_bytes(static_cast<double>(bytes)) + " (" +
                        what + ") but " + device.name + " has only " +
                        format_bytes(static_cast<double>(device.free_bytes)) +
                        " free; choose a smaller shape");
  }
}

}  // namespace fa
