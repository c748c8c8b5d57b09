// fa_stages' compiled operator: attention() for float16 and bfloat16 (forward stages 06, 07
// and 08, backward stages 11 and 13) as a PyTorch operator whose autograd node is C++ too, so
// that neither pass runs any Python once attention() has checked its input.
//
// Why it exists: in a small model's training step the host, not the GPU, sets the pace, and
// the Python of the autograd.Function in fa_stages/__init__.py (its checks, allocations and
// ctypes calls, forward and backward) cost more host time than PyTorch's own attention
// (python/README.md measures it). This file does the same work in C++: the same kernels, the
// same C interface (capi.cpp), the same tensors handed to them, bit for bit the same results.
//
// What it does not do: link the stages. Python has loaded libfa_stages_cpu.so and
// libfa_stages_cuda.so with ctypes already; fa_stages_ext::bind hands this library the
// addresses of their functions. So one build of this file serves both backends, and the
// stages' libraries stay free of PyTorch (they are built once, whatever PyTorch is installed).
// It is compiled against the PyTorch it runs with (its C++ interface changes between
// versions), when CMake finds one; without it, attention() is the Python autograd.Function.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdint>
#include <string>

// c10::Stream::native_handle() (the cudaStream_t of PyTorch's current stream without linking
// PyTorch's CUDA library) is there from PyTorch 2.3; before it, CUDA tensors take the Python path.
#define FA_HAVE_NATIVE_STREAM (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3))

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The C interface's functions (capi.cpp has their documentation).
using ForwardFn = int (*)(const char* stage, int dtype, int64_t b, int64_t h, int64_t nq, int64_t nkv, int64_t d,
                          double scale, int causal, const void* q, const void* k, const void* v, void* o, float* lse,
                          void* stats, const int64_t* strides, void* workspace, int device, void* stream);
using BackwardFn = int (*)(const char* stage, int deterministic, int dtype, int64_t b, int64_t h, int64_t nq,
                           int64_t nkv, int64_t d, double scale, int causal, const void* q, const void* k,
                           const void* v, const void* o, const void* d_o, const float* lse, const void* stats,
                           void* dq, void* dk, void* dv, const int64_t* strides, void* workspace, int device,
                           void* stream);
using WorkspaceFn = int (*)(int dtype, int64_t b, int64_t h, int64_t nq, int64_t nkv, int64_t d, int causal,
                            int64_t* bytes);
using StageFn = int (*)(const char* stage, int deterministic, int dtype, int64_t d, int device, char* name, int size);
using ErrorFn = const char* (*)();

/// One backend's library, as Python bound it.
struct Backend {
  ForwardFn forward = nullptr;
  BackwardFn backward = nullptr;
  WorkspaceFn backward_workspace = nullptr;
  StageFn backward_stage = nullptr;
  ErrorFn error = nullptr;
};
Backend g_backends[2];  // [0] the CPU backend's library, [1] the CUDA one's

/// fa_stages_ext::bind: the addresses of backend `backend`'s functions (0: CPU, 1: CUDA).
/// Returns whether this build can run that backend's tensors.
bool bind(int64_t backend, int64_t forward, int64_t backward, int64_t workspace, int64_t stage, int64_t error) {
  TORCH_CHECK(backend == 0 || backend == 1, "fa_stages: no backend ", backend);
  Backend& b = g_backends[backend];
  b.forward = reinterpret_cast<ForwardFn>(forward);
  b.backward = reinterpret_cast<BackwardFn>(backward);
  b.backward_workspace = reinterpret_cast<WorkspaceFn>(workspace);
  b.backward_stage = reinterpret_cast<StageFn>(stage);
  b.error = reinterpret_cast<ErrorFn>(error);
  return backend == 0 || FA_HAVE_NATIVE_STREAM;
}

/// A C call's return code as the exception Python's path raises: 1 (bad input) ValueError,
/// anything else RuntimeError, with the library's message.
void check(const Backend& lib, int rc) {
  if (rc == 0) return;
  const std::string message = std::string("fa_stages: ") + lib.error();
  TORCH_CHECK_VALUE(rc != 1, message);
  TORCH_CHECK(false, message);
}

/// Where a call on tensor t runs: its backend's library, device index and stream (PyTorch's
/// current stream of t's device; in the backward pass, autograd has made it the forward's).
struct Where {
  const Backend* lib;
  int device;
  void* stream;
};
Where where_to_run(const at::Tensor& t) {
  if (t.is_cpu()) return {&g_backends[0], 0, nullptr};
#if FA_HAVE_NATIVE_STREAM
  const c10::impl::VirtualGuardImpl guard(t.device().type());
  return {&g_backends[1], t.get_device(), guard.getStream(t.device()).native_handle()};
#else
  TORCH_CHECK(false, "fa_stages: the compiled operator runs CUDA tensors with PyTorch 2.3 or newer");
  return {nullptr, 0, nullptr};
#endif
}

int dtype_code(const at::Tensor& t) { return t.scalar_type() == at::kHalf ? 1 : 2; }  // as capi.cpp numbers them

bool aligned(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

/// The (batch, head, row) strides in elements by which a kernel that takes strides reads t
/// where it lies, into s[0..2]; false where it cannot (_strides() in __init__.py: the last
/// dimension contiguous, the start and every stride a whole number of 16 bytes, no stride 0,
/// rows less than 2^24 elements apart; a dimension of size 1 gets a contiguous tensor's stride).
bool strides_of(const at::Tensor& t, int64_t* s) {
  if (t.stride(3) != 1 || !aligned(t)) return false;
  const int64_t h = t.size(1), n = t.size(2), d = t.size(3), unit = 16 / t.element_size();
  s[0] = t.size(0) > 1 ? t.stride(0) : h * n * d;
  s[1] = h > 1 ? t.stride(1) : n * d;
  s[2] = n > 1 ? t.stride(2) : d;
  for (int i = 0; i < 3; ++i) {
    if (s[i] == 0 || s[i] % unit != 0) return false;
  }
  return s[2] < (int64_t{1} << 24);
}

/// Contiguous and 16-byte aligned, as the kernels without strides read it (a copy only when
/// it is not).
at::Tensor ready(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return aligned(c) ? c : c.clone();
}

/// t as the strided kernels take it (itself where they can read it, else a contiguous copy),
/// its strides into s[0..2].
at::Tensor strided(const at::Tensor& t, int64_t* s) {
  if (strides_of(t, s)) return t;
  at::Tensor c = ready(t);
  if (!strides_of(c, s)) {  // a row no whole number of 16 bytes: the stage refuses the head dim
    for (int i = 0; i < 3; ++i) s[i] = c.stride(i);
  }
  return c;
}

/// O for q, laid out as _output_like() lays it out: [B, Nq, H, d] in memory where q is (a
/// linear layer's output viewed as heads), so that the model's reshape after attention needs
/// no copy; contiguous otherwise.
at::Tensor output_like(const at::Tensor& q) {
  const int64_t b = q.size(0), h = q.size(1), n = q.size(2), d = q.size(3);
  if (h > 1 && n > 1 && q.stride(1) < q.stride(2)) return at::empty({b, n, h, d}, q.options()).transpose(1, 2);
  return at::empty(q.sizes(), q.options());
}

/// The autograd node: the forward pass keeps q, k, v, O and the log-sum-exp, the backward pass
/// recomputes P from them tile by tile (python/README.md, "How a kernel becomes an autograd
/// function", says why).
struct AttentionFunction : public torch::autograd::Function<AttentionFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            bool causal, double scale, const std::string& stage) {
    const Where w = where_to_run(q);
    const int64_t b = q.size(0), h = q.size(1), nq = q.size(2), nkv = k.size(2), d = q.size(3);
    at::Tensor qr, kr, vr, o;
    int64_t strides[12];
    const int64_t* passed = nullptr;
    if (stage == "08") {  // read where they lie
      o = output_like(q);
      qr = strided(q, strides);
      kr = strided(k, strides + 3);
      vr = strided(v, strides + 6);
      o = strided(o, strides + 9);
      passed = strides;
    } else {
      qr = ready(q);
      kr = ready(k);
      vr = ready(v);
      o = at::empty(q.sizes(), q.options());
    }
    at::Tensor lse = at::empty({b, h, nq}, q.options().dtype(at::kFloat));
    check(*w.lib, w.lib->forward(stage.c_str(), dtype_code(q), b, h, nq, nkv, d, scale, causal, qr.data_ptr(),
                                 kr.data_ptr(), vr.data_ptr(), o.data_ptr(), lse.data_ptr<float>(), nullptr, passed,
                                 nullptr, w.device, w.stream));
    ctx->save_for_backward({q, k, v, o, lse});
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["scale"] = scale;
    return o;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &o = saved[3], &lse = saved[4];
    at::Tensor grad_o = grads[0].scalar_type() == q.scalar_type() ? grads[0] : grads[0].to(q.scalar_type());
    const bool causal = ctx->saved_data["causal"].toBool();
    const double scale = ctx->saved_data["scale"].toDouble();
    const Where w = where_to_run(q);
    const int code = dtype_code(q);
    const int64_t b = q.size(0), h = q.size(1), nq = q.size(2), nkv = k.size(2), d = q.size(3);

    // torch.use_deterministic_algorithms(True): dQ's additions in a fixed order (stage 13),
    // or, where no stage can, an error (a warning with warn_only), as _deterministic_wanted().
    bool deterministic = at::globalContext().deterministicAlgorithms();
    if (deterministic) {
      char name[8];
      if (w.lib->backward_stage("auto", 1, code, d, w.device, name, sizeof name) != 0) {
        const std::string message =
            std::string("fa_stages: ") + w.lib->error() + " (torch.use_deterministic_algorithms is on)";
        TORCH_CHECK(at::globalContext().deterministicAlgorithmsWarnOnly(), message);
        TORCH_WARN(message);
        deterministic = false;
      }
    }

    int64_t bytes = 0;
    check(*w.lib, w.lib->backward_workspace(code, b, h, nq, nkv, d, causal, &bytes));
    const at::Tensor workspace = at::empty({std::max<int64_t>(bytes, 16)}, q.options().dtype(at::kByte));
    int64_t strides[15];
    const at::Tensor qr = strided(q, strides), kr = strided(k, strides + 3), vr = strided(v, strides + 6),
                     orr = strided(o, strides + 9), gr = strided(grad_o, strides + 12);
    at::Tensor dq = at::empty(q.sizes(), q.options()), dk = at::empty(k.sizes(), k.options()),
               dv = at::empty(v.sizes(), v.options());
    check(*w.lib, w.lib->backward("auto", deterministic, code, b, h, nq, nkv, d, scale, causal, qr.data_ptr(),
                                  kr.data_ptr(), vr.data_ptr(), orr.data_ptr(), gr.data_ptr(), lse.data_ptr<float>(),
                                  nullptr, dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), strides,
                                  workspace.data_ptr(), w.device, w.stream));
    return {dq, dk, dv, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

/// fa_stages_ext::attention: O, differentiable. Python's attention() has checked the input
/// and chosen the stage (06, 07 or 08); `scale` 0 means 1/sqrt(d). A direct call gets the
/// checks that keep the kernels inside the tensors (the stage checks the rest).
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, double scale,
                     c10::string_view stage) {
  TORCH_CHECK_TYPE(q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16,
                   "fa_stages: the compiled operator takes float16 or bfloat16, not ", q.scalar_type());
  TORCH_CHECK_TYPE(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
                   "fa_stages: q, k and v must have one dtype");
  TORCH_CHECK_VALUE(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && k.sizes() == v.sizes() &&
                        k.size(0) == q.size(0) && k.size(1) == q.size(1) && k.size(3) == q.size(3),
                    "fa_stages: q, k and v must be [B, H, N, d] with one B, H and d, k and v of one shape");
  TORCH_CHECK_VALUE(k.device() == q.device() && v.device() == q.device(), "fa_stages: q, k and v must be on one device");
  return AttentionFunction::apply(q, k, v, causal, scale, std::string(stage.data(), stage.size()));
}

}  // namespace

// Registered without a dispatch key, as an operator that is its own autograd formula
// (CompositeImplicitAutograd): the dispatcher calls attention() above directly, and the
// autograd node comes from AttentionFunction.
TORCH_LIBRARY(fa_stages_ext, m) {
  m.def("bind(int backend, int forward, int backward, int workspace, int stage, int error) -> bool", &bind);
  m.def("attention(Tensor q, Tensor k, Tensor v, bool causal, float scale, str stage) -> Tensor", &attention);
}
