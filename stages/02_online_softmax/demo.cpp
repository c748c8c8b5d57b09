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
#include "common/json.h"
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
struct KernelRun {
  std::string name;
  int sweeps;             // reads of each row
  double bytes_read, bytes_written;  // what the kernel asks for; caches may serve part of it
  double median_ms;
  fa::SoftmaxCheck check;
  bool checked;
};

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

int run(int argc, char** argv) {
  fa::DemoOptions opt = fa::default_demo_options(fa::is_cpu_backend());
  bool trace = false;
  std::vector<float> row = {2, 1, 4, 1.5f, 3}, tile_row = {1, 2, 3, 4};
  int64_t tile = 2;
  fa::ArgParser parser(argv[0],
                       "Stage 02_online_softmax: row softmax with the online recurrence, next to stage 01's "
                       "three-sweep softmax.\nThe matrix has B*H*Nq rows of Nkv values, like the scores of "
                       "that attention problem.");
  fa::add_demo_options(parser, opt);
  parser.add_switch("trace", &trace, "print the recurrence step by step on --row and --tile-row");
  parser.add_real_list("row", &row, "comma-separated values for --trace");
  parser.add_real_list("tile-row", &tile_row, "comma-separated values for the tiled --trace");
  parser.add_int("tile", &tile, "tile size for the tiled --trace");
  if (!parser.parse(argc, argv)) return fa::kExitPassed;

  if (trace) {
    trace_elementwise(row);
    trace_tiles(tile_row, tile);
    trace_kernel(row);
    return fa::kExitPassed;
  }
  if (!opt.load_dir.empty() || !opt.save_dir.empty()) throw fa::UsageError("stage 02 does not read or write .npy files");
  if (opt.causal) throw fa::UsageError("--causal has no meaning for stage 02: it is a softmax of a given matrix");
  if (opt.compare) throw fa::UsageError("--compare: stage 02 always runs stage 01's softmax beside its own");

  const fa::AttentionProblem shape = fa::make_problem(opt.batch, opt.heads, opt.seq_q, opt.seq_kv, opt.dim);
  const int64_t rows = shape.rows(), cols = shape.seq_kv;
  const double matrix_bytes = static_cast<double>(rows) * static_cast<double>(cols) * sizeof(float);
  const fa::DeviceInfo device = fa::require_device();
  fa::require_fits(device, static_cast<size_t>(2 * matrix_bytes) + static_cast<size_t>(rows) * 8,
                   "input and output matrices " + fa::format_bytes(matrix_bytes) + " each");

  const std::vector<float> x_host = fa::random_uniform(rows * cols, opt.seed, static_cast<float>(opt.magnitude));
  fa::DeviceBuffer<float> x(x_host), p(static_cast<size_t>(rows * cols)), m(static_cast<size_t>(rows)),
      l(static_cast<size_t>(rows));
  const std::vector<int64_t> sample = fa::sample_indices(rows, opt.check_rows);
  std::vector<float> x_sample;
  for (int64_t r : sample) x_sample.insert(x_sample.end(), x_host.begin() + r * cols, x_host.begin() + (r + 1) * cols);

  std::vector<KernelRun> runs = {
      {"01 three-sweep softmax", 3, 3 * matrix_bytes, matrix_bytes, 0, {}, false},
      {"02 online softmax", 2, 2 * matrix_bytes, matrix_bytes + rows * 8.0, 0, {}, false}};
  for (KernelRun& k : runs) {
    const bool online = k.sweeps == 2;
    const auto launch = [&] {
      if (online) {
        fa::online::softmax_rows(x.data(), p.data(), m.data(), l.data(), rows, cols);
      } else {
        fa::naive::softmax_rows(x.data(), p.data(), rows, cols);
      }
    };
    p.fill_bytes(fa::kPoisonByte);
    m.fill_bytes(fa::kPoisonByte);
    l.fill_bytes(fa::kPoisonByte);
    launch();
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    if (opt.check) {
      const std::vector<float> got = gather_rows(p.data(), sample, cols);
      const int64_t n = static_cast<int64_t>(sample.size());
      if (online) {
        const std::vector<float> got_m = gather(m.data(), sample), got_l = gather(l.data(), sample);
        k.check = fa::check_softmax(x_sample.data(), n, cols, got.data(), got_m.data(), got_l.data());
      } else {
        k.check = fa::check_softmax(x_sample.data(), n, cols, got.data());
      }
      k.checked = true;
    }
    k.median_ms = fa::time_device(launch, static_cast<int>(opt.warmup), static_cast<int>(opt.repeats)).median_ms();
  }

  bool passed = true;
  for (const KernelRun& k : runs) passed = passed && (!k.checked || k.check.passed());
  const bool cpu = fa::is_cpu_backend();
  const std::string where = cpu ? "CPU backend" : "GPU: " + device.name;
  const double speedup = runs[0].median_ms / runs[1].median_ms;
  char line[512];
  if (opt.json) {
    for (const KernelRun& k : runs) {
      fa::JsonWriter w(std::cout);
      w.begin_object().field("stage", "02_online_softmax").field("kernel", k.name).field("backend", device.backend);
      w.field("device", device.name).field("rows", rows).field("cols", cols).field("sweeps", k.sweeps);
      w.field("bytes_read", static_cast<uint64_t>(k.bytes_read));
      w.field("bytes_written", static_cast<uint64_t>(k.bytes_written));
      w.field("median_ms", k.median_ms);
      w.field("result", !k.checked ? "UNCHECKED" : (k.check.passed() ? "PASSED" : "FAILED")).end_object();
      std::cout << "\n";
    }
    return passed ? fa::kExitPassed : fa::kExitCheckFailed;
  }
  std::snprintf(line, sizeof line, "02_online_softmax: %s  online %.3f ms vs three-sweep %.3f ms (%.2fx)  [%lld rows x %lld]  [%s]",
                !runs[1].checked ? "UNCHECKED" : (passed ? "PASSED" : "FAILED"), runs[1].median_ms, runs[0].median_ms, speedup,
                static_cast<long long>(rows), static_cast<long long>(cols), where.c_str());
  if (opt.brief) {
    std::cout << line << "\n";
    return passed ? fa::kExitPassed : fa::kExitCheckFailed;
  }
  std::cout << "stage 02_online_softmax: row softmax, three sweeps (stage 01) vs online (two sweeps)\n"
            << "  device      " << device.name << (cpu ? " (CPU backend: timings are not GPU performance)" : "") << "\n"
            << "  matrix      " << rows << " rows x " << cols << " floats (B*H*Nq x Nkv of " << fa::describe(shape)
            << "), " << fa::format_bytes(matrix_bytes) << "\n"
            << "  time        median of " << opt.repeats << " runs after " << opt.warmup << " warm-up\n\n";
  std::printf("  %-24s %7s %12s %14s %11s\n", "kernel", "sweeps", "bytes read", "bytes written", "median ms");
  for (const KernelRun& k : runs) {
    std::printf("  %-24s %7d %12s %14s %11.3f\n", k.name.c_str(), k.sweeps, fa::format_bytes(k.bytes_read).c_str(),
                fa::format_bytes(k.bytes_written).c_str(), k.median_ms);
  }
  std::cout << "\n  bytes read per row: " << 3 * cols * 4 << " (three sweeps) vs " << 2 * cols * 4
            << " (online), as the kernels ask for them. A row small enough to stay in\n"
            << "  L1/L2 between sweeps is re-read from cache, not HBM (see the stage's README).\n";
  for (const KernelRun& k : runs) {
    if (!k.checked) continue;
    std::cout << "  check " << k.name << ", " << sample.size() << " of " << rows << " rows against float64:\n"
              << "    p  " << fa::describe(k.check.p, nullptr) << "\n";
    if (k.check.has_stats) {
      std::cout << "    m  " << fa::describe(k.check.m, nullptr) << "\n    l  " << fa::describe(k.check.l, nullptr) << "\n";
    }
  }
  std::cout << line << "\n";
  return passed ? fa::kExitPassed : fa::kExitCheckFailed;
}

}  // namespace

/// Runs the comparison, or the trace, with the shared error handling.
int main(int argc, char** argv) {
  return fa::run_guarded(argv[0], [&] { return run(argc, argv); });
}
