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
 *
 * The tensor-core stages record what one warp holds instead: each lane of warp 0 in block 0
 * keeps, under a name, the first fragment it passes (its registers' 16-bit or fp32 values,
 * and the shared-memory offset it handed ldmatrix), and thread 0 keeps the first copy of a
 * shared-memory tile as it lies:
 *
 *     FA_TRACE(fragment<T>("A = Q", a_row * S + a_col, a));   // after ldmatrix_x4(a, ...)
 *     FA_TRACE(accumulators("S", s));                         // this lane's C fragments
 *     FA_TRACE(tile("K", Kt, Bc * D));                         // the K tile as it lies
 *
 * A copy pipeline (stage 07) records its steps as events of thread 0: copy, commit, wait,
 * barrier and compute. Kernels whose records follow their own structure (stage 09's splits,
 * stage 10's tile pairs) record values under keys they choose:
 *
 *     FA_TRACE(keyed("part o", {blockIdx.y, row}, c, D, o));  // element c of split y's O part
 */
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace fa::trace {

/// One thing a block did: `op` is "load", "store", "step" or "skip"; or, for a copy pipeline
/// (stage 07), "copy" (first, count; j: the buffer), "commit", "wait" (count: N), "barrier"
/// or "compute" (first: the key tile; j: the buffer); or, for stage 08's ring (ring()), a
/// step of warpgroup i with first: the tile's ring position, count: a phase parity, j: a slot.
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

/// What one lane of warp 0 in block 0 recorded under a name (the first time only): an
/// element offset it handed an instruction, if any, and values (a fragment's elements, in
/// register order, the lower half of each register first).
struct LaneRecord {
  int64_t offset = -1;         ///< element offset from the tile's start, or −1
  std::vector<double> values;  ///< the values, in register order
};

/// A name's records, lane by lane (0-31).
using LaneRecords = std::map<int, LaneRecord>;

/// Values recorded under a name and a key the kernel chooses (a split and a row, a tile
/// pair and a row), for kernels whose records follow their own structure: name → key → values.
using Keyed = std::map<std::string, std::map<std::vector<int64_t>, std::vector<double>>>;

/// Forgets everything recorded; later records keep rows below `rows_per_head` only
/// (rows past the sequence, in a partial last tile, are left out).
void start(int64_t rows_per_head);
/// Everything recorded since start(), by block index.
const std::map<int64_t, BlockTrace>& blocks();

/// Everything warp 0 of block 0 recorded since start(), by name.
const std::map<std::string, LaneRecords>& lanes();
/// A tile of shared memory as thread 0 of block 0 first saw it, by name: its 16-bit elements
/// in the order they lie.
const std::map<std::string, std::vector<double>>& tiles();

/// Everything recorded under keys since start().
const Keyed& keyed();

/// Keeps `r` as lane `lane`'s record under `name`, unless it already has one.
void record_lane(const std::string& name, int lane, LaneRecord r);
/// Keeps `values` as the tile `name`, unless there is one already.
void record_tile(const std::string& name, std::vector<double> values);

/// Sets value `index` of `name` under `key` (a vector of `size`, zeros until set).
void record_keyed(const std::string& name, const std::vector<int64_t>& key, int index, int size, double value);

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

#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

/// cp.async copies of rows [first, first + count) of `what` were issued into shared-memory
/// buffer `buffer` (−1: the tensor's only one).
inline void copy(const char* what, int64_t first, int64_t count, int buffer) {
  event("copy", what, first, count, buffer, -1);
}
/// cp.async.commit_group: the copies since the last commit are one group.
inline void commit() { event("commit", "", 0, 0, -1, -1); }
/// cp.async.wait_group n: all but the n newest groups have landed.
inline void wait(int n) { event("wait", "", 0, n, -1, -1); }
/// __syncthreads().
inline void barrier() { event("barrier", "", 0, 0, -1, -1); }
/// The block computed `what` on the key/value tile at row j0, in buffer `buffer`.
inline void compute(const char* what, int64_t j0, int buffer) { event("compute", what, j0, 0, buffer, -1); }

/// A step of stage 08's ring, recorded by the first thread of each warpgroup (0: the
/// producer, 1 + c: consumer c): `op` is "load" (TMA of `what` into slot `slot`), "wait" (on
/// barrier `what` of slot `slot`, for phase parity `parity`, passed), "issue" (a wgmma,
/// `what`), "softmax", "arrive" (on barrier `what`), "turn" (the consumer's turn at the tensor
/// cores begins) or "pass" (it lets the next consumer go); `tile` is the K/V tile's position in
/// the ring (the tiles copied before it), or −1.
inline void ring(const char* op, const char* what, int slot, int parity, int64_t tile) {
  if (threadIdx.x % 128 == 0) {
    record_event(blockIdx.x, Event{op, what, tile, parity, slot, static_cast<int64_t>(threadIdx.x / 128)});
  }
}

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

/// Whether this thread is a lane of warp 0 in block 0: the one warp the lane views follow.
inline bool first_warp() { return blockIdx.x == 0 && threadIdx.x < 32; }

/// A 16-bit element as a double.
inline double widen(__half x) { return __half2float(x); }
inline double widen(__nv_bfloat16 x) { return __bfloat162float(x); }  ///< \overload

/// A 16-bit value of type T (__half or __nv_bfloat16) in bits `b`, as a double.
template <typename T>
inline double from_bits(uint16_t b) {
  T x;
  static_assert(sizeof x == 2, "16-bit elements");
  std::memcpy(&x, &b, 2);
  return widen(x);
}

/// This lane's registers r[0..N) of 16-bit pairs (T), low half first, and the element
/// offset it handed the instruction that filled them (ldmatrix), or −1: warp 0, first call.
template <typename T, int N>
inline void fragment(const char* name, int64_t offset, const uint32_t (&r)[N]) {
  if (!first_warp()) return;
  LaneRecord rec{offset, {}};
  for (int i = 0; i < N; ++i) {
    rec.values.push_back(from_bits<T>(static_cast<uint16_t>(r[i] & 0xffffu)));
    rec.values.push_back(from_bits<T>(static_cast<uint16_t>(r[i] >> 16)));
  }
  record_lane(name, static_cast<int>(threadIdx.x), std::move(rec));
}

/// This lane's fp32 registers c[n][e], n-tile by n-tile (C fragments): warp 0, first call.
template <int N, int E>
inline void accumulators(const char* name, const float (&c)[N][E]) {
  if (!first_warp()) return;
  LaneRecord rec;
  for (int n = 0; n < N; ++n)
    for (int e = 0; e < E; ++e) rec.values.push_back(c[n][e]);
  record_lane(name, static_cast<int>(threadIdx.x), std::move(rec));
}

/// A few scalars of this lane: warp 0, first call.
inline void scalars(const char* name, std::initializer_list<double> v) {
  if (first_warp()) record_lane(name, static_cast<int>(threadIdx.x), LaneRecord{-1, std::vector<double>(v)});
}

/// The `count` 16-bit elements (T) of a shared-memory tile as they lie: thread 0 of block 0,
/// first call (call it after the barrier that makes the tile complete).
template <typename T>
inline void tile(const char* name, const T* at, int count) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  std::vector<double> v(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) v[static_cast<std::size_t>(i)] = widen(at[i]);
  record_tile(name, std::move(v));
}

/// Value `index` of a vector of `size` under `name` and `key`, from any thread (several
/// threads may fill one vector, each its own elements).
inline void keyed(const char* name, std::initializer_list<int64_t> key, int index, int size, double value) {
  record_keyed(name, std::vector<int64_t>(key), index, size, value);
}

/// A whole vector under `name` and `key`, recorded by thread 0 of the block only (values
/// that every thread of the block holds alike).
template <typename... V>
inline void block_values(const char* name, std::initializer_list<int64_t> key, V... values) {
  if (threadIdx.x != 0) return;
  int index = 0;
  for (const double v : {static_cast<double>(values)...}) {
    record_keyed(name, std::vector<int64_t>(key), index++, static_cast<int>(sizeof...(V)), v);
  }
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
