/**
 * \file ex2_rate.cu
 * \brief How many 2^x a multiprocessor computes a clock, in fp32 (ex2.approx.ftz.f32) and in
 *        packed halves (ex2.approx.f16x2): whether packed halves would halve the softmax's
 *        exponentials in the backward passes (stage 13's LOG, "Measured: packed half
 *        exponentials").
 *
 * Every thread of 132 × 8 blocks of 1024 takes 8 independent values through 4096
 * exponentials each. Build and run on the GPU (not part of the CMake build):
 *
 *     nvcc -O3 -arch=sm_90a -o ex2_rate benchmarks/ex2_rate.cu && ./ex2_rate
 *     cuobjdump -sass ex2_rate | grep MUFU        # the instructions each becomes
 */
#include <cstdio>
#include <cuda_fp16.h>
/// Eight fp32 values a thread, each through `iters` exponentials (one MUFU.EX2 each).
__global__ void f32(float* out, int iters) {
  float x[8];
  for (int i = 0; i < 8; ++i) x[i] = -0.001f * (threadIdx.x + i);
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < 8; ++i) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(x[i]));
  }
  float s = 0; for (int i = 0; i < 8; ++i) s += x[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
/// The same eight values as four packed pairs: one ex2.approx.f16x2 for two values.
__global__ void h2(float* out, int iters) {
  unsigned x[4];
  for (int i = 0; i < 4; ++i) { __half2 h = __floats2half2_rn(-0.001f * threadIdx.x, -0.002f * i); x[i] = *reinterpret_cast<unsigned*>(&h); }
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("ex2.approx.f16x2 %0, %0;" : "+r"(x[i]));
  }
  float s = 0; for (int i = 0; i < 4; ++i) { __half2 h = *reinterpret_cast<__half2*>(&x[i]); s += __low2float(h) + __high2float(h); }
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
/// Times both kernels three times and prints values a clock a multiprocessor (at the H100's
/// 1.755 GHz boost clock: a figure to compare the two by, not a clock measured).
int main() {
  float* out; cudaMalloc(&out, 132 * 8 * 1024 * 4);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  const int iters = 4096;
  for (int rep = 0; rep < 3; ++rep) {
    float ms1, ms2;
    cudaEventRecord(a); f32<<<132 * 8, 1024>>>(out, iters); cudaEventRecord(b); cudaEventSynchronize(b); cudaEventElapsedTime(&ms1, a, b);
    cudaEventRecord(a); h2<<<132 * 8, 1024>>>(out, iters); cudaEventRecord(b); cudaEventSynchronize(b); cudaEventElapsedTime(&ms2, a, b);
    double n = 132.0 * 8 * 1024 * iters * 8;  // exponentials (values) per kernel
    printf("f32: %.3f ms, %.1f values/clk/SM at 1.755 GHz; f16x2: %.3f ms, %.1f values/clk/SM\n", ms1,
           n / (ms1 * 1e-3) / 132 / 1.755e9, ms2, n / (ms2 * 1e-3) / 132 / 1.755e9);
  }
  return 0;
}
