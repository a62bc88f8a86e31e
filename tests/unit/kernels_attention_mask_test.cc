// Attention's visibility rule on the CPU reference (kernels/attention_plan.h) against a brute
// force written independently here: random 0/1 masks (tree-shaped, Lookahead-shaped and
// arbitrary, rows that see nothing included), sliding windows with sinks, and batch invariance
// (a row computed alone and among other sequences gives identical bits, for attention and GEMMs).
#include <cmath>
#include <random>

#include "common/core/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/attention_plan.h"
#include "kernels/cpu/cpu_backend.h"

namespace sparseserve::kernels {
namespace {

constexpr int kHeads = 4, kKvHeads = 2, kHeadDim = 16, kBlock = 16, kBlocks = 24;

Tensor Random(Shape shape, std::mt19937& rng) {
  Tensor t = Tensor::Zeros(DType::kF32, shape);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// One sequence's K/V laid out contiguously [kv_len, kv_heads, head_dim] and scattered into a pool.
struct Fixture {
  Tensor k, v, kv_pool;
  std::vector<int32_t> table;
};

Fixture MakeKv(CpuBackend& be, int kv_len, std::mt19937& rng) {
  Fixture f;
  f.k = Random({kv_len, kKvHeads, kHeadDim}, rng);
  f.v = Random({kv_len, kKvHeads, kHeadDim}, rng);
  f.kv_pool = Tensor::Zeros(DType::kF32, {kBlocks * 2, kBlock, kKvHeads, kHeadDim});
  std::vector<int32_t> ids(kBlocks);
  for (int i = 0; i < kBlocks; ++i) ids[i] = i;
  std::shuffle(ids.begin(), ids.end(), rng);
  const int blocks = (kv_len + kBlock - 1) / kBlock;
  f.table.assign(ids.begin(), ids.begin() + blocks);
  Tensor slots = Tensor::Zeros(DType::kI32, {kv_len});
  for (int p = 0; p < kv_len; ++p)
    slots.data<int32_t>()[p] = f.table[p / kBlock] * kBlock + p % kBlock;
  EXPECT_TRUE(be.WriteKv(f.k, f.v, slots, f.kv_pool).ok());
  return f;
}

// The rule, written out: row i (at KV index prefix + i) sees key k when k is cached, or k is new
// row j with mask[i][j] (causal without a mask), and a window, if any, admits it.
bool Sees(int prefix, int q_len, const std::vector<uint8_t>& mask, int window, int sinks, int i,
          int k) {
  if (k >= prefix + q_len) return false;
  if (k >= prefix) {
    const int j = k - prefix;
    if (mask.empty() ? j > i : mask[i * q_len + j] == 0) return false;
  }
  if (window > 0 && !(k > prefix + i - window || k < sinks)) return false;
  return true;
}

std::vector<float> BruteForce(const Tensor& q, const Fixture& f, int kv_len, int q_len,
                              const std::vector<uint8_t>& mask, int window, int sinks) {
  const int prefix = kv_len - q_len;
  std::vector<float> out(static_cast<size_t>(q_len) * kHeads * kHeadDim, 0.0f);
  for (int i = 0; i < q_len; ++i) {
    for (int h = 0; h < kHeads; ++h) {
      const int g = h / (kHeads / kKvHeads);
      std::vector<double> s;
      std::vector<int> keys;
      for (int k = 0; k < kv_len; ++k) {
        if (!Sees(prefix, q_len, mask, window, sinks, i, k)) continue;
        double d = 0;
        for (int j = 0; j < kHeadDim; ++j)
          d += double(q.GetFloat({i, h, j})) * f.k.GetFloat({k, g, j});
        s.push_back(d / std::sqrt(double(kHeadDim)));
        keys.push_back(k);
      }
      if (keys.empty()) continue;  // a row that sees nothing outputs zeros
      double m = -1e300, sum = 0;
      for (double e : s) m = std::max(m, e);
      for (double& e : s) sum += (e = std::exp(e - m));
      for (int j = 0; j < kHeadDim; ++j) {
        double acc = 0;
        for (size_t t = 0; t < keys.size(); ++t) acc += s[t] / sum * f.v.GetFloat({keys[t], g, j});
        out[(static_cast<size_t>(i) * kHeads + h) * kHeadDim + j] = static_cast<float>(acc);
      }
    }
  }
  return out;
}

class AttentionMaskTest : public ::testing::Test {
 protected:
  void Check(int kv_len, int q_len, const std::vector<uint8_t>& mask, int window, int sinks) {
    Fixture f = MakeKv(be_, kv_len, rng_);
    Tensor q = Random({q_len, kHeads, kHeadDim}, rng_);
    AttentionBatch batch;
    batch.block_tokens = kBlock;
    SequenceAttention seq;
    seq.q_len = q_len;
    seq.kv_len = kv_len;
    seq.mask = mask;
    seq.block_table = f.table;
    if (window > 0) {
      seq.pattern.kind = AttentionMethodKind::kSlidingWindow;
      seq.pattern.window = window;
      seq.pattern.sink_tokens = sinks;
    }
    batch.sequences.push_back(seq);
    Tensor out = Random({q_len, kHeads, kHeadDim}, rng_);  // garbage must be overwritten
    ASSERT_TRUE(RunAttention(be_, batch, q, f.kv_pool, out).ok());
    const std::vector<float> ref = BruteForce(q, f, kv_len, q_len, mask, window, sinks);
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_NEAR(out.data<float>()[i], ref[i], 2e-5) << "element " << i;
    }
  }

  core::ThreadPool pool_{3};
  CpuBackend be_{&pool_};
  std::mt19937 rng_{7};
};

// A random tree over the new rows: row i's parent is a random earlier row (row 0 is the root);
// mask[i][j] = 1 for j an ancestor of i or i itself.
std::vector<uint8_t> TreeMask(int n, std::mt19937& rng) {
  std::vector<int> parent(n, -1);
  for (int i = 1; i < n; ++i) parent[i] = std::uniform_int_distribution<int>(0, i - 1)(rng);
  std::vector<uint8_t> mask(static_cast<size_t>(n) * n, 0);
  for (int i = 0; i < n; ++i) {
    for (int a = i; a >= 0; a = parent[a]) mask[i * n + a] = 1;
  }
  return mask;
}

TEST_F(AttentionMaskTest, RandomTreesEqualBruteForce) {
  for (int trial = 0; trial < 20; ++trial) {
    const int q_len = std::uniform_int_distribution<int>(2, 24)(rng_);
    const int prefix = std::uniform_int_distribution<int>(0, 200)(rng_);
    Check(prefix + q_len, q_len, TreeMask(q_len, rng_), 0, 0);
  }
}

TEST_F(AttentionMaskTest, LookaheadShapedMaskEqualsBruteForce) {
  // Lookahead decoding (papers/lookahead.md): the current token, then a lookahead branch of W
  // columns over N-1 levels where a cell sees its column's earlier levels and the previous
  // level's earlier columns, then G verification n-grams each seeing only the current token and
  // its own earlier tokens.
  const int w = 4, levels = 3, guesses = 3, ngram = 3;
  const int n = 1 + w * levels + guesses * ngram;
  std::vector<uint8_t> mask(static_cast<size_t>(n) * n, 0);
  auto cell = [&](int level, int col) { return 1 + level * w + col; };
  for (int i = 0; i < n; ++i) mask[i * n + 0] = mask[i * n + i] = 1;
  for (int level = 0; level < levels; ++level) {
    for (int col = 0; col < w; ++col) {
      for (int l2 = 0; l2 < level; ++l2) mask[cell(level, col) * n + cell(l2, col)] = 1;
      if (level == 0) {
        for (int c2 = 0; c2 < col; ++c2) mask[cell(0, col) * n + cell(0, c2)] = 1;
      }
    }
  }
  for (int g = 0; g < guesses; ++g) {
    const int first = 1 + w * levels + g * ngram;
    for (int t = 0; t < ngram; ++t) {
      for (int t2 = 0; t2 < t; ++t2) mask[(first + t) * n + first + t2] = 1;
    }
  }
  Check(100 + n, n, mask, 0, 0);
}

TEST_F(AttentionMaskTest, ArbitraryMasksWithEmptyRowsEqualBruteForce) {
  for (int trial = 0; trial < 10; ++trial) {
    const int q_len = std::uniform_int_distribution<int>(1, 20)(rng_);
    std::vector<uint8_t> mask(static_cast<size_t>(q_len) * q_len);
    for (uint8_t& m : mask) m = std::bernoulli_distribution(0.4)(rng_) ? 1 : 0;
    // With no cached prefix a row whose mask is all zero sees nothing: zeros, never NaN.
    const int prefix = trial % 2 == 0 ? 0 : 37;
    Check(prefix + q_len, q_len, mask, 0, 0);
  }
}

TEST_F(AttentionMaskTest, SlidingWindowWithSinksEqualsBruteForce) {
  Check(300, 1, {}, 32, 4);                 // decode row
  Check(300, 1, {}, 1, 0);                  // sees only itself
  Check(300, 40, {}, 50, 0);                // chunk, no sinks
  Check(300, 40, {}, 17, 8);                // chunk, sinks and a window shorter than the chunk
  Check(40, 40, {}, 500, 4);                // window larger than the context: dense
  Check(120, 9, TreeMask(9, rng_), 20, 4);  // window and mask together
}

TEST_F(AttentionMaskTest, RowsAreBitwiseIndependentOfTheirBatch) {
  // A decode row alone, then the same row beside a prefill chunk and a masked verify step.
  Fixture a = MakeKv(be_, 90, rng_);
  Tensor qa = Random({1, kHeads, kHeadDim}, rng_);
  AttentionBatch alone;
  alone.block_tokens = kBlock;
  SequenceAttention sa;
  sa.q_len = 1;
  sa.kv_len = 90;
  sa.block_table = a.table;
  alone.sequences.push_back(sa);
  Tensor out_alone = Tensor::Zeros(DType::kF32, {1, kHeads, kHeadDim});
  ASSERT_TRUE(RunAttention(be_, alone, qa, a.kv_pool, out_alone).ok());

  // The same pool holds the other sequences' KV in blocks the first one does not use: build a
  // batch whose first sequence reads a's blocks and whose others read the rest.
  AttentionBatch mixed;
  mixed.block_tokens = kBlock;
  SequenceAttention chunk;
  chunk.q_begin = 0;
  chunk.q_len = 7;
  chunk.kv_len = 30;
  chunk.block_table = {a.table[0], a.table[1]};
  SequenceAttention verify;
  verify.q_begin = 7;
  verify.q_len = 4;
  verify.kv_len = 50;
  verify.mask = TreeMask(4, rng_);
  verify.block_table = {a.table[2], a.table[3], a.table[4], a.table[5]};
  sa.q_begin = 11;
  mixed.sequences = {chunk, verify, sa};
  Tensor q = Random({12, kHeads, kHeadDim}, rng_);
  std::copy(qa.data<float>(), qa.data<float>() + qa.numel(),
            q.data<float>() + 11 * kHeads * kHeadDim);
  Tensor out = Tensor::Zeros(DType::kF32, {12, kHeads, kHeadDim});
  ASSERT_TRUE(RunAttention(be_, mixed, q, a.kv_pool, out).ok());
  for (int64_t i = 0; i < out_alone.numel(); ++i) {
    ASSERT_EQ(out.data<float>()[11 * kHeads * kHeadDim + i], out_alone.data<float>()[i]) << i;
  }
}

TEST_F(AttentionMaskTest, LinearRowsAreBitwiseIndependentOfTheBatch) {
  Tensor w = Random({300, 96}, rng_), b = Random({300}, rng_);
  Tensor x8 = Random({8, 96}, rng_);
  Tensor out8 = Tensor::Zeros(DType::kF32, {8, 300});
  ASSERT_TRUE(be_.Linear(x8, w, b, out8).ok());
  for (int64_t r = 0; r < 8; ++r) {
    Tensor out1 = Tensor::Zeros(DType::kF32, {1, 300});
    ASSERT_TRUE(be_.Linear(x8.Slice(0, r, r + 1), w, b, out1).ok());
    for (int64_t c = 0; c < 300; ++c) {
      ASSERT_EQ(out1.data<float>()[c], out8.data<float>()[r * 300 + c]) << r << "," << c;
    }
  }
}

TEST_F(AttentionMaskTest, ReadKvInvertsWriteKv) {
  Fixture f = MakeKv(be_, 40, rng_);
  Tensor slots = Tensor::Zeros(DType::kI32, {3});
  const int picks[3] = {39, 0, 17};
  for (int i = 0; i < 3; ++i) {
    slots.data<int32_t>()[i] = f.table[picks[i] / kBlock] * kBlock + picks[i] % kBlock;
  }
  Tensor k = Tensor::Zeros(DType::kF32, {3, kKvHeads, kHeadDim});
  Tensor v = Tensor::Zeros(DType::kF32, {3, kKvHeads, kHeadDim});
  ASSERT_TRUE(be_.ReadKv(f.kv_pool, slots, k, v).ok());
  for (int i = 0; i < 3; ++i) {
    for (int h = 0; h < kKvHeads; ++h) {
      for (int d = 0; d < kHeadDim; ++d) {
        ASSERT_EQ(k.GetFloat({i, h, d}), f.k.GetFloat({picks[i], h, d}));
        ASSERT_EQ(v.GetFloat({i, h, d}), f.v.GetFloat({picks[i], h, d}));
      }
    }
  }
  slots.data<int32_t>()[1] = kBlocks * kBlock;  // outside the pool
  EXPECT_EQ(be_.ReadKv(f.kv_pool, slots, k, v).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sparseserve::kernels
