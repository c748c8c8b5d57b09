/**
 * \file device_math.cuh
 * \brief Device helpers that several stages' kernels share: a row's max or sum over this
 *        lane's part of a row of C fragments, as a tree (stages 07 and 08), 2^x by the
 *        hardware's approximation (stages 07, 08, 10 and 11), and fp32 atomic adds of a few
 *        neighbouring floats (stages 10 and 11).
 *
 * The PTX wrappers that are a lesson of their own stay in their stage (stage 06's
 * mma.cuh, stage 07's cp_async.cuh, stage 08's hopper.cuh); these are the small pieces
 * that more than one kernel uses and none teaches.
 */
#pragma once

#include <cuda_runtime.h>

namespace fa::dev {

/// v[0] = op over v[0 .. N−1], as a tree: log2(N) dependent steps instead of N − 1.
template <int N, typename Op>
__device__ __forceinline__ float tree_reduce(float (&v)[N], Op op) {
#pragma unroll
  for (int w = 1; w < N; w *= 2) {
#pragma unroll
    for (int n = 0; n + w < N; n += 2 * w) v[n] = op(v[n], v[n + w]);
  }
  return v[0];
}

/// Max (op = fmaxf) or sum (op = add) of this lane's 2·N values of one row of N C
/// fragments of mma.sync (h = 0: row g, h = 1: row g + 8; stage 06's mma.cuh draws the
/// layout), as a tree. The quad's other lanes hold the rest of the row.
template <int N, typename Op>
__device__ __forceinline__ float row_reduce(const float (&c)[N][4], int h, Op op) {
  float v[N];
#pragma unroll
  for (int n = 0; n < N; ++n) v[n] = op(c[n][2 * h], c[n][2 * h + 1]);
  return tree_reduce(v, op);
}

/// The same over M/4 C fragments laid end to end in one array (c[4n + 2h], c[4n + 2h + 1]),
/// as wgmma's accumulators are (stage 08).
template <int M, typename Op>
__device__ __forceinline__ float row_reduce(const float (&c)[M], int h, Op op) {
  static_assert(M % 4 == 0, "whole C fragments");
  float v[M / 4];
#pragma unroll
  for (int n = 0; n < M / 4; ++n) v[n] = op(c[4 * n + 2 * h], c[4 * n + 2 * h + 1]);
  return tree_reduce(v, op);
}

/**
 * 2^x: PTX `ex2.approx.ftz.f32` when `FAST`, else `exp2f`.
 *
 * `exp2f` compiles to the same approximation (`ex2.approx.f32`) but must return results
 * below 2^−126 as denormals, which costs a few instructions a call. A softmax term that
 * small cannot change a sum of terms near 1 at FP32 precision, so the kernels flush it
 * (the `exp2f` variants of stages 07 and 10 measure the difference). The CPU backend has no
 * such instruction and always uses exp2f.
 */
template <bool FAST>
__device__ __forceinline__ float fast_exp2(float x) {
#ifdef FA_CPU_KERNEL
  return exp2f(x);
#else
  if constexpr (!FAST) return exp2f(x);
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

/// 1 / x: PTX `rcp.approx.ftz.f32` (at most 1 ulp off; denormal x flushed), one instruction
/// of the special function unit where IEEE division takes a refinement and a slow path. The
/// CPU backend divides.
__device__ __forceinline__ float fast_rcp(float x) {
#ifdef FA_CPU_KERNEL
  return 1.0f / x;
#else
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

/// log2 x: PTX `lg2.approx.ftz.f32` (CUDA's `__log2f`: within 2^−22.6 for x in [0.5, 2], 2 ulp
/// elsewhere), one instruction where `log2f` adds a range reduction. The CPU backend calls
/// log2f.
__device__ __forceinline__ float fast_log2(float x) {
#ifdef FA_CPU_KERNEL
  return log2f(x);
#else
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

/// dst[0 .. N) += v[0 .. N), each element atomically: one 128-bit (or 64-bit) reduction on
/// GPUs that have them (compute capability 9.0 and later) when VECTOR, N scalar ones otherwise.
template <int N, bool VECTOR>
__device__ __forceinline__ void atomic_add_vec(float* dst, const float* v) {
#if defined(FA_CPU_KERNEL) || __CUDA_ARCH__ >= 900
  if constexpr (VECTOR && N == 4) {
    atomicAdd(reinterpret_cast<float4*>(dst), make_float4(v[0], v[1], v[2], v[3]));
  } else if constexpr (VECTOR && N == 2) {
    atomicAdd(reinterpret_cast<float2*>(dst), make_float2(v[0], v[1]));
  } else  // one float: the scalar atomic below
#endif
  {
    for (int i = 0; i < N; ++i) atomicAdd(dst + i, v[i]);
  }
}

}  // namespace fa::dev
