/**
 * \file cublas_baseline.h
 * \brief The baseline most people would write with the vendor library: S = scale·Q·Kᵀ
 *        with cuBLAS, a row softmax, O = P·V with cuBLAS. Like stage 01 it keeps the
 *        N×N matrix in HBM; unlike stage 01 its matrix products are NVIDIA's.
 */
#pragma once

#include "common/demo.h"

namespace fa::bench {

/**
 * The baseline as the benchmark sees it: two cublasSgemmStridedBatched calls (one per
 * head, FP32, cuBLAS's default math mode: no TF32) around stage 01's row softmax.
 * Non-causal only (supports_causal = false). GPU build only.
 */
StageDemo cublas_baseline();

}  // namespace fa::bench
