/**
 * \file kernel.h
 * \brief CPU backend: force-included before every kernel file built for the CPU.
 *        It gives CUDA's keywords, built-in variables and device functions a meaning
 *        in plain C++, so the same .cu source compiles for both backends.
 *
 * - `__global__`, `__device__`, `__host__` vanish; `__shared__` becomes `static`
 *   (blocks run one at a time, so a function-static array is per-block shared memory).
 * - threadIdx, blockIdx, blockDim, gridDim are read-only views of the scheduler's state:
 *   writing to them fails to compile, as under nvcc.
 * - __syncthreads, __syncwarp, shuffles, votes: rendezvous in the fiber scheduler;
 *   ldmatrix and mma.sync too (fa_cpu/warp_matrix.h), through the PTX wrappers.
 * - Math functions are the host's (expf, exp2f, ...); fast intrinsics (__expf) map to
 *   the accurate functions. Atomics are plain read-modify-writes (only one fiber runs
 *   at a time) that the race detector knows as atomics.
 */
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_runtime.h"
#include "fa_cpu/async_copy.h"
#include "fa_cpu/hopper.h"
#include "fa_cpu/scheduler.h"
#include "fa_cpu/warp_matrix.h"

/// Defined in kernel files built for the CPU backend (the PTX wrappers test it).
#define FA_CPU_KERNEL 1

/// \cond CPU_BACKEND_KEYWORDS
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __restrict__ __restrict
#define __constant__
#define __grid_constant__
#define __shared__ static

#define threadIdx (static_cast<const uint3&>(fa_cpu_threadIdx))
#define blockIdx (static_cast<const uint3&>(fa_cpu_blockIdx))
#define blockDim (static_cast<const uint3&>(fa_cpu_blockDim))
#define gridDim (static_cast<const uint3&>(fa_cpu_gridDim))
constexpr int warpSize = 32;

#define __syncthreads() ::fa_cpu::syncthreads(__FILE__, __LINE__)
#define __syncwarp(...) ::fa_cpu::SyncWarp{__FILE__, __LINE__}(__VA_ARGS__)
#define __shfl_sync(...) ::fa_cpu::shuffle<::fa_cpu::WarpOp::Shfl>(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) ::fa_cpu::shuffle<::fa_cpu::WarpOp::ShflUp>(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) ::fa_cpu::shuffle<::fa_cpu::WarpOp::ShflDown>(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) ::fa_cpu::shuffle<::fa_cpu::WarpOp::ShflXor>(__FILE__, __LINE__, __VA_ARGS__)
#define __ballot_sync(mask, pred) ::fa_cpu::vote(::fa_cpu::WarpOp::Ballot, mask, pred, __FILE__, __LINE__)
#define __any_sync(mask, pred) static_cast<int>(::fa_cpu::vote(::fa_cpu::WarpOp::Any, mask, pred, __FILE__, __LINE__))
#define __all_sync(mask, pred) static_cast<int>(::fa_cpu::vote(::fa_cpu::WarpOp::All, mask, pred, __FILE__, __LINE__))
#define __activemask() ::fa_cpu::active_mask()

namespace fa_cpu {

// __syncwarp() and __syncwarp(mask): the call site is captured first, then the
// optional mask is an ordinary default argument.
struct SyncWarp {
  const char* file;
  int line;
  void operator()(unsigned mask = 0xffffffffu) const { warp_collective(WarpOp::Sync, mask, 0, 0, 32, file, line); }
};

template <WarpOp Op, typename T>
T shuffle(const char* file, int line, unsigned mask, T var, int param, int width = 32) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8,
                "the CPU backend shuffles values of at most 8 bytes");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &var, sizeof(T));
  bits = warp_collective(Op, mask, bits, param, width, file, line);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

inline unsigned vote(WarpOp op, unsigned mask, int pred, const char* file, int line) {
  return static_cast<unsigned>(warp_collective(op, mask, pred != 0, 0, 32, file, line));
}

template <typename T>
T* dynamic_shared() {
  return static_cast<T*>(dynamic_shared_memory(alignof(T) < 16 ? 16 : alignof(T)));
}

// The launch: kernel<<<grid, block, smem, stream>>>(args) is rewritten to
// ::fa_cpu::launch(kernel, "kernel", __FILE__, __LINE__, grid, block, smem, stream)(args).
// Notes a kernel argument in the launch's list: its address if it is a pointer.
template <typename T>
void note_argument(LaunchConfig& c, const T& value) {
  if (c.arguments >= LaunchConfig::kMaxArguments) return;
  if constexpr (std::is_pointer<T>::value) c.pointers[c.arguments] = static_cast<const void*>(value);
  ++c.arguments;
}

template <typename... Params>
struct Launch {
  void (*kernel)(Params...);
  LaunchConfig config;
  template <typename... Args>
  void operator()(Args&&... args) const {
    static_assert(sizeof...(Args) == sizeof...(Params), "wrong number of kernel arguments");
    // Arguments are converted once, like CUDA copies them into the parameter space.
    const auto params = std::make_tuple(static_cast<std::decay_t<Params>>(args)...);
    LaunchConfig c = config;
    std::apply([&c](const auto&... p) { (note_argument(c, p), ...); }, params);
    auto call = [k = kernel, &params] { std::apply(k, params); };
    run_kernel(c, call);
  }
};

// Kernel files whose barriers the race detector does not model (mbarriers) are built
// with FA_CPU_NO_SHARED_RACECHECK: their launches are checked in global memory only.
#ifdef FA_CPU_NO_SHARED_RACECHECK
constexpr bool kSharedRacecheck = false;
#else
constexpr bool kSharedRacecheck = true;
#endif

template <typename... Params>
Launch<Params...> launch(void (*kernel)(Params...), const char* name, const char* file, int line,
                         dim3 grid, dim3 block, std::size_t smem = 0, cudaStream_t = nullptr) {
  LaunchConfig c{grid, block, smem, reinterpret_cast<const void*>(kernel), name, file, line};
  c.shared_racecheck = kSharedRacecheck;
  return Launch<Params...>{kernel, c};
}

}  // namespace fa_cpu

// ---- device functions ------------------------------------------------------------------
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline unsigned __float_as_uint(float x) { unsigned i; std::memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; std::memcpy(&x, &i, 4); return x; }
inline float __uint_as_float(unsigned i) { float x; std::memcpy(&x, &i, 4); return x; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
template <typename T> inline T __ldg(const T* p) { return *p; }
template <typename T> inline T __ldcg(const T* p) { return *p; }
template <typename T> inline void __stcs(T* p, T v) { *p = v; }  // a cache hint only: a plain store here
inline void __threadfence() { ::fa_cpu::fence(); }
inline void __threadfence_block() { ::fa_cpu::fence(); }

// CUDA's min and max accept mixed integer types and floats in device code.
template <typename A, typename B>
inline std::common_type_t<A, B> min(A a, B b) { return b < a ? b : a; }
template <typename A, typename B>
inline std::common_type_t<A, B> max(A a, B b) { return a < b ? b : a; }

// Atomics: one fiber runs at a time, so a plain read-modify-write is atomic. Each is a
// real call, outside the race detector's instrumentation, and tells the detector itself
// that an atomic touched the bytes (atomics race only with other blocks' plain accesses).
#if defined(__GNUC__) || defined(__clang__)
#define FA_CPU_ATOMIC __attribute__((noinline, no_sanitize("thread")))
#else
#define FA_CPU_ATOMIC
#endif
#define FA_CPU_NOTE_ATOMIC(p, bytes) ::fa_cpu::note_atomic(p, bytes, __builtin_return_address(0))
template <typename T> FA_CPU_ATOMIC T atomicAdd(T* p, T v) { FA_CPU_NOTE_ATOMIC(p, sizeof(T)); T old = *p; *p = old + v; return old; }
/// float2 and float4 atomicAdd (compute capability 9.0, global memory): each element is
/// added atomically on its own, and the address must be aligned to the vector's size, or
/// the GPU faults; so does this emulation.
template <typename V>
FA_CPU_ATOMIC V atomic_add_vector(V* p, V v, const void* pc) {
  if (reinterpret_cast<std::uintptr_t>(p) % sizeof(V) != 0) {
    throw std::runtime_error("atomicAdd of a float" + std::to_string(sizeof(V) / 4) + ": misaligned address");
  }
  ::fa_cpu::note_atomic(p, sizeof(V), pc);
  constexpr std::size_t n = sizeof(V) / sizeof(float);
  const V old = *p;
  float sum[n], add[n];
  std::memcpy(sum, p, sizeof(V));
  std::memcpy(add, &v, sizeof(V));
  for (std::size_t i = 0; i < n; ++i) sum[i] += add[i];
  std::memcpy(p, sum, sizeof(V));
  return old;
}
FA_CPU_ATOMIC inline float2 atomicAdd(float2* p, float2 v) { return atomic_add_vector(p, v, __builtin_return_address(0)); }
FA_CPU_ATOMIC inline float4 atomicAdd(float4* p, float4 v) { return atomic_add_vector(p, v, __builtin_return_address(0)); }
template <typename T> FA_CPU_ATOMIC T atomicSub(T* p, T v) { FA_CPU_NOTE_ATOMIC(p, sizeof(T)); T old = *p; *p = old - v; return old; }
template <typename T> FA_CPU_ATOMIC T atomicMax(T* p, T v) { FA_CPU_NOTE_ATOMIC(p, sizeof(T)); T old = *p; if (old < v) *p = v; return old; }
template <typename T> FA_CPU_ATOMIC T atomicMin(T* p, T v) { FA_CPU_NOTE_ATOMIC(p, sizeof(T)); T old = *p; if (v < old) *p = v; return old; }
template <typename T> FA_CPU_ATOMIC T atomicExch(T* p, T v) { FA_CPU_NOTE_ATOMIC(p, sizeof(T)); T old = *p; *p = v; return old; }
template <typename T> FA_CPU_ATOMIC T atomicCAS(T* p, T compare, T v) { FA_CPU_NOTE_ATOMIC(p, sizeof(T)); T old = *p; if (old == compare) *p = v; return old; }
#undef FA_CPU_NOTE_ATOMIC
/// \endcond
