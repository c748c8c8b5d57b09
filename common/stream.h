/**
 * \file stream.h
 * \brief The CUDA stream on which the stages launch their kernels.
 *
 * A stage's launch names `fa::stream()`: the default stream, unless the caller has named
 * another for this thread with a `fa::StreamScope`. The Python module does, with PyTorch's
 * current stream, so that its kernels queue in order with PyTorch's own work and can be
 * captured in a CUDA graph.
 */
#pragma once

#include <cuda_runtime.h>

namespace fa {

namespace detail {
/// The stream this thread's launches go to, as a variable of the thread's own.
inline cudaStream_t& stream_of_this_thread() {
  static thread_local cudaStream_t stream = nullptr;  // nullptr: the default stream
  return stream;
}
}  // namespace detail

/// The stream this thread's launches go to.
inline cudaStream_t stream() { return detail::stream_of_this_thread(); }

/// Names the stream for this thread's launches until the scope ends, then restores the last.
class StreamScope {
 public:
  /// From here to the end of the scope, this thread's launches go to `stream`.
  explicit StreamScope(cudaStream_t stream) : previous_(detail::stream_of_this_thread()) {
    detail::stream_of_this_thread() = stream;
  }
  ~StreamScope() { detail::stream_of_this_thread() = previous_; }
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  cudaStream_t previous_;
};

}  // namespace fa
