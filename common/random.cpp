#include "common/random.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace fa {

std::vector<float> random_uniform(int64_t n, uint64_t seed, float magnitude) {
  // mt19937_64 and our own mapping to [-1, 1): std::uniform_real_distribution is not
  // specified bit-for-bit, so it could differ between standard libraries.
  std::mt19937_64 gen(seed);
  std::vector<float> out(static_cast<size_t>(n));
  for (float& x : out) {
    const double u = static_cast<double>(gen() >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
    x = static_cast<float>((2.0 * u - 1.0) * magnitude);
  }
  return out;
}

AttentionInputs random_inputs(const AttentionProblem& p, uint64_t seed, float magnitude) {
  // Distinct, well-separated seeds per tensor, so Q, K and V are unrelated.
  const uint64_t mix = 0x9E3779B97F4A7C15ull;
  AttentionInputs in{random_uniform(p.q_elems(), seed * 3 + 0 + mix, magnitude),
                     random_uniform(p.kv_elems(), seed * 3 + 1 + mix, magnitude),
                     random_uniform(p.kv_elems(), seed * 3 + 2 + mix, magnitude)};
  round_inputs(in, p.dtype);
  return in;
}

std::vector<float> random_output_gradient(const AttentionProblem& p, uint64_t seed) {
  return random_uniform(p.q_elems(), seed * 3 + 0xD1B54A32D192ED03ull, 1.0f);  // not one of Q, K, V's streams
}

AttentionInputs random_decode_inputs(const DecodeProblem& p, uint64_t seed, float magnitude) {
  const uint64_t mix = 0x9E3779B97F4A7C15ull;  // the streams random_inputs() uses
  AttentionInputs in{random_uniform(p.q_elems(), seed * 3 + 0 + mix, magnitude),
                     random_uniform(p.cache_elems(), seed * 3 + 1 + mix, magnitude),
                     random_uniform(p.cache_elems(), seed * 3 + 2 + mix, magnitude)};
  round_inputs(in, p.dtype);
  for (int64_t bh = 0; bh < p.batch * p.kv_heads; ++bh) {
    const int64_t len = p.kv_lens[static_cast<size_t>(bh / p.kv_heads)];
    const auto first = static_cast<std::ptrdiff_t>((bh * p.max_seq_kv + len) * p.dim);
    const auto last = static_cast<std::ptrdiff_t>((bh + 1) * p.max_seq_kv * p.dim);
    std::fill(in.k.begin() + first, in.k.begin() + last, NAN);
    std::fill(in.v.begin() + first, in.v.begin() + last, NAN);
  }
  return in;
}

void shift_logits(AttentionInputs& in, int64_t dim, float scale, DType t, double logit) {
  constexpr double kKey = 64.0;
  const auto query = static_cast<float>(logit / (kKey * static_cast<double>(scale)));
  for (size_t i = 0; i < in.k.size(); i += static_cast<size_t>(dim)) in.k[i] += static_cast<float>(kKey);
  for (size_t i = 0; i < in.q.size(); i += static_cast<size_t>(dim)) in.q[i] += query;
  round_inputs(in, t);
}

void round_inputs(AttentionInputs& in, DType t) {
  if (t == DType::F32) return;
  for (std::vector<float>* x : {&in.q, &in.k, &in.v}) {
    for (float& e : *x) e = round_to(t, e);
  }
}

}  // namespace fa
