/**
 * \file cp_async.cuh
 * \brief Stage 07's memory-pipeline instructions: `cp.async` (Ampere and later) and the
 *        XOR swizzle that keeps `ldmatrix` free of bank conflicts without padding.
 *
 * `cp.async.cg.shared.global [dst], [src], 16, src_size` copies 16 bytes from global to
 * shared memory without passing through registers, and without making the thread wait:
 * the copy runs while the thread goes on computing. Copies are collected in groups:
 *
 *     cp_async_16(...); cp_async_16(...);   // issue (no wait)
 *     cp_async_commit();                    // close group G
 *     ...                                   // compute on something else
 *     cp_async_wait<0>();                   // G (and all earlier groups) have landed
 *     __syncthreads();                      // ... and every thread's copies are visible
 *
 * `cp_async_wait<N>()` waits until at most N of this thread's most recent groups are
 * still in flight: with two buffers, `wait<1>` lets the next tile's copy stay in flight
 * while the current one is used. Bytes past `src_size` are filled with zeros, which is how
 * the tiles past the end of a sequence are cleared without a branch.
 *
 * On the CPU backend each wrapper calls the backend's emulation (fa_cpu/async_copy.h):
 * the data lands in shared memory only at the wait that completes its group, so a
 * missing wait gives wrong results there on every run.
 */
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/trace.h"  // FA_TRACE: trace points for the See it run page, nothing elsewhere

namespace fa::pipe {

/// Starts copying 16 bytes from global `src` to shared `dst` (both 16-byte aligned); with
/// `fill` false, writes 16 zero bytes instead (src is not read, but must be a valid address).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool fill) {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::cp_async(dst, src, 16, fill ? 16 : 0);
#else
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src), "r"(fill ? 16 : 0)
               : "memory");
#endif
}

/// Closes this thread's group of copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::cp_async_commit();
  FA_TRACE(commit());
#else
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::cp_async_wait(N);
  FA_TRACE(wait(N));
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

/**
 * Element offset of 16-byte chunk `chunk` of row `row` in a tile of D-element (16-bit)
 * rows stored without padding, with the chunk index XOR-ed by a function of the row.
 *
 * Shared memory has 32 banks of 4 bytes: 128 bytes, eight 16-byte chunks, per cycle. An
 * ldmatrix matrix is 8 rows × one chunk; the 8 row addresses conflict unless they fall in
 * 8 different chunk positions mod 8. With D = 64 (8 chunks a row) every row starts at
 * position 0, so the same chunk of 8 rows is an 8-way conflict. XOR-ing the chunk with
 * row % 8 sends row r's chunk c to position c ^ r: 8 rows, 8 positions. Rows of fewer
 * than 8 chunks (D = 32, 16) already spread over 2 or 4 positions, so the XOR pattern
 * changes every 2 or 4 rows instead. Writers and readers use the same function, and the
 * copies and ldmatrix always move whole chunks, so the data is only permuted within a row.
 *
 * Two identities let a kernel compute the swizzle once per lane instead of once per access:
 * - along a row, for any delta < D/8:  swizzle(row, chunk ^ delta) == swizzle(row, chunk) ^ 8·delta
 *   (the chunk bits sit below the row bits, and XOR is associative);
 * - down a column, for any m:  swizzle(row + 8·m, chunk) == swizzle(row, chunk) + 8·m·D
 *   (the pattern repeats every 8 rows).
 */
template <int D>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  constexpr int CHUNKS = D / 8;                      // 16-byte chunks per row
  constexpr int SPREAD = CHUNKS < 8 ? CHUNKS : 8;    // chunk positions the XOR may use
  constexpr int ROWS_PER_PATTERN = 8 / SPREAD;       // rows that share one XOR value
  return row * D + 8 * (chunk ^ (row / ROWS_PER_PATTERN % SPREAD));
}

}  // namespace fa::pipe
