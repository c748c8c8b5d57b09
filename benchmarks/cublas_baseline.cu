// The cuBLAS baseline: batched GEMM, softmax, batched GEMM.
#include "benchmarks/cublas_baseline.h"

#include <cublas_v2.h>

#include <string>

#include "common/errors.h"
#include "stages/01_naive/naive_attention.h"

namespace fa::bench {

namespace {

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw CudaError(std::string(what) + " failed: " + cublasGetStatusString(status));
  }
}

// One handle for the program, on the default stream (where the timer's events go).
cublasHandle_t handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t created = nullptr;
    check(cublasCreate(&created), "cublasCreate");
    return created;
  }();
  return h;
}

// cuBLAS is column-major; our tensors are row-major. A row-major [rows x cols] matrix
// is the column-major [cols x rows] matrix, its transpose, so each product is asked
// for transposed: S^T = K·Q^T and O^T = V^T·P^T, in column-major terms.
void attention(const AttentionProblem& p, const float* Q, const float* K, const float* V, float* O,
               float* S) {
  const int nq = static_cast<int>(p.seq_q), nkv = static_cast<int>(p.seq_kv), d = static_cast<int>(p.dim);
  const int batch = static_cast<int>(p.batch_heads());
  const float scale = static_cast<float>(p.scale), one = 1.0f, zero = 0.0f;
  // S (row-major nq x nkv) = scale · Q (nq x d) · K^T: column-major S^T (nkv x nq) = K · Q^T.
  check(cublasSgemmStridedBatched(handle(), CUBLAS_OP_T, CUBLAS_OP_N, nkv, nq, d, &scale, K, d,
                                  static_cast<long long>(nkv) * d, Q, d, static_cast<long long>(nq) * d,
                                  &zero, S, nkv, static_cast<long long>(nq) * nkv, batch),
        "cublasSgemmStridedBatched (S = Q K^T)");
  naive::softmax_rows(S, S, p.rows(), p.seq_kv);
  // O (row-major nq x d) = P (nq x nkv) · V (nkv x d): column-major O^T (d x nq) = V^T · P^T.
  check(cublasSgemmStridedBatched(handle(), CUBLAS_OP_N, CUBLAS_OP_N, d, nq, nkv, &one, V, d,
                                  static_cast<long long>(nkv) * d, S, nkv, static_cast<long long>(nq) * nkv,
                                  &zero, O, d, static_cast<long long>(nq) * d, batch),
        "cublasSgemmStridedBatched (O = P V)");
}

}  // namespace

StageDemo cublas_baseline() {
  StageDemo stage = naive::describe();  // same workspace (S/P) and the same IO model
  stage.id = "cublas_baseline";
  stage.title = "cuBLAS batched SGEMM + stage 01's row softmax + cuBLAS batched SGEMM (FP32)";
  stage.supports_causal = false;
  stage.run = [](const AttentionProblem& p, const DeviceTensors& t, void* workspace) {
    if (p.causal) throw InputError("the cuBLAS baseline has no causal mask");
    const auto f = t.f32();
    attention(p, f.q, f.k, f.v, f.o, static_cast<float*>(workspace));
  };
  return stage;
}

}  // namespace fa::bench
