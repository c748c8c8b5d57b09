#include "common/random.h"

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

void round_inputs(AttentionInputs& in, DType t) {
  if (t == DType::F32) return;
  for (std::vector<float>* x : {&in.q, &in.k, &in.v}) {
    for (float& e : *x) e = round_to(t, e);
  }
}

}  // namespace fa
