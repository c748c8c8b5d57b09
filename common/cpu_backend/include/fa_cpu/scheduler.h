/**
 * \file scheduler.h
 * \brief CPU backend: what kernel code and launches call into. Each CUDA thread of a
 *        block is a fiber that runs until it reaches a barrier, a warp collective, or its
 *        end. Blocks run one at a time, or several in flight together (Options).
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "fa_cpu/types.h"

/// \name Where the running CUDA thread is (read them in gdb: `p fa_cpu_threadIdx`)
///@{
extern "C" uint3 fa_cpu_threadIdx;  ///< threadIdx of the running fiber
extern "C" uint3 fa_cpu_blockIdx;   ///< blockIdx of the running block
extern "C" uint3 fa_cpu_blockDim;   ///< blockDim of the running launch
extern "C" uint3 fa_cpu_gridDim;    ///< gridDim of the running launch
///@}

namespace fa_cpu {

/// A kernel failed: a deadlock, a divergent barrier, a bad warp collective, or an
/// exception thrown by kernel code. The message names the kernel, block and threads.
class KernelFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Knobs that make missing barriers and uninitialised shared memory show up.
struct Options {
  bool reverse_threads = false;  ///< run a block's threads in reverse order
  bool poison_shared = false;    ///< fill shared memory with NaN (0xFF bytes) before each block
  /// Check shared-memory accesses for races by CUDA's ordering rules, and global-memory
  /// accesses for races between blocks (where the kernels were built with the race
  /// detector; see racecheck_built()). A race fails the launch.
  bool racecheck = true;
  /**
   * How many blocks of a grid are in flight together. 1: one block at a time, in grid
   * order. More: the grid's blocks start in a shuffled order, as many at once as this
   * says, and take turns in a shuffled order; a block's turn lasts until each of its
   * threads reaches its next barrier, warp collective, atomic or (in race-detector builds,
   * whose kernel files report their stores) plain store to a cudaMalloc buffer. Two blocks
   * that add to one value with a plain load and store then interleave between the load and
   * the store, and an update is lost, as on a GPU. Each block keeps its own shared memory;
   * the shared-memory race rules are off (the global ones stay on).
   */
  int blocks_at_once = 1;
  unsigned shake_seed = 1;  ///< seeds the shuffled orders (the same seed, the same orders)
  /**
   * -1: each round of the scheduler runs every thread that can go on to its next wait, so a
   * block's warpgroups (128 threads each) advance together. N >= 0: a round runs only the
   * first warpgroup, counting from N (N, N + 1, ... wrapping), that has a thread that can go
   * on, so warpgroup N runs ahead until it waits for something the others must do. Two
   * warpgroups that share data with no barrier between them then meet out of order, as they
   * may on a GPU (stage 13's consumers before dQ).
   */
  int lead_warpgroup = -1;
};
/// The current options. FA_CPU_SHAKE=1 in the environment turns on reverse_threads and
/// poison_shared and sets blocks_at_once to 4; FA_CPU_SHAKE_BLOCKS=N sets blocks_at_once,
/// FA_CPU_SHAKE_SEED=S the seed; FA_CPU_RACECHECK=0 turns racecheck off.
Options& options();

/// Whether this build's kernel files report their shared-memory accesses to the race
/// detector (CMake option FA_CPU_RACECHECK; off under AddressSanitizer).
bool racecheck_built();

/// __threadfence_block() and __threadfence(): the running thread's earlier writes are
/// visible to the rest of the block from now on (for the race detector).
void fence();

/// An atomic read-modify-write of `bytes` at `address` by the running thread, issued at
/// kernel code address `pc` (for the race detector: atomics race only with plain accesses).
void note_atomic(const void* address, std::size_t bytes, const void* pc);

/// One <<<grid, block, smem, stream>>> launch.
struct LaunchConfig {
  dim3 grid;                  ///< blocks
  dim3 block;                 ///< threads per block
  std::size_t smem = 0;       ///< dynamic shared memory bytes
  const void* kernel = nullptr;  ///< the kernel function (for attributes)
  const char* name = "";      ///< the kernel's name as written at the launch
  const char* file = "";      ///< the launch's file
  int line = 0;               ///< the launch's line
  /// Whether the race detector applies its shared-memory rules (false for kernel files
  /// built with FA_CPU_NO_SHARED_RACECHECK: their barriers are mbarriers, not modelled).
  bool shared_racecheck = true;
  static constexpr int kMaxArguments = 24;  ///< arguments past this many are not noted
  /// The kernel's arguments that are pointers, in order (null for the others), so that a
  /// race report can say which argument a global buffer was passed as.
  const void* pointers[kMaxArguments] = {};
  int arguments = 0;  ///< how many of `pointers` are filled in
};

/**
 * Runs `body` once per CUDA thread of every block. A bad configuration sets the last
 * error (cudaErrorInvalidConfiguration) and returns, as CUDA does. A failing kernel
 * throws KernelFault.
 */
void run_kernel(const LaunchConfig& config, const std::function<void()>& body);

/// The kinds of warp-level collective.
enum class WarpOp : std::uint8_t { Sync, Shfl, ShflUp, ShflDown, ShflXor, Ballot, Any, All, Matrix };

/// __syncthreads(): waits until every thread of the block that has not exited arrives.
void syncthreads(const char* file, int line);

/**
 * One warp collective: every lane named in `mask` must call it with the same op and
 * mask. `value` is this lane's contribution (bits of the shuffled variable, or the
 * predicate); `param` is srcLane, delta or laneMask. Returns this lane's result.
 */
std::uint64_t warp_collective(WarpOp op, unsigned mask, std::uint64_t value, int param, int width,
                              const char* file, int line);

/// A warp-wide matrix instruction (ldmatrix, mma.sync): given every lane's operand block,
/// indexed by lane (null for lanes outside the mask), computes every lane's results.
using MatrixOp = void (*)(void* const lanes[32]);

/**
 * One warp-wide matrix instruction: every lane in `mask` calls it with the same `op`,
 * passing a pointer to its own operands and results (`lane_data`, valid until the call
 * returns). The last lane to arrive runs `op` over all lanes' blocks, so the instruction
 * sees the whole warp's registers at once, as the hardware does. `name` names the
 * instruction in deadlock and mismatch reports.
 */
void warp_matrix(MatrixOp op, const char* name, unsigned mask, void* lane_data, const char* file, int line);

/**
 * Suspends the running thread until `ready()` returns true. The scheduler asks again each
 * time it passes the thread, between other threads' turns (so `ready` must not throw and
 * may only look at state those threads change). `what()` says what the thread waits for, in
 * a deadlock report (called only then, so it tells the state at the deadlock). Used by the Hopper emulation (mbarrier waits, named barriers,
 * warpgroup instructions; fa_cpu/hopper.h).
 */
void block_until(const std::function<bool()>& ready, const std::function<std::string()>& what, const char* file,
                 int line);

/// Lets the other threads of the block run before the running thread goes on (it stays
/// ready). The Hopper emulation calls it when an arrival completes an mbarrier phase, so
/// the threads waiting for that phase run first, as they may on a GPU.
void reschedule();

/// Mask of the lanes of the calling warp that have not exited.
unsigned active_mask();

/// The linear index (x + y·blockDim.x + z·blockDim.x·blockDim.y) of the running CUDA thread.
int current_thread();

/// The current launch's dynamic shared memory (extern __shared__), 1024-byte aligned.
void* dynamic_shared_memory(std::size_t alignment);

/// The running launch's dynamic shared memory (null outside a launch).
void* dynamic_shared_base();
/// Its size in bytes (0 outside a launch).
std::size_t dynamic_shared_bytes();


/// Registers a static __shared__ variable for poison_shared, blocks in flight together and
/// the race detector. The translated kernel calls use() each time its declaration is passed.
struct SharedRegion {
  /// Registers `bytes` at `address`, the variable `name`.
  SharedRegion(void* address, std::size_t bytes, const char* name);
  /// The running launch uses the variable: the first call in a launch marks it as this
  /// kernel's (poisoned then if poison_shared is on; saved and restored between blocks in
  /// flight together); later calls cost a compare.
  void use() const;

 private:
  std::size_t index_;  ///< its place among the registered variables
};

}  // namespace fa_cpu
