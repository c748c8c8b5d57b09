// Small kernels that exercise the CPU backend's Hopper emulation (see
// hopper_emulation_kernels.cu): a TMA → wgmma → wgmma round trip, and misuses it must report.
#pragma once

#include <vector>

namespace fa::cpu_test {

/// Q, K, V (64 × 64 each, row-major, values exact in 16 bits) copied by TMA with 128-byte
/// swizzling; S = Q·Kᵀ by four wgmma from shared memory, P = S rounded to 16 bits, O = P·V
/// by four wgmma with P in registers and V MN-major, as stage 08 does. Each thread's S
/// and O accumulators, thread after thread (32 values each), and, per thread, S[0] as read
/// between the products' commit and their wait.
struct RoundTrip {
  std::vector<float> s, o, s_before_wait;
};
RoundTrip tma_wgmma_round_trip(bool bf16, const std::vector<float>& q, const std::vector<float>& k,
                               const std::vector<float>& v);

/// A barrier of two arrivals, asked with mbarrier.test_wait whether the phases of parity 0
/// and 1 have completed, before and after each of five arrivals: 12 answers (0 or 1).
std::vector<unsigned> mbarrier_parities();

void wgmma_without_fence();          ///< a wgmma with no wgmma.fence before it: must fault
void mbarrier_never_completes();     ///< one arrival of two, then a wait: a deadlock
void named_barrier_disagreement();   ///< bar.sync 1 with 64 threads and with 96: must fault
void warpgroup_split();              ///< half a warpgroup in wgmma.fence, half in commit: must fault
void copy_over_product_in_flight();  ///< a TMA copy into what a running wgmma reads: must fault
void product_before_copy_lands();    ///< a wgmma reading a TMA destination nobody waited for: must fault
void named_barrier_split_warp();     ///< lanes of one warp at one named barrier, some bar.sync, some bar.arrive: must fault

/// 64 floats 0, 1, ..., 63 in shared memory added into 64 floats of 0.5 by one bulk reduction
/// (cp.reduce.async.bulk .add.f32); if `write_before_wait`, the thread then writes 1000 into
/// the first float of the tile before the wait that retires the reduction. The 64 sums.
std::vector<float> bulk_reduce(bool write_before_wait);
void bulk_reduce_misaligned();       ///< a reduction into an address 4 bytes past 16: must fault
void bulk_reduce_never_waited();     ///< a thread that ends with a reduction in flight: must fault

/// `blocks` blocks, each of which takes a ticket (atomicAdd), waits with flag_wait() until a
/// flag reads its ticket, records its blockIdx.x at the ticket's place and passes the flag on
/// with flag_release() (except the block with ticket `skip`, if one has it): the blockIdx.x of
/// the blocks in the order of their turns.
std::vector<int> flag_chain(int blocks, int skip = -1);

}  // namespace fa::cpu_test
