// Shared by every stage's tests: run a stage on fresh seeded inputs with poisoned
// outputs, compare every row with the float64 reference, and the standard battery of
// shapes every attention stage must pass.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/block_mask.h"
#include "common/cuda_check.h"
#include "common/demo.h"
#include "common/device_buffer.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/verify.h"
#include "tests/catch.h"

#if FA_CPU_BACKEND
#include "fa_cpu/scheduler.h"
#endif

namespace fa::test {

/// Whether kernels run on the CPU backend with its race detector on (built in, and not
/// turned off with FA_CPU_RACECHECK=0): races then fail the launch with a report.
inline bool race_detector_on() {
#if FA_CPU_BACKEND
  return fa_cpu::racecheck_built() && fa_cpu::options().racecheck;
#else
  return false;
#endif
}

/// Whether the race detector's shared-memory rules check the next launch: the detector is on
/// and blocks run one at a time (with blocks in flight together, as FA_CPU_SHAKE runs them,
/// those rules are off and only races between blocks in global memory are reported).
inline bool shared_race_rules_on() {
#if FA_CPU_BACKEND
  return race_detector_on() && fa_cpu::options().blocks_at_once <= 1;
#else
  return false;
#endif
}

/// Whether this build runs under AddressSanitizer (the CI's shaken run, where a stage's CPU
/// tests take 2-5 times as long as in a release build). The battery then leaves out its two
/// longest cases, the variant tests run each variant on fewer cases (check_attention_stage,
/// check_variants, check_backward_variants), and the tensor-core stages' longest tests take one
/// 16-bit type a head dim (dtype_case_runs): the release run has taken the finished kernels and
/// every variant through all of them, with the race detector on.
constexpr bool under_address_sanitizer() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#else
  return false;
#endif
}

/// Which (head dim, causal) pairs the backward stages' variant tests run: all four, or under
/// AddressSanitizer d = 64 without the mask and d = 128 with it (the release run has the others).
constexpr bool backward_variant_case_runs(int64_t d, bool causal) {
  return !under_address_sanitizer() || causal == (d == 128);
}

/// Which (element type, head dim) pairs the tensor-core stages' longest tests run, where they
/// loop over both 16-bit types: all of them, or under AddressSanitizer fp16 at d = 64 and bf16
/// at the other head dims, so that each type's kernels still run (the release run has the
/// other pairs). fp32 always runs.
constexpr bool dtype_case_runs(DType t, int64_t d) {
  return !under_address_sanitizer() || (t != DType::F16 && t != DType::BF16) || (t == DType::F16) == (d == 64);
}

/// For its lifetime, on the CPU backend: `blocks` blocks in flight together, taking turns
/// at every barrier, atomic and global store, with the race detector off
/// (fa_cpu::Options::blocks_at_once), so that a race between blocks shows as the wrong
/// numbers a GPU would give. On a GPU, blocks are in flight together anyway: it does nothing.
class BlocksInFlight {
 public:
  /// `shake_seed`, if not 0, seeds the shuffled orders (another seed, other orders).
  explicit BlocksInFlight([[maybe_unused]] int blocks, [[maybe_unused]] unsigned shake_seed = 0) {
#if FA_CPU_BACKEND
    fa_cpu::options().blocks_at_once = blocks;
    fa_cpu::options().racecheck = false;
    if (shake_seed != 0) fa_cpu::options().shake_seed = shake_seed;
#endif
  }
#if FA_CPU_BACKEND
  ~BlocksInFlight() { fa_cpu::options() = saved_; }
#endif
  BlocksInFlight(const BlocksInFlight&) = delete;
  BlocksInFlight& operator=(const BlocksInFlight&) = delete;

#if FA_CPU_BACKEND
 private:
  fa_cpu::Options saved_ = fa_cpu::options();
#endif
};

/// For its lifetime, on the CPU backend: warpgroup `group` of each block runs ahead of the
/// others until it waits for something they must do (fa_cpu::Options::lead_warpgroup), so
/// that warpgroups sharing data without a barrier meet out of order. On a GPU it does nothing.
class WarpgroupAhead {
 public:
  explicit WarpgroupAhead([[maybe_unused]] int group) {
#if FA_CPU_BACKEND
    fa_cpu::options().lead_warpgroup = group;
#endif
  }
#if FA_CPU_BACKEND
  ~WarpgroupAhead() { fa_cpu::options() = saved_; }
#endif
  WarpgroupAhead(const WarpgroupAhead&) = delete;
  WarpgroupAhead& operator=(const WarpgroupAhead&) = delete;

#if FA_CPU_BACKEND
 private:
  fa_cpu::Options saved_ = fa_cpu::options();
#endif
};

/// Enqueues one forward pass of the stage under test.
using StageFn = std::function<void(const AttentionProblem&, const DeviceTensors&)>;

/// What one run produced, and how it compared.
struct StageResult {
  std::vector<float> o;    ///< the full output
  std::vector<float> lse;  ///< each row's log-sum-exp, when the stage writes it
  AttentionCheck check;    ///< against the reference, every row
};

/// Runs `stage` once on the inputs `in` (of type p.dtype) and checks every row, and the
/// log-sum-exp of every row when `with_lse`; with `mask`, against the masked problem.
inline StageResult run_and_check_inputs(const AttentionProblem& p, const AttentionInputs& in, const StageFn& stage,
                                        bool with_lse, const Mask* mask = nullptr) {
  const DeviceInputs inputs = upload_inputs(in.q, in.k, in.v, p.dtype);
  DeviceBuffer<unsigned char> o(static_cast<size_t>(p.q_elems()) * dtype_bytes(p.dtype));
  DeviceBuffer<float> lse(with_lse ? static_cast<size_t>(p.rows()) : 0);
  o.fill_bytes(kPoisonByte);  // an element the stage never writes stays NaN and fails (fp16/bf16 too)
  lse.fill_bytes(kPoisonByte);
  DeviceTensors t = inputs.tensors();
  t.o = o.data();
  t.lse = with_lse ? lse.data() : nullptr;
  stage(p, t);
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  StageResult r;
  r.o = download_as_float(o.data(), static_cast<size_t>(p.q_elems()), p.dtype);
  r.lse = lse.download();
  r.check = check_attention(p, in, r.o, all_rows(p), with_lse ? &r.lse : nullptr, mask);
  return r;
}

/// Runs `stage` once on random inputs (seed, magnitude) of type p.dtype and checks every
/// row, and the log-sum-exp of every row when `with_lse`.
inline StageResult run_and_check(const AttentionProblem& p, const StageFn& stage, uint64_t seed,
                                 float magnitude = 1.0f, bool with_lse = false) {
  return run_and_check_inputs(p, random_inputs(p, seed, magnitude), stage, with_lse);  // inputs rounded to p.dtype
}

/// REQUIREs that the check passed, printing the figures and first mismatches if not.
inline void require_passed(const AttentionProblem& p, const StageResult& r) {
  INFO(describe(p));
  INFO("O: " << describe(r.check.o, output_namer(p, r.check.rows)));
  // (An INFO lasts until the end of its scope: under an `if` it would be gone by the REQUIRE.)
  INFO((r.check.has_lse ? "lse: " + describe(r.check.lse, row_namer(p, r.check.rows, "lse")) : "lse: not checked"));
  REQUIRE(r.check.passed());
}

/// REQUIREs that dQ, dK and dV all passed their checks, printing each one's figures and
/// first mismatches if not (the backward stages' tests).
inline void require_passed(const AttentionProblem& p, const GradientCheck& c) {
  INFO(describe(p));
  INFO(describe(c.dq, gradient_namer(p, c.heads, "dQ")));
  INFO(describe(c.dk, gradient_namer(p, c.heads, "dK")));
  INFO(describe(c.dv, gradient_namer(p, c.heads, "dV")));
  REQUIRE(c.passed());
}

/// REQUIREs that every element of dQ, dK and dV is finite.
inline void require_finite(const AttentionGradients<float>& g) {
  for (const std::vector<float>* x : {&g.dq, &g.dk, &g.dv})
    for (float e : *x) REQUIRE(std::isfinite(e));
}

/// Under the causal mask with Nkv > Nq, the keys j ≥ Nq are seen by no query: their dK and dV
/// must be exactly zero, and written (a poisoned element left alone stays NaN). Nothing to
/// require otherwise.
inline void require_unseen_keys_zero(const AttentionProblem& p, const AttentionGradients<float>& g) {
  if (!p.causal || p.seq_kv <= p.seq_q) return;
  for (int64_t bh = 0; bh < p.batch_heads(); ++bh)
    for (int64_t j = p.seq_q; j < p.seq_kv; ++j)
      for (int64_t c = 0; c < p.dim; ++c) {
        const auto at = static_cast<size_t>((bh * p.seq_kv + j) * p.dim + c);
        if (g.dk[at] == 0.0f && g.dv[at] == 0.0f) continue;  // NaN (never written) fails too
        INFO("head " << bh << ", key " << j << ", column " << c);
        REQUIRE(g.dk[at] == 0.0f);
        REQUIRE(g.dv[at] == 0.0f);
      }
}

/// Query and key lengths that are not multiples of any tile, 1 included, Nq != Nkv.
inline const std::vector<std::pair<int64_t, int64_t>>& ragged_lengths() {
  static const std::vector<std::pair<int64_t, int64_t>> lengths = {
      {1, 1}, {1, 257}, {7, 64}, {64, 7}, {100, 100}, {257, 1000}, {1000, 257}};
  return lengths;
}

/// One case of the standard battery: a problem, how its inputs are drawn, and the group
/// (a Catch2 section of check_attention_stage) it belongs to.
struct BatteryCase {
  std::string group;
  AttentionProblem p;
  uint64_t seed = 0;
  float magnitude = 1.0f;  ///< inputs uniform in [−magnitude, magnitude] (random_inputs)
  double logit = 0.0;      ///< non-zero: every logit moved to about this value (shift_logits)
  bool finite = false;     ///< also require every output element finite
};

/// The groups of the battery, in order.
inline const std::vector<std::string>& battery_groups() {
  static const std::vector<std::string> groups = {
      "ragged lengths and every head dim", "many heads and batches", "causal mask",
      "rows whose logits are all far below zero, over ragged key tiles",
      "large-magnitude logits stay finite and accurate"};
  return groups;
}

/// The battery every attention stage passes, in element type `dtype`: ragged lengths for
/// every head dim the stage runs (`dims`; empty: all of supported_head_dims()), many heads
/// and batches, causal (if supported), rows whose logits are all far below zero, and
/// large-magnitude logits.
inline std::vector<BatteryCase> battery_cases(bool causal, DType dtype, std::vector<int64_t> dims = {}) {
  if (dims.empty()) dims = supported_head_dims();
  const auto runs = [&](int64_t d) { return std::find(dims.begin(), dims.end(), d) != dims.end(); };
  const int64_t d64 = runs(64) ? 64 : dims.front();
  const std::vector<std::string>& g = battery_groups();
  std::vector<BatteryCase> cases;
  uint64_t seed = 100;
  for (int64_t d : dims) {
    for (auto [nq, nkv] : ragged_lengths()) cases.push_back({g[0], make_problem(1, 2, nq, nkv, d, 0.0, false, dtype), ++seed});
  }
  cases.push_back({g[1], make_problem(3, 5, 64, 100, runs(32) ? 32 : dims.front(), 0.0, false, dtype), ++seed});
  if (causal) {
    for (auto [nq, nkv] : std::vector<std::pair<int64_t, int64_t>>{{257, 257}, {100, 257}, {257, 100}}) {
      cases.push_back({g[2], make_problem(2, 2, nq, nkv, d64, 0.0, true, dtype), ++seed});
    }
  }
  // Every logit near −300: exp(s − m) underflows for every key unless m is a real score of
  // the row (not a running max started at 0, not a padded key scored 0).
  cases.push_back({g[3], make_problem(1, 2, 70, 257, d64, 0.0, false, dtype), ++seed, 1.0f, -300.0, true});
  if (causal) cases.push_back({g[3], make_problem(1, 2, 100, 100, d64, 0.0, true, dtype), ++seed, 1.0f, -300.0, true});
  // Inputs in [-30, 30] at d = 64 give logits in the hundreds: exp() without the max
  // subtraction would overflow to inf and the output would be NaN. (In fp16 the inputs
  // stay far below its 65504 limit; the logits are fp32 accumulations.)
  cases.push_back({g[4], make_problem(1, 2, 100, 257, d64, 0.0, false, dtype), ++seed, 30.0f, 0.0, true});
  return cases;
}

/// Runs one case of the battery and REQUIREs that it passed.
inline void run_battery_case(const BatteryCase& c, const StageFn& stage, bool with_lse) {
  AttentionInputs in = random_inputs(c.p, c.seed, c.magnitude);
  if (c.logit != 0.0) shift_logits(in, c.p.dim, c.p.scale, c.p.dtype, c.logit);
  const StageResult r = run_and_check_inputs(c.p, in, stage, with_lse);
  if (c.finite) {
    for (float x : r.o) REQUIRE(std::isfinite(x));
  }
  require_passed(c.p, r);
}

/// The battery (battery_cases), each group a Catch2 section. Under AddressSanitizer without
/// the two longest ragged pairs (257 × 1000 and 1000 × 257, a quarter of a million scores each,
/// most of the battery's time there): the release run has them, and 257 × 257 and 100 × 257
/// still span several tiles each way.
inline void check_attention_stage(const StageFn& stage, bool with_lse, bool causal, DType dtype = DType::F32,
                                  std::vector<int64_t> dims = {}) {
  std::vector<BatteryCase> cases = battery_cases(causal, dtype, std::move(dims));
  if (under_address_sanitizer()) {
    const auto longest = [](const BatteryCase& c) { return c.p.seq_q * c.p.seq_kv > 100 * 1000; };
    cases.erase(std::remove_if(cases.begin(), cases.end(), longest), cases.end());
  }
  for (const std::string& group : battery_groups()) {
    SECTION(group) {
      for (const BatteryCase& c : cases) {
        if (c.group == group) run_battery_case(c, stage, with_lse);
      }
    }
  }
}

/// Lazy rescaling (stages 07 and 08 at d = 128) skips the rescale of O and l until a row's
/// maximum moves past its slack (2^8). The battery's large logits are at d = 64; here inputs
/// in [-30, 30] at d = 128 give logits in the thousands, whose maxima keep jumping from tile
/// to tile, so that the rescale must happen. `seq_kv` spans several of the stage's K/V tiles.
inline void check_lazy_rescaling(const StageFn& stage, int64_t seq_kv) {
  for (DType dtype : {DType::F16, DType::BF16}) {
    for (bool causal : {false, true}) {
      const AttentionProblem p = make_problem(1, 2, 150, seq_kv, 128, 0.0, causal, dtype);
      const StageResult r = run_and_check(p, stage, 13, 30.0f, true);
      for (float x : r.o) REQUIRE(std::isfinite(x));
      require_passed(p, r);
    }
  }
}

/// Every variant of a stage's typed configuration (StageDemo::variants, the stage's
/// tuning.h) through the battery in fp16 at d = 64 and 128, so that a variant's code paths
/// meet the same edges as the finished kernel's: every case but the two longest ragged
/// pairs, which a 200 × 333 problem (several tiles each way, with and without the causal
/// mask) stands in for, at a quarter of the CPU backend's time; and at d = 128 logits in the
/// thousands, whose maxima move from tile to tile (lazy rescaling at work). Under
/// AddressSanitizer, of the battery only the ragged pairs of fewer than 2,000 scores (one query,
/// seven queries or keys): the release run takes every variant through the rest.
inline void check_variants(const std::vector<StageVariant>& variants, bool with_lse) {
  REQUIRE_FALSE(variants.empty());
  std::vector<BatteryCase> cases;
  const int64_t most = under_address_sanitizer() ? 2000 : 100 * 1000;
  for (const BatteryCase& c : battery_cases(true, DType::F16, {64, 128})) {
    if (c.p.seq_q * c.p.seq_kv <= most) cases.push_back(c);
  }
  uint64_t seed = 300;
  for (int64_t d : {64, 128}) {
    for (bool causal : {false, true}) {
      cases.push_back({"several tiles each way", make_problem(1, 2, 200, 333, d, 0.0, causal, DType::F16), ++seed});
    }
  }
  cases.push_back({"large logits at d = 128", make_problem(1, 1, 150, 300, 128, 0.0, false, DType::F16), ++seed, 30.0f});
  for (const StageVariant& v : variants) {
    if (v.name == "tuned") continue;  // the finished kernel: the stage's own battery runs it
    INFO("variant " << v.name << ": " << v.summary);
    const StageFn run = [&v](const AttentionProblem& p, const DeviceTensors& t) { v.run(p, t, nullptr); };
    for (const BatteryCase& c : cases) {
      INFO(c.group);
      run_battery_case(c, run, with_lse);
    }
  }
}

/// Enqueues one forward pass of a block-sparse stage; `block_mask` is the mask's flags in
/// device memory (common/block_mask.h).
using MaskedStageFn = std::function<void(const AttentionProblem&, const DeviceTensors&, const uint8_t* block_mask)>;

/// Block-sparse attention with blocks of block_q × block_kv against the float64 reference of
/// the masked problem, the log-sum-exp included, in element type `dtype` at each head dim of
/// `dims`: random masks keeping none, a quarter, half and all of the blocks, over lengths
/// that are not multiples of a block, with and without the causal mask (rows left with no
/// key must give O = 0 and lse −inf); and a mask that drops whole columns of blocks, whose
/// keys and values are NaN, which a kernel that read a dropped tile would spread.
inline void check_block_sparse_stage(const MaskedStageFn& stage, int64_t block_q, int64_t block_kv, DType dtype,
                                     const std::vector<int64_t>& dims) {
  uint64_t seed = 500;
  const auto run = [&](const AttentionProblem& p, const BlockMask& mask, AttentionInputs in) {
    INFO("block mask " << mask.q_blocks << "x" << mask.kv_blocks << " of " << block_q << "x" << block_kv
                       << ", density " << mask.density());
    DeviceBuffer<uint8_t> flags(mask.keep.size());
    flags.upload(mask.keep);
    const StageFn masked = [&](const AttentionProblem& q, const DeviceTensors& t) { stage(q, t, flags.data()); };
    const Mask as_mask = block_sparse(mask);
    require_passed(p, run_and_check_inputs(p, in, masked, true, &as_mask));
  };
  SECTION("random block masks of several densities") {
    for (int64_t d : dims) {
      for (double density : {0.0, 0.25, 0.5, 1.0}) {
        for (bool causal : {false, true}) {
          const AttentionProblem p = make_problem(1, 2, 3 * block_q + 5, 5 * block_kv - 3, d, 0.0, causal, dtype);
          run(p, random_block_mask(p, block_q, block_kv, density, ++seed), random_inputs(p, seed));
        }
      }
    }
  }
  SECTION("ragged lengths, several heads") {
    for (auto [nq, nkv] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 257}, {100, 100}, {257, 1000}}) {
      const AttentionProblem p = make_problem(2, 3, nq, nkv, dims.front(), 0.0, nq == nkv, dtype);
      run(p, random_block_mask(p, block_q, block_kv, 0.5, ++seed), random_inputs(p, seed));
    }
  }
  SECTION("a dropped tile is never read") {
    const AttentionProblem p = make_problem(1, 2, 2 * block_q + 1, 6 * block_kv, dims.back(), 0.0, false, dtype);
    BlockMask mask = random_block_mask(p, block_q, block_kv, 0.6, ++seed);
    AttentionInputs in = random_inputs(p, seed);
    for (int64_t jb = 1; jb < mask.kv_blocks; jb += 2) {  // every other column of blocks: dropped, and NaN
      for (int64_t ib = 0; ib < mask.q_blocks; ++ib) mask.keep[static_cast<size_t>(ib * mask.kv_blocks + jb)] = 0;
      for (int64_t bh = 0; bh < p.batch_heads(); ++bh) {
        const auto first = static_cast<std::ptrdiff_t>((bh * p.seq_kv + jb * block_kv) * p.dim);
        std::fill_n(in.k.begin() + first, block_kv * p.dim, NAN);
        std::fill_n(in.v.begin() + first, block_kv * p.dim, NAN);
      }
    }
    run(p, mask, in);
  }
}

// ---- Tensors that lie where a Layout says (the kernels that take strides) ---------------

/// The layouts the strided kernels are tested on: "interleaved", heads side by side in each
/// row of a buffer [B][N][G][H][d] (G = 3 for Q, K and V, as a linear layer's q, k, v output
/// viewed as heads gives them; 1 for O, as scaled_dot_product_attention lays it out; 2 for
/// dO), and "padded", spare elements after each row, head and batch, 8·(which + 1) of them.
/// `which` counts Q, K, V, O and dO from 0, so that a kernel that follows one tensor's
/// strides for another's reads the wrong rows.
inline Strides test_strides(const std::string& name, const AttentionProblem& p, int64_t n, int which) {
  const int64_t d = p.dim, h = p.heads;
  if (name == "interleaved") {
    const int64_t groups = which < 3 ? 3 : which == 3 ? 1 : 2;
    return {n * groups * h * d, d, groups * h * d};
  }
  if (name == "padded") {
    const int64_t pad = 8 * (which + 1), row = d + pad, head = n * row + pad;
    return {h * head + pad, head, row};
  }
  throw std::logic_error("no test layout " + name);
}

/// Each tensor of a pass laid out as test_strides(name, ...) says.
inline Layout test_layout(const std::string& name, const AttentionProblem& p) {
  return {test_strides(name, p, p.seq_q, 0), test_strides(name, p, p.seq_kv, 1), test_strides(name, p, p.seq_kv, 2),
          test_strides(name, p, p.seq_q, 3), test_strides(name, p, p.seq_q, 4)};
}

/// Elements a buffer needs to hold a [B, H, n, d] tensor laid out as `s`.
inline int64_t strided_extent(const AttentionProblem& p, int64_t n, const Strides& s) {
  return (p.batch - 1) * s.batch + (p.heads - 1) * s.head + (n - 1) * s.row + p.dim;
}

/// A buffer of 16-bit elements holding the contiguous [B, H, n, d] device tensor `from`
/// where `s` says, every element in between poisoned (kPoisonByte: NaN in fp16 and bf16),
/// so that a kernel that reads past the layout reads NaN.
inline DeviceBuffer<uint16_t> scatter(const AttentionProblem& p, int64_t n, const void* from, const Strides& s) {
  std::vector<uint16_t> dense(static_cast<size_t>(p.batch_heads() * n * p.dim));
  FA_CUDA_CHECK(cudaMemcpy(dense.data(), from, dense.size() * 2, cudaMemcpyDeviceToHost));
  std::vector<uint16_t> out(static_cast<size_t>(strided_extent(p, n, s)), 0xFFFF);
  for (int64_t bh = 0; bh < p.batch_heads(); ++bh)
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(dense.begin() + (bh * n + i) * p.dim, p.dim,
                  out.begin() + s.head_offset(bh, p.heads) + i * s.row);
  return DeviceBuffer<uint16_t>(out);
}

/// The contiguous [B, H, n, d] tensor held in `from` where `s` says, from element `offset` of
/// the buffer on, copied to the device pointer `to`. REQUIREs that every element in between
/// (and before `offset`) still holds kPoisonByte: a kernel that writes where `s` says writes
/// nothing else.
inline void gather(const AttentionProblem& p, int64_t n, const DeviceBuffer<uint16_t>& from, const Strides& s,
                   void* to, int64_t offset = 0) {
  std::vector<uint16_t> all = from.download();
  std::vector<uint16_t> dense(static_cast<size_t>(p.batch_heads() * n * p.dim));
  for (int64_t bh = 0; bh < p.batch_heads(); ++bh)
    for (int64_t i = 0; i < n; ++i) {
      const auto at = all.begin() + offset + s.head_offset(bh, p.heads) + i * s.row;
      std::copy_n(at, p.dim, dense.begin() + (bh * n + i) * p.dim);
      std::fill_n(at, p.dim, uint16_t{0xFFFF});  // taken: what remains must be the poison
    }
  REQUIRE(std::count(all.begin(), all.end(), uint16_t{0xFFFF}) == static_cast<std::ptrdiff_t>(all.size()));
  FA_CUDA_CHECK(cudaMemcpy(to, dense.data(), dense.size() * 2, cudaMemcpyHostToDevice));
}

/// A stage that writes O contiguous, as a StageFn that hands it an O `offset` elements past the
/// start of a buffer of its own (cudaMalloc's: 256-byte aligned), every other element poisoned
/// and checked untouched: `stage(p, t, o)` writes O at `o`. With `offset` 2 or 4 the kernels
/// that store 16 bytes at a time must take their narrower path.
inline StageFn with_o_offset(int64_t offset,
                             const std::function<void(const AttentionProblem&, const DeviceTensors&, void*)>& stage) {
  return [offset, stage](const AttentionProblem& p, const DeviceTensors& t) {
    DeviceBuffer<uint16_t> o(static_cast<size_t>(offset + p.q_elems() + 8));
    o.fill_bytes(kPoisonByte);
    stage(p, t, o.data() + offset);
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    gather(p, p.seq_q, o, Layout::contiguous(p).o, t.o, offset);
  };
}

}  // namespace fa::test
