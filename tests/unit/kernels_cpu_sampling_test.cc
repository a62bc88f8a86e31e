// CpuBackend::Sample: a batch of rows sampled in one call picks, row by row, what each
// sequence's own sampling::Sampler picks on the host (same seeds, same histories), and every
// malformed plan is kInvalidArgument. CpuBackend::TokenLogprobs against a brute-force reference.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "common/core/thread_pool.h"
#include "common/sampling/sampler.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/sampling_plan.h"

namespace sparseserve::kernels {
namespace {

class CpuSamplingTest : public ::testing::Test {
 protected:
  // Random knobs, each filter often on, sometimes at an extreme.
  sampling::SamplingParams RandomParams() {
    auto pick = [&](auto values) {
      return values[std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng_)];
    };
    sampling::SamplingParams p;
    p.temperature = pick(std::vector<float>{0.0f, 0.3f, 1.0f, 1.0f, 2.5f});
    p.top_k = pick(std::vector<int>{0, 0, 1, 5, 50, 100000});
    p.top_p = pick(std::vector<float>{1.0f, 1.0f, 0.9f, 0.5f, 1e-6f});
    p.min_p = pick(std::vector<float>{0.0f, 0.0f, 0.05f, 1.0f});
    p.repetition_penalty = pick(std::vector<float>{1.0f, 1.3f, 0.7f});
    p.penalty_window = pick(std::vector<int>{0, 4, 64});
    p.seed = rng_();
    return p;
  }

  // Logits with ties, -inf and NaN entries, or all equal.
  std::vector<float> RandomLogits(int vocab) {
    std::vector<float> logits(static_cast<size_t>(vocab));
    std::normal_distribution<float> normal(0.0f, 2.0f);
    const int kind = std::uniform_int_distribution<int>(0, 3)(rng_);
    for (float& l : logits) {
      l = kind == 3 ? 0.5f : normal(rng_);
      if (kind == 1) l = std::round(l);  // many exact ties
    }
    if (kind == 2) {
      for (int i = 0; i < vocab; i += 3) logits[static_cast<size_t>(i)] = -kInf;
      if (vocab > 1) logits[1] = std::numeric_limits<float>::quiet_NaN();
    }
    return logits;
  }

  static constexpr float kInf = std::numeric_limits<float>::infinity();
  std::mt19937 rng_{2024};
  core::ThreadPool pool_{2};
  CpuBackend be_{&pool_};
};

TEST_F(CpuSamplingTest, BatchedSampleEqualsEachSequencesHostSampler) {
  constexpr int kRows = 40, kSteps = 25;
  for (const int vocab : {7, 300, 5000}) {
    std::vector<std::unique_ptr<sampling::Sampler>> host, batched;
    std::vector<std::vector<int32_t>> histories(kRows);
    for (int r = 0; r < kRows; ++r) {
      const sampling::SamplingParams p = RandomParams();
      host.push_back(std::make_unique<sampling::Sampler>(p));
      batched.push_back(std::make_unique<sampling::Sampler>(p));
      std::uniform_int_distribution<int32_t> id(0, vocab - 1);
      for (int i = 0; i < 10; ++i) histories[r].push_back(id(rng_));
    }
    int mismatches = 0, sampled_rows = 0;
    for (int step = 0; step < kSteps; ++step) {
      Tensor logits = Tensor::Zeros(DType::kF32, {kRows, vocab});
      SamplingBatch batch;
      batch.penalized_begin.push_back(0);
      std::vector<int32_t> want(kRows);
      for (int r = 0; r < kRows; ++r) {
        const std::vector<float> row = RandomLogits(vocab);
        std::copy(row.begin(), row.end(), logits.data<float>() + int64_t{r} * vocab);
        want[r] = host[r]->Sample(row.data(), vocab, histories[r]);
        batch.rows.push_back(batched[r]->NextRow(histories[r], &batch.penalized_ids));
        batch.penalized_begin.push_back(static_cast<int32_t>(batch.penalized_ids.size()));
        sampled_rows += batch.rows.back().temperature != 0.0f;
      }
      Tensor out = Tensor::Zeros(DType::kI32, {kRows});
      std::fill_n(out.data<int32_t>(), kRows, -1);
      const absl::Status s = be_.Sample(logits, batch, out);
      ASSERT_TRUE(s.ok()) << s;
      for (int r = 0; r < kRows; ++r) {
        const int32_t got = out.data<int32_t>()[r];
        ASSERT_GE(got, 0);
        ASSERT_LT(got, vocab);
        mismatches += got != want[r];
        histories[r].push_back(want[r]);
      }
    }
    EXPECT_EQ(mismatches, 0) << "vocab " << vocab << ": " << mismatches << " of " << kRows * kSteps
                             << " tokens differ";
    EXPECT_GT(sampled_rows, kRows * kSteps / 2);
  }
}

TEST_F(CpuSamplingTest, RejectsMalformedPlans) {
  const int64_t vocab = 10;
  Tensor logits = Tensor::Zeros(DType::kF32, {2, vocab});
  Tensor out = Tensor::Zeros(DType::kI32, {2});
  SamplingBatch good;
  good.rows.resize(2);
  good.rows[1].temperature = 1.0f;
  good.rows[1].uniform = 0.5;
  good.rows[1].repetition_penalty = 1.2f;
  good.penalized_ids = {3, 9};
  good.penalized_begin = {0, 0, 2};
  ASSERT_TRUE(be_.Sample(logits, good, out).ok());
  SamplingBatch no_offsets;  // no penalties at all: offsets may be left out
  no_offsets.rows.resize(2);
  ASSERT_TRUE(be_.Sample(logits, no_offsets, out).ok());

  const auto rejected = [&](auto mutate) {
    SamplingBatch batch = good;
    mutate(batch);
    return be_.Sample(logits, batch, out).code() == absl::StatusCode::kInvalidArgument;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(rejected([](SamplingBatch& b) { b.rows.pop_back(); }));
  EXPECT_TRUE(rejected([](SamplingBatch& b) { b.rows.push_back({}); }));
  EXPECT_TRUE(rejected([](SamplingBatch& b) { b.penalized_begin = {0, 2}; }));
  EXPECT_TRUE(rejected([](SamplingBatch& b) { b.penalized_begin = {1, 1, 2}; }));
  EXPECT_TRUE(rejected([](SamplingBatch& b) { b.penalized_begin = {0, 0, 1}; }));
  EXPECT_TRUE(rejected([](SamplingBatch& b) { b.penalized_begin = {0, 2, 1}; }));
  EXPECT_TRUE(rejected([](SamplingBatch& b) { b.penalized_begin.clear(); }));
  EXPECT_TRUE(rejected([](SamplingBatch& b) { b.penalized_ids[1] = 10; }));
  EXPECT_TRUE(rejected([](SamplingBatch& b) { b.penalized_ids[0] = -1; }));
  EXPECT_TRUE(rejected([](SamplingBatch& b) { b.rows[1].temperature = -0.5f; }));
  EXPECT_TRUE(rejected([&](SamplingBatch& b) { b.rows[1].temperature = nan; }));
  EXPECT_TRUE(rejected([](SamplingBatch& b) { b.rows[1].top_k = -1; }));
  EXPECT_TRUE(rejected([](SamplingBatch& b) { b.rows[1].top_p = 0.0f; }));
  EXPECT_TRUE(rejected([](SamplingBatch& b) { b.rows[1].min_p = 1.5f; }));
  EXPECT_TRUE(rejected([](SamplingBatch& b) { b.rows[1].repetition_penalty = 0.0f; }));
  EXPECT_TRUE(rejected([](SamplingBatch& b) { b.rows[1].uniform = 1.0; }));
  EXPECT_TRUE(rejected([](SamplingBatch& b) { b.rows[1].uniform = -0.1; }));

  EXPECT_EQ(be_.Sample(logits, good, Tensor::Zeros(DType::kI32, {3})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be_.Sample(logits, good, Tensor::Zeros(DType::kF32, {2})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be_.Sample(Tensor::Zeros(DType::kI32, {2, vocab}), good, out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be_.Sample(Tensor::Zeros(DType::kF32, {2, 0}), no_offsets, out).code(),
            absl::StatusCode::kInvalidArgument);
}

// TokenLogprobs against a brute-force log-softmax and a full sort of the row: the sampled token's
// log probability, the top_n ids (larger logit first, lower id on ties) and theirs; NaN counts as
// -inf and a row without a finite logit is -inf throughout.
TEST_F(CpuSamplingTest, TokenLogprobsMatchBruteForce) {
  for (const int vocab : {1, 7, 512, 4099}) {
    for (int top_n = 0; top_n <= std::min(kMaxTopLogprobs, vocab); top_n += 3) {
      constexpr int64_t kRows = 6;
      Tensor logits = Tensor::Zeros(DType::kF32, {kRows, vocab});
      Tensor tokens = Tensor::Zeros(DType::kI32, {kRows});
      for (int64_t r = 0; r < kRows; ++r) {
        std::vector<float> row = RandomLogits(vocab);
        if (r == kRows - 1) std::fill(row.begin(), row.end(), -kInf);  // nothing finite
        std::copy(row.begin(), row.end(), logits.data<float>() + r * vocab);
        tokens.data<int32_t>()[r] = std::uniform_int_distribution<int32_t>(0, vocab - 1)(rng_);
      }
      Tensor values = Tensor::Zeros(DType::kF32, {kRows, 1 + top_n});
      Tensor ids = Tensor::Zeros(DType::kI32, {kRows, std::max(top_n, 1)});
      ASSERT_TRUE(be_.TokenLogprobs(logits, tokens, top_n, values, ids).ok());
      for (int64_t r = 0; r < kRows; ++r) {
        const float* l = logits.data<float>() + r * vocab;
        auto clean = [&](int i) { return std::isnan(l[i]) ? -kInf : l[i]; };
        double max = -kInf;
        for (int i = 0; i < vocab; ++i) max = std::max<double>(max, clean(i));
        double sum = 0;
        for (int i = 0; i < vocab && std::isfinite(max); ++i) sum += std::exp(clean(i) - max);
        auto want_lp = [&](int i) {
          return std::isfinite(max) ? clean(i) - (max + std::log(sum)) : -kInf;
        };
        std::vector<int> order(static_cast<size_t>(vocab));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(),
                         [&](int a, int b) { return clean(a) > clean(b); });
        const float* v = values.data<float>() + r * (1 + top_n);
        const int32_t tok = tokens.data<int32_t>()[r];
        if (std::isfinite(want_lp(tok))) {
          EXPECT_NEAR(v[0], want_lp(tok), 1e-5) << "vocab " << vocab << " row " << r;
        } else {
          EXPECT_EQ(v[0], want_lp(tok));
        }
        for (int k = 0; k < top_n; ++k) {
          EXPECT_EQ(ids.data<int32_t>()[r * std::max(top_n, 1) + k], order[static_cast<size_t>(k)])
              << "vocab " << vocab << " row " << r << " rank " << k;
          const double want = want_lp(order[static_cast<size_t>(k)]);
          if (std::isfinite(want)) {
            EXPECT_NEAR(v[1 + k], want, 1e-5);
          } else {
            EXPECT_EQ(v[1 + k], want);
          }
        }
      }
    }
  }
}

TEST_F(CpuSamplingTest, TokenLogprobsRejectsBadShapes) {
  Tensor logits = Tensor::Zeros(DType::kF32, {2, 10});
  Tensor tokens = Tensor::Zeros(DType::kI32, {2});
  Tensor values = Tensor::Zeros(DType::kF32, {2, 4});
  Tensor ids = Tensor::Zeros(DType::kI32, {2, 3});
  ASSERT_TRUE(be_.TokenLogprobs(logits, tokens, 3, values, ids).ok());
  const auto code = [&](int top_n, const Tensor& t, const Tensor& v, const Tensor& i) {
    return be_.TokenLogprobs(logits, t, top_n, v, i).code();
  };
  constexpr absl::StatusCode kBad = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code(4, tokens, values, ids), kBad);  // ids too narrow
  EXPECT_EQ(code(-1, tokens, values, ids), kBad);
  EXPECT_EQ(code(kMaxTopLogprobs + 1, tokens, Tensor::Zeros(DType::kF32, {2, 20}),
                 Tensor::Zeros(DType::kI32, {2, 20})),
            kBad);
  EXPECT_EQ(code(3, Tensor::Zeros(DType::kI32, {3}), values, ids), kBad);
  EXPECT_EQ(code(3, tokens, Tensor::Zeros(DType::kF32, {2, 3}), ids), kBad);
  Tensor out_of_vocab = Tensor::Zeros(DType::kI32, {2});
  out_of_vocab.data<int32_t>()[1] = 10;
  EXPECT_EQ(code(3, out_of_vocab, values, ids), kBad);
}

}  // namespace
}  // namespace sparseserve::kernels
