/**
 * \file hopper.h
 * \brief CPU backend: the Hopper instructions that stage 08 uses, as the PTX ISA defines
 *        them: mbarrier phases and transaction counts, named barriers, TMA tile copies
 *        (`cp.async.bulk.tensor`) with tensor maps, swizzling and zero fill, warpgroup
 *        matrix products (`wgmma.mma_async`) read through shared-memory matrix
 *        descriptors, their fence, commit and wait, and `setmaxnreg`.
 *
 * **Shared addresses.** PTX names shared memory by 32-bit addresses in the shared window,
 * and a wgmma descriptor keeps 14 bits of one (address / 16). Here the shared address of a
 * byte is its offset in the block's dynamic shared memory, which the backend allocates
 * 1024-byte aligned, so an address's low bits are those of the GPU's and the swizzle
 * patterns (which XOR address bits) come out the same.
 *
 * **Swizzling** (TMA writes and wgmma reads, modes 128, 64 and 32 bytes): bits 4-6 (128 B),
 * 4-5 (64 B) or bit 4 (32 B) of a shared address are XORed with bits 7-9, 7-8 or 7. Within
 * each 1024-byte atom, the 16-byte chunk c of 128-byte row r lands at chunk c ^ (r % 8).
 *
 * **When things happen.** The emulation does each asynchronous step as late as the ISA
 * allows, so a kernel that forgets a wait reads stale data here on every run:
 * - a TMA copy reads global memory when it is issued, but its bytes land in shared
 *   memory (and count against the mbarrier's transactions) only when a thread waits on
 *   that mbarrier and the phase cannot complete without them;
 * - a wgmma reads nothing when it is issued; at the `wgmma.wait_group` that retires its
 *   group it reads A and B (shared memory and the A registers) and the accumulators, and
 *   writes the accumulators. Registers read before that wait hold their old values.
 *
 * **Numerics.** As for mma.sync (warp_matrix.h): 16-bit products are exact, each product
 * of 16 along k is summed with the accumulator in double and rounded once to fp32.
 *
 * Threads that must act together (wgmma and its fence, commit and wait, setmaxnreg: the
 * `.sync.aligned` warpgroup instructions) meet as a warpgroup; mbarrier waits and named
 * barriers suspend the thread until their condition holds. A wait that can never end is
 * reported as a deadlock with what each thread waits for.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "fa_cpu/warp_matrix.h"

namespace fa_cpu {

/// The shared address (offset in the block's dynamic shared memory) of `p`, whose `bytes`
/// must lie inside it.
std::uint32_t shared_address(const void* p, std::size_t bytes = 1);

/// mbarrier.init: phase 0 in progress, expecting `count` arrivals and no transactions.
void mbarrier_init(void* bar, unsigned count);
/// mbarrier.arrive[.expect_tx]: first `tx_bytes` more bytes are expected, then one arrival.
void mbarrier_arrive(void* bar, unsigned tx_bytes);
/// mbarrier.try_wait.parity in a loop: returns once the phase of parity `parity` has
/// completed (at once if the phase in progress has the other parity).
void mbarrier_wait(void* bar, unsigned parity, const char* file, int line);

/// mbarrier.test_wait.parity: whether the phase of parity `parity` has completed, without
/// waiting (copies in flight on the barrier land first if the phase needs them). A thread
/// that gets false lets the others run before it goes on, so a loop on it cannot starve them.
bool mbarrier_test_wait(void* bar, unsigned parity);

/// bar.sync (`wait`) or bar.arrive with barrier `id` (1-15) and `threads` taking part: the
/// barrier completes when `threads` threads have arrived; bar.sync waits for that.
void named_barrier(int id, int threads, bool wait, const char* file, int line);

/// cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes:
/// the box at `coords` of the tensor map `map` (made by cuTensorMapEncodeTiled) to `dst`,
/// its bytes counted on `bar` when they land.
void tma_load(void* dst, const void* map, void* bar, const int* coords, int rank);

/// wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{f16,bf16}: D (64×n, fp32, this thread's
/// n/2 values in `d`) = A·B (+ D if `accumulate`). A (64×16) comes from `a_regs` (four
/// registers, mma.sync's A layout) or, when `a_regs` is null, from shared memory through
/// `a_desc` (K-major); B (16×n) through `b_desc`, K-major or, if `b_mn_major`, MN-major.
void wgmma(MmaType type, int n, float* d, const std::uint32_t* a_regs, std::uint64_t a_desc, std::uint64_t b_desc,
           bool b_mn_major, bool accumulate, const char* file, int line);
/// wgmma.fence.sync.aligned.
void wgmma_fence(const char* file, int line);
/// wgmma.commit_group.sync.aligned.
void wgmma_commit(const char* file, int line);
/// wgmma.wait_group.sync.aligned n: retires the warpgroup's committed groups but the n newest.
void wgmma_wait(int n, const char* file, int line);

/// cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32: adds the `bytes` / 4 floats at
/// shared `src` into global `dst`, each addition atomic (size and addresses multiples of 16).
/// It reads shared memory and adds when the cp.async.bulk.wait_group that retires its group
/// runs, the latest the ISA allows, so a kernel that writes the source before that wait
/// adds what it wrote.
void bulk_reduce_add(float* dst, const void* src, unsigned bytes, const char* file, int line);
/// cp.async.bulk.commit_group: closes this thread's group of bulk operations.
void bulk_commit();
/// cp.async.bulk.wait_group[.read] n: retires this thread's committed groups but the n newest.
void bulk_wait(int n);

/// ld.acquire.gpu.b32 in a loop until it reads `value`: the thread waits (the block's other
/// threads, and other blocks in flight, run meanwhile) until another block's flag_release()
/// stores that value. A value no block will store is reported as a deadlock.
void flag_wait(const int* flag, int value, const char* file, int line);
/// fence.acq_rel.gpu then st.relaxed.gpu.b32 (a release): `value` to `flag`, after all that
/// this thread wrote and added before, and all that it saw its block write (a barrier).
void flag_release(int* flag, int value);

/// setmaxnreg.{inc,dec}.sync.aligned.u32 regs: checked (24-256, a multiple of 8, the
/// same in the whole warpgroup); registers are not modelled.
void setmaxnreg(int regs, const char* file, int line);

/// `address` after the swizzle of descriptor mode `mode` (0 none, 1: 128 B, 2: 64 B, 3: 32 B).
std::uint32_t swizzle(std::uint32_t address, int mode);
/// The shared address of element (mn, k) of a 16-bit wgmma operand read through `desc`:
/// row mn of A (or column mn of B), k along the sum (0-15).
std::uint32_t operand_address(std::uint64_t desc, bool mn_major, int mn, int k);

/// \cond CPU_BACKEND_INTERNAL
/// The scheduler's hook: a new block of `threads` starts (no barriers, copies or products).
void hopper_block_begins(int threads);
/// The scheduler's hook: thread `thread` of the running block has ended. Returns why that is
/// a fault (bulk reductions it never waited for), or an empty string.
std::string hopper_thread_exits(int thread);
/// \endcond

}  // namespace fa_cpu
