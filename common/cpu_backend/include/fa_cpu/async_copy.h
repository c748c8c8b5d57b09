/**
 * \file async_copy.h
 * \brief CPU backend: `cp.async` (global to shared memory, asynchronous) with its
 *        commit and wait groups, as the PTX ISA defines them.
 *
 * A thread's `cp.async` only starts a copy. Its copies since the last commit form a
 * group at `cp.async.commit_group`; `cp.async.wait_group N` waits until at most the N
 * most recent groups are still pending. The copied data is guaranteed to be in shared
 * memory only after the wait that completes its group (and visible to other threads only
 * after a barrier that follows it).
 *
 * The backend makes that literal: the source is read when the copy is issued, and the
 * bytes are written to shared memory only at the wait that completes the group (or, for
 * copies never waited for, when the thread exits). A kernel that reads a tile before its
 * wait therefore reads whatever the buffer held before (the previous tile, or NaN under
 * FA_CPU_SHAKE), and its results are wrong here on every run, where on a GPU they would
 * be wrong only sometimes. The race detector sees the write at the wait, attributed to
 * the thread and to the line of its cp.async.
 */
#pragma once

#include <cstddef>

namespace fa_cpu {

/// cp.async.{ca,cg}.shared.global [dst], [src], bytes, src_bytes: `bytes` (4, 8 or 16)
/// bytes, of which the first `src_bytes` come from `src` and the rest are zeros.
void cp_async(void* dst, const void* src, std::size_t bytes, std::size_t src_bytes);
/// cp.async.commit_group: this thread's copies since the last commit become one group.
void cp_async_commit();
/// cp.async.wait_group n: completes this thread's groups until at most `n` are pending.
void cp_async_wait(int n);

/// \cond CPU_BACKEND_INTERNAL
/// The scheduler's hooks: a new block starts (`threads` of them, nothing pending); a
/// thread exits (its pending copies land).
void async_copy_block_begins(int threads);
void async_copy_thread_exits(int thread);
/// \endcond

}  // namespace fa_cpu
