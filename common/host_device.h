/**
 * \file host_device.h
 * \brief FA_HOST_DEVICE marks small functions that both kernels and host code call
 *        (the online-softmax update, say), under nvcc, g++ and the CPU backend alike.
 */
#pragma once

#if defined(__CUDACC__)
#define FA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FA_HOST_DEVICE inline
#endif
