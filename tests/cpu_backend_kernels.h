// Small kernels that exercise the CPU backend itself (see cpu_backend_kernels.cu).
#pragma once

#include <vector>

namespace fa::cpu_test {

/// Threads >= active return at once; the rest exchange values through shared memory
/// across a __syncthreads(). Returns out[t] = (t + 1) % active for t < active.
std::vector<int> barrier_with_early_exit(int threads, int active);
/// Every lane's result of one shuffle kind (0 idx, 1 up, 2 down, 3 xor) over 2 warps.
std::vector<float> shuffle(int kind, int param, int width);
/// __ballot_sync, __any_sync, __all_sync of (lane % 3 == 0) and of (lane >= 0).
std::vector<unsigned> votes();
/// Reverses `in` through `extern __shared__` memory, one block per 100 values.
std::vector<float> reverse_in_dynamic_shared(const std::vector<float>& in);
/// out[linear thread id of the grid] = encoded (blockIdx, threadIdx) in a 3-D launch.
std::vector<int> indices_3d();
/// A block-wide sum with no barrier between the writes and the reads.
std::vector<float> missing_barrier(int threads);
/// Thread 0 writes a shared value that another thread then reads (64 threads), with an
/// ordering rule between them: 0 __syncwarp(), 1 __syncwarp(mask of both lanes), 2 a
/// chain of two partial __syncwarps, 3 __syncwarp() but the reader is in the other warp,
/// 4 __syncthreads(), 5 only a vote, 6 a fence by the writer then a vote, 7 lane 1 reads
/// and lane 0 overwrites after a shuffle (write after read), 8 a __syncwarp() that
/// leaves the reader out. Rules 0, 1, 2, 4 and 6 order the accesses; the others race.
void ordering_rule(int rule);
/// Two blocks of 64 threads add (t, 2t, 3t, 4t) to the float4 at buf + offset and (t, −t)
/// to the float2 after it (t = threadIdx.x + 1), in an 8-float buffer of ones.
std::vector<float> vector_atomics(int offset);
/// Four blocks of 32 threads; thread t of block b has in[32·b + t] = t + 1. Rule 0: each
/// adds it to sum[t] with a plain +=; 1: with atomicAdd; 2: block 0 sets sum[t] = 0 while
/// the others add atomically; 3: each writes its own slot sum[32·b + t]; 4: each writes
/// its slot, then blocks b > 0 add block 0's slot to theirs; 5: the last block zeroes
/// in[t], which the others read. Rules 1 and 3 are right; the others race between blocks.
std::vector<float> blocks_add(int rule);
/// Rule 3 twice, the second launch reading the first's output: right (a kernel's end
/// orders everything). Returns the second launch's output.
std::vector<float> two_launches();
/// `blocks` blocks of 32 threads: each writes its own numbers to a static and to the
/// dynamic shared memory, stores to global memory, then reads them back. Returns, per
/// thread t of block b, b·1100 + 2·((t + 1) mod 32) when every block kept its own.
std::vector<float> own_shared(int blocks);
/// Every block stores in a loop, then block `bad` waits at two different barriers (a fault).
void one_block_faults(int blocks, int bad);
/// Launches with a bad configuration and returns cudaGetLastError() as an int.
int bad_configuration(int threads, int smem_bytes, bool opt_in);

void divergent_barrier();          ///< two __syncthreads() call sites: must fault
void shuffle_in_divergent_branch();  ///< half a warp shuffles, half exits: must fault
void shuffle_against_barrier();    ///< half a warp shuffles, half waits at a barrier
void throw_in_kernel(int thread);  ///< that thread throws std::runtime_error
void out_of_bounds_shared_write();  ///< writes one past a __shared__ array (for ASan)

}  // namespace fa::cpu_test
