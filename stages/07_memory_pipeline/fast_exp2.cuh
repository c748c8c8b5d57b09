/**
 * \file fast_exp2.cuh
 * \brief 2^x by the hardware's approximation, flushing denormal results to zero
 *        (PTX `ex2.approx.ftz.f32`); used by stage 07's forward and stage 10's backward.
 *
 * `exp2f` compiles to the same approximation (`ex2.approx.f32`) but must return results
 * below 2^−126 as denormals, which costs a few instructions a call. A softmax term that
 * small cannot change a sum of terms near 1 at FP32 precision, so the kernels flush it.
 */
#pragma once

#include <cuda_runtime.h>

namespace fa::pipe {

/// 2^x: `ex2.approx.ftz` when `FAST`, else `exp2f` (the `exp2f` variants of stages 07
/// and 10 measure the difference). The CPU backend has no such instruction and always uses exp2f.
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

}  // namespace fa::pipe
