#include "common/verify.h"

#include <algorithm>

#include "common/reference.h"

namespace fa {

namespace {

// O and (optionally) lse on `rows` against a reference and a same-precision baseline.
AttentionCheck check_rows(DType dtype, int64_t d, const AttentionRows<double>& ref, const AttentionRows<float>& base,
                          const std::vector<float>& o, const std::vector<int64_t>& rows,
                          const std::vector<float>* lse) {
  std::vector<float> got(rows.size() * static_cast<size_t>(d));
  for (size_t n = 0; n < rows.size(); ++n) {
    std::copy_n(o.begin() + static_cast<std::ptrdiff_t>(rows[n]) * d, d,
                got.begin() + static_cast<std::ptrdiff_t>(n) * d);
  }
  AttentionCheck check;
  check.rows = rows;
  check.o = compare_with_baseline(dtype, got.data(), ref.o.data(), base.o.data(), static_cast<int64_t>(got.size()));
  if (lse) {
    std::vector<float> got_lse(rows.size());
    for (size_t n = 0; n < rows.size(); ++n) got_lse[n] = (*lse)[static_cast<size_t>(rows[n])];
    check.has_lse = true;
    // The log-sum-exp is fp32 in every precision (scores are accumulated in fp32).
    check.lse = compare_fp32(got_lse.data(), ref.lse.data(), base.lse.data(),
                             static_cast<int64_t>(rows.size()));
  }
  return check;
}

}  // namespace

AttentionCheck check_attention(const AttentionProblem& p, const AttentionInputs& in,
                               const std::vector<float>& o, const std::vector<int64_t>& rows,
                               const std::vector<float>* lse) {
  return check_rows(p.dtype, p.dim, reference_attention(p, in.q.data(), in.k.data(), in.v.data(), rows),
                    baseline_attention(p, in.q.data(), in.k.data(), in.v.data(), rows), o, rows, lse);
}

AttentionCheck check_decode(const DecodeProblem& p, const AttentionInputs& in, const std::vector<float>& o,
                            const std::vector<int64_t>& rows, const std::vector<float>* lse) {
  return check_rows(p.dtype, p.dim, reference_decode(p, in.q.data(), in.k.data(), in.v.data(), rows),
                    baseline_decode(p, in.q.data(), in.k.data(), in.v.data(), rows), o, rows, lse);
}

SoftmaxCheck check_softmax(const float* x, int64_t rows, int64_t cols, const float* p,
                           const float* m, const float* l) {
  const size_t n = static_cast<size_t>(rows * cols);
  std::vector<double> ref_p(n), ref_m(static_cast<size_t>(rows)), ref_l(static_cast<size_t>(rows));
  std::vector<float> base_p(n), base_m(static_cast<size_t>(rows)), base_l(static_cast<size_t>(rows));
  reference_softmax(x, rows, cols, ref_p.data(), ref_m.data(), ref_l.data());
  baseline_softmax_fp32(x, rows, cols, base_p.data(), base_m.data(), base_l.data());
  SoftmaxCheck check;
  check.p = compare_fp32(p, ref_p.data(), base_p.data(), rows * cols);
  if (m && l) {
    check.has_stats = true;
    check.m = compare_fp32(m, ref_m.data(), base_m.data(), rows);
    check.l = compare_fp32(l, ref_l.data(), base_l.data(), rows);
  }
  return check;
}

namespace {

std::string row_coords(const AttentionProblem& p, int64_t r) {
  const int64_t bh = r / p.seq_q;
  return "b=" + std::to_string(bh / p.heads) + ",h=" + std::to_string(bh % p.heads) +
         ",i=" + std::to_string(r % p.seq_q);
}

std::string decode_coords(const DecodeProblem& p, int64_t r) {
  const int64_t bh = r / p.seq_q;
  return "b=" + std::to_string(bh / p.q_heads) + ",hq=" + std::to_string(bh % p.q_heads) +
         ",i=" + std::to_string(r % p.seq_q);
}

}  // namespace

IndexNamer decode_output_namer(const DecodeProblem& p, const std::vector<int64_t>& rows) {
  return [p, rows](int64_t k) {
    return "O[" + decode_coords(p, rows[static_cast<size_t>(k / p.dim)]) + ",c=" + std::to_string(k % p.dim) + "]";
  };
}

IndexNamer decode_row_namer(const DecodeProblem& p, const std::vector<int64_t>& rows, const char* what) {
  const std::string name = what;
  return [p, rows, name](int64_t k) { return name + "[" + decode_coords(p, rows[static_cast<size_t>(k)]) + "]"; };
}

IndexNamer output_namer(const AttentionProblem& p, const std::vector<int64_t>& rows) {
  return [p, rows](int64_t k) {
    return "O[" + row_coords(p, rows[static_cast<size_t>(k / p.dim)]) +
           ",c=" + std::to_string(k % p.dim) + "]";
  };
}

IndexNamer row_namer(const AttentionProblem& p, const std::vector<int64_t>& rows,
                     const char* what) {
  const std::string name = what;
  return [p, rows, name](int64_t k) {
    return name + "[" + row_coords(p, rows[static_cast<size_t>(k)]) + "]";
  };
}

}  // namespace fa
