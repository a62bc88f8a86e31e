// MInference sparse prefill on the CUDA backend against the CPU reference
// (kernels/minference_index.h): the index BuildAttentionIndex builds on the device, the sparse
// stats, and the attention outputs, in mixed batches (MInference chunks beside dense prefill and
// decode sequences). Planted inputs (clear top-k winners) and planted configs must give the CPU's
// index word for word; random inputs may differ where two scores are within rounding, so there
// the index may differ in a few words and the outputs are compared against the CPU attention
// run on the GPU's index (bf16 tolerance, as the other attention tests).
#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/attention_plan_check.h"
#include "tests/gpu/cuda_test_util.h"

namespace sparseserve::testing {
namespace {

using CudaMInferenceTest = CudaTest;
using kernels::HeadPattern;
using kernels::HeadPatternKind;
using kernels::MInferenceConfig;

struct SeqSpec {
  int q_len, kv_len;
  bool minference = true;
};

struct MinfCase {
  int head_dim, heads, kv_heads, block_tokens;
  std::vector<SeqSpec> seqs;
  std::shared_ptr<const MInferenceConfig> config;
  const char* name;
  bool planted_inputs = false;  // Q/K with planted lines: the index must match exactly
};

constexpr int kLayers = 2;
constexpr int kLayer = 1;  // the layer built (the configs differ per layer)

// Vertical-slash sizes of the planted inputs: 4 hot columns and 3 planted slash offsets beyond
// the forced ones, so the top-k picks exactly the planted lines.
constexpr int kHotColumns = 4, kPlantedSlashes = 3;
const HeadPattern kVs{HeadPatternKind::kVerticalSlash, 30 + kHotColumns, 100 + kPlantedSlashes};
const HeadPattern kAShape{HeadPatternKind::kAShape, 16, 64};
const HeadPattern kBs{HeadPatternKind::kBlockSparse, 5, 0};

std::shared_ptr<const MInferenceConfig> Uniform(HeadPattern p, int heads) {
  return std::make_shared<const MInferenceConfig>(MInferenceConfig::Uniform(kLayers, heads, p));
}

// Every kind per head, a different order in each layer.
std::shared_ptr<const MInferenceConfig> Mixed(int heads) {
  MInferenceConfig c = MInferenceConfig::Uniform(kLayers, heads);
  const HeadPattern kinds[3] = {kVs, kAShape, kBs};
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < heads; ++h) c.heads[l * heads + h] = kinds[(h + l) % 3];
  }
  return std::make_shared<const MInferenceConfig>(std::move(c));
}

// Per head, a pattern whose index covers (nearly) the whole causal area, so the dense switch
// fires, beside one that stays sparse, of every kind: one sequence then runs some heads on the
// dense tensor-core kernel and the others on the sparse path.
std::shared_ptr<const MInferenceConfig> HalfDense(int heads) {
  MInferenceConfig c = MInferenceConfig::Uniform(kLayers, heads);
  const HeadPattern kinds[6] = {HeadPattern{HeadPatternKind::kVerticalSlash, 1000, 6096}, kVs,
                                HeadPattern{HeadPatternKind::kAShape, 16, 1 << 20},       kAShape,
                                HeadPattern{HeadPatternKind::kBlockSparse, 1000, 0},      kBs};
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < heads; ++h) c.heads[l * heads + h] = kinds[(h + l) % 6];
  }
  return std::make_shared<const MInferenceConfig>(std::move(c));
}

std::shared_ptr<const MInferenceConfig> Planted(int heads) {
  MInferenceConfig c = MInferenceConfig::Uniform(kLayers, heads);
  c.planted = true;
  c.planted_seed = 1234;
  return std::make_shared<const MInferenceConfig>(std::move(c));
}

float Round(float x) {
  return Bf16ToF32(F32ToBf16(x));
}

// Overwrites q and k of one MInference sequence with planted structure (head_dim >= 64): every
// query row is 4u + 4v_r (u = e_0, v_r a random unit vector in the other dims); hot columns
// hold 16u, the keys p_r - o of each planted offset o hold 16v_r for estimation row r, and three
// key blocks get 2u, 3u, 4u added (block-sparse winners). Other keys are zero. With scale
// 1/sqrt(head_dim) = 1/8 at head_dim 64 the planted logits are 8 against 0.
void PlantSequence(std::mt19937& rng, const kernels::SequenceAttention& sa, int kv_begin, Tensor& q,
                   Tensor& k, int heads, int kv_heads, int hd) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int rows = std::min(64, sa.q_len);
  std::vector<std::vector<float>> v(sa.q_len, std::vector<float>(hd, 0.0f));
  for (auto& vr : v) {
    double norm = 0;
    for (int d = 1; d < hd; ++d) norm += (vr[d] = normal(rng)) * vr[d];
    for (int d = 1; d < hd; ++d) vr[d] /= static_cast<float>(std::sqrt(norm));
  }
  const float qs = 4.0f * std::sqrt(hd / 64.0f);  // keeps the logits at 8 for head_dim 128
  for (int r = 0; r < sa.q_len; ++r) {
    for (int h = 0; h < heads; ++h) {
      float* qr = q.data<float>() + (int64_t{sa.q_begin + r} * heads + h) * hd;
      qr[0] = Round(qs);
      for (int d = 1; d < hd; ++d) qr[d] = Round(qs * v[r][d]);
    }
  }
  std::vector<std::vector<float>> keys(sa.kv_len, std::vector<float>(hd, 0.0f));
  const int last_first = sa.kv_len - rows;  // position of estimation row 0
  std::vector<std::pair<int, int>> slash_ranges;
  for (int i = 0; i < kPlantedSlashes; ++i) {
    const int o = 120 + 70 * i;
    EXPECT_LE(o, last_first) << "sequence too short to plant";
    for (int j = 0; j < rows; ++j) {
      const int key = last_first + j - o;
      for (int d = 1; d < hd; ++d) keys[key][d] = 16.0f * v[sa.q_len - rows + j][d];
    }
    slash_ranges.push_back({last_first - o, last_first + rows - o});
  }
  int placed = 0;
  for (int c = 31; placed < kHotColumns && c < last_first; c += 37) {
    bool in_slash = false;
    for (auto [b, e] : slash_ranges) in_slash |= c >= b && c < e;
    if (in_slash) continue;
    keys[c][0] = 16.0f;
    ++placed;
  }
  EXPECT_EQ(placed, kHotColumns);
  const int blocks[3] = {2, 5, 7};
  for (int i = 0; i < 3; ++i) {
    for (int key = blocks[i] * 64; key < std::min(sa.kv_len, blocks[i] * 64 + 64); ++key) {
      keys[key][0] += 2.0f + i;
    }
  }
  for (int p = 0; p < sa.kv_len; ++p) {
    for (int h = 0; h < kv_heads; ++h) {
      float* kr = k.data<float>() + (int64_t{kv_begin + p} * kv_heads + h) * hd;
      for (int d = 0; d < hd; ++d) kr[d] = Round(keys[p][d]);
    }
  }
}

std::string Describe(const MinfCase& c) {
  std::string s = std::string(c.name) + " hd=" + std::to_string(c.head_dim) +
                  " heads=" + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) +
                  " bt=" + std::to_string(c.block_tokens) + " seqs:";
  for (const SeqSpec& q : c.seqs) {
    s += " (" + std::to_string(q.q_len) + "," + std::to_string(q.kv_len) +
         (q.minference ? ",M)" : ")");
  }
  if (c.planted_inputs) s += " planted inputs";
  return s;
}

// The resolved kinds of the built index's heads, over every MInference sequence of a case.
struct HeadKinds {
  int dense = 0, sparse = 0;
};

void RunMinfCase(CudaTest& t, kernels::Backend& cpu, kernels::Backend& gpu, const MinfCase& c,
                 std::mt19937& rng, HeadKinds* kinds = nullptr) {
  SCOPED_TRACE(Describe(c));
  const int bt = c.block_tokens;
  int total_blocks = 0, total_kv = 0, total_q = 0;
  for (const SeqSpec& s : c.seqs) {
    total_blocks += (s.kv_len + bt - 1) / bt;
    total_kv += s.kv_len;
    total_q += s.q_len;
  }
  const int num_blocks = total_blocks + 3;
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  kernels::AttentionBatch batch;
  batch.block_tokens = bt;
  std::vector<int32_t> slots, kv_begins;
  int next_block = 0, q_begin = 0, kv_begin = 0;
  for (const SeqSpec& s : c.seqs) {
    kernels::SequenceAttention sa;
    sa.q_begin = q_begin;
    sa.q_len = s.q_len;
    sa.kv_len = s.kv_len;
    for (int b = 0; b < (s.kv_len + bt - 1) / bt; ++b) sa.block_table.push_back(ids[next_block++]);
    for (int p = 0; p < s.kv_len; ++p) slots.push_back(sa.block_table[p / bt] * bt + p % bt);
    if (s.minference) {
      sa.pattern.kind = kernels::AttentionMethodKind::kMInference;
      sa.pattern.minference = c.config;
    }
    batch.sequences.push_back(sa);
    kv_begins.push_back(kv_begin);
    q_begin += s.q_len;
    kv_begin += s.kv_len;
  }
  Tensor k = t.RandomHost({total_kv, c.kv_heads, c.head_dim});
  Tensor v = t.RandomHost({total_kv, c.kv_heads, c.head_dim});
  Tensor q = t.RandomHost({total_q, c.heads, c.head_dim}, 2.0f);
  if (c.planted_inputs) {
    for (size_t i = 0; i < batch.sequences.size(); ++i) {
      if (!c.seqs[i].minference) continue;
      PlantSequence(rng, batch.sequences[i], kv_begins[i], q, k, c.heads, c.kv_heads, c.head_dim);
    }
  }
  Tensor slot_t = Tensor::Zeros(DType::kI32, {total_kv});
  std::copy(slots.begin(), slots.end(), slot_t.data<int32_t>());
  const Shape kv_shape{int64_t{num_blocks} * 2, bt, c.kv_heads, c.head_dim};
  Tensor cpu_kv = Tensor::Zeros(DType::kF32, kv_shape);
  ASSERT_TRUE(cpu.WriteKv(k, v, slot_t, cpu_kv).ok());
  Tensor gpu_kv = *gpu.Allocate(DType::kBf16, kv_shape);
  ASSERT_TRUE(gpu.WriteKv(t.ToGpu(k), t.ToGpu(v), t.ToGpu(slot_t, DType::kI32), gpu_kv).ok());

  kernels::AttentionShape shape;
  shape.num_heads = c.heads;
  shape.num_kv_heads = c.kv_heads;
  shape.head_dim = c.head_dim;
  shape.num_rows = total_q;
  shape.num_blocks = num_blocks;

  // CPU: its own index and stats.
  kernels::AttentionWorkspace cpu_ws;
  auto cpu_plan = cpu.PlanAttention(batch, shape, cpu_ws);
  ASSERT_TRUE(cpu_plan.ok()) << cpu_plan.status();
  ASSERT_TRUE(cpu.BuildAttentionIndex(*cpu_plan, q, cpu_kv, kLayer).ok());

  // GPU: index, stats and outputs.
  kernels::AttentionWorkspace gpu_ws;
  const Tensor gq = t.ToGpu(q);
  auto gpu_plan = gpu.PlanAttention(batch, shape, gpu_ws);
  ASSERT_TRUE(gpu_plan.ok()) << gpu_plan.status();
  absl::Status s = gpu.BuildAttentionIndex(*gpu_plan, gq, gpu_kv, kLayer);
  ASSERT_TRUE(s.ok()) << s;
  Tensor out = t.Poisoned(DType::kBf16, {total_q, c.heads, c.head_dim});
  s = gpu.Attention(*gpu_plan, gq, gpu_kv, kLayer, out);
  ASSERT_TRUE(s.ok()) << s;

  int64_t words = 0;
  for (const auto& sa : batch.sequences) words += kernels::SparseIndexWords(sa);
  ASSERT_GT(words, 0);
  ASSERT_GE(gpu_ws.sparse_index.numel(), words);
  Tensor gpu_index = Tensor::Zeros(DType::kI32, {gpu_ws.sparse_index.numel()});
  ASSERT_TRUE(gpu.CopyToHost(gpu_ws.sparse_index, gpu_index).ok());
  const int32_t* gi = gpu_index.data<int32_t>();
  int32_t* ci = cpu_ws.sparse_index.data<int32_t>();
  int64_t mismatches = 0, first_mismatch = -1;
  for (int64_t i = 0; i < words; ++i) {
    if (gi[i] != ci[i]) {
      if (first_mismatch < 0) first_mismatch = i;
      ++mismatches;
    }
  }
  const bool exact =
      c.planted_inputs || c.config->planted ||
      std::all_of(c.config->heads.begin(), c.config->heads.end(),
                  [](const HeadPattern& h) { return h.kind == HeadPatternKind::kAShape; });
  if (exact) {
    EXPECT_EQ(mismatches, 0) << "first at word " << first_mismatch << ": gpu "
                             << (first_mismatch >= 0 ? gi[first_mismatch] : 0) << " cpu "
                             << (first_mismatch >= 0 ? ci[first_mismatch] : 0);
  } else {
    // Near-ties of random scores may pick another line here and there.
    EXPECT_LE(mismatches, std::max<int64_t>(4, words / 50)) << "of " << words << " words";
  }

  Tensor gpu_stats = Tensor::Zeros(DType::kF32, {gpu_ws.sparse_stats.numel()});
  ASSERT_TRUE(gpu.CopyToHost(gpu_ws.sparse_stats, gpu_stats).ok());
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    for (int j = 0; j < 2; ++j) {
      const double g = gpu_stats.data<float>()[2 * i + j];
      const double r = cpu_ws.sparse_stats.data<float>()[2 * i + j];
      // Integer sums below 2^24 are exact in f32, whatever the order of the device's additions.
      const double tolerance = (exact || j == 1) && r < (1 << 24) ? 0.5
                               : exact || j == 1                  ? 1e-5 * r
                                                                  : 3e-2 * std::max(1.0, r);
      EXPECT_NEAR(g, r, tolerance)
          << "stats of sequence " << i << (j == 0 ? " (pairs)" : " (causal)");
    }
  }

  if (kinds != nullptr) {
    int64_t offset = 0;
    for (const auto& sa : batch.sequences) {
      const int64_t seq_words = kernels::SparseIndexWords(sa);
      for (int h = 0; seq_words > 0 && h < c.heads; ++h) {
        const int32_t kind = gi[offset + h * (seq_words / c.heads)];
        ++(kind == static_cast<int32_t>(HeadPatternKind::kDense) ? kinds->dense : kinds->sparse);
      }
      offset += seq_words;
    }
  }

  // The reference attention over the GPU's index (identical to the CPU's in the exact cases).
  std::copy(gi, gi + words, ci);
  Tensor ref = Tensor::Zeros(DType::kF32, {total_q, c.heads, c.head_dim});
  ASSERT_TRUE(cpu.Attention(*cpu_plan, q, cpu_kv, kLayer, ref).ok());
  const double err = CudaTest::RelError(t.ToHost(out), ref);
  EXPECT_LT(err, kBf16Tolerance);
  std::printf("minference %-70s index mismatches %lld/%lld rel err %.2e\n", Describe(c).c_str(),
              static_cast<long long>(mismatches), static_cast<long long>(words), err);
}

TEST_F(CudaMInferenceTest, PlantedInputsGiveTheCpuIndexAndOutputs) {
  for (int hd : {64, 128}) {
    for (auto [heads, kv_heads] : {std::pair{8, 4}, std::pair{8, 2}}) {
      const std::vector<SeqSpec> seqs = {{200, 1000}, {37, 37, false}, {100, 700}, {1, 300, false}};
      for (const auto& [config, name] :
           {std::pair{Uniform(kVs, heads), "vs"}, std::pair{Uniform(kBs, heads), "bs"},
            std::pair{Mixed(heads), "mixed"}}) {
        RunMinfCase(*this, cpu_, *gpu_, MinfCase{hd, heads, kv_heads, 64, seqs, config, name, true},
                    rng_);
      }
    }
  }
}

// More query blocks than the pair count's CTA has warps (35 for 32: some warps count two), more
// slash offsets and columns than a warp has lanes, and (no prefix) blocks that offsets and columns
// lie past: the pairs and the dense switch stay exact.
TEST_F(CudaMInferenceTest, ManyQueryBlocksCountedExactly) {
  const std::vector<SeqSpec> seqs = {{2200, 2600}, {2200, 2200}};
  RunMinfCase(*this, cpu_, *gpu_, MinfCase{64, 8, 2, 64, seqs, Uniform(kVs, 8), "vs", true}, rng_);
}

TEST_F(CudaMInferenceTest, RandomInputsEveryPatternHeadDimAndBatch) {
  const std::vector<std::vector<SeqSpec>> batches = {
      {{130, 130}},                                      // prefix 0, q_len not a multiple of 64
      {{200, 1000}, {37, 37, false}, {1, 300, false}},   // chunked (prefix 800) beside dense
      {{64, 100}, {1, 500}, {70, 2000}, {5, 5, false}},  // small contexts go dense; q_len 1
  };
  for (int hd : {8, 16, 64, 128}) {
    for (auto [heads, kv_heads] : {std::pair{8, 4}, std::pair{8, 2}}) {
      for (int bt : {16, 64}) {
        if (hd <= 16 && bt == 16) continue;  // keep the slow generic path brief
        for (const auto& seqs : batches) {
          for (const auto& [config, name] :
               {std::pair{Uniform(kVs, heads), "vs"}, std::pair{Uniform(kAShape, heads), "ashape"},
                std::pair{Uniform(kBs, heads), "bs"}, std::pair{Mixed(heads), "mixed"},
                std::pair{Planted(heads), "planted"}}) {
            RunMinfCase(*this, cpu_, *gpu_, MinfCase{hd, heads, kv_heads, bt, seqs, config, name},
                        rng_);
          }
        }
      }
    }
  }
}

// Odd head counts and GQA groups: the warp-specialised kernel's CTAs take two heads (a stream
// each), so the last CTA of 7 heads has one head and no second, and pairs of a group of 3 straddle
// two KV heads. A wide A-shape window (600 keys, 70 sinks) is one long range: its tiles are
// aligned blocks with the keys outside masked (packed under SPARSESERVE_PREFILL_WS_ALIGNED=0).
TEST_F(CudaMInferenceTest, OddHeadCountsAndGroups) {
  const HeadPattern wide_ashape{HeadPatternKind::kAShape, 70, 600};
  const std::vector<std::vector<SeqSpec>> batches = {
      {{130, 130}},
      {{200, 1000}, {37, 37, false}, {1, 300, false}},
  };
  for (int hd : {64, 128}) {
    for (auto [heads, kv_heads] : {std::pair{7, 7}, std::pair{6, 2}, std::pair{3, 1}}) {
      for (const auto& seqs : batches) {
        for (const auto& [config, name] :
             {std::pair{Uniform(kVs, heads), "vs"},
              std::pair{Uniform(wide_ashape, heads), "ashape"},
              std::pair{Uniform(kBs, heads), "bs"}, std::pair{Mixed(heads), "mixed"}}) {
          RunMinfCase(*this, cpu_, *gpu_, MinfCase{hd, heads, kv_heads, 64, seqs, config, name},
                      rng_);
        }
      }
    }
  }
}

// Dense-switched heads run on the tensor-core prefill kernel (gated per head by the index
// header), the others on the sparse kernels, in one sequence; head dims 16 keep every head on
// the CUDA-core kernel.
TEST_F(CudaMInferenceTest, DenseSwitchedAndSparseHeadsInOneSequence) {
  const std::vector<std::vector<SeqSpec>> batches = {
      {{300, 2000}, {37, 37, false}, {1, 300, false}},
      {{130, 130}, {200, 1500}, {70, 3000}, {1, 700}},
  };
  for (int hd : {16, 64, 128}) {
    for (auto [heads, kv_heads] : {std::pair{12, 4}, std::pair{12, 2}}) {
      for (const auto& seqs : batches) {
        HeadKinds kinds;
        RunMinfCase(*this, cpu_, *gpu_,
                    MinfCase{hd, heads, kv_heads, 16, seqs, HalfDense(heads), "half-dense"}, rng_,
                    &kinds);
        EXPECT_GT(kinds.dense, 0);
        EXPECT_GT(kinds.sparse, 0);
      }
    }
  }
}

// A few small cases for compute-sanitizer (scripts/gpu_check.sh's sanitizer stage).
TEST_F(CudaMInferenceTest, MInferenceSmallBatches) {
  const std::vector<SeqSpec> seqs = {{130, 130}, {1, 500}, {37, 37, false}, {70, 900}};
  for (int hd : {16, 64}) {
    RunMinfCase(*this, cpu_, *gpu_, MinfCase{hd, 8, 2, 16, seqs, Mixed(8), "mixed"}, rng_);
    RunMinfCase(*this, cpu_, *gpu_, MinfCase{hd, 8, 4, 64, seqs, Planted(8), "planted"}, rng_);
    RunMinfCase(*this, cpu_, *gpu_, MinfCase{hd, 12, 4, 16, seqs, HalfDense(12), "half-dense"},
                rng_);
  }
}

TEST_F(CudaMInferenceTest, LongContextChunk) {
  const std::vector<SeqSpec> seqs = {{300, 9000}, {1, 4000, false}};
  RunMinfCase(*this, cpu_, *gpu_,
              MinfCase{128, 8, 2, 64, seqs,
                       Uniform(HeadPattern{HeadPatternKind::kVerticalSlash, 200, 600}, 8), "vs"},
              rng_);
  RunMinfCase(*this, cpu_, *gpu_, MinfCase{64, 8, 4, 64, seqs, Mixed(8), "mixed"}, rng_);
}

TEST_F(CudaMInferenceTest, LayerOutsideTheConfigIsRejected) {
  kernels::AttentionBatch batch;
  batch.block_tokens = 16;
  kernels::SequenceAttention sa;
  sa.q_len = 4;
  sa.kv_len = 4;
  sa.block_table = {0};
  sa.pattern.kind = kernels::AttentionMethodKind::kMInference;
  sa.pattern.minference = Uniform(kVs, 4);
  batch.sequences.push_back(sa);
  EXPECT_TRUE(gpu_->SupportsAttention(sa.pattern, 64).ok());
  kernels::AttentionShape shape{4, 2, 64, 4, 2};
  kernels::AttentionWorkspace ws;
  auto plan = gpu_->PlanAttention(batch, shape, ws);
  ASSERT_TRUE(plan.ok()) << plan.status();
  Tensor q = ToGpu(RandomHost({4, 4, 64}));
  Tensor kv = *gpu_->Allocate(DType::kBf16, {4, 16, 2, 64});
  EXPECT_EQ(gpu_->BuildAttentionIndex(*plan, q, kv, kLayers).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

}  // namespace
}  // namespace sparseserve::testing
