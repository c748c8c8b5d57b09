/**
 * \file hopper_attention.h
 * \brief Stage 08's host interface: FlashAttention-2 on Hopper's own machinery (wgmma,
 *        TMA, mbarrier, warp specialisation). Built for sm_90a only.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/problem.h"

namespace fa {
struct StageDemo;
}  // namespace fa

namespace fa::hopper {

/// This stage as the shared demo driver sees it.
StageDemo describe();

constexpr int Br = 128;  ///< query rows per block: two consumer warpgroups of 64 rows
constexpr int Bc = 128;  ///< key/value rows per tile (one TMA box each of K and V)

/// \name The optimisation log's switches (benchmarks/tune_stage08.sh builds each variant)
///@{
#ifndef FA08_STAGES
#define FA08_STAGES 3  ///< K/V tiles in flight: the ring's slots
#endif
#ifndef FA08_OVERLAP
#define FA08_OVERLAP 1  ///< softmax of tile j+1 while P_j·V_j runs (0: each product waited for at once)
#endif
#ifndef FA08_PINGPONG
#define FA08_PINGPONG 1  ///< with FA08_OVERLAP: the two consumers take turns at the tensor cores
#endif
///@}

/// Whether this build has stage 08's kernels (nvcc with sm_90a) and this process's GPU
/// can run them (compute capability 9.0). \returns an empty string if so, else why not.
std::string unavailable_reason();

/// Shared memory one block uses for head dimension d.
std::size_t shared_bytes(int64_t d);

/**
 * O = softmax(scale·Q·Kᵀ)·V in fp16 or bf16 on a Hopper GPU, d = 64 or 128.
 * \param p the problem; \param Q, K, V the inputs; \param O the output; \param lse if
 * not null, receives each query row's log-sum-exp in fp32 (B·H·Nq floats).
 * \throws InputError for fp32 or another head dimension; NoGpuError on a GPU that is not a Hopper.
 */
void attention(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O,
               float* lse = nullptr);

/// HBM bytes this kernel moves according to the IO model: Q and O once, K and V once per
/// Q tile of Br rows.
double hbm_bytes_model(const AttentionProblem& p);

}  // namespace fa::hopper
