// TokenSelect on the CUDA backend against the CPU reference (kernels/tokenselect_index.h): the
// selection each layer writes into the sequence's state slot (header, query, k indices), the
// selection cache's decisions and counters, the pair stats, and the attention outputs, for decode
// rows, prompt chunks and masked verify steps in batches that mix selecting sequences with dense
// ones (dense-size TokenSelect sequences and plain dense ones). Index sets may differ only where
// two soft-vote scores tie within float rounding: every index in one set and not the other must
// score within a small tolerance of the k-th score (computed here in double from the same
// bf16-rounded inputs). Outputs are compared with the CPU attention run on the GPU's selection
// (bf16 tolerance). A captured step graph must replay what the ops compute one by one. Every case
// also runs with one selection list per KV head (each list its group's soft vote).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <numeric>
#include <set>
#include <tuple>
#include <vector>

#include "common/core/status.h"
#include "tests/gpu/cuda_test_util.h"

namespace sparseserve::testing {
namespace {

using CudaTokenSelectTest = CudaTest;
using kernels::AttentionMethodKind;
using kernels::TokenSelectParams;
namespace ts = kernels::tokenselect;

constexpr int kLayers = 2;
constexpr int kLayer = 1;  // the layer built: its state area is the second of the slot

struct SeqSpec {
  int q_len, kv_len;
  bool tokenselect = true;
  bool masked = false;  // a random verify mask (diagonal kept)
};

struct TsCase {
  int head_dim, heads, kv_heads;
  std::vector<SeqSpec> seqs;
  TokenSelectParams params;
  int planted = 0;  // keys made to win every head's vote (per selecting sequence)
};

std::string Describe(const TsCase& c) {
  std::string s = "hd=" + std::to_string(c.head_dim) + " heads=" + std::to_string(c.heads) + "/" +
                  std::to_string(c.kv_heads) + " k=" + std::to_string(c.params.k) +
                  " initial=" + std::to_string(c.params.initial) +
                  " local=" + std::to_string(c.params.local) +
                  (c.params.per_kv_head ? " per-kv-head" : "") + " seqs:";
  for (const SeqSpec& q : c.seqs) {
    s += " (" + std::to_string(q.q_len) + "," + std::to_string(q.kv_len) +
         (q.tokenselect ? ",T" : "") + (q.masked ? ",M" : "") + ")";
  }
  if (c.planted > 0) s += " planted " + std::to_string(c.planted);
  return s;
}

// One batch on both backends: KV written once into a CPU f32 pool and a GPU bf16 pool, q on
// both, a state table on both (sequence s in slot s).
class TsBatch {
 public:
  TsBatch(CudaTest& t, kernels::Backend& cpu, kernels::Backend& gpu, const TsCase& c,
          std::mt19937& rng)
      : t_(t), cpu_(cpu), gpu_(gpu), c_(c) {
    constexpr int kBt = 64;
    int total_blocks = 0, total_q = 0;
    for (const SeqSpec& s : c.seqs) {
      total_blocks += (s.kv_len + kBt - 1) / kBt;
      total_q += s.q_len;
    }
    num_blocks_ = total_blocks + 2;
    std::vector<int32_t> ids(num_blocks_);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    batch_.block_tokens = kBt;
    std::vector<int32_t> slots;
    int next = 0, q_begin = 0;
    std::bernoulli_distribution coin(0.5);
    for (size_t i = 0; i < c.seqs.size(); ++i) {
      const SeqSpec& s = c.seqs[i];
      kernels::SequenceAttention sa;
      sa.q_begin = q_begin;
      sa.q_len = s.q_len;
      sa.kv_len = s.kv_len;
      for (int b = 0; b < (s.kv_len + kBt - 1) / kBt; ++b) sa.block_table.push_back(ids[next++]);
      for (int p = 0; p < s.kv_len; ++p) slots.push_back(sa.block_table[p / kBt] * kBt + p % kBt);
      if (s.tokenselect) {
        sa.pattern.kind = AttentionMethodKind::kTokenSelect;
        sa.pattern.tokenselect = c.params;
        sa.state_slot = static_cast<int32_t>(i);
      }
      if (s.masked) {
        sa.mask.assign(size_t(s.q_len) * s.q_len, 0);
        for (int r = 0; r < s.q_len; ++r) {
          for (int j = 0; j < s.q_len; ++j) sa.mask[r * s.q_len + j] = j == r || coin(rng);
        }
      }
      batch_.sequences.push_back(sa);
      kv_begins_.push_back(static_cast<int64_t>(slots.size()) - s.kv_len);
      q_begin += s.q_len;
    }
    const int64_t total_kv = static_cast<int64_t>(slots.size());
    k_ = t.RandomHost({total_kv, c.kv_heads, c.head_dim});
    Tensor v = t.RandomHost({total_kv, c.kv_heads, c.head_dim});
    q_ = t.RandomHost({total_q, c.heads, c.head_dim});
    if (c.planted > 0) Plant(rng);
    Tensor slot_t = Tensor::Zeros(DType::kI32, {total_kv});
    std::copy(slots.begin(), slots.end(), slot_t.data<int32_t>());
    const Shape kv_shape{int64_t{num_blocks_} * 2, kBt, c.kv_heads, c.head_dim};
    cpu_kv_ = Tensor::Zeros(DType::kF32, kv_shape);
    EXPECT_TRUE(cpu.WriteKv(k_, v, slot_t, cpu_kv_).ok());
    gpu_kv_ = *gpu.Allocate(DType::kBf16, kv_shape);
    EXPECT_TRUE(gpu.WriteKv(t.ToGpu(k_), t.ToGpu(v), t.ToGpu(slot_t, DType::kI32), gpu_kv_).ok());
    shape_ = {c.heads, c.kv_heads, c.head_dim, total_q, num_blocks_};
    width_ = int64_t{c.heads} * c.head_dim;
    lists_ = ts::ListsOf(c.params, c.kv_heads);
    slot_words_ = ts::StateWords(kLayers, width_, c.params.k, lists_);
    cpu_state_ = Tensor::Zeros(DType::kI32, {int64_t(c.seqs.size()), slot_words_});
    gpu_state_ = t.ToGpu(cpu_state_, DType::kI32);
    cpu_batch_ = batch_;
    cpu_batch_.sequence_state = cpu_state_;
    gpu_batch_ = batch_;
    gpu_batch_.sequence_state = gpu_state_;
  }

  // New queries for every row (a new step at the same lengths).
  void NewQueries() { q_ = t_.RandomHost(q_.shape()); }
  const Tensor& q() const { return q_; }
  void set_q(const Tensor& q) { q_ = q; }

  // One step of layer kLayer on both backends, compared.
  void Step(int* hits = nullptr) {
    SCOPED_TRACE(Describe(c_));
    kernels::AttentionWorkspace cpu_ws, gpu_ws;
    auto cpu_plan = cpu_.PlanAttention(cpu_batch_, shape_, cpu_ws);
    ASSERT_TRUE(cpu_plan.ok()) << cpu_plan.status();
    ASSERT_TRUE(cpu_.BuildAttentionIndex(*cpu_plan, q_, cpu_kv_, kLayer).ok());
    auto gpu_plan = gpu_.PlanAttention(gpu_batch_, shape_, gpu_ws);
    ASSERT_TRUE(gpu_plan.ok()) << gpu_plan.status();
    const Tensor gq = t_.ToGpu(q_);
    absl::Status s = gpu_.BuildAttentionIndex(*gpu_plan, gq, gpu_kv_, kLayer);
    ASSERT_TRUE(s.ok()) << s;
    Tensor out = t_.Poisoned(DType::kBf16, q_.shape());
    s = gpu_.Attention(*gpu_plan, gq, gpu_kv_, kLayer, out);
    ASSERT_TRUE(s.ok()) << s;

    Tensor gpu_state = Tensor::Zeros(DType::kI32, cpu_state_.shape());
    ASSERT_TRUE(gpu_.CopyToHost(gpu_state_, gpu_state).ok());
    const int64_t per_layer = ts::StateWordsPerLayer(width_, c_.params.k, lists_);
    int64_t differing = 0, selected = 0;
    for (size_t i = 0; i < batch_.sequences.size(); ++i) {
      const kernels::SequenceAttention& sa = batch_.sequences[i];
      if (sa.pattern.kind != AttentionMethodKind::kTokenSelect) continue;
      const int32_t* cs = cpu_state_.data<int32_t>() + i * slot_words_ + kLayer * per_layer;
      const int32_t* gs = gpu_state.data<int32_t>() + i * slot_words_ + kLayer * per_layer;
      for (int w = 0; w < ts::kHeaderWords; ++w) {
        EXPECT_EQ(gs[w], cs[w]) << "sequence " << i << " header word " << w;
      }
      const auto regions = ts::RegionsOf(c_.params, sa.q_len, sa.kv_len);
      if (regions.dense) continue;
      for (int64_t w = 0; w < width_; ++w) {
        float a, b;
        std::memcpy(&a, gs + ts::kHeaderWords + w, 4);
        std::memcpy(&b, cs + ts::kHeaderWords + w, 4);
        ASSERT_NEAR(a, b, 1e-6f * std::max(1.0f, std::fabs(b))) << "query word " << w;
      }
      if (hits != nullptr) *hits += gs[ts::kLastHit];
      // Selected sets, per list: equal up to near-ties around the k-th score.
      const int heads_per_list = c_.heads / lists_;
      for (int list = 0; list < lists_; ++list) {
        const int64_t offset = ts::ListOffset(width_, c_.params.k, lists_, list);
        const int32_t* gsel = gs + offset;
        const int32_t* csel = cs + offset;
        ASSERT_TRUE(std::is_sorted(gsel, gsel + c_.params.k));
        ASSERT_EQ(std::adjacent_find(gsel, gsel + c_.params.k), gsel + c_.params.k);
        const std::set<int32_t> gset(gsel, gsel + c_.params.k), cset(csel, csel + c_.params.k);
        std::vector<int32_t> diff;
        std::set_symmetric_difference(gset.begin(), gset.end(), cset.begin(), cset.end(),
                                      std::back_inserter(diff));
        selected += c_.params.k;
        differing += static_cast<int64_t>(diff.size());
        if (!diff.empty() || c_.planted > 0) {
          const int32_t prefix_sel = cs[ts::kPrefix];
          const std::vector<double> score =
              Scores(i, cs + ts::kHeaderWords, prefix_sel, list * heads_per_list,
                     (list + 1) * heads_per_list);
          const int32_t cb = regions.initial_end;
          std::vector<double> sorted(score);
          std::nth_element(sorted.begin(), sorted.begin() + (c_.params.k - 1), sorted.end(),
                           std::greater<>());
          const double kth = sorted[c_.params.k - 1];
          for (int32_t key : diff) {
            ASSERT_GE(key, cb);
            ASSERT_LT(key - cb, static_cast<int32_t>(score.size()));
            EXPECT_NEAR(score[key - cb], kth, 1e-4 * kth)
                << "index " << key << " of sequence " << i << " list " << list;
          }
          if (c_.planted > 0) {
            for (int32_t key : planted_[i]) {
              EXPECT_TRUE(gset.count(key)) << "planted key " << key << " not in list " << list;
            }
          }
        }
      }
    }
    EXPECT_LE(differing, std::max<int64_t>(4, selected / 100));

    // Stats: the same counts (they do not depend on which indices won).
    for (const auto& [name, cpu_t, gpu_t] :
         {std::tuple{"pairs", &cpu_ws.sparse_stats, &gpu_ws.sparse_stats},
          std::tuple{"cache", &cpu_ws.selection_stats, &gpu_ws.selection_stats}}) {
      Tensor g = Tensor::Zeros(DType::kF32, {gpu_t->numel()});
      ASSERT_TRUE(gpu_.CopyToHost(*gpu_t, g).ok());
      for (int64_t j = 0; j < 2 * static_cast<int64_t>(batch_.sequences.size()); ++j) {
        EXPECT_EQ(g.data<float>()[j], cpu_t->data<float>()[j]) << name << " stats word " << j;
      }
    }
    last_cache_stats_.assign(cpu_ws.selection_stats.data<float>(),
                             cpu_ws.selection_stats.data<float>() + 2 * batch_.sequences.size());

    // Outputs against the CPU attention over the GPU's selection; then both states agree.
    std::copy(gpu_state.data<int32_t>(), gpu_state.data<int32_t>() + gpu_state.numel(),
              cpu_state_.data<int32_t>());
    Tensor ref = Tensor::Zeros(DType::kF32, q_.shape());
    ASSERT_TRUE(cpu_.Attention(*cpu_plan, q_, cpu_kv_, kLayer, ref).ok());
    const double err = CudaTest::RelError(t_.ToHost(out), ref);
    EXPECT_LT(err, kBf16Tolerance);
    std::printf("tokenselect %-80s differing %lld/%lld rel err %.2e\n", Describe(c_).c_str(),
                static_cast<long long>(differing), static_cast<long long>(selected), err);
  }

  // Moves sequence i's step one token on (a decode sequence's next step at the same pool).
  void SetKvLen(size_t i, int kv_len) {
    cpu_batch_.sequences[i].kv_len = gpu_batch_.sequences[i].kv_len = kv_len;
    batch_.sequences[i].kv_len = kv_len;
  }
  const std::vector<float>& last_cache_stats() const { return last_cache_stats_; }

 private:
  // Every key of the pool is random in [-1, 1) but for the planted ones: for each selecting
  // sequence, `planted` candidates whose dimension 0 is 32 while every query row's is 4, so
  // they score ~128 * scale above the rest in every head.
  void Plant(std::mt19937& rng) {
    int64_t kv_begin = 0;
    planted_.assign(c_.seqs.size(), {});
    for (size_t i = 0; i < c_.seqs.size(); ++i) {
      const kernels::SequenceAttention& sa = batch_.sequences[i];
      const auto regions = ts::RegionsOf(c_.params, sa.q_len, sa.kv_len);
      for (int r = 0; r < sa.q_len; ++r) {
        for (int h = 0; h < c_.heads; ++h) {
          q_.data<float>()[(int64_t{sa.q_begin + r} * c_.heads + h) * c_.head_dim] = 4.0f;
        }
      }
      if (sa.pattern.kind == AttentionMethodKind::kTokenSelect && !regions.dense) {
        std::uniform_int_distribution<int> pick(regions.candidate_begin, regions.candidate_end - 1);
        std::set<int32_t> keys;
        while (static_cast<int>(keys.size()) < c_.planted) keys.insert(pick(rng));
        planted_[i].assign(keys.begin(), keys.end());
        for (int32_t key : keys) {
          for (int h = 0; h < c_.kv_heads; ++h) {
            k_.data<float>()[((kv_begin + key) * c_.kv_heads + h) * c_.head_dim] = 32.0f;
          }
        }
      }
      kv_begin += sa.kv_len;
    }
  }

  // The soft vote of sequence i's candidates by query heads [h0, h1) in double, from its stored
  // selecting query.
  std::vector<double> Scores(size_t i, const int32_t* query_bits, int32_t prefix_sel, int h0,
                             int h1) const {
    const int32_t cb = std::min(c_.params.initial, prefix_sel);
    const int32_t ce = std::max(cb, prefix_sel - c_.params.local);
    const int64_t kv_begin = kv_begins_[i];
    const int n = ce - cb, hd = c_.head_dim, group = c_.heads / c_.kv_heads;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    std::vector<double> score(n, 0.0), logits(n);
    for (int h = h0; h < h1; ++h) {
      double m = -INFINITY;
      for (int t = 0; t < n; ++t) {
        const float* k =
            k_.data<float>() + ((kv_begin + cb + t) * c_.kv_heads + h / group) * int64_t{hd};
        double dot = 0;
        for (int d = 0; d < hd; ++d) {
          float qd;
          std::memcpy(&qd, query_bits + h * hd + d, 4);
          dot += double{qd} * k[d];
        }
        logits[t] = dot * scale;
        m = std::max(m, logits[t]);
      }
      double z = 0;
      for (int t = 0; t < n; ++t) z += std::exp(logits[t] - m);
      for (int t = 0; t < n; ++t) score[t] += std::exp(logits[t] - m) / z;
    }
    return score;
  }

  CudaTest& t_;
  kernels::Backend& cpu_;
  kernels::Backend& gpu_;
  TsCase c_;
  int num_blocks_ = 0;
  kernels::AttentionBatch batch_, cpu_batch_, gpu_batch_;
  kernels::AttentionShape shape_;
  Tensor k_, q_, cpu_kv_, gpu_kv_, cpu_state_, gpu_state_;
  int64_t width_ = 0, slot_words_ = 0;
  int lists_ = 1;
  std::vector<int64_t> kv_begins_;  // where each sequence's keys start in k_
  std::vector<std::vector<int32_t>> planted_;
  std::vector<float> last_cache_stats_;
};

void RunCase(CudaTest& t, kernels::Backend& cpu, kernels::Backend& gpu, const TsCase& c,
             std::mt19937& rng) {
  TsBatch batch(t, cpu, gpu, c, rng);
  batch.Step();
}

TokenSelectParams Params(int k, int initial, int local, float theta = 0.9f,
                         bool per_kv_head = false) {
  return TokenSelectParams{k, initial, local, theta, per_kv_head};
}

// Decode rows beside a plain dense decode row and a dense-size TokenSelect row.
const std::vector<SeqSpec> kDecodeBatch = {{1, 3000}, {1, 700, false}, {1, 300}, {1, 5000}};
// A prompt chunk over a cache, a masked verify step, a dense prefill and a decode row.
const std::vector<SeqSpec> kChunkBatch = {
    {130, 4000}, {5, 2500, true, true}, {37, 37, false}, {1, 3100}};

TEST_F(CudaTokenSelectTest, DecodeRowsMatchTheCpu) {
  for (int hd : {64, 128}) {
    for (auto [heads, kv_heads] : {std::pair{8, 2}, std::pair{4, 4}, std::pair{32, 8}}) {
      RunCase(*this, cpu_, *gpu_, {hd, heads, kv_heads, kDecodeBatch, Params(256, 16, 64)}, rng_);
    }
  }
}

TEST_F(CudaTokenSelectTest, ChunksAndMaskedVerifyStepsMatchTheCpu) {
  for (int hd : {64, 128}) {
    for (auto [heads, kv_heads] : {std::pair{8, 2}, std::pair{4, 4}}) {
      RunCase(*this, cpu_, *gpu_, {hd, heads, kv_heads, kChunkBatch, Params(300, 32, 128)}, rng_);
    }
  }
}

TEST_F(CudaTokenSelectTest, PlantedKeysAreAlwaysSelected) {
  for (int hd : {64, 128}) {
    for (auto [heads, kv_heads] : {std::pair{8, 2}, std::pair{4, 4}}) {
      RunCase(*this, cpu_, *gpu_,
              {hd, heads, kv_heads, kDecodeBatch, Params(128, 16, 64), /*planted=*/40}, rng_);
      RunCase(*this, cpu_, *gpu_,
              {hd, heads, kv_heads, kChunkBatch, Params(200, 8, 100), /*planted=*/60}, rng_);
    }
  }
}

TEST_F(CudaTokenSelectTest, PerKvHeadListsMatchTheCpu) {
  for (int hd : {64, 128}) {
    for (auto [heads, kv_heads] : {std::pair{8, 2}, std::pair{4, 4}, std::pair{32, 8}}) {
      RunCase(*this, cpu_, *gpu_,
              {hd, heads, kv_heads, kDecodeBatch, Params(256, 16, 64, 0.9f, true)}, rng_);
      RunCase(*this, cpu_, *gpu_,
              {hd, heads, kv_heads, kChunkBatch, Params(300, 32, 128, 0.9f, true), /*planted=*/30},
              rng_);
    }
  }
  RunCase(*this, cpu_, *gpu_,
          {128, 32, 8, {{1, 40000}, {64, 20000}}, Params(2048, 128, 512, 0.9f, true)}, rng_);
}

TEST_F(CudaTokenSelectTest, LongContextAndLargeK) {
  // Several scoring chunks per sequence and a k of a few thousand.
  RunCase(*this, cpu_, *gpu_,
          {128, 32, 8, {{1, 40000}, {1, 9000}, {64, 20000}}, Params(2048, 128, 512)}, rng_);
}

TEST_F(CudaTokenSelectTest, BudgetsCoveringTheContextAreDense) {
  // k >= candidates: every key, exactly the dense result (and the state stays untouched).
  RunCase(*this, cpu_, *gpu_, {128, 8, 2, {{1, 600}, {40, 500}}, Params(4096, 128, 512)}, rng_);
}

// The selection cache: a repeated query hits (the indices are reused and the trailing keys that
// left the local window stay attended), a changed query misses, and a selection older than the
// local window misses whatever the query.
TEST_F(CudaTokenSelectTest, SelectionCacheHitsAndMisses) {
  // KV for 3100 and 2100 tokens; the steps run at shorter lengths first.
  const TsCase c{64, 8, 2, {{1, 3100}, {1, 2100}}, Params(128, 16, 64, 0.9f)};
  TsBatch batch(*this, cpu_, *gpu_, c, rng_);
  batch.SetKvLen(0, 3000);
  batch.SetKvLen(1, 2000);
  int hits = 0;
  batch.Step(&hits);  // first step: selects
  EXPECT_EQ(hits, 0);
  EXPECT_EQ(batch.last_cache_stats(), (std::vector<float>{0, 1, 0, 1}));
  const Tensor q1 = batch.q();
  for (int step = 1; step <= 3; ++step) {  // the same query, one token on: hits
    batch.SetKvLen(0, 3000 + step);
    batch.SetKvLen(1, 2000 + step);
    hits = 0;
    batch.Step(&hits);
    EXPECT_EQ(hits, 2) << "step " << step;
    EXPECT_EQ(batch.last_cache_stats(), (std::vector<float>{1, 1, 1, 1}));
  }
  batch.NewQueries();  // a new query: misses
  hits = 0;
  batch.Step(&hits);
  EXPECT_EQ(hits, 0);
  EXPECT_EQ(batch.last_cache_stats(), (std::vector<float>{0, 1, 0, 1}));
  batch.set_q(q1);
  batch.SetKvLen(0, 3003 + 65);  // more than `local` past the last selection: misses
  batch.SetKvLen(1, 2003 + 10);  // within it, but q1 is not the query that selected: misses
  hits = 0;
  batch.Step(&hits);
  EXPECT_EQ(hits, 0);
}

// A TokenSelect decode step captured as a graph and replayed equals the ops run one by one, over
// steps that select, reuse and select again (the decision is made on the device at replay).
TEST_F(CudaTokenSelectTest, ReplayedStepEqualsOpByOp) {
  const int hd = 128, heads = 8, kv_heads = 2, bt = 64;
  for (bool per_kv_head : {false, true}) {
    SCOPED_TRACE(per_kv_head ? "per KV head" : "per layer");
    const TokenSelectParams params = Params(256, 16, 64, 0.9f, per_kv_head);

    const std::vector<int> lens = {5000, 3000, 200};  // the last one is dense-size
    int blocks = 0;
    for (int len : lens) blocks += (len + bt - 1) / bt;
    Tensor kv = *gpu_->Allocate(DType::kBf16, {2 * int64_t{blocks}, bt, kv_heads, hd});
    ASSERT_TRUE(gpu_->FillUniform(kv, 5, -1.0f, 1.0f).ok());
    const int64_t width = int64_t{heads} * hd;
    const int64_t slot_words =
        ts::StateWords(kLayers, width, params.k, ts::ListsOf(params, kv_heads));
    kernels::AttentionBatch batches[2];
    Tensor states[2];
    int next = 0;
    for (kernels::AttentionBatch& b : batches) b.block_tokens = bt;
    for (size_t s = 0; s < lens.size(); ++s) {
      kernels::SequenceAttention sa;
      sa.q_begin = static_cast<int32_t>(s);
      sa.q_len = 1;
      sa.kv_len = lens[s];
      for (int i = 0; i < (lens[s] + bt - 1) / bt; ++i) sa.block_table.push_back(next++);
      sa.pattern.kind = AttentionMethodKind::kTokenSelect;
      sa.pattern.tokenselect = params;
      sa.state_slot = static_cast<int32_t>(s);
      for (kernels::AttentionBatch& b : batches) b.sequences.push_back(sa);
    }
    for (int i = 0; i < 2; ++i) {
      states[i] =
          ToGpu(Tensor::Zeros(DType::kI32, {int64_t(lens.size()), slot_words}), DType::kI32);
      batches[i].sequence_state = states[i];
    }
    const kernels::AttentionShape shape{heads, kv_heads, hd, int64_t(lens.size()), blocks};
    kernels::AttentionWorkspace ws[2];
    auto eager = gpu_->PlanAttention(batches[0], shape, ws[0]);
    auto graphed = gpu_->PlanAttention(batches[1], shape, ws[1]);
    ASSERT_TRUE(eager.ok() && graphed.ok()) << eager.status() << graphed.status();
    Tensor q = ToGpu(RandomHost({int64_t(lens.size()), heads, hd}));
    Tensor outs[2] = {Poisoned(DType::kBf16, q.shape()), Poisoned(DType::kBf16, q.shape())};
    auto run = [&](const kernels::AttentionPlan& plan, const Tensor& out) -> absl::Status {
      for (int layer = 0; layer < kLayers; ++layer) {
        SS_RETURN_IF_ERROR(gpu_->BuildAttentionIndex(plan, q, kv, layer));
        SS_RETURN_IF_ERROR(gpu_->Attention(plan, q, kv, layer, out));
      }
      return absl::OkStatus();
    };
    std::unique_ptr<kernels::StepGraph> graph;
    for (int step = 0; step < 4; ++step) {
      // Steps 0 and 2 select (a fresh slot, a new query), 1 and 3 reuse.
      if (step == 2) {
        ASSERT_TRUE(gpu_->CopyFromHost(RandomHost(q.shape()), q).ok());
      }
      ASSERT_TRUE(run(*eager, outs[0]).ok());
      if (graph == nullptr) {  // captured after one op-by-op run, as the model does
        auto captured = gpu_->CaptureGraph([&] { return run(*graphed, outs[1]); });
        ASSERT_TRUE(captured.ok()) << captured.status();
        graph = *std::move(captured);
      }
      ASSERT_TRUE(gpu_->LaunchGraph(*graph).ok());
      EXPECT_EQ(RelError(ToHost(outs[1]), ToHost(outs[0])), 0.0) << "step " << step;
      Tensor a = Tensor::Zeros(DType::kI32, {int64_t(lens.size()), slot_words});
      Tensor b = Tensor::Zeros(DType::kI32, a.shape());
      ASSERT_TRUE(gpu_->CopyToHost(states[0], a).ok());
      ASSERT_TRUE(gpu_->CopyToHost(states[1], b).ok());
      EXPECT_EQ(std::memcmp(a.data<int32_t>(), b.data<int32_t>(), a.numel() * 4), 0)
          << "step " << step;
      const int32_t last_hit = a.data<int32_t>()[ts::kLastHit];
      EXPECT_EQ(last_hit, step % 2) << "step " << step;
      for (int i = 0; i < 2; ++i) {
        Tensor stats = Tensor::Zeros(DType::kF32, {ws[i].selection_stats.numel()});
        ASSERT_TRUE(gpu_->CopyToHost(ws[i].selection_stats, stats).ok());
        // Accumulated over both layers and every step so far (the plans were made once).
        const int hits = std::vector<int>{0, 1, 1, 2}[step];
        EXPECT_EQ(stats.data<float>()[1], 2.0f * (step + 1)) << "plan " << i << " step " << step;
        EXPECT_EQ(stats.data<float>()[0], 2.0f * hits) << "plan " << i << " step " << step;
      }
    }
  }
}

TEST_F(CudaTokenSelectTest, SmallStateSlotsAreRejected) {
  const TsCase c{64, 4, 2, {{1, 2000}}, Params(64, 16, 64)};
  kernels::AttentionBatch batch;
  batch.block_tokens = 64;
  kernels::SequenceAttention sa;
  sa.q_len = 1;
  sa.kv_len = 2000;
  for (int i = 0; i < 32; ++i) sa.block_table.push_back(i);
  sa.pattern.kind = AttentionMethodKind::kTokenSelect;
  sa.pattern.tokenselect = c.params;
  sa.state_slot = 0;
  batch.sequences.push_back(sa);
  const int64_t one_layer = ts::StateWordsPerLayer(4 * 64, 64);
  batch.sequence_state = ToGpu(Tensor::Zeros(DType::kI32, {1, one_layer}), DType::kI32);
  const kernels::AttentionShape shape{4, 2, 64, 1, 32};
  kernels::AttentionWorkspace ws;
  auto plan = gpu_->PlanAttention(batch, shape, ws);
  ASSERT_TRUE(plan.ok()) << plan.status();
  Tensor q = ToGpu(RandomHost({1, 4, 64}));
  Tensor kv = *gpu_->Allocate(DType::kBf16, {64, 64, 2, 64});
  ASSERT_TRUE(gpu_->FillUniform(kv, 1, -1.0f, 1.0f).ok());
  EXPECT_TRUE(gpu_->BuildAttentionIndex(*plan, q, kv, 0).ok());
  EXPECT_EQ(gpu_->BuildAttentionIndex(*plan, q, kv, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->Attention(*plan, q, kv, 1, q).code(), absl::StatusCode::kInvalidArgument);
  // Lists per KV head need kv_heads lists per layer: one list's area is too small even for 0.
  batch.sequences[0].pattern.tokenselect.per_kv_head = true;
  auto per_head_plan = gpu_->PlanAttention(batch, shape, ws);
  ASSERT_TRUE(per_head_plan.ok()) << per_head_plan.status();
  EXPECT_EQ(gpu_->BuildAttentionIndex(*per_head_plan, q, kv, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

// The attention kernel checks the stored lists rather than trusting them: an entry repeating the
// one before it, a negative one, one past the cached prefix and one inside the local range are
// skipped (with any entry no longer above its predecessor) — never read, never counted twice.
TEST_F(CudaTokenSelectTest, CorruptListEntriesAreSkipped) {
  const int hd = 64, heads = 8, kv_heads = 2, bt = 64, kv_len = 3000;
  for (bool per_kv_head : {false, true}) {
    const TokenSelectParams params = Params(64, 16, 64, 0.9f, per_kv_head);
    const int lists = ts::ListsOf(params, kv_heads);
    kernels::AttentionBatch batch;
    batch.block_tokens = bt;
    kernels::SequenceAttention sa;
    sa.q_len = 1;
    sa.kv_len = kv_len;
    for (int i = 0; i < (kv_len + bt - 1) / bt; ++i) sa.block_table.push_back(i);
    sa.pattern.kind = AttentionMethodKind::kTokenSelect;
    sa.pattern.tokenselect = params;
    sa.state_slot = 0;
    batch.sequences.push_back(sa);
    const int64_t width = int64_t{heads} * hd;
    const int64_t words = ts::StateWords(1, width, params.k, lists);
    Tensor state = Tensor::Zeros(DType::kI32, {1, words});
    batch.sequence_state = ToGpu(state, DType::kI32);
    const kernels::AttentionShape shape{heads, kv_heads, hd, 1, 47};
    Tensor kv = *gpu_->Allocate(DType::kBf16, {2 * 47, bt, kv_heads, hd});
    ASSERT_TRUE(gpu_->FillUniform(kv, 3, -1.0f, 1.0f).ok());
    kernels::AttentionWorkspace ws;
    auto plan = gpu_->PlanAttention(batch, shape, ws);
    ASSERT_TRUE(plan.ok()) << plan.status();
    Tensor q = ToGpu(RandomHost({1, heads, hd}));
    Tensor out = Poisoned(DType::kBf16, q.shape());
    ASSERT_TRUE(gpu_->BuildAttentionIndex(*plan, q, kv, 0).ok());
    ASSERT_TRUE(gpu_->Attention(*plan, q, kv, 0, out).ok());
    const Tensor intact = ToHost(out);
    ASSERT_TRUE(gpu_->CopyToHost(batch.sequence_state, state).ok());
    int32_t* list = state.data<int32_t>() + ts::ListOffset(width, params.k, lists, lists - 1);
    const int32_t local_begin = kv_len - 1 - params.local;
    std::vector<Tensor> outs;
    for (const int32_t value : {list[9], -5, kv_len + 100, local_begin + 3}) {
      Tensor corrupt = Tensor::Zeros(DType::kI32, state.shape());
      std::copy_n(state.data<int32_t>(), state.numel(), corrupt.data<int32_t>());
      corrupt.data<int32_t>()[list - state.data<int32_t>() + 10] = value;
      ASSERT_TRUE(gpu_->CopyFromHost(corrupt, batch.sequence_state).ok());
      ASSERT_TRUE(gpu_->Attention(*plan, q, kv, 0, out).ok());
      outs.push_back(ToHost(out));
    }
    // A repeat and a negative key drop entry 10 alone; a key past the prefix or inside the local
    // range also drops entry 11, which is no longer above the entry before it.
    EXPECT_GT(RelError(outs[0], intact), 0.0) << "the repeated entry was not skipped";
    EXPECT_EQ(RelError(outs[1], outs[0]), 0.0);
    EXPECT_GT(RelError(outs[2], outs[0]), 0.0);
    EXPECT_EQ(RelError(outs[3], outs[2]), 0.0);
  }
}

// A few small cases for compute-sanitizer (racecheck / memcheck).
TEST_F(CudaTokenSelectTest, TokenSelectSmall) {
  const std::vector<SeqSpec> seqs = {{1, 700}, {20, 600}, {3, 500, true, true}, {1, 90}};
  RunCase(*this, cpu_, *gpu_, {64, 8, 2, seqs, Params(64, 8, 32)}, rng_);
  RunCase(*this, cpu_, *gpu_, {128, 4, 4, seqs, Params(48, 8, 32), /*planted=*/10}, rng_);
  RunCase(*this, cpu_, *gpu_, {64, 8, 2, seqs, Params(64, 8, 32, 0.9f, true), /*planted=*/10},
          rng_);
}

}  // namespace
}  // namespace sparseserve::testing
