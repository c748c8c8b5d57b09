// Kernels with a race planted on purpose (see race_probe.h). Built for the GPU and for
// the CPU backend from this one file.
#include "tests/race_probe.h"

#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "stages/06_tensor_cores/mma.cuh"

namespace fa::race_probe {

__global__ void shuffle_then_read_kernel(const float* in, float* out, bool planted) {
  __shared__ float s[32];
  const int lane = threadIdx.x;
  s[lane] = 2.0f * in[lane];
  // Every lane waits here for every other lane, yet no memory is ordered by it.
  const float other = __shfl_xor_sync(0xffffffffu, in[lane], 16);
  if (!planted) __syncwarp();  // makes each lane's write above visible to the reads below
  out[lane] = s[31 - lane] + other;
}

std::vector<float> shuffle_then_read(bool planted) {
  std::vector<float> host(32);
  for (int i = 0; i < 32; ++i) host[static_cast<size_t>(i)] = static_cast<float>(i);
  DeviceBuffer<float> in(host), out(32);
  out.fill_bytes(0xFF);
  shuffle_then_read_kernel<<<1, 32>>>(in.data(), out.data(), planted);
  FA_CHECK_LAUNCH("shuffle_then_read_kernel");
  return out.download();
}

__global__ void store_then_ldmatrix_kernel(uint32_t* out, bool planted) {
  __shared__ uint4 raw[8];  // an 8×8 tile of 16-bit values, 16-byte aligned rows
  uint16_t* tile = reinterpret_cast<uint16_t*>(raw);
  const int lane = threadIdx.x;
  for (int i = lane; i < 64; i += 32) tile[i] = static_cast<uint16_t>(i);
  if (!planted) __syncwarp();  // ldmatrix reads rows that other lanes wrote
  uint32_t r[4];
  tc::ldmatrix_x4(r, tile + 8 * (lane % 8));  // the same tile four times
  out[lane] = r[0];
}

std::vector<std::uint32_t> store_then_ldmatrix(bool planted) {
  DeviceBuffer<uint32_t> out(32);
  out.fill_bytes(0xFF);
  store_then_ldmatrix_kernel<<<1, 32>>>(out.data(), planted);
  FA_CHECK_LAUNCH("store_then_ldmatrix_kernel");
  return out.download();
}

}  // namespace fa::race_probe
