/**
 * \file hopper.cuh
 * \brief Stage 08's Hopper instructions, each a few lines of inline PTX: the asynchronous
 *        barrier (`mbarrier`), the tensor memory accelerator (`cp.async.bulk.tensor`),
 *        warpgroup matrix products (`wgmma.mma_async`) and register reallocation
 *        (`setmaxnreg`); and stage 13's bulk reduction, named barriers and `stmatrix`.
 *        sm_90a on the GPU; on the CPU backend each wrapper calls the backend's emulation
 *        (common/cpu_backend/include/fa_cpu/hopper.h, and warp_matrix.h for `stmatrix`),
 *        which follows the PTX ISA and is checked against the H100 by tests/hopper_probe.cu.
 *
 * **mbarrier.** A 64-bit word in shared memory that counts arrivals and, separately,
 * bytes still to land ("transactions"). A phase completes when both reach zero; the
 * barrier then flips its phase bit and starts over. Waiting is on a phase's parity:
 * `wait(bar, parity)` returns once the phase with that parity has completed. A ring of
 * buffers uses two barriers a slot, "full" (the copy engine's bytes landed) and "empty"
 * (every consumer is done with it), and a phase counter that flips each time the ring
 * wraps around.
 *
 * **TMA.** `cp.async.bulk.tensor` copies a box of a tensor (described once on the host by
 * a CUtensorMap: address, sizes, strides, box, swizzle) into shared memory, filling
 * the part of the box outside the tensor with zeros, and counts the bytes it lands
 * against an mbarrier. One thread issues a whole tile.
 *
 * **wgmma.** Four warps (a warpgroup, 128 threads) compute D (64×N, fp32 in
 * registers) = A (64×16) · B (16×N) + D. A and B are read from shared memory through
 * 64-bit *matrix descriptors*, or A from registers. D's layout repeats mma.sync's
 * 16×8 C fragment: warp w of the group holds rows 16w .. 16w+15, and register pair
 * d[4j], d[4j+1] is row 16w + g, columns 8j + 2t, 8j + 2t + 1 (g = lane / 4, t = lane % 4);
 * d[4j+2], d[4j+3] is row 16w + g + 8. A from registers has mma.sync's A layout, so
 * two 8-column pieces of D, rounded to 16 bits, are an A fragment of the next product:
 * P goes from S = Q·Kᵀ into O += P·V without leaving registers, as in stage 06.
 * The products run asynchronously: `wgmma_fence()` before the first (registers
 * written by ordinary instructions become visible to it), `wgmma_commit()` closes a
 * group, `wgmma_wait<N>()` waits until at most N groups are still running.
 */
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/errors.h"
#include "common/problem.h"

namespace fa::hopper {

// ---- mbarrier --------------------------------------------------------------------------

/// The shared-memory address of `p`, as the PTX instructions take it.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
#ifdef FA_CPU_KERNEL
  return ::fa_cpu::shared_address(p);
#else
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
#endif
}

/// Sets up a barrier that completes a phase after `arrivals` arrivals (and its bytes).
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::mbarrier_init(bar, arrivals);
#else
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
#endif
}

/// Makes the barriers' initialisation visible to the copy engine (then __syncthreads()).
__device__ __forceinline__ void mbarrier_init_fence() {
#ifndef FA_CPU_KERNEL  // the emulated copy engine sees the barriers at once
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

/// One arrival that also announces `bytes` more to land before the phase can complete.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::mbarrier_arrive(bar, bytes);
#else
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
#endif
}

/// One arrival.
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::mbarrier_arrive(bar, 0);
#else
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
#endif
}

/// Waits until the phase with parity `parity` (0 or 1) of `bar` has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::mbarrier_wait(bar, parity, __FILE__, __LINE__);
#else
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  }
#endif
}

// ---- TMA -------------------------------------------------------------------------------

/// cuTensorMapEncodeTiled from the driver, found through the runtime (so nothing links
/// libcuda, and a machine without a driver can still run the other stages' tests). On the
/// CPU backend, the backend's own, which records what its TMA emulation needs.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    FA_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || !f) throw CudaError("cuTensorMapEncodeTiled not found in the driver");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

/// The tensor map of a [B, H, N, d] tensor of 16-bit values T (`__half` or `__nv_bfloat16`)
/// at `base` with strides `s` (in elements), N = `n` and B, H, d from `p`: read in boxes of
/// `rows` rows × 64 columns (128 bytes) with 128-byte swizzling; rows past N read as zeros.
/// `stage` ("stage 08") begins the message of a stride TMA cannot follow.
/// \throws InputError for a stride of 0; CudaError if the driver refuses the map.
template <typename T>
CUtensorMap tensor_map_4d(const void* base, const AttentionProblem& p, int64_t n, Strides s, int rows,
                          const char* stage) {
  // A stride along a dimension of size 1 is never followed: give it a value TMA takes.
  if (n == 1) s.row = p.dim;
  if (p.heads == 1) s.head = n * p.dim;
  if (p.batch == 1) s.batch = p.heads * n * p.dim;
  if (s.row == 0 || s.head == 0 || s.batch == 0) {
    throw InputError(std::string(stage) + ": a stride of 0 (a broadcast tensor) cannot be read by TMA; copy the tensor");
  }
  CUtensorMap map;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(p.dim), static_cast<cuuint64_t>(n),
                              static_cast<cuuint64_t>(p.heads), static_cast<cuuint64_t>(p.batch)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(s.row) * 2, static_cast<cuuint64_t>(s.head) * 2,
                                 static_cast<cuuint64_t>(s.batch) * 2};  // bytes
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(rows), 1, 1};
  const cuuint32_t step[4] = {1, 1, 1, 1};
  const CUtensorMapDataType type =
      std::is_same<T, __half>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const CUresult rc = tensor_map_encoder()(&map, type, 4, const_cast<void*>(base), dims, strides, box, step,
                                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (rc != CUDA_SUCCESS) throw CudaError("cuTensorMapEncodeTiled failed (CUresult " + std::to_string(rc) + ")");
  return map;
}

/// Copies the box at coordinates (c0, c1, c2) of the 3-D tensor `map` (a __grid_constant__
/// kernel parameter) to `dst`, its bytes counted on `bar`.
__device__ __forceinline__ void tma_load_3d(void* dst, const void* map, uint64_t* bar, int c0, int c1, int c2) {
#ifdef FA_CPU_KERNEL
  const int coords[3] = {c0, c1, c2};
  ::fa_cpu::tma_load(dst, map, bar, coords, 3);
#else
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#endif
}

/// Copies the box at coordinates (c0, c1, c2, c3) of the 4-D tensor `map` to `dst`, its
/// bytes counted on `bar`: the stage's Q, K and V as [B][H][N][D], each with its own strides.
__device__ __forceinline__ void tma_load_4d(void* dst, const void* map, uint64_t* bar, int c0, int c1, int c2,
                                            int c3) {
#ifdef FA_CPU_KERNEL
  const int coords[4] = {c0, c1, c2, c3};
  ::fa_cpu::tma_load(dst, map, bar, coords, 4);
#else
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
#endif
}

/// Two floats from shared memory at `p` (`ld.shared.v2.f32`). A kernel that rounds its
/// shared-memory pointer up as an integer leaves the compiler no way to know it is shared, and
/// a plain load of it becomes a generic one, slower to issue and to return.
__device__ __forceinline__ float2 ld_shared_f2(const void* p) {
#ifdef FA_CPU_KERNEL
  return *static_cast<const float2*>(p);
#else
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(smem_addr(p)) : "memory");
  return v;
#endif
}

/// Stores two floats into shared memory at `p` (`st.shared.v2.f32`; why: ld_shared_f2()).
__device__ __forceinline__ void st_shared_f2(void* p, float2 v) {
#ifdef FA_CPU_KERNEL
  *static_cast<float2*>(p) = v;
#else
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(smem_addr(p)), "f"(v.x), "f"(v.y) : "memory");
#endif
}

/// 16 bytes from shared memory at `p`, 16-byte aligned (`ld.shared.v4.b32`; why: ld_shared_f2()).
__device__ __forceinline__ uint4 ld_shared_u4(const void* p) {
#ifdef FA_CPU_KERNEL
  return *static_cast<const uint4*>(p);
#else
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(smem_addr(p))
               : "memory");
  return v;
#endif
}

/// Stores 4 bytes into shared memory at `p` (`st.shared.b32`; why: ld_shared_f2()).
__device__ __forceinline__ void st_shared_u32(void* p, uint32_t v) {
#ifdef FA_CPU_KERNEL
  *static_cast<uint32_t*>(p) = v;
#else
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(smem_addr(p)), "r"(v) : "memory");
#endif
}

/// Asks for the 128-byte line of global memory that holds `p` to be brought into L1 (a hint,
/// `prefetch.global.L1`: nothing waits for it, and nothing changes if it is dropped).
__device__ __forceinline__ void prefetch_l1(const void* p) {
#ifdef FA_CPU_KERNEL
  (void)p;  // a hint with no effect on any value: the emulation has no caches
#else
  asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p));
#endif
}

// ---- bulk reductions ---------------------------------------------------------------------

/// Adds `bytes` / 4 floats of shared memory at `src` into global memory at `dst`, each
/// addition atomic, by the copy engine (`cp.reduce.async.bulk ... .add.f32`): one thread
/// issues a whole tile. Size and both addresses are multiples of 16 bytes. Asynchronous:
/// `src` may be written again only after bulk_wait_read() has retired the operation's group.
__device__ __forceinline__ void bulk_reduce_add(float* dst, const void* src, uint32_t bytes) {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::bulk_reduce_add(dst, src, bytes, __FILE__, __LINE__);
#else
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
               "r"(smem_addr(src)), "r"(bytes)
               : "memory");
#endif
}

/// Closes this thread's group of bulk operations.
__device__ __forceinline__ void bulk_commit() {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::bulk_commit();
#else
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}

/// Waits until at most N of this thread's groups of bulk operations still read shared memory.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::bulk_wait(N);
#else
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#endif
}

/// Waits until at most N of this thread's groups of bulk operations are still running.
template <int N>
__device__ __forceinline__ void bulk_wait() {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::bulk_wait(N);
#else
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// ---- flags between blocks --------------------------------------------------------------

/// Waits until the int at `flag` (global memory) reads `value`, loading it with acquire
/// semantics at GPU scope: what the block that stored it did before its release is visible
/// after. One thread waits; a barrier then lets the others of its group go on.
__device__ __forceinline__ void flag_wait(const int* flag, int value) {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::flag_wait(flag, value, __FILE__, __LINE__);
#else
  int now;
  do {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(now) : "l"(flag) : "memory");
  } while (now != value);
#endif
}

/// Stores `value` to `flag` with release semantics at GPU scope: after it, a flag_wait() that
/// reads it sees everything this thread wrote or added before, and what its block wrote
/// before a barrier this thread passed.
__device__ __forceinline__ void flag_release(int* flag, int value) {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::flag_release(flag, value);
#else
  asm volatile("fence.acq_rel.gpu;\nst.relaxed.gpu.global.b32 [%0], %1;\n" ::"l"(flag), "r"(value) : "memory");
#endif
}

// ---- named barriers --------------------------------------------------------------------

/// Waits at hardware barrier `id` (1-15; 0 is __syncthreads) until `threads` threads have
/// reached it, counting those that only arrive.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::named_barrier(id, threads, true, __FILE__, __LINE__);
#else
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#endif
}

/// Counts this warp at barrier `id` without waiting for the others.
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::named_barrier(id, threads, false, __FILE__, __LINE__);
#else
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#endif
}

// ---- stmatrix ---------------------------------------------------------------------------

/// Four 8×8 matrices of 16-bit elements from the warp's registers into shared memory, each
/// transposed on the way (stmatrix.sync.aligned.m8n8.x4.trans, sm_90): ldmatrix's layout
/// the other way. Lane 8·i + r gives `row`, the address of row r of matrix i (16-byte
/// aligned); register i of lane L holds column L/4, rows 2·(L%4) and 2·(L%4) + 1 of
/// matrix i. Stage 13 stores dSᵀ's A fragments as dS with it, 16 bytes a row.
__device__ __forceinline__ void stmatrix_x4_trans(void* row, const uint32_t (&r)[4]) {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::stmatrix(4, true, row, r, __FILE__, __LINE__);
#else
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n"
               ::"r"(smem_addr(row)), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
#endif
}

// ---- proxies ---------------------------------------------------------------------------

/// Makes this thread's ordinary stores to shared memory visible to the tensor cores' and the
/// copy engine's reads (the "async proxy"): after a tile is written by the threads and before
/// a wgmma reads it (then a barrier, so that every writer has fenced).
__device__ __forceinline__ void fence_proxy_async() {
#ifndef FA_CPU_KERNEL  // the emulation reads shared memory as the threads left it
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// ---- register reallocation -------------------------------------------------------------

/// The warpgroup gives registers back, down to N a thread (the producer needs few).
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::setmaxnreg(N, __FILE__, __LINE__);
#else
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

/// The warpgroup takes registers, up to N a thread (the consumers hold S and O).
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::setmaxnreg(N, __FILE__, __LINE__);
#else
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

// ---- wgmma -----------------------------------------------------------------------------

/**
 * The descriptor of a tile in shared memory laid out as TMA writes it with 128-byte
 * swizzling: rows of 64 16-bit values (128 bytes), eight rows (1024 bytes) a swizzle
 * atom, the tile 1024-byte aligned. Bits 0-13: address / 16; 16-29: the leading byte
 * offset / 16; 32-45: the stride byte offset / 16; 62-63: the swizzle mode (1: 128 B).
 *
 * - K-major (Q and K: the sum runs along the row): the stride offset is 1024 (from one
 *   group of eight rows to the next); the leading offset is unused. A step of 16 along
 *   the sum is 32 bytes further along the row: the descriptor's address + 32.
 * - MN-major (V: the sum runs down the columns): the stride offset is again 1024 (eight
 *   rows of the sum); the leading offset is the distance between 64-column blocks of the
 *   tile (d = 128 is two of them). A step of 16 along the sum is 16 rows: + 2048.
 */
__device__ __forceinline__ uint64_t smem_desc(const void* tile, uint32_t leading_bytes, uint32_t stride_bytes) {
  const uint64_t addr = smem_addr(tile);
  return ((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(leading_bytes >> 4) << 16) |
         (static_cast<uint64_t>(stride_bytes >> 4) << 32) | (1ull << 62);
}

#ifdef FA_CPU_KERNEL
__device__ __forceinline__ void wgmma_fence() { ::fa_cpu::wgmma_fence(__FILE__, __LINE__); }
__device__ __forceinline__ void wgmma_commit() { ::fa_cpu::wgmma_commit(__FILE__, __LINE__); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  ::fa_cpu::wgmma_wait(N, __FILE__, __LINE__);
}
// The emulated products reach the accumulators through their addresses, which the compiler
// has seen escape: nothing to pin.
template <int M>
__device__ __forceinline__ void fence_registers(float (&)[M]) {}
#else
/// Orders this thread's earlier register writes before the warpgroup's next wgmma.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
/// Closes the group of wgmma instructions issued since the last commit.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
/// Waits until at most N committed groups are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/// Keeps the compiler from moving accesses to accumulators across an asynchronous product.
template <int M>
__device__ __forceinline__ void fence_registers(float (&d)[M]) {
#pragma unroll
  for (int i = 0; i < M; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
#endif

/// \cond wgmma_operand_lists (spelled-out register lists for the asm statements below)
#define FA_D8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                    "+f"(d[i + 6]), "+f"(d[i + 7])
#define FA_WGMMA_D16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define FA_WGMMA_OUT16(d) FA_D8(d, 0), FA_D8(d, 8)
#define FA_WGMMA_D32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define FA_WGMMA_OUT32(d) FA_D8(d, 0), FA_D8(d, 8), FA_D8(d, 16), FA_D8(d, 24)
#define FA_WGMMA_D64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define FA_WGMMA_OUT64(d) FA_D8(d, 0), FA_D8(d, 8), FA_D8(d, 16), FA_D8(d, 24), FA_D8(d, 32), FA_D8(d, 40), FA_D8(d, 48), FA_D8(d, 56)
/// \endcond

/// D (64×N) = A·B (+ D if `accumulate`), A (64×16) K-major and B (16×N) in shared memory:
/// K-major, or MN-major with B_MN_MAJOR (B's transpose flag set). T is __half or
/// __nv_bfloat16. N is 64 or 128 with B K-major, 32 or 64 with B MN-major: the shapes the
/// kernels use and the Hopper probe proves.
template <typename T, int N, bool B_MN_MAJOR = false>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t a_desc, uint64_t b_desc, bool accumulate) {
  static_assert(B_MN_MAJOR ? (N == 32 || N == 64) : (N == 64 || N == 128),
                "wgmma_ss: N is 64 or 128 with B K-major, 32 or 64 with B MN-major");
#ifdef FA_CPU_KERNEL
  const auto type = std::is_same<T, __half>::value ? ::fa_cpu::MmaType::F16 : ::fa_cpu::MmaType::BF16;
  ::fa_cpu::wgmma(type, N, d, nullptr, a_desc, b_desc, B_MN_MAJOR, accumulate, __FILE__, __LINE__);
#else
  constexpr int tnsp_b = B_MN_MAJOR ? 1 : 0;  // the last immediate: B's transpose flag
  if constexpr (N == 32 && std::is_same<T, __half>::value) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 " FA_WGMMA_D16 ", %16, %17, p, 1, 1, 0, %19;\n}\n"
        : FA_WGMMA_OUT16(d)
        : "l"(a_desc), "l"(b_desc), "r"(static_cast<int>(accumulate)), "n"(tnsp_b));
  } else if constexpr (N == 32 && std::is_same<T, __nv_bfloat16>::value) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " FA_WGMMA_D16 ", %16, %17, p, 1, 1, 0, %19;\n}\n"
        : FA_WGMMA_OUT16(d)
        : "l"(a_desc), "l"(b_desc), "r"(static_cast<int>(accumulate)), "n"(tnsp_b));
  } else if constexpr (N == 64 && std::is_same<T, __half>::value) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " FA_WGMMA_D32 ", %32, %33, p, 1, 1, 0, %35;\n}\n"
        : FA_WGMMA_OUT32(d)
        : "l"(a_desc), "l"(b_desc), "r"(static_cast<int>(accumulate)), "n"(tnsp_b));
  } else if constexpr (N == 64 && std::is_same<T, __nv_bfloat16>::value) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " FA_WGMMA_D32 ", %32, %33, p, 1, 1, 0, %35;\n}\n"
        : FA_WGMMA_OUT32(d)
        : "l"(a_desc), "l"(b_desc), "r"(static_cast<int>(accumulate)), "n"(tnsp_b));
  } else if constexpr (N == 128 && std::is_same<T, __half>::value) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " FA_WGMMA_D64 ", %64, %65, p, 1, 1, 0, %67;\n}\n"
        : FA_WGMMA_OUT64(d)
        : "l"(a_desc), "l"(b_desc), "r"(static_cast<int>(accumulate)), "n"(tnsp_b));
  } else if constexpr (N == 128 && std::is_same<T, __nv_bfloat16>::value) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " FA_WGMMA_D64 ", %64, %65, p, 1, 1, 0, %67;\n}\n"
        : FA_WGMMA_OUT64(d)
        : "l"(a_desc), "l"(b_desc), "r"(static_cast<int>(accumulate)), "n"(tnsp_b));
  }
#endif
}

/// D (64×N) = A·B (+ D if `accumulate`), A (64×16) from registers (mma.sync's A fragment, four registers of two
/// 16-bit values) and B (16×N) MN-major in shared memory (the transpose flag set).
template <typename T, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b_desc,
                                         bool accumulate) {
#ifdef FA_CPU_KERNEL
  const auto type = std::is_same<T, __half>::value ? ::fa_cpu::MmaType::F16 : ::fa_cpu::MmaType::BF16;
  ::fa_cpu::wgmma(type, N, d, a, 0, b_desc, true, accumulate, __FILE__, __LINE__);
#else
  if constexpr (N == 64 && std::is_same<T, __half>::value) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " FA_WGMMA_D32 ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : FA_WGMMA_OUT32(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(static_cast<int>(accumulate)));
  } else if constexpr (N == 64 && std::is_same<T, __nv_bfloat16>::value) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " FA_WGMMA_D32 ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : FA_WGMMA_OUT32(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(static_cast<int>(accumulate)));
  } else if constexpr (N == 128 && std::is_same<T, __half>::value) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " FA_WGMMA_D64 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : FA_WGMMA_OUT64(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(static_cast<int>(accumulate)));
  } else if constexpr (N == 128 && std::is_same<T, __nv_bfloat16>::value) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " FA_WGMMA_D64 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : FA_WGMMA_OUT64(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(static_cast<int>(accumulate)));
  }
#endif
}

#undef FA_D8
#undef FA_WGMMA_D16
#undef FA_WGMMA_D32
#undef FA_WGMMA_D64
#undef FA_WGMMA_OUT16
#undef FA_WGMMA_OUT32
#undef FA_WGMMA_OUT64

}  // namespace fa::hopper
