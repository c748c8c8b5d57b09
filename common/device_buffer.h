/**
 * \file device_buffer.h
 * \brief An owning, move-only buffer in device memory.
 */
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "common/cuda_check.h"

namespace fa {

/// `count` elements of T in device memory, freed when the buffer goes out of scope.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// Allocates `count` elements (uninitialised).
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    if (count_ > 0) FA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), bytes()));
  }
  /// Allocates and copies `host` to the device.
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);  // no check: destructors must not throw
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  /// Takes over `other`'s memory.
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  /// Swaps memory with `other` (which frees ours when it goes).
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(count_, other.count_);
    return *this;
  }

  T* data() { return ptr_; }                               ///< device pointer
  const T* data() const { return ptr_; }                   ///< device pointer
  std::size_t size() const { return count_; }              ///< elements
  std::size_t bytes() const { return count_ * sizeof(T); }  ///< bytes

  /// Copies host.size() elements (at most size()) to the device.
  void upload(const std::vector<T>& host) {
    FA_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), std::min(host.size(), count_) * sizeof(T),
                             cudaMemcpyHostToDevice));
  }
  /// Copies the whole buffer back to the host.
  std::vector<T> download() const {
    std::vector<T> host(count_);
    if (count_ > 0) FA_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  /// Sets every byte to `value`. 0xFF makes every float a NaN: poison outputs with it
  /// before a run, so an element the kernel never wrote cannot pass a check.
  void fill_bytes(unsigned char value) {
    if (count_ > 0) FA_CUDA_CHECK(cudaMemset(ptr_, value, bytes()));
  }

 private:
  T* ptr_ = nullptr;
  std::size_t count_ = 0;
};

/// The byte used to poison outputs: every float becomes a NaN.
constexpr unsigned char kPoisonByte = 0xFF;

}  // namespace fa
