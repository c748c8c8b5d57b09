// Stage 12 against the float64 reference of the masked problem, in fp16 and bf16 at d = 64
// and 128, the log-sum-exp included: the standard battery (no mask but the causal one),
// sliding windows of every width round a tile's, packed documents down to one row, block
// masks (whose dropped tiles hold NaN: a kernel that read one would spread it), all of them
// together, and rows that see no key at all (O = 0, lse −inf), whole Q tiles of them. The
// classification is checked block by block against the mask's own definition. On a GPU they
// need a Hopper (skipped, never passed, without one); on the CPU backend they run through its
// emulation, on smaller shapes; a planted copy that does not mask partial blocks must fail.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/block_mask.h"
#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "common/dtype.h"
#include "common/errors.h"
#include "common/problem.h"
#include "common/stream.h"
#include "stages/12_masks/masked_attention.h"
#include "tests/catch.h"
#include "tests/mask_check.h"
#include "tests/stage_check.h"

namespace fa::masks::planted {
// The planted copy (stages/12_masks/CMakeLists.txt): partial blocks computed as full ones.
void attention(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse,
               const Plan& plan);
}  // namespace fa::masks::planted

namespace {

const std::vector<int64_t> kDims = {64, 128};
const std::vector<fa::DType> kTypes = {fa::DType::F16, fa::DType::BF16};

// Longer sequences on the GPU, where they cost nothing; on the CPU backend a few tiles.
constexpr int64_t kN = FA_CPU_BACKEND ? 300 : 1000;

using fa::test::check_mask;
using fa::test::documents;
using fa::test::window;
using fa::test::masked_stage;

}  // namespace

TEST_CASE("stage 12 with no mask but the causal one matches the reference", "[stage12]") {
  for (fa::DType dtype : kTypes) {
    INFO(fa::dtype_name(dtype));
    fa::test::check_attention_stage(masked_stage(fa::Mask{}), /*with_lse=*/true, /*causal=*/true, dtype, kDims);
  }
}

TEST_CASE("stage 12 under sliding windows of every width round a tile's", "[stage12][window]") {
  uint64_t seed = 1200;
  for (fa::DType dtype : kTypes) {
    for (int64_t d : kDims) {
      if (!fa::test::dtype_case_runs(dtype, d)) continue;  // under ASan, one type a head dim
      for (bool causal : {true, false}) {
        const fa::AttentionProblem p = fa::make_problem(1, 2, kN, kN, d, 0.0, causal, dtype);
        // Windows narrower than a tile, one either side of it, and longer than the sequence.
        for (int64_t w : {int64_t{0}, int64_t{1}, int64_t{100}, int64_t{127}, int64_t{128}, int64_t{129}, 2 * kN}) {
          check_mask(p, window(w, causal ? -1 : w / 2), ++seed);
        }
      }
    }
  }
  // Nq != Nkv, ragged ends, several heads and batches, a window to the right only.
  for (auto [nq, nkv] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 257}, {257, 100}, {130, kN}}) {
    const fa::AttentionProblem p = fa::make_problem(2, 3, nq, nkv, 64, 0.0, false, fa::DType::F16);
    check_mask(p, window(40, 70), ++seed);
    check_mask(p, window(-1, 5), ++seed);
  }
}

TEST_CASE("stage 12 over packed documents, down to one row", "[stage12][documents]") {
  uint64_t seed = 1300;
  for (fa::DType dtype : kTypes) {
    for (int64_t d : kDims) {
      for (bool causal : {true, false}) {
        const fa::AttentionProblem p = fa::make_problem(1, 2, kN, kN, d, 0.0, causal, dtype);
        for (int64_t docs : {int64_t{1}, int64_t{3}, int64_t{9}}) {
          check_mask(p, documents(fa::random_doc_lengths(kN, docs, ++seed)), seed);
        }
      }
    }
  }
  // Every document a single row: each row sees itself only, and O is its own V row.
  const fa::AttentionProblem ones = fa::make_problem(2, 2, 200, 200, 64, 0.0, false, fa::DType::BF16);
  check_mask(ones, documents(std::vector<int64_t>(200, 1)), ++seed);
  // Documents that end on a tile's edge and one row either side of it.
  const fa::AttentionProblem edges = fa::make_problem(1, 2, 512, 512, 128, 0.0, true, fa::DType::F16);
  check_mask(edges, documents({127, 1, 128, 129, 127}), ++seed);
}

TEST_CASE("stage 12 under block masks: none, some and all blocks kept", "[stage12][block_sparse]") {
  // The battery of block-sparse stages (tests/stage_check.h): its masks come as flags in
  // device memory, made into a plan here.
  const fa::test::MaskedStageFn stage = [](const fa::AttentionProblem& p, const fa::DeviceTensors& t,
                                           const uint8_t* flags) {
    fa::BlockMask blocks = fa::full_block_mask(p, fa::masks::Br, fa::masks::Bc, false);
    FA_CUDA_CHECK(cudaMemcpy(blocks.keep.data(), flags, blocks.keep.size(), cudaMemcpyDeviceToHost));
    fa::masks::attention(p, t.q, t.k, t.v, t.o, t.lse, fa::block_sparse(std::move(blocks)));
  };
  for (fa::DType dtype : kTypes) {
    INFO(fa::dtype_name(dtype));
    fa::test::check_block_sparse_stage(stage, fa::masks::Br, fa::masks::Bc, dtype, kDims);
  }
}

TEST_CASE("stage 12 under a window, documents and a block mask together", "[stage12]") {
  uint64_t seed = 1400;
  for (int64_t d : kDims) {
    const fa::AttentionProblem p = fa::make_problem(2, 2, 2 * kN, 2 * kN, d, 0.0, true, fa::DType::F16);
    fa::Mask mask = window(150, -1);
    mask.doc_lengths = fa::random_doc_lengths(p.seq_q, 4, ++seed);
    mask.blocks = fa::random_block_mask(p, 128, 256, 0.7, ++seed);
    check_mask(p, mask, seed);
    check_mask(p, mask, ++seed, 30.0f);  // large logits: the softmax stays finite and exact
  }
}

TEST_CASE("stage 12 rows that see no key give O = 0 and lse -inf", "[stage12][empty]") {
  uint64_t seed = 1500;
  for (int64_t d : kDims) {
    // Nkv = 150 and a window of 10 either side: rows past 160 see nothing, and Q tiles 2 and
    // 3 have no block to visit at all.
    const fa::AttentionProblem p = fa::make_problem(1, 2, 400, 150, d, 0.0, false, fa::DType::F16);
    REQUIRE(fa::masks::classify(p, window(10, 10)).draw() == "++\n++\n..\n..\n");
    check_mask(p, window(10, 10), ++seed);
  }
}

// Lists longer than 64 blocks at d = 128: a block for each Q tile, heaviest first (not one a
// multiprocessor); at d = 64 still persistent. The window leaves the Q tiles lists of
// different lengths.
TEST_CASE("stage 12 with lists longer than 64 blocks: a block for each Q tile at d = 128", "[stage12][long]") {
  uint64_t seed = 1600;
  const fa::Mask mask = window(200, -1);
  for (int64_t d : kDims) {
    // Under ASan d = 128 only, the case this test is for (the release run has d = 64).
    if (fa::test::under_address_sanitizer() && d == 64) continue;
    const fa::AttentionProblem p = fa::make_problem(1, FA_CPU_BACKEND ? 1 : 3, 300, 8400, d, 0.0, false,
                                                    fa::DType::BF16);
    const fa::masks::Plan plan(p, mask);
    REQUIRE(plan.longest() == 66);
    REQUIRE(plan.persistent(d) == (d == 64));
    check_mask(p, mask, ++seed);
  }
}

// Q, K and V read, and O written, where the layout `name` of fa::test::test_layout says, under
// `mask`, every element between them poisoned (and checked untouched), as the Python module
// hands stage 12 a linear layer's views.
fa::test::StageFn strided(const std::string& name, const fa::Mask& mask) {
  return [name, mask](const fa::AttentionProblem& p, const fa::DeviceTensors& t) {
    const fa::Layout layout = fa::test::test_layout(name, p);
    const auto q = fa::test::scatter(p, p.seq_q, t.q, layout.q);
    const auto k = fa::test::scatter(p, p.seq_kv, t.k, layout.k);
    const auto v = fa::test::scatter(p, p.seq_kv, t.v, layout.v);
    fa::DeviceBuffer<uint16_t> o(static_cast<size_t>(fa::test::strided_extent(p, p.seq_q, layout.o)));
    o.fill_bytes(fa::kPoisonByte);
    fa::masks::attention_strided(p, q.data(), k.data(), v.data(), o.data(), t.lse, layout, fa::masks::Plan(p, mask));
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    fa::test::gather(p, p.seq_q, o, layout.o, t.o);
  };
}

TEST_CASE("stage 12 reads Q, K and V where their strides say and writes O where its strides say", "[stage12]") {
  uint64_t seed = 1700;
  for (const std::string layout : {"interleaved", "padded"}) {
    for (int64_t d : kDims) {
      const fa::AttentionProblem p = fa::make_problem(2, 3, 200, 200, d, 0.0, true, fa::DType::F16);
      fa::Mask mask = window(70, -1);
      mask.doc_lengths = {90, 1, 109};
      INFO(layout);
      const fa::AttentionInputs in = fa::random_inputs(p, ++seed);
      fa::test::require_passed(p, fa::test::run_and_check_inputs(p, in, strided(layout, mask), true, &mask));
    }
  }
  const fa::AttentionProblem p = fa::make_problem(2, 2, 8, 8, 64, 0.0, false, fa::DType::F16);
  fa::DeviceBuffer<uint16_t> x(static_cast<size_t>(p.q_elems()));
  fa::Layout broadcast = fa::Layout::contiguous(p);
  broadcast.k.batch = 0;  // every batch reads one K
  REQUIRE_THROWS_WITH(fa::masks::attention_strided(p, x.data(), x.data(), x.data(), x.data(), nullptr, broadcast,
                                                   fa::masks::Plan(p, fa::Mask{})),
                      fa::test::HasSubstring("stride of 0"));
}

// As stage 08's: at d = 128 16 bytes a store where O is 16-byte aligned, else 4 bytes.
TEST_CASE("stage 12 writes O at an address that is not 16-byte aligned", "[stage12]") {
  uint64_t seed = 1780;
  for (const int64_t o_offset : {0, 2, 4}) {
    for (int64_t d : kDims) {
      const fa::AttentionProblem p = fa::make_problem(2, 2, 140, 140, d, 0.0, true, fa::DType::BF16);
      fa::Mask mask = window(40, -1);
      mask.doc_lengths = {60, 80};
      INFO("O at element " << o_offset);
      const fa::AttentionInputs in = fa::random_inputs(p, ++seed);
      const fa::test::StageFn stage = fa::test::with_o_offset(
          o_offset, [&mask](const fa::AttentionProblem& q, const fa::DeviceTensors& t, void* o) {
            fa::masks::attention(q, t.q, t.k, t.v, o, t.lse, fa::masks::Plan(q, mask));
          });
      fa::test::require_passed(p, fa::test::run_and_check_inputs(p, in, stage, true, &mask));
    }
  }
}

// Against the definition: a block is full when every row (up to Nq) sees every key of it (up
// to Bc), empty when no row sees any, partial otherwise.
TEST_CASE("stage 12 classifies each block as the mask defines it", "[stage12]") {
  const auto check = [](const fa::AttentionProblem& p, const fa::Mask& mask) {
    INFO(fa::describe(p) << ", mask: " << mask.describe());
    const fa::masks::BlockClasses c = fa::masks::classify(p, mask);
    const std::vector<fa::KeyRange> keys = mask.key_ranges(p);
    for (int64_t qt = 0; qt < c.q_tiles; ++qt) {
      for (int64_t j = 0; j < c.kv_tiles; ++j) {
        int64_t seen = 0, cells = 0;
        for (int64_t i = qt * 128; i < std::min<int64_t>(p.seq_q, (qt + 1) * 128); ++i) {
          for (int64_t k = j * 128; k < (j + 1) * 128; ++k, ++cells) {
            const fa::KeyRange r = keys[static_cast<size_t>(i)];
            seen += k < p.seq_kv && k >= r.first && k <= r.last && (!mask.blocks || mask.blocks->keeps(i, k));
          }
        }
        const fa::masks::BlockKind want = seen == 0       ? fa::masks::BlockKind::empty
                                          : seen == cells ? fa::masks::BlockKind::full
                                                          : fa::masks::BlockKind::partial;
        INFO("block " << qt << ", " << j);
        REQUIRE(c.kinds[static_cast<size_t>(qt * c.kv_tiles + j)] == want);
      }
    }
  };
  const fa::AttentionProblem p = fa::make_problem(1, 1, 700, 900, 64, 0.0, true, fa::DType::F16);
  fa::Mask mask = window(200, -1);
  mask.blocks = fa::random_block_mask(p, 256, 128, 0.8, 3);
  check(p, mask);
  const fa::AttentionProblem packed = fa::make_problem(1, 1, 1000, 1000, 64, 0.0, false, fa::DType::F16);
  check(packed, documents({127, 1, 128, 300, 1, 443}));
  fa::Mask both = window(30, 60);
  both.doc_lengths = fa::random_doc_lengths(1000, 7, 4);
  check(packed, both);
  // Rows past Nkv + 10 see nothing: Q tiles with empty rows beside rows that see keys.
  check(fa::make_problem(1, 1, 500, 200, 64, 0.0, false, fa::DType::F16), window(10, 10));
  check(fa::make_problem(1, 1, 129, 1, 64, 0.0, true, fa::DType::F16), fa::Mask{});
  // The causal mask alone on 4 × 4 tiles: the diagonal partial, below it full.
  const fa::AttentionProblem square = fa::make_problem(1, 1, 512, 512, 64, 0.0, true, fa::DType::F16);
  REQUIRE(fa::masks::classify(square, fa::Mask{}).draw() == "+...\n#+..\n##+.\n###+\n");
}

// The persistent grid's schedule: every Q tile of every head dealt to exactly one block; with
// equal work, round robin; otherwise no block more than one tile's work past the least loaded,
// and under the causal mask (B·H = 128, 32 Q tiles a head, on an H100's 132 multiprocessors,
// where pairs of tiles leave the grid a 3% tail) within 1% of an even share.
TEST_CASE("stage 12 deals each Q tile to one block, so that the blocks finish together", "[stage12][schedule]") {
  const auto loads = [](const fa::masks::Schedule& s, const std::vector<int64_t>& work, int64_t heads, int blocks) {
    const int64_t q_tiles = static_cast<int64_t>(work.size());
    REQUIRE(s.at.size() == static_cast<size_t>(blocks) + 1);
    REQUIRE(s.at.front() == 0);
    REQUIRE(s.at.back() == heads * q_tiles);
    REQUIRE(s.tiles.size() == static_cast<size_t>(heads * q_tiles));
    std::vector<int> seen(s.tiles.size(), 0);
    std::vector<int64_t> load(static_cast<size_t>(blocks), 0);
    for (int b = 0; b < blocks; ++b) {
      REQUIRE(s.at[static_cast<size_t>(b)] <= s.at[static_cast<size_t>(b) + 1]);
      for (int u = s.at[static_cast<size_t>(b)]; u < s.at[static_cast<size_t>(b) + 1]; ++u) {
        const int tile = s.tiles[static_cast<size_t>(u)];
        REQUIRE(tile >= 0);
        REQUIRE(tile < heads * q_tiles);
        ++seen[static_cast<size_t>(tile)];
        load[static_cast<size_t>(b)] += work[static_cast<size_t>(tile % q_tiles)];
      }
    }
    REQUIRE(std::count(seen.begin(), seen.end(), 1) == static_cast<std::ptrdiff_t>(seen.size()));
    return load;
  };
  std::mt19937_64 rng(1900);
  for (const auto& [q_tiles, heads, blocks] : std::vector<std::tuple<int64_t, int64_t, int>>{
           {1, 1, 1}, {5, 3, 1}, {5, 3, 132}, {32, 128, 132}, {7, 9, 4}, {33, 5, 16}}) {
    INFO(q_tiles << " Q tiles, " << heads << " heads, " << blocks << " blocks");
    std::vector<int64_t> work(static_cast<size_t>(q_tiles));
    for (int64_t& w : work) w = 16 + static_cast<int64_t>(rng() % 300);
    const std::vector<int64_t> load = loads(fa::masks::schedule_tiles(work, heads, blocks), work, heads, blocks);
    const int64_t heaviest = *std::max_element(work.begin(), work.end());
    REQUIRE(*std::max_element(load.begin(), load.end()) - *std::min_element(load.begin(), load.end()) <= heaviest);

    // Equal work: block b takes the b-th tile dealt, then the (b + blocks)-th, ...; a head's
    // tiles are dealt last first (rank's order among equals), head by head.
    const std::vector<int64_t> equal(static_cast<size_t>(q_tiles), 42);
    const fa::masks::Schedule rr = fa::masks::schedule_tiles(equal, heads, blocks);
    loads(rr, equal, heads, blocks);
    for (int b = 0; b < blocks; ++b) {
      for (int u = rr.at[static_cast<size_t>(b)], k = 0; u < rr.at[static_cast<size_t>(b) + 1]; ++u, ++k) {
        const int64_t dealt = b + static_cast<int64_t>(k) * blocks;
        REQUIRE(rr.tiles[static_cast<size_t>(u)] == dealt / q_tiles * q_tiles + (q_tiles - 1 - dealt % q_tiles));
      }
    }
  }
  std::vector<int64_t> causal(32);  // Plan::work() of the causal mask: qt full blocks and the diagonal, partial
  for (int64_t qt = 0; qt < 32; ++qt) causal[static_cast<size_t>(qt)] = 16 + 10 * qt + 13;
  const fa::AttentionProblem square = fa::make_problem(1, 1, 4096, 4096, 64, 0.0, true, fa::DType::F16);
  REQUIRE(fa::masks::Plan(square, fa::Mask{}).work() == causal);
  const std::vector<int64_t> load = loads(fa::masks::schedule_tiles(causal, 128, 132), causal, 128, 132);
  const double mean = static_cast<double>(std::accumulate(load.begin(), load.end(), int64_t{0})) / 132.0;
  REQUIRE(static_cast<double>(*std::max_element(load.begin(), load.end())) <= 1.01 * mean);
  REQUIRE_THROWS_WITH(fa::masks::schedule_tiles(causal, 128, 0), fa::test::HasSubstring("blocks"));
}

#if !FA_CPU_BACKEND
// Stage 12 in a CUDA graph. A plan's first call for some heads makes the persistent grid's
// schedule and copies it to the device, which no call may do while a stream captures: that
// call is refused with a message (and the capture still ends cleanly). After one call outside
// a capture the call is captured, and the graph's replay writes O and the lse, checked
// against the reference (both poisoned again before the replay).
TEST_CASE("stage 12 in a CUDA graph: a plan's first call for its heads comes before the capture", "[stage12][graph]") {
  const fa::AttentionProblem p = fa::make_problem(2, 3, 1000, 1000, 64, 0.0, true, fa::DType::F16);
  const fa::Mask mask = window(300, -1);
  const fa::masks::Plan plan(p, mask);
  const fa::test::StageFn graphed = [&](const fa::AttentionProblem& q, const fa::DeviceTensors& t) {
    cudaStream_t stream = nullptr;
    FA_CUDA_CHECK(cudaStreamCreate(&stream));
    const fa::StreamScope on(stream);
    const auto call = [&] { fa::masks::attention(q, t.q, t.k, t.v, t.o, t.lse, plan); };
    cudaGraph_t graph = nullptr;
    FA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    std::string refused;
    try {
      call();
    } catch (const fa::InputError& e) {
      refused = e.what();
    }
    FA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    FA_CUDA_CHECK(cudaGraphDestroy(graph));
    REQUIRE_THAT(refused, fa::test::HasSubstring("before capturing"));

    call();  // makes the schedule
    FA_CUDA_CHECK(cudaStreamSynchronize(stream));
    FA_CUDA_CHECK(cudaMemset(t.o, fa::kPoisonByte, static_cast<size_t>(q.q_elems()) * fa::dtype_bytes(q.dtype)));
    FA_CUDA_CHECK(cudaMemset(t.lse, fa::kPoisonByte, static_cast<size_t>(q.batch_heads() * q.seq_q) * sizeof(float)));
    FA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    call();
    FA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec = nullptr;
    FA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    FA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    FA_CUDA_CHECK(cudaStreamSynchronize(stream));
    FA_CUDA_CHECK(cudaGraphExecDestroy(exec));
    FA_CUDA_CHECK(cudaGraphDestroy(graph));
    FA_CUDA_CHECK(cudaStreamDestroy(stream));
  };
  const fa::AttentionInputs in = fa::random_inputs(p, 2100);
  fa::test::require_passed(p, fa::test::run_and_check_inputs(p, in, graphed, true, &mask));
}
#endif

TEST_CASE("stage 12 refuses what it cannot run with a clear message", "[stage12]") {
  const fa::DeviceTensors none{nullptr, nullptr, nullptr, nullptr};
  const fa::AttentionProblem p = fa::make_problem(1, 1, 300, 300, 64, 0.0, false, fa::DType::F16);
  REQUIRE_THROWS_WITH(fa::masks::Plan(p, fa::block_sparse(fa::random_block_mask(p, 64, 64, 0.5, 1))),
                      fa::test::HasSubstring("whole tiles: 64x64 is not a multiple of 128x128"));
  REQUIRE_THROWS_WITH(fa::masks::Plan(p, documents({100, 100})), fa::test::HasSubstring("sum to 200, not to N = 300"));
  REQUIRE_THROWS_WITH(fa::masks::Plan(p, documents({300, 0})), fa::test::HasSubstring("at least one row"));
  const fa::AttentionProblem ragged = fa::make_problem(1, 1, 300, 200, 64, 0.0, false, fa::DType::F16);
  REQUIRE_THROWS_WITH(fa::masks::Plan(ragged, documents({300})), fa::test::HasSubstring("Nq = Nkv"));
  REQUIRE_THROWS_WITH(fa::masks::Plan(p, window(-2, 3)), fa::test::HasSubstring("-1 (none) or at least 0"));
  const fa::masks::Plan plan(p, fa::Mask{});
  const fa::AttentionProblem longer = fa::make_problem(1, 1, 301, 300, 64, 0.0, false, fa::DType::F16);
  REQUIRE_THROWS_WITH(fa::masks::attention(longer, nullptr, nullptr, nullptr, nullptr, nullptr, plan),
                      fa::test::HasSubstring("plan was made for Nq = 300"));
  const fa::AttentionProblem p32 = fa::make_problem(1, 1, 300, 300, 32, 0.0, false, fa::DType::F16);
  REQUIRE_THROWS_WITH(masked_stage(fa::Mask{})(p32, none), fa::test::HasSubstring("head dim 32 is not supported"));
  REQUIRE_THROWS_WITH(masked_stage(fa::Mask{})(fa::make_problem(1, 1, 8, 8, 64), none),
                      fa::test::HasSubstring("fp16 or bf16"));
}

// The planted copy computes partial blocks as full ones: hidden scores inside a partial
// block get weight, which every mask here has.
TEST_CASE("a kernel that does not mask partial blocks fails the checks", "[stage12][planted]") {
  const fa::AttentionProblem p = fa::make_problem(1, 2, 300, 300, 64, 0.0, true, fa::DType::F16);
  for (const fa::Mask& mask : {window(50, -1), documents({100, 200}), fa::Mask{}}) {
    const fa::masks::Plan plan(p, mask);
    const fa::test::StageFn planted = [&plan](const fa::AttentionProblem& q, const fa::DeviceTensors& t) {
      fa::masks::planted::attention(q, t.q, t.k, t.v, t.o, t.lse, plan);
    };
    const fa::AttentionInputs in = fa::random_inputs(p, 21);
    INFO("mask: " << mask.describe());
    REQUIRE_FALSE(fa::test::run_and_check_inputs(p, in, planted, true, &mask).check.passed());
    REQUIRE(fa::test::run_and_check_inputs(p, in, masked_stage(mask), true, &mask).check.passed());
  }
}
