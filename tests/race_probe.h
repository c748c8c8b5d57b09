// Kernels with a race planted on purpose, for the two race detectors: the CPU backend's
// (tests/test_cpu_backend.cpp) and compute-sanitizer's racecheck on the GPU
// (race_probe_main.cpp, run by CTest under racecheck). The same file builds for both.
#pragma once

#include <cstdint>
#include <vector>

namespace fa::race_probe {

/// One warp: each lane writes s[lane], then all lanes meet in a __shfl_xor_sync, then
/// lane L reads s[31 - L]. With `planted`, the __syncwarp() between the writes and the
/// reads is missing: the shuffle synchronises the lanes but orders no memory, so the
/// reads race with the writes (the results usually come out right all the same).
/// Returns out[L] = 2·in[31 - L] + in[L ^ 16].
std::vector<float> shuffle_then_read(bool planted);

/// One warp: the lanes store an 8×8 tile of 16-bit values to shared memory, then the
/// warp reads it with ldmatrix. With `planted`, the __syncwarp() before ldmatrix is
/// missing. Returns every lane's ldmatrix register (row L/4, columns 2·(L%4), +1).
std::vector<std::uint32_t> store_then_ldmatrix(bool planted);

}  // namespace fa::race_probe
