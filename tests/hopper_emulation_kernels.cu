// Kernels for the CPU backend's own tests of its Hopper emulation (fa_cpu/hopper.h),
// through stage 08's wrappers (stages/08_hopper/hopper.cuh). Built for the CPU backend only.
#include "tests/hopper_emulation_kernels.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/demo.h"
#include "common/device_buffer.h"
#include "stages/06_tensor_cores/mma.cuh"
#include "stages/08_hopper/hopper.cuh"

namespace fa::cpu_test {

namespace {

using namespace fa::hopper;

constexpr int kTile = 64 * 64 * 2;  // bytes of one 64 × 64 tile of 16-bit values

// A [64][64] tensor of 16-bit values, read in one 64 × 64 box with 128-byte swizzling.
CUtensorMap tile_map(const void* base) {
  CUtensorMap map;
  const cuuint64_t dims[3] = {64, 64, 1}, strides[2] = {128, kTile};
  const cuuint32_t box[3] = {64, 64, 1}, step[3] = {1, 1, 1};
  const CUresult rc = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, const_cast<void*>(base), dims,
                                           strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                           CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (rc != CUDA_SUCCESS) throw CudaError("cuTensorMapEncodeTiled failed");
  return map;
}

template <typename T>
__global__ void round_trip_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                                  const __grid_constant__ CUtensorMap tv, float* s_out, float* o_out, float* before) {
  extern __shared__ uint8_t smem[];  // Q, K, V tiles, then the barrier (the backend aligns it to 1024)
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + 3 * kTile);
  if (threadIdx.x == 0) {
    mbarrier_init(bar, 1);
    mbarrier_arrive_expect_tx(bar, 3 * kTile);
    tma_load_3d(smem, &tq, bar, 0, 0, 0);
    tma_load_3d(smem + kTile, &tk, bar, 0, 0, 0);
    tma_load_3d(smem + 2 * kTile, &tv, bar, 0, 0, 0);
  }
  __syncthreads();
  mbarrier_wait(bar, 0);

  float s[32];
  for (float& x : s) x = 12345.0f;
  wgmma_fence();
  for (int kk = 0; kk < 4; ++kk) {  // 16 columns of the sum are 32 bytes along a swizzled row
    wgmma_ss<T, 64>(s, smem_desc(smem + 32 * kk, 16, 1024), smem_desc(smem + kTile + 32 * kk, 16, 1024), kk > 0);
  }
  wgmma_commit();
  before[threadIdx.x] = s[0];  // too early: the products have not run
  wgmma_wait<0>();
  uint32_t p[4][4];  // S's 8-column pieces, two by two, are the A fragments of P·V
  for (int kk = 0; kk < 4; ++kk) {
    for (int r = 0; r < 4; ++r) p[kk][r] = tc::pack2<T>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
  }
  float o[32] = {};
  wgmma_fence();
  for (int kk = 0; kk < 4; ++kk) wgmma_rs<T, 64>(o, p[kk], smem_desc(smem + 2 * kTile + kk * 2048, kTile, 1024), true);
  wgmma_commit();
  wgmma_wait<0>();
  for (int i = 0; i < 32; ++i) {
    s_out[threadIdx.x * 32 + i] = s[i];
    o_out[threadIdx.x * 32 + i] = o[i];
  }
}

__global__ void parities_kernel(unsigned* out) {
  extern __shared__ uint8_t smem[];
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem);
  mbarrier_init(bar, 2);
  for (int step = 0; step < 6; ++step) {
    out[2 * step] = ::fa_cpu::mbarrier_test_wait(bar, 0);
    out[2 * step + 1] = ::fa_cpu::mbarrier_test_wait(bar, 1);
    if (step < 5) mbarrier_arrive(bar);
  }
}

// 128 threads; shared memory holds A's tile (which the copies write), B's, and a barrier.
__global__ void misuse_kernel(int which, const __grid_constant__ CUtensorMap map) {
  extern __shared__ uint8_t smem[];
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + 2 * kTile);
  if (threadIdx.x == 0) mbarrier_init(bar, 2);
  __syncthreads();
  float d[32] = {};
  const uint64_t a = smem_desc(smem, 16, 1024), b = smem_desc(smem + kTile, 16, 1024);
  switch (which) {
    case 0:  // no wgmma.fence
      wgmma_ss<__half, 64>(d, a, b, false);
      break;
    case 1:  // one arrival of the two the phase needs
      if (threadIdx.x == 0) mbarrier_arrive(bar);
      mbarrier_wait(bar, 0);
      break;
    case 2:  // two counts for one barrier
      if (threadIdx.x < 64) named_barrier_sync(1, threadIdx.x < 32 ? 64 : 96);
      break;
    case 3:  // half the warpgroup fences, half commits
      if (threadIdx.x < 64) {
        wgmma_fence();
      } else {
        wgmma_commit();
      }
      break;
    case 4:  // a copy into the tile a product in flight reads
      wgmma_fence();
      wgmma_ss<__half, 64>(d, a, b, false);
      wgmma_commit();
      if (threadIdx.x == 0) {
        mbarrier_arrive_expect_tx(bar, kTile);
        tma_load_3d(smem, &map, bar, 0, 0, 0);
      }
      wgmma_wait<0>();
      break;
    case 6:  // one lane of warp 0 syncs at barrier 1 while its other lanes and warp 1 arrive
      if (threadIdx.x == 0) {
        named_barrier_sync(1, 64);
      } else if (threadIdx.x < 64) {
        named_barrier_arrive(1, 64);
      }
      break;
    default:  // a product over a tile whose copy nobody waited for
      if (threadIdx.x == 0) {
        mbarrier_arrive_expect_tx(bar, kTile);
        tma_load_3d(smem, &map, bar, 0, 0, 0);
      }
      __syncthreads();
      wgmma_fence();
      wgmma_ss<__half, 64>(d, a, b, false);
      wgmma_commit();
      wgmma_wait<0>();
  }
}

// Thread 0 adds the tile into out (at out + offset) by one bulk reduction; see bulk_reduce().
__global__ void bulk_reduce_kernel(float* out, int offset, bool write_before_wait, bool wait) {
  extern __shared__ uint8_t smem_raw[];
  float* tile = reinterpret_cast<float*>(smem_raw);
  if (threadIdx.x != 0) return;
  for (int i = 0; i < 64; ++i) tile[i] = static_cast<float>(i);
  fence_proxy_async();
  bulk_reduce_add(out + offset, tile, 64 * 4);
  bulk_commit();
  if (write_before_wait) tile[0] = 1000.0f;  // the reduction has not read it yet
  if (wait) bulk_wait<0>();
}

std::vector<float> run_bulk_reduce(int offset, bool write_before_wait, bool wait) {
  DeviceBuffer<float> out(std::vector<float>(80, 0.5f));
  bulk_reduce_kernel<<<1, 32, 64 * 4>>>(out.data(), offset, write_before_wait, wait);
  FA_CHECK_LAUNCH("bulk_reduce_kernel");
  return out.download();
}

// Each block takes a ticket t from counter[0], waits until counter[1] reads t, writes t into
// order[t's turn] and passes the turn on; `skip` is a ticket that never passes it on.
__global__ void flag_chain_kernel(int* counter, int* order, int skip) {
  if (threadIdx.x != 0) return;
  const int t = atomicAdd(counter, 1);
  flag_wait(counter + 1, t);
  order[t] = static_cast<int>(blockIdx.x);
  if (t != skip) flag_release(counter + 1, t + 1);
}

void misuse(int which) {
  DeviceBuffer<uint16_t> tile(std::vector<uint16_t>(64 * 64, 0));
  const CUtensorMap map = tile_map(tile.data());
  misuse_kernel<<<1, 128, 2 * kTile + 64>>>(which, map);
}

}  // namespace

RoundTrip tma_wgmma_round_trip(bool bf16, const std::vector<float>& q, const std::vector<float>& k,
                               const std::vector<float>& v) {
  const DeviceInputs in = upload_inputs(q, k, v, bf16 ? DType::BF16 : DType::F16);
  const CUtensorMap tq = tile_map(in.q.data()), tk = tile_map(in.k.data()), tv = tile_map(in.v.data());
  DeviceBuffer<float> s(128 * 32), o(128 * 32), before(128);
  const int smem = 3 * kTile + 64;
  if (bf16) {
    FA_CUDA_CHECK(cudaFuncSetAttribute(round_trip_kernel<__nv_bfloat16>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    round_trip_kernel<__nv_bfloat16><<<1, 128, smem>>>(tq, tk, tv, s.data(), o.data(), before.data());
  } else {
    FA_CUDA_CHECK(cudaFuncSetAttribute(round_trip_kernel<__half>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    round_trip_kernel<__half><<<1, 128, smem>>>(tq, tk, tv, s.data(), o.data(), before.data());
  }
  FA_CHECK_LAUNCH("round_trip_kernel");
  return RoundTrip{s.download(), o.download(), before.download()};
}

std::vector<unsigned> mbarrier_parities() {
  DeviceBuffer<unsigned> out(12);
  parities_kernel<<<1, 1, 64>>>(out.data());
  FA_CHECK_LAUNCH("parities_kernel");
  return out.download();
}

void wgmma_without_fence() { misuse(0); }
void mbarrier_never_completes() { misuse(1); }
void named_barrier_disagreement() { misuse(2); }
void warpgroup_split() { misuse(3); }
void copy_over_product_in_flight() { misuse(4); }
void product_before_copy_lands() { misuse(5); }
void named_barrier_split_warp() { misuse(6); }

std::vector<float> bulk_reduce(bool write_before_wait) {
  std::vector<float> all = run_bulk_reduce(0, write_before_wait, true);
  all.resize(64);
  return all;
}
std::vector<int> flag_chain(int blocks, int skip) {
  DeviceBuffer<int> counter(std::vector<int>{0, 0});
  DeviceBuffer<int> order(std::vector<int>(static_cast<size_t>(blocks), -1));
  flag_chain_kernel<<<blocks, 32>>>(counter.data(), order.data(), skip);
  FA_CHECK_LAUNCH("flag_chain_kernel");
  return order.download();
}

void bulk_reduce_misaligned() { run_bulk_reduce(1, false, true); }
void bulk_reduce_never_waited() { run_bulk_reduce(0, false, false); }

}  // namespace fa::cpu_test
