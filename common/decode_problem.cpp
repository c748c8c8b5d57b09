#include "common/decode_problem.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "common/errors.h"
#include "common/problem.h"

namespace fa {

int64_t DecodeProblem::longest() const { return *std::max_element(kv_lens.begin(), kv_lens.end()); }

int64_t DecodeProblem::total_kv() const { return std::accumulate(kv_lens.begin(), kv_lens.end(), int64_t{0}); }

double DecodeProblem::flops() const {
  double keys = 0;  // Σ over sequences and new queries of the keys each sees
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < seq_q; ++i) keys += static_cast<double>(visible_keys(b, i));
  }
  return 4.0 * static_cast<double>(q_heads * dim) * keys;
}

DecodeProblem make_decode_problem(int64_t batch, int64_t q_heads, int64_t kv_heads, int64_t seq_q,
                                  int64_t max_seq_kv, std::vector<int64_t> kv_lens, int64_t dim, double scale,
                                  bool causal, DType dtype) {
  // make_problem() owns the size, head-dimension and scale rules: the problem of every query
  // head against the cache's capacity must pass them.
  const AttentionProblem shape = make_problem(batch, q_heads, seq_q, max_seq_kv, dim, scale, false, dtype);
  if (kv_heads < 1) throw InputError("kv-heads must be at least 1, got " + std::to_string(kv_heads));
  if (q_heads % kv_heads != 0) {
    throw InputError("heads (" + std::to_string(q_heads) + ") must be a multiple of kv-heads (" +
                     std::to_string(kv_heads) + "): each KV head serves a whole group of query heads");
  }
  if (kv_lens.empty()) kv_lens.assign(static_cast<std::size_t>(batch), max_seq_kv);
  if (static_cast<int64_t>(kv_lens.size()) != batch) {
    throw InputError("kv-lens has " + std::to_string(kv_lens.size()) + " lengths for " + std::to_string(batch) +
                     " sequences: give one per sequence");
  }
  for (std::size_t b = 0; b < kv_lens.size(); ++b) {
    const int64_t len = kv_lens[b];
    if (len < 1 || len > max_seq_kv) {
      throw InputError("kv-lens: sequence " + std::to_string(b) + " has length " + std::to_string(len) +
                       ", outside [1, " + std::to_string(max_seq_kv) + "] (the cache's capacity, --seq-kv)");
    }
    if (causal && len < seq_q) {
      throw InputError("causal: sequence " + std::to_string(b) + " has " + std::to_string(len) +
                       " cached rows but " + std::to_string(seq_q) +
                       " new queries; the new queries are the last Nq positions, so every length must be at "
                       "least Nq");
    }
  }
  DecodeProblem p;
  p.batch = batch;
  p.q_heads = q_heads;
  p.kv_heads = kv_heads;
  p.seq_q = seq_q;
  p.max_seq_kv = max_seq_kv;
  p.kv_lens = std::move(kv_lens);
  p.dim = dim;
  p.scale = shape.scale;
  p.causal = causal;
  p.dtype = dtype;
  return p;
}

std::string describe(const DecodeProblem& p) {
  std::ostringstream s;
  s << "B=" << p.batch << " Hq=" << p.q_heads << " Hkv=" << p.kv_heads << " Nq=" << p.seq_q << " L=";
  const auto [lo, hi] = std::minmax_element(p.kv_lens.begin(), p.kv_lens.end());
  if (*lo == *hi) {
    s << *lo;
  } else if (p.kv_lens.size() <= 6) {
    s << "[";
    for (std::size_t b = 0; b < p.kv_lens.size(); ++b) s << (b ? ", " : "") << p.kv_lens[b];
    s << "]";
  } else {
    s << *lo << ".." << *hi;
  }
  if (p.max_seq_kv != *hi) s << " (capacity " << p.max_seq_kv << ")";
  s << " d=" << p.dim << " scale=" << p.scale << " causal=" << (p.causal ? "bottom-right" : "no")
    << " dtype=" << dtype_name(p.dtype);
  return s.str();
}

}  // namespace fa
