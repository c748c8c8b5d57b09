// libfa_inputs: the benchmark's inputs as a C library, so that scripts in other
// languages (torch_sdpa.py, through ctypes) measure exactly the numbers fa_bench does.
#include <algorithm>
#include <cstdint>
#include <exception>
#include <vector>

#include "common/decode_problem.h"
#include "common/problem.h"
#include "common/random.h"
#include "common/reference.h"

namespace {

// Q, K and V into the caller's buffers, which have room for them.
void copy_out(const fa::AttentionInputs& in, float* q, float* k, float* v) {
  std::copy(in.q.begin(), in.q.end(), q);
  std::copy(in.k.begin(), in.k.end(), k);
  std::copy(in.v.begin(), in.v.end(), v);
}

}  // namespace

extern "C" {

/// Fills q ([B, H, Nq, d]), k and v ([B, H, Nkv, d]) with fa::random_inputs(seed,
/// magnitude). \returns 0, or -1 for a shape make_problem() rejects.
int fa_inputs_fill(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv, int64_t dim, uint64_t seed,
                   float magnitude, float* q, float* k, float* v) {
  try {
    const fa::AttentionProblem p = fa::make_problem(batch, heads, seq_q, seq_kv, dim);
    copy_out(fa::random_inputs(p, seed, magnitude), q, k, v);
    return 0;
  } catch (const std::exception&) {
    return -1;
  }
}

/// Fills d_o ([B, H, Nq, d]) with fa::random_output_gradient(seed): the dO stage 10's demo
/// draws for the same flags. \returns 0, or -1 for a shape make_problem() rejects.
int fa_output_gradient_fill(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv, int64_t dim, uint64_t seed,
                            float* d_o) {
  try {
    const fa::AttentionProblem p = fa::make_problem(batch, heads, seq_q, seq_kv, dim);
    const std::vector<float> g = fa::random_output_gradient(p, seed);
    std::copy(g.begin(), g.end(), d_o);
    return 0;
  } catch (const std::exception&) {
    return -1;
  }
}

/// Writes the query rows fa_bench checks (fa::sample_rows) to `rows` (room for `count`).
/// \returns how many were written, or -1 for a bad shape.
int64_t fa_inputs_sample_rows(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv, int64_t dim,
                              int64_t count, int64_t* rows) {
  try {
    const fa::AttentionProblem p = fa::make_problem(batch, heads, seq_q, seq_kv, dim);
    const std::vector<int64_t> picked = fa::sample_rows(p, count);
    std::copy(picked.begin(), picked.end(), rows);
    return static_cast<int64_t>(picked.size());
  } catch (const std::exception&) {
    return -1;
  }
}

/// Fills q ([B, Hq, Nq, d]) and the caches k, v ([B, Hkv, Nkv, d], every sequence Nkv long)
/// with fa::random_decode_inputs(seed, magnitude): the inputs stage 09's demo draws for
/// the same flags. \returns 0, or -1 for a shape make_decode_problem() rejects.
int fa_decode_inputs_fill(int64_t batch, int64_t q_heads, int64_t kv_heads, int64_t seq_q, int64_t seq_kv,
                          int64_t dim, uint64_t seed, float magnitude, float* q, float* k, float* v) {
  try {
    const fa::DecodeProblem p =
        fa::make_decode_problem(batch, q_heads, kv_heads, seq_q, seq_kv, {}, dim, 0.0, false, fa::DType::F32);
    copy_out(fa::random_decode_inputs(p, seed, magnitude), q, k, v);
    return 0;
  } catch (const std::exception&) {
    return -1;
  }
}

}  // extern "C"
