// MInference on the CPU reference (kernels/minference_index.h) against brute force written
// independently here: the vertical-slash block cover against the mask its definition states,
// covering budgets against dense attention, non-covering indices (A-shape, vertical-slash,
// block-sparse mixed per head, GQA, chunks that do not start on a block) against attention under
// the mask the index defines, chunk after chunk, and the estimation against planted lines.
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <set>

#include "common/core/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/attention_plan.h"
#include "kernels/attention_plan_check.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/minference_index.h"

namespace sparseserve::kernels {
namespace {

constexpr int kHeads = 4, kKvHeads = 2, kHeadDim = 16, kBlock = 16;
using minference::kBlockRows;

Tensor Random(Shape shape, std::mt19937& rng, float sd = 1.0f) {
  Tensor t = Tensor::Zeros(DType::kF32, shape);
  std::normal_distribution<float> dist(0.0f, sd);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// A sequence's K/V contiguous [kv_len, kv_heads, head_dim], scattered into a paged pool.
struct Kv {
  Tensor k, v, pool;
  std::vector<int32_t> table;
};

Kv MakeKv(CpuBackend& be, Tensor k, Tensor v, std::mt19937& rng) {
  Kv f;
  const int kv_len = static_cast<int>(k.dim(0));
  const int blocks = (kv_len + kBlock - 1) / kBlock + 3;
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

// One chunk's output [q_len, heads, head_dim], index areas and stats.
struct ChunkRun {
  Tensor out;
  std::vector<int32_t> index;
  MInferenceIndexShape shape;
  float computed = 0, causal = 0;
};

class MInferenceTest : public ::testing::Test {
 protected:
  MInferenceTest() : pool_(2), be_(&pool_) {}

  // Runs one chunk: rows [prefix, kv_len) of q_all attend with `config` at `layer`.
  ChunkRun RunChunk(const Kv& kv, const Tensor& q_all, int prefix, int kv_len,
                    std::shared_ptr<const MInferenceConfig> config, int layer = 0) {
    const int q_len = kv_len - prefix;
    Tensor q = Tensor::Zeros(DType::kF32, {q_len, kHeads, kHeadDim});
    std::copy_n(q_all.data<float>() + int64_t{prefix} * kHeads * kHeadDim, q.numel(),
                q.data<float>());
    AttentionBatch batch;
    batch.block_tokens = kBlock;
    SequenceAttention sa;
    sa.q_len = q_len;
    sa.kv_len = kv_len;
    sa.block_table = kv.table;
    sa.pattern.kind = AttentionMethodKind::kMInference;
    sa.pattern.minference = config;
    batch.sequences.push_back(sa);
    AttentionShape shape{kHeads, kKvHeads, kHeadDim, q_len, kv.pool.dim(0) / 2};
    AttentionWorkspace ws;
    ChunkRun run;
    absl::StatusOr<AttentionPlan> plan = be_.PlanAttention(batch, shape, ws);
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) return run;
    EXPECT_TRUE(be_.BuildAttentionIndex(*plan, q, kv.pool, layer).ok());
    run.out = Tensor::Zeros(DType::kF32, q.shape());
    EXPECT_TRUE(be_.Attention(*plan, q, kv.pool, layer, run.out).ok());
    run.shape = MInferenceIndexShapeOf(*config, q_len, kv_len);
    run.index.assign(ws.sparse_index.data<int32_t>(),
                     ws.sparse_index.data<int32_t>() + SparseIndexWords(batch.sequences[0]));
    run.computed = ws.sparse_stats.data<float>()[0];
    run.causal = ws.sparse_stats.data<float>()[1];
    return run;
  }

  core::ThreadPool pool_;
  CpuBackend be_;
};

// Keys the vertical-slash lines define for absolute row p of the block [b, e): k <= p and k is a
// column or lies in [b - o, e - o) for a slash o.
bool VsDefines(const std::vector<int32_t>& columns, const std::vector<int32_t>& slashes, int b,
               int e, int p, int k) {
  if (k > p) return false;
  if (std::find(columns.begin(), columns.end(), k) != columns.end()) return true;
  for (int32_t o : slashes) {
    if (k >= b - o && k < e - o) return true;
  }
  return false;
}

TEST(VsBlockCoverTest, CoversExactlyTheDefinedKeysOnce) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int kv_len = 1 + static_cast<int>(rng() % 700);
    const int b = static_cast<int>(rng() % kv_len);
    const int e = std::min(kv_len, b + 1 + static_cast<int>(rng() % kBlockRows));
    std::vector<int32_t> columns(rng() % 40), slashes(1 + rng() % 30);
    for (int32_t& c : columns) c = static_cast<int32_t>(rng() % kv_len);  // duplicates allowed
    for (int32_t& o : slashes) o = static_cast<int32_t>(rng() % kv_len);
    std::sort(columns.begin(), columns.end());
    std::sort(slashes.begin(), slashes.end());
    slashes.erase(std::unique(slashes.begin(), slashes.end()), slashes.end());
    std::vector<int32_t> rb(slashes.size()), re(slashes.size()), gathered(columns.size());
    const VsBlockCover cover = CoverVsBlock(columns.data(), static_cast<int32_t>(columns.size()),
                                            slashes.data(), static_cast<int32_t>(slashes.size()), b,
                                            e, rb.data(), re.data(), gathered.data());
    int64_t pairs = 0;
    for (int p = b; p < e; ++p) {
      for (int k = 0; k < kv_len; ++k) {
        int times = 0;
        for (int r = 0; r < cover.num_runs; ++r) times += k <= p && k >= rb[r] && k < re[r];
        for (int c = 0; c < cover.num_columns; ++c) times += k <= p && gathered[c] == k;
        const bool defined = VsDefines(columns, slashes, b, e, p, k);
        ASSERT_EQ(times, defined ? 1 : 0) << "trial " << trial << " row " << p << " key " << k;
        pairs += defined;
      }
    }
    for (int r = 1; r < cover.num_runs; ++r) EXPECT_GT(rb[r], re[r - 1]);  // disjoint, ascending
    EXPECT_EQ(VsBlockPairs(rb.data(), re.data(), cover.num_runs, gathered.data(), cover.num_columns,
                           b, e),
              pairs);
  }
}

// Softmax attention of one row and head over the keys `sees` admits, in double.
void AttendRow(const Kv& kv, const float* q, int head, int kv_len,
               const std::function<bool(int)>& sees, float* out) {
  const int g = head / (kHeads / kKvHeads);
  std::vector<double> s;
  std::vector<int> keys;
  for (int k = 0; k < kv_len; ++k) {
    if (!sees(k)) continue;
    double d = 0;
    for (int j = 0; j < kHeadDim; ++j) d += double(q[j]) * kv.k.GetFloat({k, g, j});
    s.push_back(d / std::sqrt(double(kHeadDim)));
    keys.push_back(k);
  }
  std::fill(out, out + kHeadDim, 0.0f);
  if (keys.empty()) return;
  const double m = *std::max_element(s.begin(), s.end());
  double sum = 0;
  for (double& e : s) sum += (e = std::exp(e - m));
  for (size_t t = 0; t < keys.size(); ++t) {
    for (int j = 0; j < kHeadDim; ++j) out[j] += float(s[t] / sum * kv.v.GetFloat({keys[t], g, j}));
  }
}

// The estimation's scores written out (§3.2): softmax of the chunk's last 64 rows, summed per
// column and per diagonal.
void EstimateScores(const Kv& kv, const Tensor& q_all, int prefix, int kv_len, int head,
                    std::vector<double>* columns, std::vector<double>* diagonals) {
  const int g = head / (kHeads / kKvHeads);
  columns->assign(kv_len, 0.0);
  diagonals->assign(kv_len, 0.0);
  const int q_len = kv_len - prefix;
  for (int r = std::max(0, q_len - 64); r < q_len; ++r) {
    const int p = prefix + r;
    std::vector<double> s(p + 1);
    for (int k = 0; k <= p; ++k) {
      double d = 0;
      for (int j = 0; j < kHeadDim; ++j)
        d += double(q_all.GetFloat({p, head, j})) * kv.k.GetFloat({k, g, j});
      s[k] = d / std::sqrt(double(kHeadDim));
    }
    const double m = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (double& e : s) sum += (e = std::exp(e - m));
    for (int k = 0; k <= p; ++k) {
      (*columns)[k] += s[k] / sum;
      (*diagonals)[p - k] += s[k] / sum;
    }
  }
}

// `chosen` (ascending, n entries) is a valid top-n of `scores` with `forced` leading indices
// first: every forced index that fits is in, and no unchosen score beats a chosen one (up to
// float rounding between this double reference and the float kernel).
void ExpectTopN(const std::vector<double>& scores, int forced, const int32_t* chosen, int n,
                const char* what) {
  std::set<int> set(chosen, chosen + n);
  ASSERT_EQ(static_cast<int>(set.size()), n) << what << ": duplicates";
  ASSERT_TRUE(std::is_sorted(chosen, chosen + n)) << what;
  for (int i = 0; i < std::min<int>(forced, n); ++i) EXPECT_TRUE(set.count(i)) << what << " " << i;
  double worst_chosen = 1e300, best_other = -1e300;
  for (int i = 0; i < static_cast<int>(scores.size()); ++i) {
    if (i < forced) continue;
    if (set.count(i))
      worst_chosen = std::min(worst_chosen, scores[i]);
    else
      best_other = std::max(best_other, scores[i]);
  }
  if (n > forced && n < static_cast<int>(scores.size())) {
    EXPECT_GE(worst_chosen, best_other - 1e-5) << what;
  }
}

// Checks one chunk against brute force: the estimation's choices, attention under the mask the
// index defines, and the stats.
void CheckChunk(const ChunkRun& run, const Kv& kv, const Tensor& q_all, int prefix, int kv_len,
                const MInferenceConfig& config, int layer, std::set<HeadPatternKind>* kinds_seen) {
  const int q_len = kv_len - prefix;
  double pairs = 0;
  for (int h = 0; h < kHeads; ++h) {
    const int32_t* area = run.index.data() + h * run.shape.words_per_head;
    const auto kind = static_cast<HeadPatternKind>(area[0]);
    kinds_seen->insert(kind);
    const HeadPattern& p = config.at(layer, h);
    const int32_t* body = area + minference::kHeaderWords;
    std::vector<int32_t> columns, slashes;
    const bool forced = MInferenceSizesForceDense(p.kind, p.v, p.s, q_len, kv_len);
    if (forced) {
      EXPECT_EQ(kind, HeadPatternKind::kDense);  // dense by its sizes: no lines built
      EXPECT_EQ(area[1], 0);
    } else if (p.kind == HeadPatternKind::kVerticalSlash) {
      ASSERT_EQ(area[1], MInferenceColumns(p.v, kv_len));
      ASSERT_EQ(area[2], MInferenceSlashes(p.s, kv_len));
      columns.assign(body, body + area[1]);
      slashes.assign(body + run.shape.cap_columns, body + run.shape.cap_columns + area[2]);
      std::vector<double> col_scores, diag_scores;
      EstimateScores(kv, q_all, prefix, kv_len, h, &col_scores, &diag_scores);
      ExpectTopN(col_scores, minference::kSinkColumns, columns.data(), area[1], "columns");
      ExpectTopN(diag_scores, minference::kLocalSlashes, slashes.data(), area[2], "slashes");
    }
    for (int r = 0; r < q_len; ++r) {
      const int pos = prefix + r;
      const int b = prefix + r / kBlockRows * kBlockRows;
      const int e = std::min(b + kBlockRows, kv_len);
      std::function<bool(int)> sees;
      if (kind == HeadPatternKind::kDense) {
        sees = [&](int k) { return k <= pos; };
      } else if (kind == HeadPatternKind::kAShape) {
        sees = [&](int k) { return k <= pos && (k < p.v || k > pos - p.s); };
      } else if (kind == HeadPatternKind::kVerticalSlash) {
        sees = [&](int k) { return VsDefines(columns, slashes, b, e, pos, k); };
      } else {
        const int32_t* blocks = body + (r / kBlockRows) * (1 + run.shape.cap_blocks);
        std::set<int> chosen(blocks + 1, blocks + 1 + blocks[0]);
        EXPECT_TRUE(chosen.count(0));                 // forced: the first block
        EXPECT_TRUE(chosen.count(pos / kBlockRows));  // forced: the row's own block
        EXPECT_LE(blocks[0], MInferenceBlocks(p.v, kv_len));
        sees = [&, chosen](int k) { return k <= pos && chosen.count(k / kBlockRows) > 0; };
      }
      float expect[kHeadDim];
      AttendRow(kv, q_all.data<float>() + (int64_t{pos} * kHeads + h) * kHeadDim, h, kv_len, sees,
                expect);
      for (int k = 0; k < kv_len; ++k) pairs += sees(k);
      for (int j = 0; j < kHeadDim; ++j) {
        ASSERT_NEAR(run.out.GetFloat({r, h, j}), expect[j], 2e-5)
            << "head " << h << " row " << r << " kind " << area[0];
      }
    }
  }
  EXPECT_FLOAT_EQ(run.computed, static_cast<float>(pairs));
  EXPECT_FLOAT_EQ(run.causal, static_cast<float>(kHeads * CausalPairs(prefix, kv_len)));
}

std::shared_ptr<const MInferenceConfig> MixedConfig(int layers) {
  MInferenceConfig c = MInferenceConfig::Uniform(layers, kHeads);
  for (int l = 0; l < layers; ++l) {
    c.heads[l * kHeads + 0] = {HeadPatternKind::kVerticalSlash, 30, 100};
    c.heads[l * kHeads + 1] = {HeadPatternKind::kVerticalSlash, 45, 110};
    c.heads[l * kHeads + 2] = {HeadPatternKind::kAShape, 16, 96};
    c.heads[l * kHeads + 3] = {HeadPatternKind::kBlockSparse, 4, 0};
  }
  return std::make_shared<const MInferenceConfig>(c);
}

TEST_F(MInferenceTest, NonCoveringIndexEqualsAttentionUnderItsMask) {
  std::mt19937 rng(11);
  const int kv_len = 1500, prefix = 1200;  // a chunk of 300 rows starting mid-block
  Kv kv = MakeKv(be_, Random({kv_len, kKvHeads, kHeadDim}, rng),
                 Random({kv_len, kKvHeads, kHeadDim}, rng), rng);
  const Tensor q = Random({kv_len, kHeads, kHeadDim}, rng);
  auto config = MixedConfig(2);
  const ChunkRun run = RunChunk(kv, q, prefix, kv_len, config, /*layer=*/1);
  std::set<HeadPatternKind> kinds;
  CheckChunk(run, kv, q, prefix, kv_len, *config, 1, &kinds);
  EXPECT_EQ(kinds.size(), 3u) << "every sparse kind ran (none switched to dense)";
  EXPECT_GT(run.computed, 0.0f);
  EXPECT_LT(run.computed / run.causal, 0.5f);
}

TEST_F(MInferenceTest, ChunkAfterChunkEqualsEachChunksBruteForce) {
  std::mt19937 rng(12);
  const int kv_len = 1100;
  Kv kv = MakeKv(be_, Random({kv_len, kKvHeads, kHeadDim}, rng),
                 Random({kv_len, kKvHeads, kHeadDim}, rng), rng);
  const Tensor q = Random({kv_len, kHeads, kHeadDim}, rng);
  auto config = MixedConfig(1);
  for (int chunk : {64, 512}) {
    std::set<HeadPatternKind> kinds;
    for (int prefix = 0; prefix < kv_len; prefix += chunk) {
      const int end = std::min(kv_len, prefix + chunk);
      const ChunkRun run = RunChunk(kv, q, prefix, end, config);
      CheckChunk(run, kv, q, prefix, end, *config, 0, &kinds);
    }
    EXPECT_TRUE(kinds.count(HeadPatternKind::kDense)) << "early chunks switch to dense";
    EXPECT_TRUE(kinds.count(HeadPatternKind::kVerticalSlash)) << chunk;
  }
}

TEST_F(MInferenceTest, CoveringBudgetsEqualDense) {
  std::mt19937 rng(13);
  const int kv_len = 700, prefix = 300;
  Kv kv = MakeKv(be_, Random({kv_len, kKvHeads, kHeadDim}, rng),
                 Random({kv_len, kKvHeads, kHeadDim}, rng), rng);
  const Tensor q = Random({kv_len, kHeads, kHeadDim}, rng);
  MInferenceConfig c = MInferenceConfig::Uniform(1, kHeads);
  c.heads[0] = {HeadPatternKind::kVerticalSlash, 5000, 5000};
  c.heads[1] = {HeadPatternKind::kAShape, 700, 700};
  c.heads[2] = {HeadPatternKind::kBlockSparse, 100, 0};
  c.heads[3] = {HeadPatternKind::kVerticalSlash, 1, kv_len};  // every diagonal
  const ChunkRun run = RunChunk(kv, q, prefix, kv_len, std::make_shared<const MInferenceConfig>(c));
  // The dense reference through the same backend.
  AttentionBatch batch;
  batch.block_tokens = kBlock;
  SequenceAttention sa;
  sa.q_len = kv_len - prefix;
  sa.kv_len = kv_len;
  sa.block_table = kv.table;
  batch.sequences.push_back(sa);
  Tensor qc = Tensor::Zeros(DType::kF32, {sa.q_len, kHeads, kHeadDim});
  std::copy_n(q.data<float>() + int64_t{prefix} * kHeads * kHeadDim, qc.numel(), qc.data<float>());
  Tensor dense = Tensor::Zeros(DType::kF32, qc.shape());
  ASSERT_TRUE(RunAttention(be_, batch, qc, kv.pool, dense).ok());
  double num = 0, den = 0;
  for (int64_t i = 0; i < dense.numel(); ++i) {
    const double d = run.out.data<float>()[i] - dense.data<float>()[i];
    num += d * d;
    den += double(dense.data<float>()[i]) * dense.data<float>()[i];
  }
  EXPECT_LE(std::sqrt(num / den), 1e-5);
  EXPECT_FLOAT_EQ(run.computed, run.causal);  // density 1
  // Head 0's sizes alone force the switch: dense without an index (zeros but the kind); head 3
  // (one column, every diagonal) too.
  for (int h : {0, 3}) {
    const int32_t* area = run.index.data() + h * run.shape.words_per_head;
    EXPECT_EQ(area[0], static_cast<int>(HeadPatternKind::kDense));
    EXPECT_TRUE(
        std::all_of(area + 1, area + run.shape.words_per_head, [](int32_t w) { return w == 0; }))
        << "head " << h;
  }
}

TEST(MInferenceSizesTest, SizesForceDenseOnlyWhenEveryPlacementWould) {
  const auto vs = HeadPatternKind::kVerticalSlash;
  // VS(1000, 6096): 6096 distinct diagonals leave the last 512 rows of 8K at least ~75% dense.
  EXPECT_TRUE(MInferenceSizesForceDense(vs, 1000, 6096, 512, 8192));
  EXPECT_TRUE(MInferenceSizesForceDense(vs, 1000, 6096, 512, 4096));    // every diagonal
  EXPECT_FALSE(MInferenceSizesForceDense(vs, 1000, 6096, 512, 16384));  // ~37%: build and see
  EXPECT_FALSE(MInferenceSizesForceDense(vs, 100, 120, 512, 8192));
  EXPECT_FALSE(MInferenceSizesForceDense(HeadPatternKind::kBlockSparse, 1000, 6096, 512, 8192));
  EXPECT_FALSE(MInferenceSizesForceDense(HeadPatternKind::kAShape, 8192, 8192, 512, 8192));
  // The bound is a bound (brute force over random placements of the lines never sees fewer
  // pairs) and the decision is the bound's.
  std::mt19937 rng(21);
  for (int trial = 0; trial < 300; ++trial) {
    const int kv_len = 1 + static_cast<int>(rng() % 400);
    const int q_len = 1 + static_cast<int>(rng() % kv_len);
    const int s = 1 + static_cast<int>(rng() % kv_len);
    const int n = std::max(MInferenceColumns(1, kv_len), MInferenceSlashes(s, kv_len));
    std::vector<int32_t> offsets(kv_len);
    for (int i = 0; i < kv_len; ++i) offsets[i] = i;
    std::shuffle(offsets.begin(), offsets.end(), rng);
    offsets.resize(n);
    int64_t seen = 0, bound = 0;
    for (int p = kv_len - q_len; p < kv_len; ++p) {
      for (int32_t o : offsets) seen += o <= p;  // each offset <= p is one distinct key
      bound += std::max(0, p + 1 - (kv_len - n));
    }
    EXPECT_GE(seen, bound);
    const double causal = static_cast<double>(CausalPairs(kv_len - q_len, kv_len));
    EXPECT_EQ(MInferenceSizesForceDense(vs, 1, s, q_len, kv_len),
              static_cast<double>(bound) > minference::kDenseSwitchFraction * causal)
        << kv_len << " " << q_len << " " << s;
  }
}

TEST_F(MInferenceTest, EstimationRecoversPlantedVerticalAndSlashLines) {
  // One-hot keys and queries on a hashed dimension: q_i · k_j is large exactly when
  // h(i) == h(j + kSlash), which holds on the diagonal at offset kSlash for every row and by
  // chance (1 in kHeadDim) elsewhere; key kColumn matches every query.
  std::mt19937 rng(14);
  constexpr int kLen = 1024, kSlash = 333, kColumn = 517;
  std::vector<int> hash(kLen + kSlash + 1);
  for (int& x : hash) x = static_cast<int>(rng() % kHeadDim);
  Tensor k = Tensor::Zeros(DType::kF32, {kLen, kKvHeads, kHeadDim});
  Tensor q = Tensor::Zeros(DType::kF32, {kLen, kHeads, kHeadDim});
  for (int j = 0; j < kLen; ++j) {
    for (int g = 0; g < kKvHeads; ++g) {
      if (j == kColumn) {
        for (int d = 0; d < kHeadDim; ++d) k.data<float>()[(j * kKvHeads + g) * kHeadDim + d] = 8;
      } else {
        k.data<float>()[(j * kKvHeads + g) * kHeadDim + hash[j + kSlash]] = 6;
      }
    }
    for (int h = 0; h < kHeads; ++h) q.data<float>()[(j * kHeads + h) * kHeadDim + hash[j]] = 6;
  }
  Kv kv = MakeKv(be_, k, Random({kLen, kKvHeads, kHeadDim}, rng), rng);
  // One free column and one free slash beyond the forced ones.
  auto config = std::make_shared<const MInferenceConfig>(
      MInferenceConfig::Uniform(1, kHeads,
                                {HeadPatternKind::kVerticalSlash, minference::kSinkColumns + 1,
                                 minference::kLocalSlashes + 1}));
  const ChunkRun run = RunChunk(kv, q, 512, kLen, config);
  for (int h = 0; h < kHeads; ++h) {
    const int32_t* area = run.index.data() + h * run.shape.words_per_head;
    const int32_t* body = area + minference::kHeaderWords;
    ASSERT_EQ(area[0], static_cast<int>(HeadPatternKind::kVerticalSlash));
    EXPECT_EQ(body[minference::kSinkColumns], kColumn) << "head " << h;
    EXPECT_EQ(body[run.shape.cap_columns + minference::kLocalSlashes], kSlash) << "head " << h;
  }
}

TEST_F(MInferenceTest, PlantedIndexIsSeededSortedAndInRange) {
  for (int kv_len : {200, 5000, 131072}) {
    const int nc = MInferenceColumns(1000, kv_len), ns = MInferenceSlashes(6096, kv_len);
    int32_t prev_c = -1, prev_s = -1;
    for (int i = 0; i < nc; ++i) {
      const int32_t c = PlantedColumn(7, 3, 5, i, nc, kv_len);
      EXPECT_GE(c, prev_c);
      EXPECT_LT(c, kv_len);
      if (i < minference::kSinkColumns) {
        EXPECT_EQ(c, i);
      }
      prev_c = c;
    }
    for (int i = 0; i < ns; ++i) {
      const int32_t s = PlantedSlash(7, 3, 5, i, ns, kv_len);
      EXPECT_GE(s, prev_s);
      EXPECT_LT(s, kv_len);
      prev_s = s;
    }
  }
}

TEST_F(MInferenceTest, BadConfigsAreRejected) {
  std::mt19937 rng(15);
  Kv kv = MakeKv(be_, Random({100, kKvHeads, kHeadDim}, rng),
                 Random({100, kKvHeads, kHeadDim}, rng), rng);
  AttentionBatch batch;
  batch.block_tokens = kBlock;
  SequenceAttention sa;
  sa.q_len = 100;
  sa.kv_len = 100;
  sa.block_table = kv.table;
  sa.pattern.kind = AttentionMethodKind::kMInference;
  batch.sequences.push_back(sa);
  AttentionShape shape{kHeads, kKvHeads, kHeadDim, 100, kv.pool.dim(0) / 2};
  AttentionWorkspace ws;
  EXPECT_EQ(be_.PlanAttention(batch, shape, ws).status().code(),
            absl::StatusCode::kInvalidArgument);  // no config
  batch.sequences[0].pattern.minference =
      std::make_shared<const MInferenceConfig>(MInferenceConfig::Uniform(1, kHeads + 1));
  EXPECT_EQ(be_.PlanAttention(batch, shape, ws).status().code(),
            absl::StatusCode::kInvalidArgument);  // head count
  batch.sequences[0].pattern.minference =
      std::make_shared<const MInferenceConfig>(MInferenceConfig::Uniform(1, kHeads));
  batch.sequences[0].mask.assign(100 * 100, 1);
  EXPECT_EQ(be_.PlanAttention(batch, shape, ws).status().code(),
            absl::StatusCode::kInvalidArgument);  // a query mask
  batch.sequences[0].mask.clear();
  absl::StatusOr<AttentionPlan> plan = be_.PlanAttention(batch, shape, ws);
  ASSERT_TRUE(plan.ok());
  Tensor q = Random({100, kHeads, kHeadDim}, rng);
  EXPECT_EQ(be_.BuildAttentionIndex(*plan, q, kv.pool, 1).code(),
            absl::StatusCode::kInvalidArgument);  // layer outside the config
}

}  // namespace
}  // namespace sparseserve::kernels
