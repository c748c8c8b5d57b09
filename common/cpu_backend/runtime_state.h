// CPU backend internals shared by runtime.cpp and scheduler.cpp.
#pragma once

#include <cstddef>
#include <map>

#include "cuda_runtime.h"

namespace fa_cpu {

constexpr std::size_t kSharedMemDefault = 48 * 1024;   // without opting in
constexpr std::size_t kSharedMemOptin = 227 * 1024;    // an H100's opt-in limit

/// Sets the error cudaGetLastError returns next.
void set_last_error(cudaError_t err);
/// Per-kernel dynamic shared-memory limits set with cudaFuncSetAttribute.
std::map<const void*, int>& kernel_smem_limits();

/// Which of the blocks in flight runs (0 when blocks run one at a time): the emulations
/// that keep per-block state (cp.async groups, mbarriers) keep one copy per slot.
int block_slot();
/// A point where the scheduler may switch to another block in flight (called before a
/// store to global memory or an atomic); does nothing when blocks run one at a time.
/// Never throws.
void interleave_point();

}  // namespace fa_cpu
