// CPU reference backend: each op against a naive formula; paged attention against contiguous.
#include <cmath>
#include <random>

#include "common/core/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/rope_frequencies.h"
#include "kernels/sampling_plan.h"

namespace sparseserve::kernels {
namespace {

Tensor Random(Shape shape, std::mt19937& rng) {
  Tensor t = Tensor::Zeros(DType::kF32, shape);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

Tensor I32(std::vector<int32_t> v) {
  Tensor t = Tensor::Zeros(DType::kI32, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

class CpuBackendTest : public ::testing::Test {
 protected:
  core::ThreadPool pool_{3};
  CpuBackend be_{&pool_};
  std::mt19937 rng_{42};
};

TEST_F(CpuBackendTest, LinearMatchesNaiveWithBias) {
  Tensor x = Random({5, 37}, rng_), w = Random({300, 37}, rng_), b = Random({300}, rng_);
  Tensor out = Tensor::Zeros(DType::kF32, {5, 300});
  ASSERT_TRUE(be_.Linear(x, w, b, out).ok());
  for (int64_t i = 0; i < 5; ++i) {
    for (int64_t o = 0; o < 300; ++o) {
      double ref = b.data<float>()[o];
      for (int64_t k = 0; k < 37; ++k) ref += double(x.GetFloat({i, k})) * w.GetFloat({o, k});
      EXPECT_NEAR(out.GetFloat({i, o}), ref, 1e-4);
    }
  }
  EXPECT_EQ(be_.Linear(x, Random({3, 36}, rng_), Tensor(), out).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CpuBackendTest, LinearSiluMulIsSwiGlu) {
  const int64_t n = 3, in = 11, ffn = 6;
  Tensor x = Random({n, in}, rng_), w = Random({2 * ffn, in}, rng_);
  Tensor gate_up = Tensor::Zeros(DType::kF32, {n, 2 * ffn}),
         out = Tensor::Zeros(DType::kF32, {n, ffn});
  ASSERT_TRUE(be_.LinearSiluMul(x, w, gate_up, out).ok());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < ffn; ++j) {
      double g = 0, u = 0;
      for (int64_t k = 0; k < in; ++k) {
        g += double(x.GetFloat({i, k})) * w.GetFloat({j, k});
        u += double(x.GetFloat({i, k})) * w.GetFloat({ffn + j, k});
      }
      EXPECT_NEAR(out.GetFloat({i, j}), g / (1 + std::exp(-g)) * u, 1e-4) << i << "," << j;
    }
  }
  // gate_up must hold both halves of the projection.
  EXPECT_EQ(be_.LinearSiluMul(x, w, Tensor::Zeros(DType::kF32, {n, ffn}), out).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CpuBackendTest, RmsNormAndFusedResidual) {
  Tensor x = Random({3, 8}, rng_), w = Random({8}, rng_), r = Random({3, 8}, rng_);
  Tensor r_before = *r.ToF32();
  Tensor out = Tensor::Zeros(DType::kF32, {3, 8});
  ASSERT_TRUE(be_.AddRmsNorm(r, x, w, 1e-5f, out).ok());
  for (int64_t i = 0; i < 3; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < 8; ++j) {
      const float sum = r_before.GetFloat({i, j}) + x.GetFloat({i, j});
      EXPECT_FLOAT_EQ(r.GetFloat({i, j}), sum);
      ss += sum * sum;
    }
    const double inv = 1.0 / std::sqrt(ss / 8 + 1e-5);
    for (int64_t j = 0; j < 8; ++j) {
      EXPECT_NEAR(out.GetFloat({i, j}), r.GetFloat({i, j}) * inv * w.GetFloat({j}), 1e-5);
    }
  }
}

TEST_F(CpuBackendTest, RopeIsRelative) {
  // <rope(q, m), rope(k, n)> depends only on m - n.
  RopeFrequencyParams p;
  p.head_dim = 16;
  std::vector<float> f = RopeInverseFrequencies(p);
  Tensor inv = Tensor::Wrap(f.data(), DType::kF32, {8}, Device::kHost, nullptr);
  Tensor q0 = Random({1, 1, 16}, rng_), k0 = Random({1, 1, 16}, rng_);
  auto dot_at = [&](int m, int n) {
    Tensor q = *q0.ToF32(), k = *k0.ToF32(), qd = *q0.ToF32(), kd = *k0.ToF32();
    EXPECT_TRUE(be_.Rope(q, kd, I32({m}), inv).ok());
    EXPECT_TRUE(be_.Rope(qd, k, I32({n}), inv).ok());
    double d = 0;
    for (int i = 0; i < 16; ++i) d += double(q.data<float>()[i]) * k.data<float>()[i];
    return d;
  };
  EXPECT_NEAR(dot_at(7, 3), dot_at(104, 100), 1e-3);
  EXPECT_NEAR(dot_at(0, 0), dot_at(50, 50), 1e-3);
}

TEST(RopeFrequenciesTest, Llama3ScalingKeepsHighAndScalesLowFrequencies) {
  RopeFrequencyParams p;
  p.head_dim = 128;
  p.theta = 500000.0f;
  std::vector<float> plain = RopeInverseFrequencies(p);
  p.scaling = 2;
  p.factor = 8.0f;
  std::vector<float> scaled = RopeInverseFrequencies(p);
  EXPECT_FLOAT_EQ(scaled[0], plain[0]);           // short wavelength: unchanged
  EXPECT_FLOAT_EQ(scaled[63], plain[63] / 8.0f);  // long wavelength: divided by factor
  p.scaling = 1;
  EXPECT_FLOAT_EQ(RopeInverseFrequencies(p)[5], plain[5] / 8.0f);
}

// Naive causal GQA attention over contiguous K/V for one sequence: q rows are the last q_len
// positions of kv_len.
std::vector<float> NaiveAttention(const Tensor& q, const Tensor& k, const Tensor& v, int kv_len) {
  const int64_t n = q.dim(0), heads = q.dim(1), hd = q.dim(2), kvh = k.dim(1);
  std::vector<float> out(n * heads * hd);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = kv_len - n + i;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / (heads / kvh);
      std::vector<double> s(pos + 1);
      double m = -1e30;
      for (int64_t p = 0; p <= pos; ++p) {
        double d = 0;
        for (int64_t j = 0; j < hd; ++j) d += double(q.GetFloat({i, h, j})) * k.GetFloat({p, g, j});
        s[p] = d / std::sqrt(double(hd));
        m = std::max(m, s[p]);
      }
      double sum = 0;
      for (double& e : s) sum += (e = std::exp(e - m));
      for (int64_t j = 0; j < hd; ++j) {
        double acc = 0;
        for (int64_t p = 0; p <= pos; ++p) acc += s[p] / sum * v.GetFloat({p, g, j});
        out[(i * heads + h) * hd + j] = static_cast<float>(acc);
      }
    }
  }
  return out;
}

TEST_F(CpuBackendTest, PagedAttentionEqualsContiguous) {
  const int heads = 8, kvh = 2, hd = 16, bt = 16, num_blocks = 12;
  const int kv_len = 83, q_len = 29;  // a chunk of 29 new tokens after 54 cached ones
  Tensor k = Random({kv_len, kvh, hd}, rng_), v = Random({kv_len, kvh, hd}, rng_);
  Tensor q = Random({q_len, heads, hd}, rng_);
  Tensor kv = Tensor::Zeros(DType::kF32, {num_blocks * 2, bt, kvh, hd});
  const std::vector<int32_t> table = {7, 2, 11, 0, 5, 9};  // scattered blocks
  std::vector<int32_t> slots;
  for (int p = 0; p < kv_len; ++p) slots.push_back(table[p / bt] * bt + p % bt);
  ASSERT_TRUE(be_.WriteKv(k, v, I32(slots), kv).ok());

  AttentionBatch batch;
  batch.block_tokens = bt;
  SequenceAttention seq;
  seq.q_len = q_len;
  seq.kv_len = kv_len;
  seq.block_table = table;
  batch.sequences.push_back(seq);
  Tensor out = Tensor::Zeros(DType::kF32, {q_len, heads, hd});
  ASSERT_TRUE(RunAttention(be_, batch, q, kv, out).ok());
  std::vector<float> ref = NaiveAttention(q, k, v, kv_len);
  for (int64_t i = 0; i < out.numel(); ++i) ASSERT_NEAR(out.data<float>()[i], ref[i], 1e-5) << i;
}

TEST_F(CpuBackendTest, GreedySamplePicksTheLowestIndexOfTheMaximum) {
  Tensor logits = Random({3, 1000}, rng_);
  logits.data<float>()[17] = 50.0f;          // row 0: a clear maximum
  logits.data<float>()[1000 + 999] = 50.0f;  // row 1: at the last column
  logits.data<float>()[2000 + 5] = 50.0f;    // row 2: a tie, the lower index wins
  logits.data<float>()[2000 + 900] = 50.0f;
  kernels::SamplingBatch greedy;
  greedy.rows.resize(3);  // temperature 0
  Tensor out = Tensor::Zeros(DType::kI32, {3});
  ASSERT_TRUE(be_.Sample(logits, greedy, out).ok());
  EXPECT_EQ(out.data<int32_t>()[0], 17);
  EXPECT_EQ(out.data<int32_t>()[1], 999);
  EXPECT_EQ(out.data<int32_t>()[2], 5);
  EXPECT_EQ(be_.Sample(logits, greedy, Tensor::Zeros(DType::kI32, {2})).code(),
            absl::StatusCode::kInvalidArgument);
}

// The shadow-dense monitor's comparison: per row range ||a - b|| / ||b||, exactly 0 for equal
// rows, 1 where only b is zero, and ranges outside the rows rejected.
TEST_F(CpuBackendTest, RelativeL2ErrorPerRowRange) {
  Tensor b = Random({5, 2, 3}, rng_);
  Tensor a = *b.ToF32();
  for (int64_t j = 0; j < 6; ++j) a.data<float>()[2 * 6 + j] += 0.5f;  // row 2 differs by 0.5
  for (int64_t j = 0; j < 6; ++j) b.data<float>()[4 * 6 + j] = 0;      // row 4: b is zero, a not
  a.data<float>()[4 * 6] = 1;
  Tensor ranges = Tensor::Zeros(DType::kI32, {4, 2});
  const int32_t r[] = {0, 2, 1, 2, 4, 1, 3, 0};  // rows 0-1, 1-2, 4, none
  std::copy(r, r + 8, ranges.data<int32_t>());
  Tensor out = Tensor::Zeros(DType::kF32, {4});
  ASSERT_TRUE(be_.RelativeL2Error(a, b, ranges, out).ok());
  EXPECT_EQ(out.data<float>()[0], 0.0f);
  double ref = 0;
  for (int64_t j = 6; j < 18; ++j) ref += double(b.data<float>()[j]) * b.data<float>()[j];
  EXPECT_NEAR(out.data<float>()[1], std::sqrt(6 * 0.25 / ref), 1e-6);
  EXPECT_EQ(out.data<float>()[2], 1.0f);
  EXPECT_EQ(out.data<float>()[3], 0.0f);  // no rows: nothing differs
  ranges.data<int32_t>()[6] = 4;
  ranges.data<int32_t>()[7] = 2;  // rows 4-5 of 5
  EXPECT_EQ(be_.RelativeL2Error(a, b, ranges, out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be_.RelativeL2Error(a, Random({5, 6}, rng_), ranges, out).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CpuBackendTest, AttentionRejectsBadPlans) {
  Tensor q = Random({1, 2, 8}, rng_), out = Tensor::Zeros(DType::kF32, {1, 2, 8});
  Tensor kv = Tensor::Zeros(DType::kF32, {4, 16, 1, 8});
  AttentionBatch batch;
  batch.block_tokens = 16;
  SequenceAttention seq;
  seq.q_len = 1;
  seq.kv_len = 20;
  seq.block_table = {0};  // too short for 20 tokens
  batch.sequences.push_back(seq);
  EXPECT_EQ(RunAttention(be_, batch, q, kv, out).code(), absl::StatusCode::kInvalidArgument);
  batch.sequences[0].block_table = {0, 5};  // block 5 outside a 2-block pool
  EXPECT_EQ(RunAttention(be_, batch, q, kv, out).code(), absl::StatusCode::kInvalidArgument);
  batch.sequences[0].block_table = {0, 1};
  EXPECT_TRUE(RunAttention(be_, batch, q, kv, out).ok());
  batch.sequences[0].pattern.kind = AttentionMethodKind::kTokenSelect;  // no state slot
  EXPECT_EQ(RunAttention(be_, batch, q, kv, out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(be_.SupportsAttention(batch.sequences[0].pattern, 8).ok());
  batch.sequences[0].pattern.kind = AttentionMethodKind::kSlidingWindow;  // window 0: invalid
  EXPECT_EQ(RunAttention(be_, batch, q, kv, out).code(), absl::StatusCode::kInvalidArgument);
  batch.sequences[0].pattern = {};
  batch.sequences[0].mask = {1, 1};  // not q_len * q_len entries
  EXPECT_EQ(RunAttention(be_, batch, q, kv, out).code(), absl::StatusCode::kInvalidArgument);
  batch.sequences[0].mask = {2};  // not 0/1
  EXPECT_EQ(RunAttention(be_, batch, q, kv, out).code(), absl::StatusCode::kInvalidArgument);
  batch.sequences[0].mask = {};
  batch.sequences[0].state_slot = 0;  // no sequence_state to point into
  EXPECT_EQ(RunAttention(be_, batch, q, kv, out).code(), absl::StatusCode::kInvalidArgument);
  batch.sequence_state = Tensor::Zeros(DType::kI32, {2, 4});
  EXPECT_TRUE(RunAttention(be_, batch, q, kv, out).ok());
  batch.sequences[0].state_slot = 2;  // past the 2 slots
  EXPECT_EQ(RunAttention(be_, batch, q, kv, out).code(), absl::StatusCode::kInvalidArgument);
  batch.sequences[0].state_slot = 1;
  batch.sequences[0].q_begin = 0;
  SequenceAttention other = batch.sequences[0];
  other.q_begin = 1;
  batch.sequences.push_back(other);  // two sequences, one slot
  Tensor q2 = Random({2, 2, 8}, rng_), out2 = Tensor::Zeros(DType::kF32, {2, 2, 8});
  EXPECT_EQ(RunAttention(be_, batch, q2, kv, out2).code(), absl::StatusCode::kInvalidArgument);
  batch.sequences[1].state_slot = 0;
  EXPECT_TRUE(RunAttention(be_, batch, q2, kv, out2).ok());
  EXPECT_EQ(be_.WriteKv(Random({1, 1, 8}, rng_), Random({1, 1, 8}, rng_), I32({32}), kv).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      be_.Embedding(Random({4, 8}, rng_), I32({4}), Tensor::Zeros(DType::kF32, {1, 8})).code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sparseserve::kernels

namespace sparseserve::kernels {
namespace {

// The element of slot `slot`'s key (value: + block_tokens * row) in a paged layer.
int64_t KeyElement(int64_t slot, int64_t block_tokens, int64_t row) {
  return ((slot / block_tokens) * 2 * block_tokens + slot % block_tokens) * row;
}

// Backend::MoveKvRows (the default, ReadKv + WriteKv per layer): every layer's keys and values
// move from the values before the call, where a later move writes a slot an earlier one read.
TEST(MoveKvRowsTest, MovesKeysAndValuesOfEveryLayer) {
  core::ThreadPool pool(2);
  CpuBackend be(&pool);
  constexpr int64_t kBt = 16, kRow = 2 * 8;
  std::vector<Tensor> layers;
  for (int l = 0; l < 3; ++l) {
    Tensor t = Tensor::Zeros(DType::kF32, {2 * 4, kBt, 2, 8});
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(l * 100000 + i);
    layers.push_back(t);
  }
  std::vector<std::vector<float>> before;
  for (const Tensor& t : layers) before.emplace_back(t.data<float>(), t.data<float>() + t.numel());
  const std::vector<int32_t> src = {5, 9, 10, 40}, dst = {3, 5, 9, 10};  // a commit's shape
  ASSERT_TRUE(be.MoveKvRows(layers, src, dst).ok());
  for (int l = 0; l < 3; ++l) {
    const float* now = layers[l].data<float>();
    const float* old = before[l].data();
    for (int64_t slot = 0; slot < 4 * kBt; ++slot) {
      int64_t from = slot;
      for (size_t i = 0; i < dst.size(); ++i) {
        if (dst[i] == slot) from = src[i];
      }
      for (int64_t half : {int64_t{0}, kBt * kRow}) {  // keys, values
        for (int64_t e = 0; e < kRow; ++e) {
          ASSERT_EQ(now[KeyElement(slot, kBt, kRow) + half + e],
                    old[KeyElement(from, kBt, kRow) + half + e])
              << "layer " << l << " slot " << slot;
        }
      }
    }
  }
  EXPECT_EQ(be.MoveKvRows(layers, src, {3}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(be.MoveKvRows(layers, {}, {}).ok());
}

}  // namespace
}  // namespace sparseserve::kernels
