// CPU backend: the CUDA runtime API subset on the host.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "cuda.h"
#include "cuda_runtime.h"
#include "fa_cpu/scheduler.h"
#include "racecheck.h"
#include "runtime_state.h"

/// What a cudaEvent_t points to.
struct fa_cpu_event {
  std::chrono::steady_clock::time_point time;  ///< when it was recorded
  bool recorded = false;                       ///< whether it was recorded
};
/// What a cudaStream_t points to (nothing: all work is synchronous).
struct fa_cpu_stream {};

namespace fa_cpu {

namespace {

cudaError_t g_last_error = cudaSuccess;
std::set<void*> g_allocations;  // to reject frees of foreign pointers

cudaError_t fail(cudaError_t err) {
  g_last_error = err;
  return err;
}

// MemAvailable and MemTotal from /proc/meminfo, in bytes (0 if unreadable).
void read_meminfo(std::size_t* available, std::size_t* total) {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::size_t kib = 0;
  std::string unit;
  *available = *total = 0;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") *available = kib * 1024;
    if (key == "MemTotal:") *total = kib * 1024;
  }
}

}  // namespace

void set_last_error(cudaError_t err) { g_last_error = err; }

std::map<const void*, int>& kernel_smem_limits() {
  static std::map<const void*, int> limits;
  return limits;
}

cudaError_t set_kernel_attribute(const void* kernel, cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || static_cast<std::size_t>(value) > kSharedMemOptin) return fail(cudaErrorInvalidValue);
    kernel_smem_limits()[kernel] = value;
  }
  return cudaSuccess;
}

}  // namespace fa_cpu

using fa_cpu::fail;

cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
  if (!ptr) return fail(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  // Exactly `bytes`, so AddressSanitizer sees an access one past the end.
  if (posix_memalign(ptr, 256, bytes) != 0) {
    *ptr = nullptr;
    return fail(cudaErrorMemoryAllocation);
  }
  fa_cpu::g_allocations.insert(*ptr);
  fa_cpu::race::add_buffer(*ptr, bytes);  // checked for races between blocks
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  if (fa_cpu::g_allocations.erase(ptr) == 0) return fail(cudaErrorInvalidDevicePointer);
  fa_cpu::race::remove_buffer(ptr);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind) {
  if (bytes == 0) return cudaSuccess;
  if (!dst || !src) return fail(cudaErrorInvalidValue);
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void* ptr, int value, std::size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  if (!ptr) return fail(cudaErrorInvalidValue);
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, std::size_t bytes, cudaStream_t) {
  return cudaMemset(ptr, value, bytes);
}

cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  if (!free_bytes || !total_bytes) return fail(cudaErrorInvalidValue);
  fa_cpu::read_meminfo(free_bytes, total_bytes);
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return fail(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return fail(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return fail(cudaErrorInvalidValue);
  if (device != 0) return fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof *prop);
  const int blocks = fa_cpu::options().blocks_at_once;
  if (blocks > 1) {
    std::snprintf(prop->name, sizeof prop->name, "CPU backend (fibers, %d blocks in flight, shuffled)", blocks);
  } else {
    std::snprintf(prop->name, sizeof prop->name, "CPU backend (fibers, one block at a time)");
  }
  std::size_t avail = 0;
  fa_cpu::read_meminfo(&avail, &prop->totalGlobalMem);
  prop->sharedMemPerBlock = fa_cpu::kSharedMemDefault;
  prop->sharedMemPerBlockOptin = fa_cpu::kSharedMemOptin;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  prop->l2CacheSize = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return fail(cudaErrorInvalidValue);
  if (device != 0) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(fa_cpu::kSharedMemDefault); break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMultiProcessorCount: *value = 1; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(fa_cpu::kSharedMemOptin); break;
    default: return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  if (!stream) return fail(cudaErrorInvalidValue);
  *stream = new fa_cpu_stream;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus* status) {
  if (!status) return fail(cudaErrorInvalidValue);
  *status = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** function, unsigned int version,
                                             unsigned long long, cudaDriverEntryPointQueryResult* status) {
  if (!symbol || !function) {
    fa_cpu::set_last_error(cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
  }
  *function = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (std::strcmp(symbol, "cuTensorMapEncodeTiled") == 0) {
    found = version >= 12000 ? cudaDriverEntryPointSuccess : cudaDriverEntryPointVersionNotSufficent;
    if (found == cudaDriverEntryPointSuccess) *function = reinterpret_cast<void*>(&cuTensorMapEncodeTiled);
  }
  if (status) *status = found;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t err = fa_cpu::g_last_error;
  fa_cpu::g_last_error = cudaSuccess;
  return err;
}

cudaError_t cudaPeekAtLastError() { return fa_cpu::g_last_error; }

namespace {

struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* text;
};

// CUDA's names and messages for the codes this backend returns.
constexpr ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
};

const ErrorText* find_error(cudaError_t err) {
  for (const ErrorText& e : kErrors) {
    if (e.code == err) return &e;
  }
  return nullptr;
}

}  // namespace

const char* cudaGetErrorName(cudaError_t err) {
  const ErrorText* e = find_error(err);
  return e ? e->name : "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t err) {
  const ErrorText* e = find_error(err);
  return e ? e->text : "unknown error";
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  if (!event) return fail(cudaErrorInvalidValue);
  *event = new fa_cpu_event;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  event->time = std::chrono::steady_clock::now();  // all work before this has finished
  event->recorded = true;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return event ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop) {
  if (!ms || !start || !stop || !start->recorded || !stop->recorded) {
    return fail(cudaErrorInvalidResourceHandle);
  }
  *ms = std::chrono::duration<float, std::milli>(stop->time - start->time).count();
  return cudaSuccess;
}
