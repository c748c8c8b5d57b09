/**
 * \file cuda_check.h
 * \brief Checking every CUDA runtime call and every kernel launch.
 *
 * \code
 * FA_CUDA_CHECK(cudaMalloc(&ptr, bytes));
 * my_kernel<<<grid, block>>>(args);
 * FA_CHECK_LAUNCH("my_kernel");
 * \endcode
 * A failure throws fa::CudaError whose message holds the call, file:line and CUDA's
 * error string. Define FA_SYNC_LAUNCHES to also synchronise after every launch, so an
 * error inside a kernel is reported at the launch that caused it.
 */
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/errors.h"

namespace fa {

/// Throws CudaError for a failed call (used by the macros below).
[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* what, const char* file,
                                          int line) {
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + what + " failed: " +
                  cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace fa

/// Checks a CUDA runtime call's return code.
#define FA_CUDA_CHECK(call)                                                  \
  do {                                                                       \
    const cudaError_t fa_err_ = (call);                                      \
    if (fa_err_ != cudaSuccess) ::fa::throw_cuda_error(fa_err_, #call, __FILE__, __LINE__); \
  } while (0)

/// Checks the launch just made (bad configuration, missing kernel image, ...).
#ifndef FA_SYNC_LAUNCHES
#define FA_CHECK_LAUNCH(kernel_name)                                                              \
  do {                                                                                            \
    const cudaError_t fa_err_ = cudaGetLastError();                                               \
    if (fa_err_ != cudaSuccess)                                                                   \
      ::fa::throw_cuda_error(fa_err_, "launch of " kernel_name, __FILE__, __LINE__);              \
  } while (0)
#else
#define FA_CHECK_LAUNCH(kernel_name)                                                              \
  do {                                                                                            \
    cudaError_t fa_err_ = cudaGetLastError();                                                     \
    if (fa_err_ == cudaSuccess) fa_err_ = cudaDeviceSynchronize();                                \
    if (fa_err_ != cudaSuccess)                                                                   \
      ::fa::throw_cuda_error(fa_err_, "launch of " kernel_name, __FILE__, __LINE__);              \
  } while (0)
#endif
