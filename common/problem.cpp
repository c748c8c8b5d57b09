#include "common/problem.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "common/errors.h"

namespace fa {

namespace {

void require_positive(const char* name, int64_t value) {
  if (value < 1) {
    throw InputError(std::string(name) + " must be at least 1, got " + std::to_string(value));
  }
}

// Largest element count we accept for one tensor: far beyond any GPU, far below
// int64 overflow in index arithmetic such as (row * Nkv + col).
constexpr double kMaxElements = 1e15;

}  // namespace

AttentionProblem make_problem(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv,
                              int64_t dim, double scale, bool causal, DType dtype) {
  require_positive("batch", batch);
  require_positive("heads", heads);
  require_positive("seq-q", seq_q);
  require_positive("seq-kv", seq_kv);
  require_positive("dim", dim);
  const auto& dims = supported_head_dims();
  if (std::find(dims.begin(), dims.end(), dim) == dims.end()) {
    std::string list;
    for (int64_t d : dims) list += (list.empty() ? "" : ", ") + std::to_string(d);
    throw InputError("head dim " + std::to_string(dim) + " is not supported (supported: " +
                     list + ")");
  }
  // Checked in floating point so the check itself cannot overflow.
  const double bh = static_cast<double>(batch) * static_cast<double>(heads);
  const double longest = static_cast<double>(std::max(seq_q, seq_kv));
  if (bh * longest * static_cast<double>(dim) > kMaxElements ||
      bh * static_cast<double>(seq_q) * static_cast<double>(seq_kv) > kMaxElements) {
    throw InputError("shape is too large to index: B·H·N·d or B·H·Nq·Nkv exceeds 1e15");
  }
  if (!(scale >= 0.0) || !std::isfinite(scale)) {
    throw InputError("scale must be a positive finite number (or 0 for 1/sqrt(d))");
  }
  AttentionProblem p;
  p.batch = batch;
  p.heads = heads;
  p.seq_q = seq_q;
  p.seq_kv = seq_kv;
  p.dim = dim;
  p.scale = scale > 0.0 ? static_cast<float>(scale)
                        : static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  p.causal = causal;
  p.dtype = dtype;
  return p;
}

void require_copyable(const AttentionProblem& p, const Layout& layout, const std::string& stage) {
  const int64_t unit = 16 / static_cast<int64_t>(dtype_bytes(p.dtype));  // elements in 16 bytes
  const std::pair<const char*, const Strides*> tensors[] = {
      {"q", &layout.q}, {"k", &layout.k}, {"v", &layout.v}, {"o", &layout.o}, {"d_o", &layout.d_o}};
  for (const auto& [name, s] : tensors) {
    for (const int64_t stride : {s->batch, s->head, s->row}) {
      if (stride < 0 || stride % unit != 0) {
        throw InputError(stage + ": " + name + "'s strides (" + std::to_string(s->batch) + ", " +
                         std::to_string(s->head) + ", " + std::to_string(s->row) +
                         " elements) must be whole multiples of 16 bytes, not negative");
      }
    }
  }
}

unsigned q_tile_grid(const AttentionProblem& p, int64_t br, const std::string& stage) {
  const int64_t blocks = p.batch_heads() * ((p.seq_q + br - 1) / br);
  if (blocks > 2147483647) throw InputError(stage + ": too many query tiles for one grid");
  return static_cast<unsigned>(blocks);
}

double q_outer_hbm_bytes(const AttentionProblem& p, int64_t br) {
  const double elem = static_cast<double>(dtype_bytes(p.dtype));
  const double q_tiles = static_cast<double>((p.seq_q + br - 1) / br);
  const double bh = static_cast<double>(p.batch_heads());
  const double q = static_cast<double>(p.seq_q) * static_cast<double>(p.dim) * elem;
  const double kv = 2.0 * static_cast<double>(p.seq_kv) * static_cast<double>(p.dim) * elem;
  return bh * (2.0 * q + q_tiles * kv + static_cast<double>(p.seq_q) * 4.0);
}

std::string describe(const AttentionProblem& p) {
  std::ostringstream s;
  s << "B=" << p.batch << " H=" << p.heads << " Nq=" << p.seq_q << " Nkv=" << p.seq_kv
    << " d=" << p.dim << " scale=" << p.scale << " causal=" << (p.causal ? "yes" : "no")
    << " dtype=" << dtype_name(p.dtype);
  return s.str();
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 5) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

}  // namespace fa
