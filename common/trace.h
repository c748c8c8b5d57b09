/**
 * \file trace.h
 * \brief Trace points in the kernels, for the "See it run" pages (docs/see-it-run): what
 *        each block loads and stores, and its running m, l and O after every step.
 *
 * A kernel marks what it does with one-line trace points:
 *
 *     FA_TRACE(load("Q", i0, q_valid));             // a tile of rows comes from HBM
 *     FA_TRACE(rows(j0, i0, i0 + ROWS * ty, "l", l_run));   // this thread's rows' l
 *     FA_TRACE(step(j0, i0));                       // the block finished step (j0, i0)
 *
 * `FA_TRACE(call)` is `fa::trace::call` only in the CPU-backend copies of the kernels
 * that the tracer (see_it_run_trace) links, which are compiled with FA_TRACE_KERNELS.
 * Everywhere else, on the GPU and in every other CPU build, it is nothing: its arguments
 * are not even evaluated, so tracing costs nothing when it is off.
 *
 * The recorder keeps, per block, the events (load, store, step, skip) that thread 0
 * passes in program order, and the per-row values of each step (j0, i0), which every
 * thread may record for its own rows (the threads that share a row record the same
 * value). Blocks run one at a time on the CPU backend, so no locking is needed.
 */
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace fa::trace {

/// One thing a block did: `op` is "load", "store", "step" or "skip".
struct Event {
  std::string op;    ///< what happened
  std::string what;  ///< the tensors loaded or stored ("Q", "K, V", "O, m, l"), or empty
  int64_t first = 0;  ///< first row of the tile loaded or stored
  int64_t count = 0;  ///< rows loaded or stored
  int64_t j = -1;     ///< step and skip: the key/value tile's first row
  int64_t i = -1;     ///< step and skip: the query tile's first row
};

/// The per-row values of one step: row → name → values (one for m, l; d for O).
using StepRows = std::map<int64_t, std::map<std::string, std::vector<double>>>;

/// What one block recorded.
struct BlockTrace {
  std::vector<Event> events;                                 ///< in thread 0's program order
  std::map<std::pair<int64_t, int64_t>, StepRows> steps;     ///< (j, i) → its rows' values
};

/// Forgets everything recorded; later records keep rows below `rows_per_head` only
/// (rows past the sequence, in a partial last tile, are left out).
void start(int64_t rows_per_head);
/// Everything recorded since start(), by block index.
const std::map<int64_t, BlockTrace>& blocks();

/// Appends an event to block `block`'s list.
void record_event(int64_t block, Event e);
/// Sets value `index` of `name` for `row` in step (j, i) of `block` (a vector of `size`).
void record_value(int64_t block, int64_t j, int64_t i, int64_t row, const std::string& name, int index, int size,
                  double value);

}  // namespace fa::trace

#if defined(FA_TRACE_KERNELS)
#if !defined(FA_CPU_KERNEL)
#error "FA_TRACE_KERNELS is for the CPU backend's copies of the kernels only"
#endif

/// A trace point: calls fa::trace::call (here, in the tracer's copies of the kernels).
#define FA_TRACE(call) ::fa::trace::call

namespace fa::trace {

/// Thread 0 of the block records an event; the others pass.
inline void event(const char* op, const char* what, int64_t first, int64_t count, int64_t j, int64_t i) {
  if (threadIdx.x == 0) record_event(blockIdx.x, Event{op, what, first, count, j, i});
}
/// Rows [first, first + count) of `what` came from HBM into shared memory.
inline void load(const char* what, int64_t first, int64_t count) { event("load", what, first, count, -1, -1); }
/// Rows [first, first + count) of `what` were written to HBM.
inline void store(const char* what, int64_t first, int64_t count) { event("store", what, first, count, -1, -1); }
/// The block finished its work on key tile j and query tile i; the values of the step
/// are those recorded under the same (j, i).
inline void step(int64_t j, int64_t i) { event("step", "", 0, 0, j, i); }
/// The block skips key tile j for query tile i: it lies above the causal diagonal.
inline void skip(int64_t j, int64_t i) { event("skip", "", 0, 0, j, i); }

/// This thread's per-row scalars: rows first .. first + R − 1 of `name`, times `mul`.
template <int R>
inline void rows(int64_t j, int64_t i, int64_t first, const char* name, const float (&v)[R], float mul = 1.0f) {
  for (int r = 0; r < R; ++r) record_value(blockIdx.x, j, i, first + r, name, 0, 1, v[r] * mul);
}

/// This thread's part of O: o[r][c] is row first + r, column col0 + c·col_step (of d).
template <int R, int C>
inline void o_part(int64_t j, int64_t i, int64_t first, int col0, int col_step, int d, const float (&o)[R][C]) {
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) record_value(blockIdx.x, j, i, first + r, "o", col0 + c * col_step, d, o[r][c]);
}

/// What HBM holds now for rows [first, first + count) of a head (thread 0 reads it): m,
/// l and O, where `m`, `l` and `o` point at the head's row 0.
inline void hbm_state(int64_t j, int64_t i, const float* m, const float* l, const float* o, int64_t first,
                      int64_t count, int d) {
  if (threadIdx.x != 0) return;
  for (int64_t r = first; r < first + count; ++r) {
    record_value(blockIdx.x, j, i, r, "m", 0, 1, m[r]);
    record_value(blockIdx.x, j, i, r, "l", 0, 1, l[r]);
    for (int c = 0; c < d; ++c) record_value(blockIdx.x, j, i, r, "o", c, d, o[r * d + c]);
  }
}

}  // namespace fa::trace

#else
/// A trace point: nothing, its arguments not evaluated (the GPU and every other build).
#define FA_TRACE(call) ((void)0)
#endif
