// Small kernels that exercise the new instructions one at a time: ldmatrix (.x4, with and
// without .trans), mma.sync.m16n8k16 (fp16 and bf16), the 16-bit roundings, and cp.async
// with commit and wait groups and zero-fill.
// The same file is built for the GPU and for the CPU backend; tensor_core_probe_main.cpp
// runs both on the same inputs and requires the CPU backend to match the hardware.
#include "tests/tensor_core_probe.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "stages/06_tensor_cores/mma.cuh"
#include "stages/07_memory_pipeline/cp_async.cuh"

namespace fa::probe {

namespace {

// One warp. Shared memory holds kTileRows rows of 16 elements; lane L points ldmatrix at
// row row_of[L], column 8·col_of[L], so lanes name rows in a scrambled order.
__global__ void ldmatrix_kernel(const uint16_t* tile, const int* row_of, const int* col_of, uint32_t* plain,
                                uint32_t* trans) {
  __shared__ uint4 raw[kTileRows * 2];  // uint4: 16-byte aligned rows, as ldmatrix needs
  uint16_t* smem = reinterpret_cast<uint16_t*>(raw);
  const int lane = threadIdx.x;
  for (int i = lane; i < kTileRows * 16; i += 32) smem[i] = tile[i];
  __syncwarp();
  const uint16_t* row = smem + row_of[lane] * 16 + 8 * col_of[lane];
  uint32_t r[4], s[4];
  tc::ldmatrix_x4(r, row);
  tc::ldmatrix_x4_trans(s, row);
  for (int i = 0; i < 4; ++i) {
    plain[lane * 4 + i] = r[i];
    trans[lane * 4 + i] = s[i];
  }
}

// One warp, one mma per launch: every lane's registers come straight from memory, so
// the instruction alone decides which matrix they form.
template <typename T>
__global__ void mma_kernel(const uint32_t* a, const uint32_t* b, const float* c, float* d) {
  const int lane = threadIdx.x;
  const uint32_t ra[4] = {a[lane * 4], a[lane * 4 + 1], a[lane * 4 + 2], a[lane * 4 + 3]};
  float acc[4] = {c[lane * 4], c[lane * 4 + 1], c[lane * 4 + 2], c[lane * 4 + 3]};
  tc::mma_m16n8k16<T>(acc, ra, b[lane * 2], b[lane * 2 + 1]);
  for (int e = 0; e < 4; ++e) d[lane * 4 + e] = acc[e];
}

// Each thread rounds two floats to fp16 and to bf16 with the kernels' own pack2.
__global__ void round_kernel(const float* x, uint32_t* half2, uint32_t* bf162, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (2 * i + 1 >= n) return;
  half2[i] = tc::pack2<__half>(x[2 * i], x[2 * i + 1]);
  bf162[i] = tc::pack2<__nv_bfloat16>(x[2 * i], x[2 * i + 1]);
}

// One warp, two commit groups of cp.async: lane L copies chunk L into a scrambled slot
// of the first 32 (every third lane with src-size 0: zeros), then chunk 32 + L into slot
// 32 + L. After wait_group 1 (the first group complete) and a __syncwarp, lane L reads
// another lane's slot of the first group; after wait_group 0, of the second. Only data
// the PTX ISA guarantees to be there is read, so the GPU's answer is defined.
__global__ void cp_async_kernel(const uint4* src, uint4* out) {
  __shared__ uint4 slots[64];
  const int lane = threadIdx.x;
  pipe::cp_async_16(&slots[(5 * lane + 3) % 32], &src[lane], lane % 3 != 0);
  pipe::cp_async_commit();
  pipe::cp_async_16(&slots[32 + lane], &src[32 + lane], true);
  pipe::cp_async_commit();
  pipe::cp_async_wait<1>();
  __syncwarp();
  out[lane] = slots[(lane + 7) % 32];
  pipe::cp_async_wait<0>();
  __syncwarp();
  out[32 + lane] = slots[32 + (lane + 1) % 32];
}

}  // namespace

ProbeOutputs run_probes(const ProbeInputs& in) {
  ProbeOutputs out;
  {
    DeviceBuffer<uint16_t> tile(in.tile);
    DeviceBuffer<int> row_of(in.row_of), col_of(in.col_of);
    DeviceBuffer<uint32_t> plain(32 * 4), trans(32 * 4);
    ldmatrix_kernel<<<1, 32>>>(tile.data(), row_of.data(), col_of.data(), plain.data(), trans.data());
    FA_CHECK_LAUNCH("ldmatrix_kernel");
    out.ldmatrix = plain.download();
    out.ldmatrix_trans = trans.download();
  }
  for (int type = 0; type < 2; ++type) {
    DeviceBuffer<uint32_t> a(in.mma_a[type]), b(in.mma_b[type]);
    DeviceBuffer<float> c(in.mma_c), d(32 * 4);
    if (type == 0) {
      mma_kernel<__half><<<1, 32>>>(a.data(), b.data(), c.data(), d.data());
    } else {
      mma_kernel<__nv_bfloat16><<<1, 32>>>(a.data(), b.data(), c.data(), d.data());
    }
    FA_CHECK_LAUNCH("mma_kernel");
    out.mma_d[type] = d.download();
  }
  {
    const int n = static_cast<int>(in.floats.size());
    DeviceBuffer<float> x(in.floats);
    DeviceBuffer<uint32_t> h(static_cast<size_t>(n / 2)), bf(static_cast<size_t>(n / 2));
    round_kernel<<<(n / 2 + 127) / 128, 128>>>(x.data(), h.data(), bf.data(), n);
    FA_CHECK_LAUNCH("round_kernel");
    out.half2 = h.download();
    out.bf162 = bf.download();
  }
  {
    DeviceBuffer<uint32_t> src(in.copy_src), dst(64 * 4);
    cp_async_kernel<<<1, 32>>>(reinterpret_cast<const uint4*>(src.data()), reinterpret_cast<uint4*>(dst.data()));
    FA_CHECK_LAUNCH("cp_async_kernel");
    out.cp_async = dst.download();
  }
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  return out;
}

}  // namespace fa::probe
