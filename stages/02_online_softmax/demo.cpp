/**
 * \file stages/02_online_softmax/demo.cpp
 * \brief Stage 02's demo: the online softmax next to stage 01's three-sweep softmax on
 *        the same matrix, with time and bytes for both; `--trace` shows the recurrence
 *        step by step on a short row.
 *
 * The matrix has the shape of the scores S of the attention problem on the command
 * line: B·H·Nq rows of Nkv values.
 * \code
 * stage02_online_softmax                       # 4·32·4096 rows of 4096
 * stage02_online_softmax --trace               # [2, 1, 4, 1.5, 3] and [1, 2, 3, 4] by tiles of 2
 * stage02_online_softmax --trace --row=5,-inf,3 --tile-row=1,2,3,4,5 --tile 3
 * \endcode
 */
#include <cuda_runtime.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/cuda_check.h"
#include "common/demo.h"
#include "common/device.h"
#include "common/device_buffer.h"
#include "common/errors.h"
#include "common/report.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/timer.h"
#include "common/verify.h"
#include "stages/01_naive/naive_attention.h"
#include "stages/02_online_softmax/online_softmax.h"

namespace {

std::string num(float x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", x);
  return x == -INFINITY ? "-inf" : buf;
}

// ---- --trace: the recurrence by hand ---------------------------------------------------
void trace_elementwise(const std::vector<float>& x) {
  std::cout << "Online softmax, one value at a time:\n"
            << "  m_new = max(m, x),  alpha = exp(m - m_new),  l = l*alpha + exp(x - m_new)\n\n"
            << "  step       x       m   alpha         l\n";
  fa::online::Stats s = fa::online::empty_stats();
  for (size_t k = 0; k < x.size(); ++k) {
    const float m_new = fmaxf(s.m, x[k]);
    const float alpha = m_new == -INFINITY ? 1.0f : expf(s.m - m_new);
    const float term = m_new == -INFINITY ? 0.0f : expf(x[k] - m_new);
    std::printf("  %4zu  %6s  %6s  %6s  %8s   = %s*%s + %s\n", k + 1, num(x[k]).c_str(), num(m_new).c_str(),
                num(alpha).c_str(), num(s.l * alpha + term).c_str(), num(s.l).c_str(), num(alpha).c_str(),
                num(term).c_str());
    fa::online::update(s, x[k]);  // the kernel's form of the same step
  }
  std::cout << "\n  final: m = " << num(s.m) << ", l = " << num(s.l) << "\n  probabilities exp(x - m) / l:";
  float total = 0;
  for (float v : x) {
    const float p = s.l > 0 ? expf(v - s.m) / s.l : 0.0f;
    total += p;
    std::cout << " " << num(p);
  }
  std::cout << "  (sum " << num(total) << ")\n";
}

void trace_tiles(const std::vector<float>& x, int64_t tile) {
  std::cout << "\nTile by tile (tile size " << tile << "): each tile's own m and l, merged into the running ones:\n"
            << "  m = max(m_run, m_tile),  l = l_run*exp(m_run - m) + l_tile*exp(m_tile - m)\n\n";
  fa::online::Stats run = fa::online::empty_stats();
  for (size_t start = 0; start < x.size(); start += static_cast<size_t>(tile)) {
    fa::online::Stats t = fa::online::empty_stats();
    std::string values;
    for (size_t j = start; j < std::min(x.size(), start + static_cast<size_t>(tile)); ++j) {
      fa::online::update(t, x[j]);
      values += (values.empty() ? "" : ", ") + num(x[j]);
    }
    const fa::online::Stats merged = fa::online::merge(run, t);
    const float alpha = merged.m == -INFINITY ? 1.0f : expf(run.m - merged.m);
    std::printf("  tile [%s]: m_tile = %s, l_tile = %s;  merged: m = %s, alpha = exp(%s - %s) = %s, l = %s\n",
                values.c_str(), num(t.m).c_str(), num(t.l).c_str(), num(merged.m).c_str(), num(run.m).c_str(),
                num(merged.m).c_str(), num(alpha).c_str(), num(merged.l).c_str());
    run = merged;
  }
  fa::online::Stats whole = fa::online::empty_stats();
  for (float v : x) fa::online::update(whole, v);
  std::cout << "\n  final: m = " << num(run.m) << ", l = " << num(run.l) << "  (value by value: m = "
            << num(whole.m) << ", l = " << num(whole.l) << ")\n";
}

// The same row through the kernel, when there is a device.
void trace_kernel(const std::vector<float>& x) {
  try {
    fa::require_device();
  } catch (const fa::NoGpuError&) {
    std::cout << "\n(no GPU: the kernel was not run; the CPU twin stage02_online_softmax_cpu runs it)\n";
    return;
  }
  fa::DeviceBuffer<float> in(x), out(x.size()), m(1), l(1);
  fa::online::softmax_rows(in.data(), out.data(), m.data(), l.data(), 1, static_cast<int64_t>(x.size()));
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  std::cout << "\nThe kernel on " << (fa::is_cpu_backend() ? "the CPU backend" : "the GPU") << ", 256 threads on this row: m = "
            << num(m.download()[0]) << ", l = " << num(l.download()[0]) << ", p =";
  for (float p : out.download()) std::cout << " " << num(p);
  std::cout << "\n";
}

// ---- the comparison ------------------------------------------------------------------

// The rows `rows` of a device matrix with `cols` columns, gathered on the host.
std::vector<float> gather_rows(const float* device, const std::vector<int64_t>& rows, int64_t cols) {
  std::vector<float> host(rows.size() * static_cast<size_t>(cols));
  for (size_t n = 0; n < rows.size(); ++n) {
    FA_CUDA_CHECK(cudaMemcpy(host.data() + n * static_cast<size_t>(cols), device + rows[n] * cols,
                             static_cast<size_t>(cols) * sizeof(float), cudaMemcpyDeviceToHost));
  }
  return host;
}

std::vector<float> gather(const float* device, const std::vector<int64_t>& rows) { return gather_rows(device, rows, 1); }

// Names element k of the gathered rows, `per_row` values a row: "p[row=17,col=5]" or "m[row=17]".
fa::IndexNamer sample_namer(const std::vector<int64_t>& rows, int64_t per_row, const std::string& what) {
  return [rows, per_row, what](int64_t k) {
    const std::string row = "row=" + std::to_string(rows[static_cast<size_t>(k / per_row)]);
    return what + "[" + row + (per_row > 1 ? ",col=" + std::to_string(k % per_row) : "") + "]";
  };
}

// Stage 02's softmax beside stage 01's on the same matrix; or, with --trace, the
// recurrence step by step.
class SoftmaxDemo final : public fa::Demo {
 public:
  std::string id() const override { return "02_online_softmax"; }
  std::string about() const override {
    return "row softmax with the online recurrence, next to stage 01's three-sweep softmax.\n"
           "The matrix has B*H*Nq rows of Nkv values, like the scores of that attention problem.";
  }
  std::vector<std::string> left_out_flags() const override { return {"load", "save", "dtype"}; }
  void add_flags(fa::ArgParser& parser) override {
    parser.reword("compare", "(always on: stage 01's softmax runs beside this one)");
    parser.add_switch("trace", &trace_, "print the recurrence step by step on --row and --tile-row");
    parser.add_real_list("row", &row_, "comma-separated values for --trace");
    parser.add_real_list("tile-row", &tile_row_, "comma-separated values for the tiled --trace");
    parser.add_int("tile", &tile_, "tile size for the tiled --trace");
  }

  std::optional<int> setup(const fa::DemoOptions& opt, const fa::ArgParser&) override {
    if (trace_) {
      trace_elementwise(row_);
      trace_tiles(tile_row_, tile_);
      trace_kernel(row_);
      return fa::kExitPassed;
    }
    if (opt.causal) throw fa::UsageError("--causal has no meaning for stage 02: it is a softmax of a given matrix");
    if (opt.compare) throw fa::UsageError("--compare: stage 02 always runs stage 01's softmax beside its own");
    opt_ = opt;
    shape_ = fa::make_problem(opt.batch, opt.heads, opt.seq_q, opt.seq_kv, opt.dim);
    return std::nullopt;
  }

  fa::DemoFootprint footprint(const fa::DeviceInfo&) override {
    fa::DemoFootprint f;
    f.shape = matrix_text();
    f.device_bytes = static_cast<size_t>(2 * matrix_bytes()) + static_cast<size_t>(shape_.rows()) * 8;
    f.what = "input and output matrices " + fa::format_bytes(matrix_bytes()) + " each";
    return f;
  }

  fa::RunReport run(const fa::DeviceInfo& device) override {
    const int64_t rows = shape_.rows(), cols = shape_.seq_kv;
    const std::vector<float> x_host = fa::random_uniform(rows * cols, opt_.seed, static_cast<float>(opt_.magnitude));
    fa::DeviceBuffer<float> x(x_host), p(static_cast<size_t>(rows * cols)), m(static_cast<size_t>(rows)),
        l(static_cast<size_t>(rows));
    const std::vector<int64_t> sample = fa::sample_indices(rows, opt_.check_rows);
    std::vector<float> x_sample;
    for (int64_t r : sample) x_sample.insert(x_sample.end(), x_host.begin() + r * cols, x_host.begin() + (r + 1) * cols);

    // Each kernel: outputs poisoned, one checked run, then the timed runs.
    const auto measure = [&](bool online) {
      const auto launch = [&] {
        if (online) {
          fa::online::softmax_rows(x.data(), p.data(), m.data(), l.data(), rows, cols);
        } else {
          fa::naive::softmax_rows(x.data(), p.data(), rows, cols);
        }
      };
      const int sweeps = online ? 2 : 3;
      const double read = sweeps * matrix_bytes(), written = matrix_bytes() + (online ? rows * 8.0 : 0.0);
      fa::RunReport r;
      r.stage = online ? "02_online_softmax" : "01_naive softmax";
      r.title = online ? "row softmax, online: m and l in one sweep, then normalise"
                       : "row softmax, three sweeps: max, sum, normalise";
      r.device = device;
      r.shape = matrix_text();
      r.fields = {{"rows", rows}, {"cols", cols}, {"sweeps", int64_t{sweeps}},
                  {"bytes_read", read}, {"bytes_written", written}};
      r.hbm_model_bytes = read + written;
      r.notes = {{"sweeps", std::to_string(sweeps) + " reads of each row, " + fa::format_bytes(read) + " read and " +
                                fa::format_bytes(written) + " written as the kernel asks for them; a row that stays "
                                "in L1/L2 between sweeps is read again from cache, not HBM (the stage's README)"}};
      p.fill_bytes(fa::kPoisonByte);
      m.fill_bytes(fa::kPoisonByte);
      l.fill_bytes(fa::kPoisonByte);
      launch();
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      if (opt_.check) {
        const std::vector<float> got = gather_rows(p.data(), sample, cols);
        const int64_t n = static_cast<int64_t>(sample.size());
        r.checked = true;
        r.checked_what = std::to_string(n) + " of " + std::to_string(rows) + " rows";
        r.checked_count = {"rows_checked", n};
        if (online) {
          const std::vector<float> got_m = gather(m.data(), sample), got_l = gather(l.data(), sample);
          const fa::SoftmaxCheck c = fa::check_softmax(x_sample.data(), n, cols, got.data(), got_m.data(), got_l.data());
          r.checks = {{"p", c.p, sample_namer(sample, cols, "p")},
                      {"m", c.m, sample_namer(sample, 1, "m")},
                      {"l", c.l, sample_namer(sample, 1, "l")}};
        } else {
          r.checks = {{"p", fa::check_softmax(x_sample.data(), n, cols, got.data()).p, sample_namer(sample, cols, "p")}};
        }
      }
      r.median_ms = fa::time_device(launch, static_cast<int>(opt_.warmup), static_cast<int>(opt_.repeats)).median_ms();
      r.warmup = opt_.warmup;
      r.repeats = opt_.repeats;
      r.metrics = {fa::rate_metric(device, "gbps", (read + written) / (r.median_ms * 1e-3) / 1e9, "GB/s", "bandwidth",
                                   "of the bytes the kernel asks for", true, 1)};
      return r;
    };
    fa::RunReport report = measure(true);
    report.compared.push_back(measure(false));
    return report;
  }

 private:
  double matrix_bytes() const { return static_cast<double>(shape_.rows()) * static_cast<double>(shape_.seq_kv) * 4; }
  std::string matrix_text() const {
    const auto n = [](int64_t x) { return std::to_string(x); };
    return n(shape_.rows()) + " rows x " + n(shape_.seq_kv) + " floats, " + fa::format_bytes(matrix_bytes()) +
           " (B*H*Nq x Nkv for B=" + n(shape_.batch) + " H=" + n(shape_.heads) + " Nq=" + n(shape_.seq_q) +
           " Nkv=" + n(shape_.seq_kv) + ")";
  }

  bool trace_ = false;  // --trace, on --row and --tile-row by tiles of --tile
  std::vector<float> row_ = {2, 1, 4, 1.5f, 3}, tile_row_ = {1, 2, 3, 4};
  int64_t tile_ = 2;
  fa::DemoOptions opt_;
  fa::AttentionProblem shape_;
};

}  // namespace

/// Runs the comparison, or the trace, through the shared driver.
int main(int argc, char** argv) {
  SoftmaxDemo demo;
  return fa::run_demo(argc, argv, demo);
}
