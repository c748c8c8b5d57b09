// The stages behind a C interface, for the Python module (python/fa_stages): one shared
// library per backend, libfa_stages_cuda.so (the GPU kernels) and libfa_stages_cpu.so (the
// same kernels on the CPU backend). Plain C types only, so Python loads it with ctypes and
// nothing depends on PyTorch's C++ ABI. Every function returns 0 on success; otherwise 1
// for bad input, 2 for anything else, and fa_stages_error() says what went wrong.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "common/cuda_check.h"
#include "common/device.h"
#include "common/errors.h"
#include "common/problem.h"
#include "common/stream.h"
#include "stages/01_naive/naive_attention.h"
#include "stages/02_online_softmax/online_softmax.h"
#include "stages/03_streaming/streaming_attention.h"
#include "stages/04_flash1/flash1_attention.h"
#include "stages/05_flash2/flash2_attention.h"
#include "stages/06_tensor_cores/tensor_core_attention.h"
#include "stages/07_memory_pipeline/pipelined_attention.h"
#if FA_HAVE_STAGE08
#include "stages/08_hopper/hopper_attention.h"
#include "stages/12_masks/masked_attention.h"
#include "stages/13_backward_hopper/hopper_backward.h"
#endif
#include "stages/10_backward/backward_attention.h"
#include "stages/11_backward_tensor_cores/tensor_core_backward.h"

#define FA_API extern "C" __attribute__((visibility("default")))

namespace {

thread_local std::string g_error;

// Runs `f`, turning an exception into a return code and the message fa_stages_error() gives.
template <typename F>
int guarded(F&& f) {
  try {
    f();
    return 0;
  } catch (const fa::InputError& e) {
    g_error = e.what();
    return 1;
  } catch (const std::exception& e) {
    g_error = e.what();
    return 2;
  } catch (...) {
    g_error = "an exception of unknown type";
    return 2;
  }
}

fa::DType dtype_of(int code) {
  switch (code) {
    case 0: return fa::DType::F32;
    case 1: return fa::DType::F16;
    case 2: return fa::DType::BF16;
    default: throw fa::InputError("unknown dtype code " + std::to_string(code));
  }
}

fa::AttentionProblem problem(int dtype, int64_t b, int64_t h, int64_t nq, int64_t nkv, int64_t d, double scale,
                             int causal) {
  return fa::make_problem(b, h, nq, nkv, d, scale, causal != 0, dtype_of(dtype));
}

// The layout that `strides` gives: null for contiguous tensors, else (batch, head, row) in
// elements for each of `count` tensors in the order q, k, v, o, d_o.
fa::Layout layout_of(const fa::AttentionProblem& p, const int64_t* strides, int count) {
  fa::Layout layout = fa::Layout::contiguous(p);
  if (!strides) return layout;
  fa::Strides* each[] = {&layout.q, &layout.k, &layout.v, &layout.o, &layout.d_o};
  for (int i = 0; i < count; ++i) *each[i] = {strides[3 * i], strides[3 * i + 1], strides[3 * i + 2]};
  return layout;
}

void require_fp32(const fa::AttentionProblem& p, const std::string& stage) {
  if (p.dtype != fa::DType::F32) throw fa::InputError("stage " + stage + " computes in fp32 only");
}

// Whether stage 13 runs here: a Hopper GPU, or the CPU backend.
bool stage13_runs_here() {
#if FA_HAVE_STAGE08
  return fa::hopper_backward::unavailable_reason().empty();
#else
  return false;
#endif
}

// The backward stage that `stage` names: "10", "11" or "13" as given; "auto" the fastest for
// the problem, as measured on the H100 (benchmarks/results): stage 10 for fp32; for fp16 and
// bf16, stage 13 at d = 64 and 128 where it runs (a Hopper, or the CPU backend), else stage 11.
// `deterministic`: dQ's additions in a fixed order, which only stage 13 offers (stages 10 and
// 11 add by atomics in any order).
std::string backward_stage(const fa::AttentionProblem& p, const std::string& stage, bool deterministic) {
  if (stage != "auto" && stage != "10" && stage != "11" && stage != "13") {
    throw fa::InputError("no backward stage \"" + stage + "\": choose \"auto\", \"10\", \"11\" or \"13\"");
  }
  if (deterministic) {
    if (stage == "10" || stage == "11") {
      throw fa::InputError("backward stage " + stage + " adds dQ by atomics in any order: it has no deterministic "
                           "mode (stage 13 has)");
    }
    if (p.dtype == fa::DType::F32 || (p.dim != 64 && p.dim != 128) || !stage13_runs_here()) {
      throw fa::InputError(std::string("no deterministic backward pass for ") + fa::dtype_name(p.dtype) + " at d = " +
                           std::to_string(p.dim) + " here: only stage 13 (fp16 or bf16, d = 64 or 128, on a Hopper "
                           "GPU or the CPU backend) adds dQ in a fixed order");
    }
    return "13";
  }
  if (stage != "auto") return stage;
  if (p.dtype == fa::DType::F32) return "10";
  if ((p.dim == 64 || p.dim == 128) && stage13_runs_here()) return "13";
  return "11";
}

void select_device([[maybe_unused]] int device) {
#if !FA_CPU_BACKEND
  FA_CUDA_CHECK(cudaSetDevice(device));
#endif
}

}  // namespace

/// Why the last call failed.
FA_API const char* fa_stages_error() { return g_error.c_str(); }

/// Writes the device's name (at most `size` bytes with the terminating zero) into `name`.
FA_API int fa_stages_device_name(int device, char* name, int size) {
  return guarded([&] {
    select_device(device);
    cudaDeviceProp prop{};
    FA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    std::snprintf(name, static_cast<std::size_t>(size), "%s", prop.name);
  });
}

/// Whether stage 08 runs here: writes "" or the reason it does not into `reason`.
FA_API int fa_stages_hopper_unavailable(int device, char* reason, int size) {
  return guarded([&] {
    select_device(device);
#if FA_HAVE_STAGE08
    const std::string why = fa::hopper::unavailable_reason();
#else
    const std::string why = "this build has no stage 08 (it needs nvcc 12 or newer)";
#endif
    std::snprintf(reason, static_cast<std::size_t>(size), "%s", why.c_str());
  });
}

/**
 * Device bytes of workspace the forward pass of `stage` ("01" to "08") needs, into *bytes:
 * stage 01 and 02 keep S (then P) there, stage 04 its running m and l (B·H·Nq floats each,
 * m first); the others need none.
 */
FA_API int fa_stages_forward_workspace(const char* stage, int dtype, int64_t b, int64_t h, int64_t nq, int64_t nkv,
                                       int64_t d, int causal, int64_t* bytes) {
  return guarded([&] {
    const fa::AttentionProblem p = problem(dtype, b, h, nq, nkv, d, 0.0, causal);
    const std::string s = stage;
    *bytes = s == "01" || s == "02" ? static_cast<int64_t>(fa::naive::workspace_bytes(p))
             : s == "04"            ? static_cast<int64_t>(fa::flash1::workspace_bytes(p))
                                    : 0;
  });
}

/**
 * O = softmax(scale·Q·Kᵀ)·V by stage `stage`, tensors [B, H, N, d] (lse: [B, H, Nq] fp32,
 * contiguous), 16-byte aligned, on device `device`; `scale` 0 means 1/sqrt(d). `strides`:
 * null for contiguous tensors, or 12 numbers, (batch, head, row) strides in elements of q,
 * k, v and o in turn, which only stage 08 takes (fa::Layout says what it needs of them).
 * `lse` receives each row's log-sum-exp from the stages that keep it (03, 05, 06, 07,
 * 08); stages 01, 02 and 04 leave it alone (04's m and l are in the workspace). `stats`:
 * null, or for stage 05 [B, H, Nq] pairs of floats that receive each row's m and 1/l
 * (fa::flash2::RowStats), which fa_stages_backward takes for stage 10. `stream` is the
 * caller's CUDA stream (null: the default stream); the kernels are launched on it.
 */
FA_API int fa_stages_forward(const char* stage, int dtype, int64_t b, int64_t h, int64_t nq, int64_t nkv, int64_t d,
                             double scale, int causal, const void* q, const void* k, const void* v, void* o,
                             float* lse, void* stats, const int64_t* strides, void* workspace, int device,
                             void* stream) {
  return guarded([&] {
    const fa::AttentionProblem p = problem(dtype, b, h, nq, nkv, d, scale, causal);
    const std::string s = stage;
    if (strides && s != "08") throw fa::InputError("stage " + s + " reads contiguous tensors only: pass no strides");
    if (stats && s != "05") throw fa::InputError("only stage 05 hands over m and 1/l: pass no stats");
    select_device(device);
    const fa::StreamScope on(static_cast<cudaStream_t>(stream));  // the stages launch on the caller's stream
    const auto* fq = static_cast<const float*>(q);
    const auto* fk = static_cast<const float*>(k);
    const auto* fv = static_cast<const float*>(v);
    auto* fo = static_cast<float*>(o);
    if (s == "01" || s == "02") {
      require_fp32(p, s);
      fa::naive::attention(p, fq, fk, fv, fo, static_cast<float*>(workspace),
                           s == "01" ? fa::naive::softmax_rows : fa::online::softmax_rows_only);
    } else if (s == "03") {
      require_fp32(p, s);
      fa::streaming::attention(p, fq, fk, fv, fo, lse);
    } else if (s == "04") {
      require_fp32(p, s);
      auto* m = static_cast<float*>(workspace);
      fa::flash1::attention(p, fq, fk, fv, fo, m, m + p.rows());
    } else if (s == "05") {
      require_fp32(p, s);
      fa::flash2::attention(p, fq, fk, fv, fo, lse, nullptr, static_cast<fa::flash2::RowStats*>(stats));
    } else if (s == "06") {
      fa::tensor_core::attention(p, q, k, v, o, lse);
    } else if (s == "07") {
      fa::pipeline::attention(p, q, k, v, o, lse);
    } else if (s == "08") {
#if FA_HAVE_STAGE08
      fa::hopper::attention_strided(p, q, k, v, o, lse, layout_of(p, strides, 4));
#else
      throw fa::NoGpuError("this build has no stage 08 (it needs nvcc 12 or newer)");
#endif
    } else {
      throw fa::InputError("no forward stage \"" + s + "\": stages 01 to 08 compute attention");
    }
    FA_CUDA_CHECK(cudaGetLastError());
  });
}

/**
 * A plan of stage 12 (fa::masks::Plan) for queries of `nq` rows and keys of `nkv`, on device
 * `device`, into *plan (free it with fa_stages_mask_plan_free): the causal mask if `causal`,
 * a sliding window (`window_left`, `window_right`: −1 for no bound), `docs` packed documents
 * of `doc_lengths` rows (0 and null: one), and a block mask of `block_q` × `block_kv` blocks
 * whose ⌈nq/block_q⌉·⌈nkv/block_kv⌉ flags `block_keep` holds in host memory (null: every
 * block kept). counts[0..2] receive the blocks a head that are empty, partial and full.
 */
FA_API int fa_stages_mask_plan(int64_t nq, int64_t nkv, int causal, int64_t window_left, int64_t window_right,
                               const int64_t* doc_lengths, int64_t docs, const uint8_t* block_keep, int64_t block_q,
                               int64_t block_kv, int device, void** plan, int64_t* counts) {
  return guarded([&] {
#if FA_HAVE_STAGE08
    const fa::AttentionProblem p = problem(1, 1, 1, nq, nkv, 64, 0.0, causal);
    fa::Mask mask;
    mask.window_left = window_left;
    mask.window_right = window_right;
    if (docs > 0) mask.doc_lengths.assign(doc_lengths, doc_lengths + docs);
    if (block_keep) {
      mask.blocks = fa::full_block_mask(p, block_q, block_kv);
      std::memcpy(mask.blocks->keep.data(), block_keep, mask.blocks->keep.size());
    }
    select_device(device);
    auto* made = new fa::masks::Plan(p, mask);
    const fa::masks::BlockClasses& c = made->classes();
    counts[0] = c.count(fa::masks::BlockKind::empty);
    counts[1] = c.count(fa::masks::BlockKind::partial);
    counts[2] = c.count(fa::masks::BlockKind::full);
    *plan = made;
#else
    throw fa::NoGpuError("this build has no stage 12 (it needs nvcc 12 or newer)");
#endif
  });
}

/// Frees a plan of fa_stages_mask_plan (null: nothing).
FA_API void fa_stages_mask_plan_free(void* plan) {
#if FA_HAVE_STAGE08
  delete static_cast<fa::masks::Plan*>(plan);
#endif
}

/**
 * O = softmax(scale·Q·Kᵀ under the plan's mask)·V by stage 12, fp16 or bf16 tensors [B, H,
 * N, d] with (batch, head, row) `strides` in elements for q, k, v and o in turn (12 numbers,
 * or null for contiguous ones), lse [B, H, Nq] fp32 contiguous (or null), on `stream` as
 * fa_stages_forward. Nq, Nkv and `causal` must be the plan's.
 */
FA_API int fa_stages_masked_forward(const void* plan, int dtype, int64_t b, int64_t h, int64_t nq, int64_t nkv,
                                    int64_t d, double scale, int causal, const void* q, const void* k, const void* v,
                                    void* o, float* lse, const int64_t* strides, int device, void* stream) {
  return guarded([&] {
#if FA_HAVE_STAGE08
    const fa::AttentionProblem p = problem(dtype, b, h, nq, nkv, d, scale, causal);
    select_device(device);
    const fa::StreamScope on(static_cast<cudaStream_t>(stream));  // the stages launch on the caller's stream
    fa::masks::attention_strided(p, q, k, v, o, lse, layout_of(p, strides, 4),
                                 *static_cast<const fa::masks::Plan*>(plan));
    FA_CUDA_CHECK(cudaGetLastError());
#else
    throw fa::NoGpuError("this build has no stage 12 (it needs nvcc 12 or newer)");
#endif
  });
}

/// The backward stage that `stage` ("auto", "10", "11" or "13") runs for `dtype` at head dim
/// `d` on device `device`, deterministic or not, written into `name` (at most `size` bytes
/// with the terminating zero).
FA_API int fa_stages_backward_stage(const char* stage, int deterministic, int dtype, int64_t d, int device, char* name,
                                    int size) {
  return guarded([&] {
    select_device(device);
    const std::string s = backward_stage(problem(dtype, 1, 1, 1, 1, d, 0.0, 0), stage, deterministic != 0);
    std::snprintf(name, static_cast<std::size_t>(size), "%s", s.c_str());
  });
}

/// Device bytes of workspace the backward pass of `dtype` needs, into *bytes: stage 10's for
/// fp32; for fp16 and bf16 enough for stage 11 and for stage 13 (stage 11's workspace and the
/// deterministic mode's flags), whichever runs.
FA_API int fa_stages_backward_workspace(int dtype, int64_t b, int64_t h, int64_t nq, int64_t nkv, int64_t d,
                                        int causal, int64_t* bytes) {
  return guarded([&] {
    const fa::AttentionProblem p = problem(dtype, b, h, nq, nkv, d, 0.0, causal);
    std::size_t n = p.dtype == fa::DType::F32 ? fa::backward::workspace_bytes(p) : fa::tc_backward::workspace_bytes(p);
#if FA_HAVE_STAGE08
    if (p.dtype != fa::DType::F32 && (d == 64 || d == 128)) n = std::max(n, fa::hopper_backward::workspace_bytes(p));
#endif
    *bytes = static_cast<int64_t>(n);
  });
}

/**
 * dQ, dK and dV by the backward stage `stage` ("auto", "10", "11" or "13"; backward_stage()
 * says which "auto" runs): stage 10 in fp32 on CUDA cores, stage 11 (tensor cores, mma.sync)
 * or stage 13 (Hopper: TMA and wgmma) in fp16 and bf16; `deterministic`: stage 13 with dQ's
 * additions in a fixed order (refused where stage 13 does not run). Tensors [B, H, N, d] in `dtype`
 * (lse [B, H, Nq] in fp32), 16-byte aligned: q, k, v, the forward's o and lse, and d_o the
 * gradient of the loss with respect to o. dq, dk and dv are written contiguous. `strides`:
 * null for contiguous inputs, or 15 numbers, (batch, head, row) strides in elements of q, k,
 * v, o and d_o in turn, which stages 11 and 13 take (fp16 and bf16). `stats`: null, or stage
 * 05's m and 1/l of each row (fa_stages_forward), from which stage 10 rebuilds P in place
 * of lse: exact at large logits. Ordered on `stream` as fa_stages_forward is.
 */
FA_API int fa_stages_backward(const char* stage, int deterministic, int dtype, int64_t b, int64_t h, int64_t nq,
                              int64_t nkv, int64_t d, double scale, int causal, const void* q, const void* k,
                              const void* v, const void* o, const void* d_o, const float* lse, const void* stats,
                              void* dq, void* dk, void* dv, const int64_t* strides, void* workspace, int device,
                              void* stream) {
  return guarded([&] {
    const fa::AttentionProblem p = problem(dtype, b, h, nq, nkv, d, scale, causal);
    select_device(device);
    const std::string s = backward_stage(p, stage, deterministic != 0);
    if (strides && s == "10") throw fa::InputError("stage 10 (fp32) reads contiguous tensors only: pass no strides");
    if (stats && s != "10") throw fa::InputError("only stage 10 reads stage 05's m and 1/l: pass no stats");
    const fa::StreamScope on(static_cast<cudaStream_t>(stream));  // the stages launch on the caller's stream
    if (s == "10") {
      const auto f = [](const void* x) { return static_cast<const float*>(x); };
      const auto w = [](void* x) { return static_cast<float*>(x); };
      const auto* row_stats = static_cast<const fa::flash2::RowStats*>(stats);
      fa::backward::attention_backward(p, {f(q), f(k), f(v), f(o), f(d_o), lse, w(dq), w(dk), w(dv), row_stats},
                                       workspace);
    } else if (s == "11") {
      fa::tc_backward::attention_backward_strided(p, {q, k, v, o, d_o, lse, dq, dk, dv}, workspace,
                                                  layout_of(p, strides, 5));
    } else {
#if FA_HAVE_STAGE08
      (deterministic ? fa::hopper_backward::attention_backward_deterministic
                     : fa::hopper_backward::attention_backward_strided)(p, {q, k, v, o, d_o, lse, dq, dk, dv},
                                                                        workspace, layout_of(p, strides, 5));
#else
      throw fa::NoGpuError("this build has no stage 13 (it needs nvcc 12 or newer)");
#endif
    }
    FA_CUDA_CHECK(cudaGetLastError());
  });
}
