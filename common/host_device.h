/**
 * \file host_device.h
 * \brief FA_HOST_DEVICE marks small functions that both kernels and host code call
 *        (the online-softmax update, say), under nvcc, g++ and the CPU backend alike.
 */
#pragma once

#if defined(__CUDACC__)
#define FA_HOST_DEVICE __host__ __device__ __forceinline__  ///< callable from kernels and host code
#else
#define FA_HOST_DEVICE inline  ///< callable from kernels and host code
#endif
