// Kernels for the CPU backend's own tests. They are CUDA, rewritten by fa_cu2cpp like
// every stage's kernels; some of them are wrong on purpose.
#include <stdexcept>

#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "tests/cpu_backend_kernels.h"

namespace fa::cpu_test {

__global__ void barrier_kernel(int* out, int active) {
  __shared__ int s[1024];
  const int t = threadIdx.x;
  if (t >= active) return;  // exited threads no longer count at the barrier
  s[t] = t;
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = s[(t + 1) % active];  // each block its own half
}

std::vector<int> barrier_with_early_exit(int threads, int active) {
  DeviceBuffer<int> out(2 * static_cast<size_t>(threads));
  out.fill_bytes(0xFF);
  barrier_kernel<<<2, threads>>>(out.data(), active);
  FA_CHECK_LAUNCH("barrier_kernel");
  const std::vector<int> both = out.download();
  const std::vector<int> first(both.begin(), both.begin() + threads), second(both.begin() + threads, both.end());
  if (first != second) throw std::runtime_error("barrier_kernel: the two blocks disagree");
  return first;
}

__global__ void shuffle_kernel(float* out, int kind, int param, int width) {
  const int t = threadIdx.x;
  const float mine = 100.0f * (t / 32) + (t % 32);
  float r = 0;
  if (kind == 0) r = __shfl_sync(0xffffffffu, mine, param, width);
  if (kind == 1) r = __shfl_up_sync(0xffffffffu, mine, param, width);
  if (kind == 2) r = __shfl_down_sync(0xffffffffu, mine, param, width);
  if (kind == 3) r = __shfl_xor_sync(0xffffffffu, mine, param, width);
  out[t] = r;
}

std::vector<float> shuffle(int kind, int param, int width) {
  DeviceBuffer<float> out(64);
  shuffle_kernel<<<1, 64>>>(out.data(), kind, param, width);
  FA_CHECK_LAUNCH("shuffle_kernel");
  return out.download();
}

__global__ void vote_kernel(unsigned* out) {
  const int lane = threadIdx.x % 32;
  out[0] = __ballot_sync(0xffffffffu, lane % 3 == 0);
  out[1] = __any_sync(0xffffffffu, lane == 31);
  out[2] = __all_sync(0xffffffffu, lane % 3 == 0);
  out[3] = __all_sync(0xffffffffu, lane >= 0);
  __syncwarp();
}

__global__ void half_warp_vote_kernel(unsigned* out) {
  // Only lanes 0-15 take part, and only they are named in the mask.
  if (threadIdx.x < 16) out[0] = __ballot_sync(0x0000ffffu, threadIdx.x % 2);
}

std::vector<unsigned> votes() {
  DeviceBuffer<unsigned> out(8);
  out.fill_bytes(0);
  vote_kernel<<<1, 32>>>(out.data());
  FA_CHECK_LAUNCH("vote_kernel");
  std::vector<unsigned> a = out.download();
  half_warp_vote_kernel<<<1, 32>>>(out.data() + 5);
  FA_CHECK_LAUNCH("half_warp_vote_kernel");
  a[5] = out.download()[5];
  return a;
}

__global__ void reverse_kernel(const float* in, float* out, int n) {
  extern __shared__ float buf[];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) buf[threadIdx.x] = in[i];
  __syncthreads();
  const int last = min(n - blockIdx.x * blockDim.x, blockDim.x) - 1;
  if (i < n) out[blockIdx.x * blockDim.x + last - threadIdx.x] = buf[threadIdx.x];
}

std::vector<float> reverse_in_dynamic_shared(const std::vector<float>& in) {
  const int n = static_cast<int>(in.size()), block = 100;
  DeviceBuffer<float> d_in(in), d_out(in.size());
  reverse_kernel<<<(n + block - 1) / block, block, block * sizeof(float)>>>(d_in.data(), d_out.data(), n);
  FA_CHECK_LAUNCH("reverse_kernel");
  return d_out.download();
}

__global__ void index_kernel(int* out) {
  const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  out[block * blockDim.x * blockDim.y * blockDim.z + thread] =
      ((blockIdx.z * 10 + blockIdx.y) * 10 + blockIdx.x) * 1000 + (threadIdx.z * 10 + threadIdx.y) * 10 + threadIdx.x;
}

std::vector<int> indices_3d() {
  DeviceBuffer<int> out(2 * 3 * 2 * 4 * 3 * 2);
  index_kernel<<<dim3(2, 3, 2), dim3(4, 3, 2)>>>(out.data());
  FA_CHECK_LAUNCH("index_kernel");
  return out.download();
}

__global__ void missing_barrier_kernel(float* out) {
  __shared__ float s[256];
  const int t = threadIdx.x;
  s[t] = static_cast<float>(t);
  // BUG on purpose: no __syncthreads() here, so s[t + 1] may not be written yet.
  out[t] = s[(t + 1) % blockDim.x];
}

std::vector<float> missing_barrier(int threads) {
  DeviceBuffer<float> out(static_cast<size_t>(threads));
  missing_barrier_kernel<<<1, threads>>>(out.data());
  FA_CHECK_LAUNCH("missing_barrier_kernel");
  return out.download();
}

// Thread 0 writes s[0] and another thread reads it, with one of CUDA's ordering rules
// (or none) between them; see ordering_rule() in the header.
__global__ void ordering_kernel(float* out, int rule) {
  __shared__ float s[1];
  const int t = threadIdx.x;
  float seen = 0.0f;
  switch (rule) {
    case 0:  // __syncwarp() orders the lanes of a warp
      if (t == 0) s[0] = 1.0f;
      __syncwarp();
      if (t == 1) seen = s[0];
      break;
    case 1:  // so does a partial mask naming both lanes
      if (t == 0) s[0] = 1.0f;
      if (t < 2) __syncwarp(0x3u);
      if (t == 1) seen = s[0];
      break;
    case 2:  // and a chain: lane 0 meets lane 2, then lane 2 meets lane 1
      if (t == 0) s[0] = 1.0f;
      if (t == 0 || t == 2) __syncwarp(0x5u);
      if (t == 1 || t == 2) __syncwarp(0x6u);
      if (t == 1) seen = s[0];
      break;
    case 3:  // __syncwarp() does not order two warps
      if (t == 0) s[0] = 1.0f;
      __syncwarp();
      if (t == 32) seen = s[0];
      break;
    case 4:  // __syncthreads() does
      if (t == 0) s[0] = 1.0f;
      __syncthreads();
      if (t == 32) seen = s[0];
      break;
    case 5:  // a vote makes lanes wait for each other, but orders no memory
      if (t == 0) s[0] = 1.0f;
      (void)__ballot_sync(0xffffffffu, t == 0);
      if (t == 1) seen = s[0];
      break;
    case 6:  // a fence makes the writer's earlier writes visible to the block
      if (t == 0) {
        s[0] = 1.0f;
        __threadfence_block();
      }
      (void)__ballot_sync(0xffffffffu, t == 0);
      if (t == 1) seen = s[0];
      break;
    case 7:  // write after read: lane 1 reads, a shuffle, then lane 0 overwrites
      if (t == 0) s[0] = 1.0f;
      __syncwarp();
      if (t == 1) seen = s[0];
      (void)__shfl_sync(0xffffffffu, seen, 0);
      if (t == 0) s[0] = 2.0f;
      break;
    case 8:  // a __syncwarp() with lane 1 outside its mask orders nothing for lane 1
      if (t == 0) s[0] = 1.0f;
      if (t == 0 || t == 2) __syncwarp(0x5u);
      if (t == 1) seen = s[0];
      break;
  }
  out[t] = seen;
}

void ordering_rule(int rule) {
  DeviceBuffer<float> out(64);
  ordering_kernel<<<1, 64>>>(out.data(), rule);
  FA_CHECK_LAUNCH("ordering_kernel");
}

__global__ void empty_kernel(float* out) {
  extern __shared__ float buf[];
  if (threadIdx.x == 0) out[0] = buf[0] * 0.0f;
}

int bad_configuration(int threads, int smem_bytes, bool opt_in) {
  DeviceBuffer<float> out(1);
  if (opt_in) {
    FA_CUDA_CHECK(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  }
  empty_kernel<<<1, threads, smem_bytes>>>(out.data());
  return static_cast<int>(cudaGetLastError());
}

__global__ void divergent_barrier_kernel() {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
}

void divergent_barrier() { divergent_barrier_kernel<<<1, 64>>>(); }

__global__ void divergent_shuffle_kernel(float* out) {
  float x = static_cast<float>(threadIdx.x);
  if (threadIdx.x % 32 < 16) x = __shfl_xor_sync(0xffffffffu, x, 1);  // lanes 16-31 never come
  out[threadIdx.x] = x;
}

void shuffle_in_divergent_branch() {
  DeviceBuffer<float> out(64);
  divergent_shuffle_kernel<<<1, 64>>>(out.data());
}

__global__ void shuffle_against_barrier_kernel(float* out) {
  float x = static_cast<float>(threadIdx.x);
  if (threadIdx.x < 16) {
    x = __shfl_down_sync(0xffffffffu, x, 16);
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = x;
}

void shuffle_against_barrier() {
  DeviceBuffer<float> out(32);
  shuffle_against_barrier_kernel<<<1, 32>>>(out.data());
}

__global__ void throwing_kernel(int bad) {
  __syncthreads();
  if (static_cast<int>(threadIdx.x) == bad) throw std::runtime_error("boom from a kernel thread");
  __syncthreads();
}

void throw_in_kernel(int thread) { throwing_kernel<<<2, 128>>>(thread); }

__global__ void vector_atomics_kernel(float* buf, int offset) {
  const float t = static_cast<float>(threadIdx.x + 1);
  atomicAdd(reinterpret_cast<float4*>(buf + offset), make_float4(t, 2 * t, 3 * t, 4 * t));
  atomicAdd(reinterpret_cast<float2*>(buf + offset + 4), make_float2(t, -t));
}

std::vector<float> vector_atomics(int offset) {
  DeviceBuffer<float> buf(std::vector<float>(8, 1.0f));
  vector_atomics_kernel<<<2, 64>>>(buf.data(), offset);
  FA_CHECK_LAUNCH("vector_atomics_kernel");
  return buf.download();
}

__global__ void blocks_add_kernel(const float* in, float* sum, int rule) {
  const int t = threadIdx.x;
  const float mine = in[blockIdx.x * blockDim.x + t];
  switch (rule) {
    case 0: sum[t] += mine; break;              // BUG on purpose: a plain read-modify-write
    case 1: atomicAdd(&sum[t], mine); break;    // right
    case 2:                                     // BUG on purpose: block 0 resets what others add to
      if (blockIdx.x == 0) sum[t] = 0.0f;
      else atomicAdd(&sum[t], mine);
      break;
    case 3: sum[blockIdx.x * blockDim.x + t] = mine; break;  // right: a slot per block
    case 4:                                     // BUG on purpose: reads another block's slot
      sum[blockIdx.x * blockDim.x + t] = mine;
      if (blockIdx.x > 0) sum[blockIdx.x * blockDim.x + t] += sum[t];
      break;
    case 5:                                     // BUG on purpose: overwrites an input others read
      if (blockIdx.x == gridDim.x - 1) const_cast<float*>(in)[t] = 0.0f;
      break;
  }
}

std::vector<float> blocks_add(int rule) {
  constexpr int kBlocks = 4, kThreads = 32;
  std::vector<float> host(kBlocks * kThreads);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % kThreads + 1);
  DeviceBuffer<float> in(host), sum(std::vector<float>(host.size(), 0.0f));
  blocks_add_kernel<<<kBlocks, kThreads>>>(in.data(), sum.data(), rule);
  FA_CHECK_LAUNCH("blocks_add_kernel");
  return sum.download();
}

std::vector<float> two_launches() {
  std::vector<float> host(64, 1.0f);
  DeviceBuffer<float> in(host), sum(std::vector<float>(64, 0.0f));
  // The second launch reads what the first wrote: the kernel boundary orders them.
  blocks_add_kernel<<<2, 32>>>(in.data(), sum.data(), 3);
  blocks_add_kernel<<<2, 32>>>(sum.data(), in.data(), 3);
  FA_CHECK_LAUNCH("blocks_add_kernel");
  return in.download();
}

// Each block fills its static and dynamic shared memory with its own numbers, then stores
// to global memory (where, with blocks in flight together, another block may run), then
// reads back a neighbour's entries.
__global__ void own_shared_kernel(float* scratch, float* out) {
  __shared__ float fixed[32];
  extern __shared__ float dynamic[];
  const int t = threadIdx.x, b = blockIdx.x;
  fixed[t] = static_cast<float>(b * 100 + t);
  dynamic[t] = static_cast<float>(b * 1000 + t);
  __syncthreads();
  for (int i = 0; i < 4; ++i) scratch[b * 32 + t] = static_cast<float>(i);  // switch points
  out[b * 32 + t] = fixed[(t + 1) % 32] + dynamic[(t + 1) % 32];
}

std::vector<float> own_shared(int blocks) {
  DeviceBuffer<float> scratch(static_cast<size_t>(blocks) * 32), out(static_cast<size_t>(blocks) * 32);
  own_shared_kernel<<<blocks, 32, 32 * sizeof(float)>>>(scratch.data(), out.data());
  FA_CHECK_LAUNCH("own_shared_kernel");
  return out.download();
}

// Every block stores in a loop; block `bad` then waits at two different barriers, while
// the other blocks are still in flight.
__global__ void one_block_faults_kernel(float* scratch, int bad) {
  const int t = threadIdx.x, b = blockIdx.x;
  for (int i = 0; i < 8; ++i) scratch[b * 32 + t] = static_cast<float>(i);
  if (b == bad) {
    if (t < 16) {
      __syncthreads();
    } else {
      __syncthreads();  // BUG on purpose: a barrier in divergent code
    }
  }
  for (int i = 0; i < 8; ++i) scratch[b * 32 + t] += 1.0f;
  __syncthreads();
}

void one_block_faults(int blocks, int bad) {
  DeviceBuffer<float> scratch(static_cast<size_t>(blocks) * 32);
  one_block_faults_kernel<<<blocks, 32>>>(scratch.data(), bad);
  FA_CHECK_LAUNCH("one_block_faults_kernel");
}

__global__ void out_of_bounds_kernel(float* out) {
  __shared__ float tile[32];
  tile[threadIdx.x] = 1.0f;  // BUG on purpose: 33 threads, 32 slots
  __syncthreads();
  out[threadIdx.x] = tile[0];
}

void out_of_bounds_shared_write() {
  DeviceBuffer<float> out(33);
  out_of_bounds_kernel<<<1, 33>>>(out.data());
}

}  // namespace fa::cpu_test
