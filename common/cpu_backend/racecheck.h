// CPU backend internals: the race detector (racecheck.cpp), called by the scheduler at
// the events that order memory between CUDA threads.
//
// Shared memory, within a block:
// The rule it checks is CUDA's, not the fiber schedule's: a thread's shared-memory
// access is ordered before another thread's only by a barrier both take part in
// (__syncthreads, or __syncwarp with both lanes in the mask), directly or through a
// chain of such barriers, or, for a write, by a fence its writer executed since. Two
// accesses to the same bytes by different threads, at least one a write, with no such
// order between them, are a race. Shuffles, votes and matrix instructions synchronise
// lanes but order no memory, so they do not count.
//
// Global memory, between blocks: blocks of one launch are not ordered with each other at
// all (only the kernel's end orders them), so two blocks that touch the same bytes of a
// cudaMalloc'd buffer, at least one of them with a plain write, race. Atomic
// read-modify-writes do not race with each other, but do with another block's plain
// loads and stores of the same bytes. A flag stored with release semantics by one block
// (flag_released) and read with acquire semantics by another (flag_acquired) orders the
// first block's accesses before the release ahead of the second's after the acquire. That is
// modelled block by block, more loosely than CUDA's rule (which orders only what the storing
// thread wrote, or its block wrote before a barrier it passed, and what the loading thread,
// or its block after a barrier, reads next): in the emulation's schedule a thread of the
// first block that writes after the flag's store, or one of the second block that reads
// before the flag's load, is still reported. Accesses within one block are left to the
// shared-memory rules' intent and not checked in global memory.
//
// The accesses come from the compiler: kernel files are built with GCC's or Clang's
// ThreadSanitizer instrumentation (-fsanitize=thread at compile time only), which calls
// __tsan_read4(addr) and friends before every load and store. ThreadSanitizer's own
// runtime is not linked: racecheck.cpp defines those functions itself and looks only at
// addresses inside the block's shared memory and inside cudaMalloc'd buffers.
#pragma once

#include <cstddef>
#include <string>

namespace fa_cpu::race {

/// Whether the kernel files were built with the instrumentation (FA_CPU_RACECHECK).
bool built();

/// A launch starts: `threads` per block, the dynamic shared memory buffer. `enabled`
/// turns checking on for this launch; `shared` the shared-memory rules (off for kernels
/// whose barriers the detector does not model: mbarriers, and while blocks are in flight
/// together); `interleaved`: several blocks are in flight, and every plain store to a
/// cudaMalloc buffer is a switch point (fa_cpu::interleave_point), checked or not;
/// `pointers` are the kernel's arguments that are pointers (null for the others), to name
/// a buffer in a report.
void launch_begins(bool enabled, bool shared, bool interleaved, int threads, const void* dynamic_smem,
                   std::size_t dynamic_bytes, const void* const* pointers, int count);
/// The launch is over (normally or by a fault).
void launch_ends();
/// A new block starts (fa_cpu_blockIdx is set): nothing it does is ordered with the
/// previous block's accesses to the same shared memory, because that block has finished;
/// its global accesses race with those of every other block of the launch.
void block_begins();
/// The running thread stored a flag with release semantics (fa_cpu::flag_release).
void flag_released(const void* flag);
/// The running thread read, with acquire semantics, the value another block's release
/// stored at `flag` (fa_cpu::flag_wait, once it returns).
void flag_acquired(const void* flag);
/// Another block in flight runs from now on (fa_cpu_blockIdx is set).
void block_resumes();
/// `thread` (linear id) runs from now on; -1 while the scheduler runs.
void set_current(int thread);
/// A __syncthreads() released every thread of the block.
void barrier();
/// A __syncwarp(mask) released the lanes of `mask` in warp `warp`.
void warp_sync(int warp, unsigned mask);
/// The running thread executed __threadfence_block() or __threadfence().
void fence();
/// A static __shared__ variable (registered once, the first time its kernel runs).
void add_region(const void* address, std::size_t bytes, const char* name);
/// An access by the running thread that the compiler cannot see (ldmatrix's row reads,
/// cp.async's and TMA's copies, done by the backend): `pc` is the kernel code's address
/// that issued it.
void access(const void* address, std::size_t bytes, bool write, const void* pc);
/// An atomic read-modify-write by the running thread (kernel.h's atomics).
void atomic_access(const void* address, std::size_t bytes, const void* pc);

/// A buffer of global memory (cudaMalloc): its accesses are checked for races between
/// blocks. Buffers over kMaxTrackedBytes are not (the shadow would be 18 times as big).
void add_buffer(const void* address, std::size_t bytes);
/// The buffer is freed.
void remove_buffer(const void* address);
constexpr std::size_t kMaxTrackedBytes = std::size_t{64} << 20;

/// Whether the block that just ran had a race; if so, the report (both accesses with
/// their source lines, the threads and blocks, the variable or buffer and the offset).
bool pending();
std::string take_report();

}  // namespace fa_cpu::race
