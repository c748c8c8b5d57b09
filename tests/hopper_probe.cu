// Kernels that exercise stage 08's Hopper instructions one at a time, so that the CPU
// backend's emulation of them (fa_cpu/hopper.h) can be held against the hardware:
// - mbarrier: which phase parities count as completed, before and after each arrival;
// - TMA: one box copied by cp.async.bulk.tensor, completing on an mbarrier, in each swizzle
//   mode, with parts of the box outside the tensor (zeros), read back from shared memory; of
//   16-bit values, and a row of fp32 values as stage 13 copies lse and D;
//   from 3-D maps, and from 4-D maps of [B][H][N][d] views whose heads are interleaved in
//   each row, as stages 08 and 12 read a linear layer's q, k and v;
// - bulk reduce-add (cp.reduce.async.bulk .add.f32): shared memory added into global memory,
//   as stage 13 adds dQ;
// - wgmma: one m64nNk16 product over a shared-memory image of random values, read through
//   descriptors in each swizzle mode, K-major and MN-major, with A from shared memory or
//   from registers;
// - stmatrix: four, two or one 8×8 matrices stored from registers, transposed or not, to rows
//   that the lanes name in a 128-byte swizzled tile, as stage 13 stores dS.
// The same file is built for the GPU (sm_90a) and for the CPU backend; hopper_probe_main.cpp
// runs both on the same inputs and requires the CPU backend to match the hardware.
#include "tests/hopper_probe.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "common/errors.h"
#include "stages/08_hopper/hopper.cuh"

namespace fa::probe {

std::vector<TmaCase> tma_cases() {
  return {
      {0, 64, 64, 0, 30, 1},    // no swizzle; rows 40-45 lie past the tensor
      {1, 16, 64, 24, -5, 0},   // 32-byte swizzle; rows -5 to -1 before it
      {2, 32, 64, 40, 3, 2},    // 64-byte swizzle; columns 64-71 past it
      {3, 64, 56, 0, 12, 1},    // 128-byte swizzle; a tensor 56 wide: columns 56-63 past it
      {3, 64, 64, -8, 36, 2},   // 128-byte swizzle; columns before, rows after
      // one row of 32 floats, no swizzle, as stage 13 copies a Q tile's lse and D: inside the
      // tensor, and with its last 8 columns past it
      {0, 32, 32, 0, 39, 1, 4, 1},
      {0, 32, 32, 8, 7, 2, 4, 1},
  };
}

std::vector<Tma4Case> tma4_cases() {
  return {
      // d = 64 in 128-byte swizzled boxes, as the stages copy Q, K and V: rows 8-23 of a
      // sequence of 20 (rows 20-23 past it: zeros), the last head of the last batch entry.
      {3, 64, 64, 2, 20, 3, 0, 8, 1, 2},
      {3, 64, 64, 2, 20, 3, 0, -3, 0, 1},  // rows before the first
      {2, 32, 32, 4, 20, 3, 0, 2, 3, 1},   // d = 32, four heads, 64-byte swizzle
      {0, 32, 64, 2, 20, 3, 32, 5, 1, 0},  // the second half of d = 64, no swizzle
  };
}

std::vector<WgmmaCase> wgmma_cases() {
  std::vector<WgmmaCase> cases;
  for (int type = 0; type < 2; ++type) {
    for (int n : {64, 128}) {
      // A and B K-major from shared memory. Mode 0: core matrices of 8 rows × 16 bytes,
      // the two along k `lbo` apart, groups of 8 rows `sbo` apart (both ways round). Swizzled:
      // 8 rows of 128, 64 or 32 bytes an atom, atoms `sbo` apart; a start 32 bytes into a row
      // is the second k-step of the row, as stage 08 steps along k.
      cases.push_back({type, n, false, 0, 0, 128, 256, 16384, 128, 256});
      cases.push_back({type, n, false, 0, 0, 1024, 128, 16384, 2048, 128});
      cases.push_back({type, n, false, 1, 32, 16, 1024, 16384 + 64, 16, 2048});
      cases.push_back({type, n, false, 2, 32, 16, 512, 16384, 16, 1024});
      cases.push_back({type, n, false, 3, 0, 16, 256, 16384, 16, 256});
      // A from registers, B MN-major: mode 0: groups of 8 columns `sbo` apart, of 8 k `lbo`
      // apart; swizzled: rows of 64, 32 or 16 columns, blocks of them along n `lbo` apart,
      // groups of 8 k `sbo` apart (stage 08's V: lbo = the tile's 64-column blocks, sbo = 1024).
      cases.push_back({type, n, true, 0, 0, 0, 0, 16384, 2048, 128});
      cases.push_back({type, n, true, 1, 0, 0, 0, 16384, 4096, 1024});
      cases.push_back({type, n, true, 2, 0, 0, 0, 16384, 2048, 512});
      cases.push_back({type, n, true, 3, 0, 0, 0, 16384, 1024, 256});
    }
    // A K-major and B MN-major, both from shared memory, 128-byte swizzled: stage 13's
    // dQ = dS·K, where each consumer takes half of K's columns: at d = 64, 32 columns that
    // start 64 bytes into the rows of a 64-column block, at d = 128 a whole block.
    cases.push_back({type, 32, false, 3, 0, 16, 1024, 16384 + 64, 8192, 1024, true});
    cases.push_back({type, 32, false, 3, 32, 16, 1024, 16384, 8192, 1024, true});
    cases.push_back({type, 64, false, 3, 0, 16, 1024, 16384 + 8192, 8192, 1024, true});
  }
  return cases;
}

std::vector<StmatrixCase> stmatrix_cases() {
  return {
      {4, true, 0, 0},   // stage 13's store of dS, its first k-step in warp 0
      {4, true, 3, 2},   // its last k-step in warp 2
      {4, false, 1, 1},  // not transposed
      {2, true, 2, 3},   // two matrices: lanes 16-31 name no row
      {1, false, 0, 1},  // one matrix
  };
}

namespace {

/// A 1024-aligned start of dynamic shared memory (the launch asks for 1024 bytes more).
__device__ __forceinline__ uint8_t* aligned_smem(uint8_t* raw) {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t{1023});
}

/// mbarrier.test_wait.parity: whether that phase has completed, without waiting.
__device__ __forceinline__ bool test_wait(uint64_t* bar, uint32_t parity) {
#ifdef FA_CPU_KERNEL
  return ::fa_cpu::mbarrier_test_wait(bar, parity);
#else
  uint32_t done = 0;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(hopper::smem_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
#endif
}

// One thread asks a barrier of two arrivals which phases have completed, before and after
// each arrival: a fresh barrier counts the phase "before" phase 0 (parity 1) as complete.
__global__ void parity_kernel(uint32_t* out) {
  extern __shared__ uint8_t smem_raw[];
  uint64_t* bar = reinterpret_cast<uint64_t*>(aligned_smem(smem_raw));
  if (threadIdx.x != 0) return;
  hopper::mbarrier_init(bar, 2);
  int n = 0;
  for (int arrivals = 0; arrivals < 5; ++arrivals) {  // phases 0 and 1 complete, then phase 2 half
    out[n++] = test_wait(bar, 0);
    out[n++] = test_wait(bar, 1);
    hopper::mbarrier_arrive(bar);
  }
  out[n++] = test_wait(bar, 0);
  out[n++] = test_wait(bar, 1);
}

// One thread copies the box at (c.x, c.y, c.z), or with a 4-D map (c.x, c.y, c.z, c.w), into
// poisoned shared memory; everyone waits; the box's bytes are read back as they lie (swizzled).
template <int RANK>
__global__ void tma_kernel(const __grid_constant__ CUtensorMap map, int4 c, int bytes, uint32_t* out) {
  static_assert(RANK == 3 || RANK == 4, "the maps of stages 08 and 12");
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = aligned_smem(smem_raw);
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + 4096);
  for (int i = threadIdx.x; i < bytes / 4; i += blockDim.x) reinterpret_cast<uint32_t*>(smem)[i] = 0xDEADBEEFu;
  if (threadIdx.x == 0) {
    hopper::mbarrier_init(bar, 1);
    hopper::mbarrier_init_fence();
  }
  __syncthreads();
  hopper::fence_proxy_async();
  if (threadIdx.x == 0) {
    hopper::mbarrier_arrive_expect_tx(bar, static_cast<uint32_t>(bytes));
    if constexpr (RANK == 3) {
      hopper::tma_load_3d(smem, &map, bar, c.x, c.y, c.z);
    } else {
      hopper::tma_load_4d(smem, &map, bar, c.x, c.y, c.z, c.w);
    }
  }
  hopper::mbarrier_wait(bar, 0);
  for (int i = threadIdx.x; i < bytes / 4; i += blockDim.x) out[i] = reinterpret_cast<const uint32_t*>(smem)[i];
}

uint64_t descriptor(uint32_t start, uint32_t lbo, uint32_t sbo, int mode) {
  return (start >> 4) | static_cast<uint64_t>(lbo >> 4) << 16 | static_cast<uint64_t>(sbo >> 4) << 32 |
         static_cast<uint64_t>(mode) << 62;
}

// Shared memory gets c's first 4096 floats; one thread adds [256, 256 + 1024) of them into
// out[16 ..] and [2048, 2048 + 512) into out[3000 ..] with two bulk reductions in two groups,
// waiting for the first's reads before the second is issued.
__global__ void reduce_kernel(const float* c, float* out) {
  extern __shared__ uint8_t smem_raw[];
  float* tile = reinterpret_cast<float*>(aligned_smem(smem_raw));
  for (int i = threadIdx.x; i < 4096; i += blockDim.x) tile[i] = c[i];
  hopper::fence_proxy_async();
  __syncthreads();
  if (threadIdx.x == 0) {
    hopper::bulk_reduce_add(out + 16, tile + 256, 1024 * 4);
    hopper::bulk_commit();
    hopper::bulk_wait_read<0>();
    hopper::bulk_reduce_add(out + 3000, tile + 2048, 512 * 4);
    hopper::bulk_commit();
    hopper::bulk_wait<0>();
  }
}

// stmatrix.sync.aligned.m8n8.x{COUNT}[.trans].shared.b16 from this lane's first COUNT registers:
// .x4.trans through the wrapper stage 13 calls (hopper.cuh), the others here.
template <int COUNT, bool TRANS>
__device__ __forceinline__ void stmatrix(void* row, const uint32_t (&r)[4]) {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::stmatrix(COUNT, TRANS, row, r, __FILE__, __LINE__);
#else
  const uint32_t addr = hopper::smem_addr(row);
  if constexpr (COUNT == 4 && TRANS) {
    hopper::stmatrix_x4_trans(row, r);
  } else if constexpr (COUNT == 4) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]), "r"(r[1]),
                 "r"(r[2]), "r"(r[3]) : "memory");
  } else if constexpr (COUNT == 2 && TRANS) {
    asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};\n" ::"r"(addr), "r"(r[0]), "r"(r[1])
                 : "memory");
  } else {
    static_assert(COUNT == 1 && !TRANS, "the probe's cases");
    asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};\n" ::"r"(addr), "r"(r[0]) : "memory");
  }
#endif
}

// One warp stores its registers into a poisoned tile of 64 rows × 128 bytes, each lane naming
// its row as stage 13 does; the tile is read back as it lies.
template <int COUNT, bool TRANS>
__global__ void stmatrix_kernel(const uint32_t* regs, int kk, int warp, uint32_t* out) {
  extern __shared__ uint8_t smem_raw[];
  uint16_t* tile = reinterpret_cast<uint16_t*>(aligned_smem(smem_raw));
  for (int i = threadIdx.x; i < kStmatrixTileBytes / 4; i += blockDim.x) reinterpret_cast<uint32_t*>(tile)[i] = 0xDEADBEEFu;
  __syncwarp();
  const int lane = threadIdx.x, m = lane / 8, j = lane % 8;
  const int q = 16 * kk + 8 * (m / 2) + j, chunk = (2 * warp + m % 2) ^ (q % 8);
  const uint32_t r[4] = {regs[4 * lane], regs[4 * lane + 1], regs[4 * lane + 2], regs[4 * lane + 3]};
  stmatrix<COUNT, TRANS>(tile + q * 64 + chunk * 8, r);
  __syncwarp();
  for (int i = threadIdx.x; i < kStmatrixTileBytes / 4; i += blockDim.x) out[i] = reinterpret_cast<const uint32_t*>(tile)[i];
}

// One warpgroup: the image into shared memory, then one product D = A·B + C.
template <typename T, int N, bool REGS, bool BT>
__global__ void wgmma_kernel(const uint16_t* image, const uint32_t* a_regs, const float* c, uint64_t a_desc,
                             uint64_t b_desc, float* out) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = aligned_smem(smem_raw);
  uint16_t* img = reinterpret_cast<uint16_t*>(smem);
  for (int i = threadIdx.x; i < kImageBytes / 2; i += blockDim.x) img[i] = image[i];
  __syncthreads();
  hopper::fence_proxy_async();
  // The descriptors hold addresses relative to the image; add its shared address.
  const uint64_t base = hopper::smem_addr(smem) >> 4;
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = c[threadIdx.x * 64 + i];
  const uint32_t a[4] = {a_regs[threadIdx.x * 4], a_regs[threadIdx.x * 4 + 1], a_regs[threadIdx.x * 4 + 2],
                         a_regs[threadIdx.x * 4 + 3]};
  hopper::wgmma_fence();
  if constexpr (REGS) {
    hopper::wgmma_rs<T, N>(d, a, b_desc + base, true);
  } else {
    hopper::wgmma_ss<T, N, BT>(d, a_desc + base, b_desc + base, true);
  }
  hopper::wgmma_commit();
  hopper::wgmma_wait<0>();
  hopper::fence_registers(d);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) out[threadIdx.x * (N / 2) + i] = d[i];
}

template <typename T, int N, bool REGS, bool BT = false>
void launch_wgmma(const DeviceBuffer<uint16_t>& image, const DeviceBuffer<uint32_t>& regs,
                  const DeviceBuffer<float>& c, uint64_t a_desc, uint64_t b_desc, DeviceBuffer<float>& out) {
  const int smem = kImageBytes + 1024;
  FA_CUDA_CHECK(cudaFuncSetAttribute(wgmma_kernel<T, N, REGS, BT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  wgmma_kernel<T, N, REGS, BT><<<1, 128, smem>>>(image.data(), regs.data(), c.data(), a_desc, b_desc, out.data());
  FA_CHECK_LAUNCH("wgmma_kernel");
}

template <typename T>
void run_wgmma(const WgmmaCase& w, const DeviceBuffer<uint16_t>& image, const DeviceBuffer<uint32_t>& regs,
               const DeviceBuffer<float>& c, DeviceBuffer<float>& out) {
  const uint64_t a = descriptor(w.a_start, w.a_lbo, w.a_sbo, w.mode), b = descriptor(w.b_start, w.b_lbo, w.b_sbo, w.mode);
  if (w.b_mn && w.n == 32) {
    launch_wgmma<T, 32, false, true>(image, regs, c, a, b, out);
  } else if (w.b_mn) {
    launch_wgmma<T, 64, false, true>(image, regs, c, a, b, out);
  } else if (w.n == 64) {
    w.a_regs ? launch_wgmma<T, 64, true>(image, regs, c, a, b, out) : launch_wgmma<T, 64, false>(image, regs, c, a, b, out);
  } else {
    w.a_regs ? launch_wgmma<T, 128, true>(image, regs, c, a, b, out) : launch_wgmma<T, 128, false>(image, regs, c, a, b, out);
  }
}

}  // namespace

HopperOutputs run_hopper_probes(const HopperInputs& in) {
  HopperOutputs out;
  DeviceBuffer<uint16_t> tensor(in.tensor);
  for (const TmaCase& t : tma_cases()) {
    CUtensorMap map;
    // The same bytes seen as [3][40][tensor_x] values of element_bytes each.
    const auto e = static_cast<cuuint64_t>(t.element_bytes);
    const cuuint64_t dims[3] = {static_cast<cuuint64_t>(t.tensor_x), 40, 3};
    const cuuint64_t strides[2] = {static_cast<cuuint64_t>(t.tensor_x) * e, static_cast<cuuint64_t>(t.tensor_x) * 40 * e};
    const cuuint32_t box[3] = {static_cast<cuuint32_t>(t.box_x), static_cast<cuuint32_t>(t.box_y), 1};
    const cuuint32_t step[3] = {1, 1, 1};
    const CUresult rc = hopper::tensor_map_encoder()(
        &map, t.element_bytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, tensor.data(),
        dims, strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE, static_cast<CUtensorMapSwizzle>(t.swizzle),
        CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (rc != CUDA_SUCCESS) throw CudaError("cuTensorMapEncodeTiled failed (CUresult " + std::to_string(rc) + ")");
    const int bytes = t.bytes();
    DeviceBuffer<uint32_t> box_out(static_cast<size_t>(bytes / 4));
    tma_kernel<3><<<1, 32, 4096 + 64 + 1024>>>(map, make_int4(t.x, t.y, t.z, 0), bytes, box_out.data());
    FA_CHECK_LAUNCH("tma_kernel");
    const std::vector<uint32_t> got = box_out.download();
    out.tma.insert(out.tma.end(), got.begin(), got.end());
  }
  for (const Tma4Case& t : tma4_cases()) {
    CUtensorMap map;
    const cuuint64_t dims[4] = {static_cast<cuuint64_t>(t.d), static_cast<cuuint64_t>(t.rows),
                                static_cast<cuuint64_t>(t.heads), static_cast<cuuint64_t>(t.batches)};
    const cuuint64_t strides[3] = {static_cast<cuuint64_t>(t.heads * t.d) * 2, static_cast<cuuint64_t>(t.d) * 2,
                                   static_cast<cuuint64_t>(t.rows * t.heads * t.d) * 2};  // bytes
    const cuuint32_t box[4] = {static_cast<cuuint32_t>(t.box_x), 16, 1, 1};
    const cuuint32_t step[4] = {1, 1, 1, 1};
    const CUresult rc = hopper::tensor_map_encoder()(
        &map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, tensor.data(), dims, strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
        static_cast<CUtensorMapSwizzle>(t.swizzle), CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (rc != CUDA_SUCCESS) throw CudaError("cuTensorMapEncodeTiled failed (CUresult " + std::to_string(rc) + ")");
    const int bytes = t.box_x * 16 * 2;
    DeviceBuffer<uint32_t> box_out(static_cast<size_t>(bytes / 4));
    tma_kernel<4><<<1, 32, 4096 + 64 + 1024>>>(map, make_int4(t.x, t.row, t.head, t.batch), bytes, box_out.data());
    FA_CHECK_LAUNCH("tma_kernel");
    const std::vector<uint32_t> got = box_out.download();
    out.tma4.insert(out.tma4.end(), got.begin(), got.end());
  }
  {
    DeviceBuffer<uint32_t> answers(12);
    answers.fill_bytes(0xFF);
    parity_kernel<<<1, 32, 64 + 1024>>>(answers.data());
    FA_CHECK_LAUNCH("parity_kernel");
    out.parity = answers.download();
  }
  DeviceBuffer<float> c(in.c);
  {
    std::vector<float> start(4096);
    for (size_t i = 0; i < start.size(); ++i) start[i] = in.c[in.c.size() - 1 - i];  // other values than the added
    DeviceBuffer<float> sums(start);
    reduce_kernel<<<1, 128, 4096 * 4 + 1024>>>(c.data(), sums.data());
    FA_CHECK_LAUNCH("reduce_kernel");
    out.reduce = sums.download();
  }
  {
    DeviceBuffer<uint32_t> regs(in.st_regs);
    for (const StmatrixCase& c : stmatrix_cases()) {
      DeviceBuffer<uint32_t> tile(kStmatrixTileBytes / 4);
      const int smem = kStmatrixTileBytes + 1024;
      if (c.count == 4 && c.trans) {
        stmatrix_kernel<4, true><<<1, 32, smem>>>(regs.data(), c.kk, c.warp, tile.data());
      } else if (c.count == 4) {
        stmatrix_kernel<4, false><<<1, 32, smem>>>(regs.data(), c.kk, c.warp, tile.data());
      } else if (c.count == 2) {
        stmatrix_kernel<2, true><<<1, 32, smem>>>(regs.data(), c.kk, c.warp, tile.data());
      } else {
        stmatrix_kernel<1, false><<<1, 32, smem>>>(regs.data(), c.kk, c.warp, tile.data());
      }
      FA_CHECK_LAUNCH("stmatrix_kernel");
      const std::vector<uint32_t> got = tile.download();
      out.stmatrix.insert(out.stmatrix.end(), got.begin(), got.end());
    }
  }
  for (const WgmmaCase& w : wgmma_cases()) {
    DeviceBuffer<uint16_t> image(in.image[w.type]);
    DeviceBuffer<uint32_t> regs(in.a_regs[w.type]);
    DeviceBuffer<float> d(static_cast<size_t>(128 * w.n / 2));
    if (w.type == 0) {
      run_wgmma<__half>(w, image, regs, c, d);
    } else {
      run_wgmma<__nv_bfloat16>(w, image, regs, c, d);
    }
    const std::vector<float> got = d.download();
    out.wgmma.insert(out.wgmma.end(), got.begin(), got.end());
  }
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  return out;
}

}  // namespace fa::probe
