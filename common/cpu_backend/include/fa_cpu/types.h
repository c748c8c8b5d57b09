/**
 * \file types.h
 * \brief CPU backend: the CUDA vector types and dim3, defined here so that no NVIDIA
 *        header is needed (the backend builds without the CUDA Toolkit).
 */
#pragma once

/// Three unsigned components, as CUDA's uint3 (threadIdx, blockIdx are uint3).
struct uint3 {
  unsigned int x;  ///< first component
  unsigned int y;  ///< second component
  unsigned int z;  ///< third component
};

/// Grid and block sizes: unspecified components default to 1, as in CUDA.
struct dim3 {
  unsigned int x = 1;  ///< first component
  unsigned int y = 1;  ///< second component
  unsigned int z = 1;  ///< third component
  /// dim3(4) is (4, 1, 1).
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  /// From a uint3 (blockDim and gridDim read back as dim3).
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  /// To a uint3.
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

/// \cond VECTOR_TYPES  (plain aggregates with CUDA's names and alignments)
struct alignas(8) float2 { float x, y; };
struct float3 { float x, y, z; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct int3 { int x, y, z; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned int x, y; };
struct alignas(16) uint4 { unsigned int x, y, z, w; };
struct alignas(16) double2 { double x, y; };

inline constexpr float2 make_float2(float x, float y) { return {x, y}; }
inline constexpr float3 make_float3(float x, float y, float z) { return {x, y, z}; }
inline constexpr float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline constexpr int2 make_int2(int x, int y) { return {x, y}; }
inline constexpr int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline constexpr uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return {x, y, z}; }
inline constexpr uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline constexpr uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline constexpr double2 make_double2(double x, double y) { return {x, y}; }
/// \endcond
