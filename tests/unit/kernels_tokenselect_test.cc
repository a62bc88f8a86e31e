// TokenSelect on the CPU reference (kernels/tokenselect_index.h) against brute force written
// independently here: a budget covering the context equals dense attention bit for bit; the
// selection equals a double-precision top-k of the head soft vote (mean query for multi-row
// steps); planted critical tokens are always selected; attention equals brute-force attention
// over exactly the listed tokens (also under a verify mask); the selection cache hits, misses and
// ages as specified and counts on the backend; bad state slots are rejected. Per KV head: each
// KV head's list is the top-k of its own query heads' soft vote and its heads attend exactly it;
// corrupt lists (unsorted, repeated, out of range) are rejected before attention reads them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "common/core/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/attention_plan.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/tokenselect_index.h"

namespace sparseserve::kernels {
namespace {

constexpr int kHeads = 4, kKvHeads = 2, kHeadDim = 16, kBlock = 16, kLayers = 2;
constexpr int kWidth = kHeads * kHeadDim;

Tensor Random(Shape shape, std::mt19937& rng, float sd = 1.0f) {
  Tensor t = Tensor::Zeros(DType::kF32, shape);
  std::normal_distribution<float> dist(0.0f, sd);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// A sequence's K/V [kv_len, kv_heads, head_dim], kept contiguous and scattered into a paged pool.
struct Kv {
  Tensor k, v, pool;
  std::vector<int32_t> table;
  const float* key(int t, int kvh) const {
    return k.data<float>() + (t * kKvHeads + kvh) * kHeadDim;
  }
  const float* value(int t, int kvh) const {
    return v.data<float>() + (t * kKvHeads + kvh) * kHeadDim;
  }
};

Kv MakeKv(CpuBackend& be, Tensor k, Tensor v, std::mt19937& rng) {
  Kv f;
  const int kv_len = static_cast<int>(k.dim(0));
  const int blocks = (kv_len + kBlock - 1) / kBlock + 2;
  f.k = std::move(k);
  f.v = std::move(v);
  f.pool = Tensor::Zeros(DType::kF32, {blocks * 2, kBlock, kKvHeads, kHeadDim});
  std::vector<int32_t> ids(blocks);
  for (int i = 0; i < blocks; ++i) ids[i] = i;
  std::shuffle(ids.begin(), ids.end(), rng);
  f.table.assign(ids.begin(), ids.begin() + (kv_len + kBlock - 1) / kBlock);
  Tensor slots = Tensor::Zeros(DType::kI32, {kv_len});
  for (int p = 0; p < kv_len; ++p) {
    slots.data<int32_t>()[p] = f.table[p / kBlock] * kBlock + p % kBlock;
  }
  EXPECT_TRUE(be.WriteKv(f.k, f.v, slots, f.pool).ok());
  return f;
}

struct StepResult {
  absl::Status status;
  Tensor out;
  float computed = 0, causal = 0, hits = 0, queries = 0;
};

class TokenSelectTest : public ::testing::Test {
 protected:
  TokenSelectTest()
      : pool_(2),
        be_(&pool_),
        state_(Tensor::Zeros(DType::kI32,
                             {2, tokenselect::StateWords(kLayers, kWidth, kMaxK, kKvHeads)})) {}

  static constexpr int kMaxK = 64;

  // Runs rows [kv_len - q_len, kv_len) of `q_all` at `layer` under `pattern` (dense when its kind
  // is kDense) with state slot 0, index build then attention.
  StepResult Run(const Kv& kv, const Tensor& q_all, int q_len, int kv_len,
                 const AttentionPattern& pattern, int layer = 0, std::vector<uint8_t> mask = {}) {
    Tensor q = Tensor::Zeros(DType::kF32, {q_len, kHeads, kHeadDim});
    std::copy_n(q_all.data<float>() + int64_t{kv_len - q_len} * kWidth, q.numel(), q.data<float>());
    AttentionBatch batch;
    batch.block_tokens = kBlock;
    batch.sequence_state = state_;
    SequenceAttention sa;
    sa.q_len = q_len;
    sa.kv_len = kv_len;
    sa.block_table = kv.table;
    sa.pattern = pattern;
    sa.mask = std::move(mask);
    sa.state_slot = 0;
    batch.sequences.push_back(sa);
    AttentionShape shape{kHeads, kKvHeads, kHeadDim, q_len, kv.pool.dim(0) / 2};
    AttentionWorkspace ws;
    StepResult r;
    absl::StatusOr<AttentionPlan> plan = be_.PlanAttention(batch, shape, ws);
    if (!plan.ok()) {
      r.status = plan.status();
      return r;
    }
    r.status = be_.BuildAttentionIndex(*plan, q, kv.pool, layer);
    if (!r.status.ok()) return r;
    r.out = Tensor::Zeros(DType::kF32, q.shape());
    r.status = be_.Attention(*plan, q, kv.pool, layer, r.out);
    r.computed = ws.sparse_stats.data<float>()[0];
    r.causal = ws.sparse_stats.data<float>()[1];
    r.hits = ws.selection_stats.data<float>()[0];
    r.queries = ws.selection_stats.data<float>()[1];
    return r;
  }

  int32_t* LayerState(const AttentionPattern& p, int layer) const {
    return state_.data<int32_t>() +
           layer * tokenselect::StateWordsPerLayer(kWidth, p.tokenselect.k,
                                                   tokenselect::ListsOf(p.tokenselect, kKvHeads));
  }
  std::vector<int32_t> Selected(const AttentionPattern& p, int layer = 0, int list = 0) const {
    const int32_t* s = LayerState(p, layer);
    const int32_t* idx =
        s + tokenselect::ListOffset(kWidth, p.tokenselect.k,
                                    tokenselect::ListsOf(p.tokenselect, kKvHeads), list);
    return std::vector<int32_t>(idx, idx + s[tokenselect::kSelected]);
  }

  core::ThreadPool pool_;
  CpuBackend be_;
  Tensor state_;
};

AttentionPattern TokenSelect(int k, int initial, int local, float theta = 2.0f,
                             bool per_kv_head = false) {
  AttentionPattern p;
  p.kind = AttentionMethodKind::kTokenSelect;
  p.tokenselect = {k, initial, local, theta, per_kv_head};
  return p;
}

// The soft vote of Eq. 10 in double: Σ_h softmax over the candidates of scale · q̄_h · k_t, over
// the query heads [h0, h1) (default all).
std::vector<double> SoftVote(const Kv& kv, const Tensor& q_all, int q_len, int kv_len, int begin,
                             int end, int h0 = 0, int h1 = kHeads) {
  std::vector<double> mean(kWidth, 0.0);
  for (int r = kv_len - q_len; r < kv_len; ++r) {
    for (int i = 0; i < kWidth; ++i) mean[i] += q_all.data<float>()[r * kWidth + i] / q_len;
  }
  const double scale = 1.0 / std::sqrt(double{kHeadDim});
  std::vector<double> score(end - begin, 0.0);
  for (int h = h0; h < h1; ++h) {
    std::vector<double> l(end - begin);
    for (int t = begin; t < end; ++t) {
      double dot = 0;
      for (int d = 0; d < kHeadDim; ++d) {
        dot += mean[h * kHeadDim + d] * kv.key(t, h / (kHeads / kKvHeads))[d];
      }
      l[t - begin] = dot * scale;
    }
    const double m = *std::max_element(l.begin(), l.end());
    double z = 0;
    for (double x : l) z += std::exp(x - m);
    for (size_t i = 0; i < l.size(); ++i) score[i] += std::exp(l[i] - m) / z;
  }
  return score;
}

// Attention of one row over exactly `keys_of[kv head]` (one list for every head when it holds
// one), in double, [heads, head_dim].
std::vector<double> BruteAttention(const Kv& kv, const float* q_row,
                                   const std::vector<std::vector<int>>& keys_of) {
  std::vector<double> out(kWidth, 0.0);
  const double scale = 1.0 / std::sqrt(double{kHeadDim});
  for (int h = 0; h < kHeads; ++h) {
    const int kvh = h / (kHeads / kKvHeads);
    const std::vector<int>& keys = keys_of[keys_of.size() == 1 ? 0 : kvh];
    std::vector<double> w(keys.size());
    double m = -1e300;
    for (size_t i = 0; i < keys.size(); ++i) {
      double dot = 0;
      for (int d = 0; d < kHeadDim; ++d) dot += q_row[h * kHeadDim + d] * kv.key(keys[i], kvh)[d];
      w[i] = dot * scale;
      m = std::max(m, w[i]);
    }
    double z = 0;
    for (double& x : w) z += (x = std::exp(x - m));
    for (size_t i = 0; i < keys.size(); ++i) {
      for (int d = 0; d < kHeadDim; ++d) {
        out[h * kHeadDim + d] += w[i] / z * kv.value(keys[i], kvh)[d];
      }
    }
  }
  return out;
}

std::vector<double> BruteAttention(const Kv& kv, const float* q_row, const std::vector<int>& keys) {
  return BruteAttention(kv, q_row, std::vector<std::vector<int>>{keys});
}

void ExpectNear(const Tensor& out, int row, const std::vector<double>& expected, double tol) {
  for (int i = 0; i < kWidth; ++i) {
    ASSERT_NEAR(out.data<float>()[row * kWidth + i], expected[i], tol)
        << "row " << row << " i " << i;
  }
}

TEST_F(TokenSelectTest, BudgetCoveringTheContextIsDenseBitForBit) {
  std::mt19937 rng(1);
  const int kv_len = 150;
  Kv kv = MakeKv(be_, Random({kv_len, kKvHeads, kHeadDim}, rng),
                 Random({kv_len, kKvHeads, kHeadDim}, rng), rng);
  Tensor q = Random({kv_len, kHeads, kHeadDim}, rng);
  for (int q_len : {1, 7}) {
    // Candidates [8, 150 - q_len - 16) number at most 126 <= k.
    StepResult dense = Run(kv, q, q_len, kv_len, AttentionPattern());
    StepResult sparse = Run(kv, q, q_len, kv_len, TokenSelect(kMaxK * 2, 8, 16));
    ASSERT_TRUE(dense.status.ok()) << dense.status;
    ASSERT_TRUE(sparse.status.ok()) << sparse.status;
    ASSERT_EQ(std::memcmp(dense.out.data<float>(), sparse.out.data<float>(),
                          dense.out.numel() * sizeof(float)),
              0);
    EXPECT_EQ(sparse.computed, sparse.causal);
    EXPECT_EQ(sparse.queries, 0);  // nothing to choose: no selection-cache query
  }
}

TEST_F(TokenSelectTest, SelectionIsTheSoftVoteTopKAndAttentionCoversExactlyItsList) {
  std::mt19937 rng(2);
  for (int trial = 0; trial < 12; ++trial) {
    const int kv_len = 200 + 37 * trial;
    const int q_len = trial % 3 == 0 ? 5 : 1;  // a chunk selects with its mean query
    const int k = 8 + trial * 4, initial = trial % 4, local = 3 + trial;
    Kv kv = MakeKv(be_, Random({kv_len, kKvHeads, kHeadDim}, rng),
                   Random({kv_len, kKvHeads, kHeadDim}, rng), rng);
    Tensor q = Random({kv_len, kHeads, kHeadDim}, rng, 2.0f);
    const AttentionPattern p = TokenSelect(k, initial, local);
    const int layer = trial % kLayers;
    StepResult r = Run(kv, q, q_len, kv_len, p, layer);
    ASSERT_TRUE(r.status.ok()) << r.status;
    const int prefix = kv_len - q_len;
    const int begin = initial, end = prefix - local;
    const std::vector<double> score = SoftVote(kv, q, q_len, kv_len, begin, end);
    std::vector<int> order(end - begin);
    for (int i = 0; i < end - begin; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[a] > score[b]; });
    std::set<int> expected;
    for (int i = 0; i < k; ++i) expected.insert(begin + order[i]);
    const std::vector<int32_t> selected = Selected(p, layer);
    ASSERT_EQ(selected.size(), static_cast<size_t>(k));
    ASSERT_TRUE(std::is_sorted(selected.begin(), selected.end()));
    EXPECT_EQ(std::set<int>(selected.begin(), selected.end()), expected) << "trial " << trial;
    EXPECT_EQ(LayerState(p, layer)[tokenselect::kPrefix], prefix);
    // Each row attends initial ∪ selected ∪ the last `local` cached keys ∪ its causal new rows.
    for (int row = 0; row < q_len; ++row) {
      std::vector<int> keys;
      for (int t = 0; t < initial; ++t) keys.push_back(t);
      keys.insert(keys.end(), selected.begin(), selected.end());
      for (int t = prefix - local; t <= prefix + row; ++t) keys.push_back(t);
      ExpectNear(r.out, row, BruteAttention(kv, q.data<float>() + (prefix + row) * kWidth, keys),
                 2e-5);
    }
    const double sparse_keys = q_len * (initial + k + local) + q_len * (q_len + 1) / 2.0;
    const double dense_keys = q_len * prefix + q_len * (q_len + 1) / 2.0;
    EXPECT_FLOAT_EQ(r.computed, static_cast<float>(kHeads * sparse_keys));
    EXPECT_FLOAT_EQ(r.causal, static_cast<float>(kHeads * dense_keys));
    EXPECT_EQ(r.queries, 1);
    EXPECT_EQ(r.hits, 0);
  }
}

TEST_F(TokenSelectTest, PlantedCriticalTokensAreAlwaysSelected) {
  std::mt19937 rng(3);
  const int kv_len = 600, k = 16;
  Tensor keys = Random({kv_len, kKvHeads, kHeadDim}, rng);
  Tensor q = Random({kv_len, kHeads, kHeadDim}, rng);
  // Critical tokens: keys along the last query's direction for every KV head's first query head.
  const std::vector<int> planted = {9, 100, 101, 333, 470};
  for (int t : planted) {
    for (int kvh = 0; kvh < kKvHeads; ++kvh) {
      for (int d = 0; d < kHeadDim; ++d) {
        keys.data<float>()[(t * kKvHeads + kvh) * kHeadDim + d] =
            3.0f *
            q.data<float>()[((kv_len - 1) * kHeads + kvh * (kHeads / kKvHeads)) * kHeadDim + d];
      }
    }
  }
  Kv kv = MakeKv(be_, std::move(keys), Random({kv_len, kKvHeads, kHeadDim}, rng), rng);
  const AttentionPattern p = TokenSelect(k, 4, 32);
  ASSERT_TRUE(Run(kv, q, 1, kv_len, p).status.ok());
  const std::vector<int32_t> selected = Selected(p);
  for (int t : planted) {
    EXPECT_TRUE(std::binary_search(selected.begin(), selected.end(), t)) << t;
  }
}

TEST_F(TokenSelectTest, VerifyMaskLimitsTheNewRowsOnly) {
  std::mt19937 rng(4);
  const int kv_len = 300, q_len = 3, k = 20, initial = 2, local = 10;
  Kv kv = MakeKv(be_, Random({kv_len, kKvHeads, kHeadDim}, rng),
                 Random({kv_len, kKvHeads, kHeadDim}, rng), rng);
  Tensor q = Random({kv_len, kHeads, kHeadDim}, rng);
  // A tree: rows 1 and 2 both follow row 0 but not each other.
  const std::vector<uint8_t> mask = {1, 0, 0, 1, 1, 0, 1, 0, 1};
  const AttentionPattern p = TokenSelect(k, initial, local);
  StepResult r = Run(kv, q, q_len, kv_len, p, 0, mask);
  ASSERT_TRUE(r.status.ok()) << r.status;
  const std::vector<int32_t> selected = Selected(p);
  const int prefix = kv_len - q_len;
  for (int row = 0; row < q_len; ++row) {
    std::vector<int> keys;
    for (int t = 0; t < initial; ++t) keys.push_back(t);
    keys.insert(keys.end(), selected.begin(), selected.end());
    for (int t = prefix - local; t < prefix; ++t) keys.push_back(t);
    for (int j = 0; j < q_len; ++j) {
      if (mask[row * q_len + j]) keys.push_back(prefix + j);
    }
    ExpectNear(r.out, row, BruteAttention(kv, q.data<float>() + (prefix + row) * kWidth, keys),
               2e-5);
  }
}

TEST_F(TokenSelectTest, SelectionCacheHitsOnSimilarQueriesMissesOnNewOnesAndAges) {
  std::mt19937 rng(5);
  const int kv_len = 400, local = 8;
  Kv kv = MakeKv(be_, Random({kv_len, kKvHeads, kHeadDim}, rng),
                 Random({kv_len, kKvHeads, kHeadDim}, rng), rng);
  Tensor q = Random({kv_len, kHeads, kHeadDim}, rng);
  const float* base = q.data<float>() + 300 * kWidth;
  auto set_row = [&](int row, float noise) {  // row = row 300's query + noise
    std::normal_distribution<float> dist(0.0f, noise);
    for (int i = 0; i < kWidth; ++i) q.data<float>()[row * kWidth + i] = base[i] + dist(rng);
  };
  const AttentionPattern p = TokenSelect(16, 4, local, 0.9f);
  StepResult first = Run(kv, q, 1, 301, p);
  ASSERT_TRUE(first.status.ok()) << first.status;
  EXPECT_EQ(first.hits, 0);
  EXPECT_EQ(first.queries, 1);
  const std::vector<int32_t> selected = Selected(p);
  // A nearly equal query two steps later reuses the selection, keeping the keys that left the
  // local window since ([293, 295)) attended.
  set_row(302, 0.01f);
  StepResult hit = Run(kv, q, 1, 303, p);
  ASSERT_TRUE(hit.status.ok());
  EXPECT_EQ(hit.hits, 1);
  EXPECT_EQ(Selected(p), selected);
  EXPECT_EQ(LayerState(p, 0)[tokenselect::kPrefix], 300);
  std::vector<int> keys = {0, 1, 2, 3};
  keys.insert(keys.end(), selected.begin(), selected.end());
  for (int t = 300 - local; t <= 302; ++t) keys.push_back(t);
  ExpectNear(hit.out, 0, BruteAttention(kv, q.data<float>() + 302 * kWidth, keys), 2e-5);
  EXPECT_FLOAT_EQ(hit.computed, kHeads * (4 + 16 + local + 3));
  // Another layer has no selection yet: a miss there.
  StepResult other_layer = Run(kv, q, 1, 303, p, 1);
  EXPECT_EQ(other_layer.hits, 0);
  EXPECT_EQ(other_layer.queries, 1);
  // An unrelated query misses and selects afresh at its own prefix.
  StepResult miss = Run(kv, q, 1, 304, p);
  EXPECT_EQ(miss.hits, 0);
  EXPECT_EQ(LayerState(p, 0)[tokenselect::kPrefix], 303);
  // The same query again hits; once the selection is more than `local` tokens old it misses.
  std::copy_n(q.data<float>() + 303 * kWidth, kWidth, q.data<float>() + 305 * kWidth);
  EXPECT_EQ(Run(kv, q, 1, 306, p).hits, 1);
  std::copy_n(q.data<float>() + 303 * kWidth, kWidth, q.data<float>() + (304 + local) * kWidth);
  EXPECT_EQ(Run(kv, q, 1, 305 + local, p).hits, 0);
  // θ = -1 always reuses a fresh-enough selection; θ above 1 never does.
  EXPECT_EQ(Run(kv, q, 1, 306 + local, TokenSelect(16, 4, local, -1.0f)).hits, 1);
  EXPECT_EQ(Run(kv, q, 1, 307 + local, TokenSelect(16, 4, local, 1.5f)).hits, 0);
  // Multi-row steps (prompt chunks, verified drafts) always select, and their selections are
  // never reused; the next one-row step selects, the one after reuses.
  EXPECT_EQ(Run(kv, q, 2, 309 + local, TokenSelect(16, 4, local, -1.0f)).hits, 0);
  EXPECT_EQ(Run(kv, q, 1, 310 + local, TokenSelect(16, 4, local, -1.0f)).hits, 0);
  EXPECT_EQ(Run(kv, q, 1, 311 + local, TokenSelect(16, 4, local, -1.0f)).hits, 1);
}

TEST_F(TokenSelectTest, PerKvHeadListsAreEachGroupsTopKAndItsHeadsAttendExactlyThem) {
  std::mt19937 rng(7);
  constexpr int kGroup = kHeads / kKvHeads;
  for (int trial = 0; trial < 8; ++trial) {
    const int kv_len = 260 + 41 * trial;
    const int q_len = trial % 2 == 0 ? 1 : 4;  // decode rows and multi-row (verify) steps
    const int k = 10 + 3 * trial, initial = trial % 3, local = 5 + trial;
    Tensor keys = Random({kv_len, kKvHeads, kHeadDim}, rng);
    Tensor q = Random({kv_len, kHeads, kHeadDim}, rng, 2.0f);
    // Tokens planted for one KV head only: along its first query head's last query.
    const std::vector<std::vector<int>> planted = {{20, 77, 150}, {33, 120, 200}};
    for (int kvh = 0; kvh < kKvHeads; ++kvh) {
      for (int t : planted[kvh]) {
        for (int d = 0; d < kHeadDim; ++d) {
          keys.data<float>()[(t * kKvHeads + kvh) * kHeadDim + d] =
              4.0f * q.data<float>()[((kv_len - 1) * kHeads + kvh * kGroup) * kHeadDim + d];
        }
      }
    }
    Kv kv = MakeKv(be_, std::move(keys), Random({kv_len, kKvHeads, kHeadDim}, rng), rng);
    const AttentionPattern p = TokenSelect(k, initial, local, 2.0f, /*per_kv_head=*/true);
    const int layer = trial % kLayers;
    StepResult r = Run(kv, q, q_len, kv_len, p, layer);
    ASSERT_TRUE(r.status.ok()) << r.status;
    const int prefix = kv_len - q_len;
    const int begin = initial, end = prefix - local;
    std::vector<std::vector<int32_t>> lists(kKvHeads);
    for (int kvh = 0; kvh < kKvHeads; ++kvh) {
      const std::vector<double> score =
          SoftVote(kv, q, q_len, kv_len, begin, end, kvh * kGroup, (kvh + 1) * kGroup);
      std::vector<int> order(end - begin);
      for (int i = 0; i < end - begin; ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return score[a] > score[b]; });
      std::set<int> expected;
      for (int i = 0; i < k; ++i) expected.insert(begin + order[i]);
      lists[kvh] = Selected(p, layer, kvh);
      ASSERT_EQ(lists[kvh].size(), static_cast<size_t>(k));
      ASSERT_TRUE(std::is_sorted(lists[kvh].begin(), lists[kvh].end()));
      EXPECT_EQ(std::set<int>(lists[kvh].begin(), lists[kvh].end()), expected)
          << "trial " << trial << " kv head " << kvh;
      if (q_len == 1) {
        for (int t : planted[kvh]) {
          EXPECT_TRUE(std::binary_search(lists[kvh].begin(), lists[kvh].end(), t))
              << "trial " << trial << " kv head " << kvh << " planted " << t;
        }
      }
    }
    EXPECT_NE(lists[0], lists[1]) << "trial " << trial;  // the heads chose for themselves
    for (int row = 0; row < q_len; ++row) {
      std::vector<std::vector<int>> keys_of(kKvHeads);
      for (int kvh = 0; kvh < kKvHeads; ++kvh) {
        for (int t = 0; t < initial; ++t) keys_of[kvh].push_back(t);
        keys_of[kvh].insert(keys_of[kvh].end(), lists[kvh].begin(), lists[kvh].end());
        for (int t = prefix - local; t <= prefix + row; ++t) keys_of[kvh].push_back(t);
      }
      ExpectNear(r.out, row, BruteAttention(kv, q.data<float>() + (prefix + row) * kWidth, keys_of),
                 2e-5);
    }
  }
  // A budget covering the context is dense bit for bit per KV head too.
  Kv kv = MakeKv(be_, Random({150, kKvHeads, kHeadDim}, rng),
                 Random({150, kKvHeads, kHeadDim}, rng), rng);
  Tensor q = Random({150, kHeads, kHeadDim}, rng);
  StepResult dense = Run(kv, q, 3, 150, AttentionPattern());
  StepResult sparse = Run(kv, q, 3, 150, TokenSelect(kMaxK * 2, 8, 16, 2.0f, true));
  ASSERT_TRUE(sparse.status.ok()) << sparse.status;
  EXPECT_EQ(std::memcmp(dense.out.data<float>(), sparse.out.data<float>(),
                        dense.out.numel() * sizeof(float)),
            0);
}

TEST_F(TokenSelectTest, CorruptListsAreRejectedBeforeAttentionReadsThem) {
  std::mt19937 rng(8);
  const int kv_len = 300, k = 12, initial = 4, local = 8;
  Kv kv = MakeKv(be_, Random({kv_len, kKvHeads, kHeadDim}, rng),
                 Random({kv_len, kKvHeads, kHeadDim}, rng), rng);
  Tensor q_all = Random({kv_len, kHeads, kHeadDim}, rng);
  Tensor q = Tensor::Zeros(DType::kF32, {1, kHeads, kHeadDim});
  std::copy_n(q_all.data<float>() + int64_t{kv_len - 1} * kWidth, kWidth, q.data<float>());
  for (bool per_kv_head : {false, true}) {
    const AttentionPattern p = TokenSelect(k, initial, local, 2.0f, per_kv_head);
    AttentionBatch batch;
    batch.block_tokens = kBlock;
    batch.sequence_state = state_;
    SequenceAttention sa;
    sa.q_len = 1;
    sa.kv_len = kv_len;
    sa.block_table = kv.table;
    sa.pattern = p;
    sa.state_slot = 0;
    batch.sequences.push_back(sa);
    AttentionShape shape{kHeads, kKvHeads, kHeadDim, 1, kv.pool.dim(0) / 2};
    AttentionWorkspace ws;
    absl::StatusOr<AttentionPlan> plan = be_.PlanAttention(batch, shape, ws);
    ASSERT_TRUE(plan.ok()) << plan.status();
    Tensor out = Tensor::Zeros(DType::kF32, q.shape());
    ASSERT_TRUE(be_.BuildAttentionIndex(*plan, q, kv.pool, 0).ok());
    ASSERT_TRUE(be_.Attention(*plan, q, kv.pool, 0, out).ok());
    const int last_list = per_kv_head ? kKvHeads - 1 : 0;
    int32_t* list =
        LayerState(p, 0) + tokenselect::ListOffset(kWidth, k, per_kv_head ? 2 : 1, last_list);
    const std::vector<int32_t> good(list, list + k);
    const int32_t local_begin = kv_len - 1 - local;
    for (const auto& [place, value] :
         std::vector<std::pair<int, int32_t>>{{0, initial - 1},  // an always-attended initial key
                                              {k - 1, local_begin},  // a local key
                                              {k - 1, kv_len + 50},  // outside the sequence
                                              {3, good[2]},          // repeated (not ascending)
                                              {0, -7}}) {
      std::copy(good.begin(), good.end(), list);
      list[place] = value;
      const absl::Status status = be_.Attention(*plan, q, kv.pool, 0, out);
      EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << place << " = " << value;
      EXPECT_NE(status.message().find("TokenSelect list"), std::string::npos) << status;
    }
    std::copy(good.begin(), good.end(), list);
    LayerState(p, 0)[tokenselect::kSelected] = k - 1;
    EXPECT_EQ(be_.Attention(*plan, q, kv.pool, 0, out).code(), absl::StatusCode::kInternal);
    LayerState(p, 0)[tokenselect::kSelected] = k;
    EXPECT_TRUE(be_.Attention(*plan, q, kv.pool, 0, out).ok());
  }
}

TEST_F(TokenSelectTest, RejectsMissingOrSmallStateSlots) {
  std::mt19937 rng(6);
  const int kv_len = 300;
  Kv kv = MakeKv(be_, Random({kv_len, kKvHeads, kHeadDim}, rng),
                 Random({kv_len, kKvHeads, kHeadDim}, rng), rng);
  Tensor q = Random({1, kHeads, kHeadDim}, rng);
  AttentionBatch batch;
  batch.block_tokens = kBlock;
  SequenceAttention sa;
  sa.q_len = 1;
  sa.kv_len = kv_len;
  sa.block_table = kv.table;
  sa.pattern = TokenSelect(16, 4, 8);
  batch.sequences.push_back(sa);
  AttentionShape shape{kHeads, kKvHeads, kHeadDim, 1, kv.pool.dim(0) / 2};
  AttentionWorkspace ws;
  absl::StatusOr<AttentionPlan> plan = be_.PlanAttention(batch, shape, ws);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);  // no slot
  // A slot that holds one layer of state: layer 0 works, layer 1 is rejected.
  batch.sequence_state =
      Tensor::Zeros(DType::kI32, {1, tokenselect::StateWordsPerLayer(kWidth, 16)});
  batch.sequences[0].state_slot = 0;
  plan = be_.PlanAttention(batch, shape, ws);
  ASSERT_TRUE(plan.ok()) << plan.status();
  Tensor out = Tensor::Zeros(DType::kF32, q.shape());
  EXPECT_TRUE(be_.BuildAttentionIndex(*plan, q, kv.pool, 0).ok());
  EXPECT_TRUE(be_.Attention(*plan, q, kv.pool, 0, out).ok());
  EXPECT_EQ(be_.BuildAttentionIndex(*plan, q, kv.pool, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be_.Attention(*plan, q, kv.pool, 1, out).code(), absl::StatusCode::kInvalidArgument);
  // Bad parameters.
  batch.sequences[0].pattern = TokenSelect(0, 4, 8);
  EXPECT_EQ(be_.PlanAttention(batch, shape, ws).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sparseserve::kernels
