/**
 * \file cpu_backend/include/cuda_runtime.h
 * \brief CPU backend: the subset of the CUDA runtime API that the project's host code
 *        uses, with the same names and signatures, implemented on the host.
 *
 * Programs built for the CPU backend find this header instead of NVIDIA's. Memory is
 * host memory, every call is synchronous, streams are accepted and ignored, and events
 * read a steady clock. Kernels launched with <<<...>>> run on fibers (see kernel.h).
 */
#pragma once

#include <cstddef>

#include "fa_cpu/types.h"

/// Error codes (the values CUDA uses, for the codes the backend can return).
enum cudaError_t {
  cudaSuccess = 0,                      ///< no error
  cudaErrorInvalidValue = 1,            ///< a bad argument
  cudaErrorMemoryAllocation = 2,        ///< out of memory
  cudaErrorInvalidConfiguration = 9,    ///< bad grid, block or shared-memory size
  cudaErrorInvalidDevicePointer = 17,   ///< not a pointer from cudaMalloc
  cudaErrorNoDevice = 100,              ///< no device
  cudaErrorInvalidDevice = 101,         ///< device index out of range
  cudaErrorInvalidResourceHandle = 400, ///< bad event or stream
  cudaErrorLaunchFailure = 719,         ///< a kernel failed
};
typedef enum cudaError_t cudaError;  ///< CUDA's alias

/// Copy directions (all copies are host memcpy here).
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,      ///< host to host
  cudaMemcpyHostToDevice = 1,    ///< host to device
  cudaMemcpyDeviceToHost = 2,    ///< device to host
  cudaMemcpyDeviceToDevice = 3,  ///< device to device
  cudaMemcpyDefault = 4,         ///< inferred
};

/// Kernel attributes settable with cudaFuncSetAttribute.
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,    ///< opt in to more dynamic shared memory
  cudaFuncAttributePreferredSharedMemoryCarveout = 9, ///< accepted, ignored
};

/// Device attributes readable with cudaDeviceGetAttribute.
enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,              ///< 1024
  cudaDevAttrMaxSharedMemoryPerBlock = 8,         ///< 48 KiB
  cudaDevAttrWarpSize = 10,                       ///< 32
  cudaDevAttrMultiProcessorCount = 16,            ///< 1
  cudaDevAttrComputeCapabilityMajor = 75,         ///< 9
  cudaDevAttrComputeCapabilityMinor = 76,         ///< 0
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,   ///< 227 KiB
};

/// The fields of cudaDeviceProp that the project reads.
struct cudaDeviceProp {
  char name[256];                    ///< "CPU backend (...)"
  std::size_t totalGlobalMem;        ///< host RAM
  std::size_t sharedMemPerBlock;     ///< 48 KiB
  std::size_t sharedMemPerBlockOptin;///< 227 KiB, as on an H100
  int regsPerBlock;                  ///< 65536 (not enforced)
  int warpSize;                      ///< 32
  int maxThreadsPerBlock;            ///< 1024
  int maxThreadsDim[3];              ///< 1024, 1024, 64
  int maxGridSize[3];                ///< 2^31-1, 65535, 65535
  int major;                         ///< 9
  int minor;                         ///< 0
  int multiProcessorCount;           ///< 1: blocks run one at a time
  int l2CacheSize;                   ///< 0
};

typedef struct fa_cpu_stream* cudaStream_t;  ///< streams: accepted, ignored (all work is synchronous)
typedef struct fa_cpu_event* cudaEvent_t;    ///< events: a host timestamp

cudaError_t cudaMalloc(void** ptr, std::size_t bytes);  ///< host memory, 256-byte aligned
/// Typed overload, as in CUDA.
template <typename T>
cudaError_t cudaMalloc(T** ptr, std::size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
cudaError_t cudaFree(void* ptr);  ///< frees cudaMalloc memory
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);  ///< memcpy
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);  ///< memcpy
cudaError_t cudaMemset(void* ptr, int value, std::size_t bytes);  ///< memset
cudaError_t cudaMemsetAsync(void* ptr, int value, std::size_t bytes, cudaStream_t stream = nullptr);  ///< memset
cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes);  ///< available and total RAM

cudaError_t cudaGetDeviceCount(int* count);  ///< always 1
cudaError_t cudaGetDevice(int* device);      ///< always 0
cudaError_t cudaSetDevice(int device);       ///< only 0 is valid
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);  ///< see cudaDeviceProp
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);  ///< see cudaDeviceAttr
cudaError_t cudaDeviceSynchronize();         ///< nothing to wait for
cudaError_t cudaStreamCreate(cudaStream_t* stream);  ///< a dummy stream
cudaError_t cudaStreamDestroy(cudaStream_t stream);  ///< no-op
cudaError_t cudaStreamSynchronize(cudaStream_t stream);  ///< no-op
/// Whether a stream is capturing a CUDA graph (as in CUDA; the CPU backend has no graphs).
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,         ///< not capturing: always, here
  cudaStreamCaptureStatusActive = 1,       ///< capturing
  cudaStreamCaptureStatusInvalidated = 2,  ///< capturing, but an error has spoiled the capture
};
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status);  ///< always None

cudaError_t cudaGetLastError();    ///< returns and clears the last error
cudaError_t cudaPeekAtLastError(); ///< returns the last error
const char* cudaGetErrorString(cudaError_t err);  ///< description
const char* cudaGetErrorName(cudaError_t err);    ///< enum name

cudaError_t cudaEventCreate(cudaEvent_t* event);  ///< a timestamp holder
cudaError_t cudaEventDestroy(cudaEvent_t event);  ///< frees it
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);  ///< reads the clock
cudaError_t cudaEventSynchronize(cudaEvent_t event);  ///< no-op
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop);  ///< difference

/// What cudaGetDriverEntryPointByVersion found.
enum cudaDriverEntryPointQueryResult {
  cudaDriverEntryPointSuccess = 0,             ///< found
  cudaDriverEntryPointSymbolNotFound = 1,      ///< no such function here
  cudaDriverEntryPointVersionNotSufficent = 2, ///< (CUDA's spelling) too new
};
/// Flags of cudaGetDriverEntryPointByVersion (accepted, ignored).
enum { cudaEnableDefault = 0 };
/// A driver function by name: here only "cuTensorMapEncodeTiled" (cuda.h), version 12000.
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** function, unsigned int version,
                                             unsigned long long flags, cudaDriverEntryPointQueryResult* status);

namespace fa_cpu {
/// Records a kernel's opt-in dynamic shared-memory limit (cudaFuncSetAttribute).
cudaError_t set_kernel_attribute(const void* kernel, cudaFuncAttribute attr, int value);
}  // namespace fa_cpu

/// Sets a kernel attribute; the dynamic shared-memory limit is enforced at launch.
template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel* kernel, cudaFuncAttribute attr, int value) {
  return fa_cpu::set_kernel_attribute(reinterpret_cast<const void*>(kernel), attr, value);
}
