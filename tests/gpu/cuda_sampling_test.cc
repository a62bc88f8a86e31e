// CUDA Backend::Sample against the CPU reference backend, token for token (the pipeline is exact:
// integer masses and one exp sequence, kernels/sampling_math.h), on rows chosen to hit every
// branch: ties, -inf and NaN entries, all-equal rows, +inf, top_k = 1 and beyond the vocabulary,
// tiny top_p, min_p = 1, penalties over long windows with repeated ids. Outputs are poisoned
// first, so an unwritten row fails. Also prints Sample's time for greedy and filtered rows.
// TokenLogprobs against the CPU reference (ids exact, values to float rounding).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "kernels/sampling_plan.h"
#include "tests/gpu/cuda_test_util.h"

namespace sparseserve::testing {
namespace {

using kernels::SamplingBatch;
using kernels::SamplingRow;

class CudaSamplingTest : public CudaTest {
 protected:
  template <typename T>
  T Pick(const std::vector<T>& values) {
    return values[std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng_)];
  }

  // One random row of logits into `row` (f32 [vocab]).
  void FillLogits(float* row, int64_t vocab) {
    const float inf = std::numeric_limits<float>::infinity();
    const int kind = std::uniform_int_distribution<int>(0, 9)(rng_);
    std::normal_distribution<float> normal(0.0f, Pick<float>({0.5f, 2.0f, 6.0f}));
    for (int64_t i = 0; i < vocab; ++i) {
      float l = normal(rng_);
      if (kind <= 2) l = std::round(l * 4.0f) / 4.0f;  // many exact ties
      if (kind == 3) l = 1.25f;                        // all equal
      row[i] = l;
    }
    if (kind == 4) {  // a band of -inf, a NaN
      for (int64_t i = 0; i < vocab; i += 2) row[i] = -inf;
      row[vocab / 3] = std::numeric_limits<float>::quiet_NaN();
    }
    if (kind == 5) {  // the max repeated far apart (ties at the top)
      for (int64_t i = 7; i < vocab; i += vocab / 5 + 1) row[i] = 40.0f;
    }
    if (kind == 6 && std::uniform_int_distribution<int>(0, 3)(rng_) == 0) {
      row[vocab - 1] = inf;  // +inf max: the argmax
    }
    if (kind == 7 && std::uniform_int_distribution<int>(0, 3)(rng_) == 0) {
      for (int64_t i = 0; i < vocab; ++i) row[i] = -inf;  // nothing finite: id 0
    }
  }

  SamplingRow RandomRow(int64_t vocab) {
    SamplingRow row;
    row.temperature = Pick<float>({0.0f, 0.0f, 1e-3f, 0.3f, 0.8f, 1.0f, 1.0f, 1.7f, 5.0f});
    row.top_k = Pick<int>(
        {0, 0, 0, 1, 2, 40, 1000, static_cast<int>(vocab) - 1, static_cast<int>(vocab) + 5});
    row.top_p = Pick<float>({1.0f, 1.0f, 0.99f, 0.9f, 0.5f, 1e-7f});
    row.min_p = Pick<float>({0.0f, 0.0f, 0.0f, 1e-4f, 0.05f, 1.0f});
    row.repetition_penalty = Pick<float>({1.0f, 1.0f, 1.1f, 1.3f, 0.8f, 3.0f});
    // Draws across [0, 1), with both ends.
    row.uniform = Pick<double>({0.0, 0x1.fffffffffffffp-1, -1.0});
    if (row.uniform < 0) row.uniform = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
    return row;
  }

  // Penalised ids of one row: a window of up to 4096 history tokens, repeats included (an id
  // listed twice must be penalised once on both backends).
  void AppendIds(int64_t vocab, std::vector<int32_t>* ids) {
    const int n = Pick<int>({0, 5, 64, 1024, 4096});
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab) - 1);
    for (int i = 0; i < n; ++i) {
      ids->push_back(i > 0 && i % 7 == 0 ? ids->back() : id(rng_));
    }
  }

  Tensor PoisonedI32(int64_t n) {
    Tensor host = Tensor::Zeros(DType::kI32, {n});
    std::fill_n(host.data<int32_t>(), n, -7);
    return ToGpu(host, DType::kI32);
  }

  Tensor I32ToHost(const Tensor& dev) {
    Tensor host = Tensor::Zeros(DType::kI32, dev.shape());
    const absl::Status s = gpu_->CopyToHost(dev, host);
    EXPECT_TRUE(s.ok()) << s;
    return host;
  }
};

TEST_F(CudaSamplingTest, SampleMatchesCpuTokenForToken) {
  struct Case {
    int64_t vocab;
    int batches;
  };
  constexpr int64_t kRows = 64;
  int64_t total = 0, mismatches = 0, unwritten = 0;
  for (const Case& c : {Case{512, 12}, Case{32000, 8}, Case{128256, 6}, Case{151936, 6}}) {
    int64_t case_mismatches = 0;
    for (int b = 0; b < c.batches; ++b) {
      Tensor logits = Tensor::Zeros(DType::kF32, {kRows, c.vocab});
      SamplingBatch batch;
      batch.penalized_begin.push_back(0);
      for (int64_t r = 0; r < kRows; ++r) {
        FillLogits(logits.data<float>() + r * c.vocab, c.vocab);
        batch.rows.push_back(RandomRow(c.vocab));
        AppendIds(c.vocab, &batch.penalized_ids);
        batch.penalized_begin.push_back(static_cast<int32_t>(batch.penalized_ids.size()));
      }
      Tensor want = Tensor::Zeros(DType::kI32, {kRows});
      ASSERT_TRUE(cpu_.Sample(logits, batch, want).ok());
      Tensor got_dev = PoisonedI32(kRows);
      const absl::Status s = gpu_->Sample(ToGpu(logits, DType::kF32), batch, got_dev);
      ASSERT_TRUE(s.ok()) << s;
      const Tensor got = I32ToHost(got_dev);
      for (int64_t r = 0; r < kRows; ++r) {
        const int32_t g = got.data<int32_t>()[r];
        const int32_t w = want.data<int32_t>()[r];
        unwritten += g == -7;
        if (g != w) {
          ++case_mismatches;
          if (case_mismatches <= 5) {
            const SamplingRow& row = batch.rows[static_cast<size_t>(r)];
            ADD_FAILURE() << "vocab " << c.vocab << " batch " << b << " row " << r << ": cuda " << g
                          << ", cpu " << w << " (temperature " << row.temperature << ", top_k "
                          << row.top_k << ", top_p " << row.top_p << ", min_p " << row.min_p
                          << ", penalty " << row.repetition_penalty << ", uniform " << row.uniform
                          << ")";
          }
        }
      }
      total += kRows;
    }
    mismatches += case_mismatches;
  }
  std::printf("[ sample   ] %lld rows, %lld mismatches, %lld unwritten\n",
              static_cast<long long>(total), static_cast<long long>(mismatches),
              static_cast<long long>(unwritten));
  EXPECT_GE(total, 2000);
  EXPECT_EQ(unwritten, 0);
  EXPECT_EQ(mismatches, 0) << mismatches << " of " << total << " rows differ from the CPU";
}

TEST_F(CudaSamplingTest, SampleRejectsBadPlansBeforeLaunching) {
  Tensor logits = Poisoned(DType::kF32, {2, 100});
  Tensor out = PoisonedI32(2);
  SamplingBatch batch;
  batch.rows.resize(2);
  batch.penalized_ids = {5, 100};
  batch.penalized_begin = {0, 1, 2};
  EXPECT_EQ(gpu_->Sample(logits, batch, out).code(), absl::StatusCode::kInvalidArgument);
  batch.penalized_ids[1] = 99;
  batch.rows[0].top_p = 0.0f;
  EXPECT_EQ(gpu_->Sample(logits, batch, out).code(), absl::StatusCode::kInvalidArgument);
  batch.rows[0].top_p = 1.0f;
  batch.rows.pop_back();
  EXPECT_EQ(gpu_->Sample(logits, batch, out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

// For the record (no assertion on speed): one decode step's sampling for 64 sequences over a
// Llama-3 vocabulary: greedy rows beside filtered ones.
TEST_F(CudaSamplingTest, SampleTimeGreedyAndFiltered) {
  constexpr int64_t kRows = 64, kVocab = 128256;
  constexpr int kIters = 20;
  Tensor logits = RandomHost({kRows, kVocab}, 8.0f);
  Tensor dev = ToGpu(logits, DType::kF32);
  Tensor out = PoisonedI32(kRows);
  SamplingBatch typical, greedy;
  typical.penalized_begin.push_back(0);
  for (int64_t r = 0; r < kRows; ++r) {
    SamplingRow row;
    row.temperature = 0.8f;
    row.top_k = 50;
    row.top_p = 0.95f;
    row.repetition_penalty = 1.1f;
    row.uniform = 0.37;
    typical.rows.push_back(row);
    AppendIds(kVocab, &typical.penalized_ids);
    typical.penalized_begin.push_back(static_cast<int32_t>(typical.penalized_ids.size()));
  }
  SamplingBatch nucleus = typical;  // top-p alone: the selection runs over the whole row
  for (SamplingRow& row : nucleus.rows) row.top_k = 0;
  greedy.rows.resize(kRows);
  const auto time_us = [&](const auto& op) {
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(op().ok());
    EXPECT_TRUE(gpu_->Synchronize().ok());
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kIters; ++i) EXPECT_TRUE(op().ok());
    EXPECT_TRUE(gpu_->Synchronize().ok());
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
               .count() /
           kIters;
  };
  const double sample_greedy = time_us([&] { return gpu_->Sample(dev, greedy, out); });
  const double sample_typical = time_us([&] { return gpu_->Sample(dev, typical, out); });
  const double sample_nucleus = time_us([&] { return gpu_->Sample(dev, nucleus, out); });
  std::printf(
      "[ timing   ] [%lld, %lld] Sample greedy rows %.1f us, T 0.8 top-k 50 "
      "top-p 0.95 penalty 1.1 %.1f us, top-p 0.95 alone %.1f us\n",
      static_cast<long long>(kRows), static_cast<long long>(kVocab), sample_greedy, sample_typical,
      sample_nucleus);
}

// TokenLogprobs against the CPU reference on the same rows: the top ids exactly (ids order
// keys exactly), the log probabilities to float rounding (the device sums in float, the host in
// double), -inf where the host has -inf. Also prints its time beside Sample's greedy rows.
TEST_F(CudaSamplingTest, TokenLogprobsMatchCpu) {
  constexpr int64_t kRows = 64;
  int64_t checked = 0;
  for (const int64_t vocab : {int64_t{512}, int64_t{32000}, int64_t{128256}}) {
    for (const int top_n : {0, 1, 5, kernels::kMaxTopLogprobs}) {
      Tensor logits = Tensor::Zeros(DType::kF32, {kRows, vocab});
      Tensor tokens = Tensor::Zeros(DType::kI32, {kRows});
      for (int64_t r = 0; r < kRows; ++r) {
        FillLogits(logits.data<float>() + r * vocab, vocab);
        tokens.data<int32_t>()[r] =
            std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(vocab) - 1)(rng_);
      }
      const int64_t width = std::max(top_n, 1);
      Tensor want_v = Tensor::Zeros(DType::kF32, {kRows, 1 + top_n});
      Tensor want_i = Tensor::Zeros(DType::kI32, {kRows, width});
      ASSERT_TRUE(cpu_.TokenLogprobs(logits, tokens, top_n, want_v, want_i).ok());
      Tensor got_v_dev = Poisoned(DType::kF32, {kRows, 1 + top_n});
      Tensor got_i_dev = ToGpu(Tensor::Zeros(DType::kI32, {kRows, width}), DType::kI32);
      const absl::Status s = gpu_->TokenLogprobs(
          ToGpu(logits, DType::kF32), ToGpu(tokens, DType::kI32), top_n, got_v_dev, got_i_dev);
      ASSERT_TRUE(s.ok()) << s;
      Tensor got_v = Tensor::Zeros(DType::kF32, got_v_dev.shape());
      ASSERT_TRUE(gpu_->CopyToHost(got_v_dev, got_v).ok());
      const Tensor got_i = I32ToHost(got_i_dev);
      for (int64_t r = 0; r < kRows; ++r) {
        for (int k = 0; k < top_n; ++k) {
          ASSERT_EQ(got_i.data<int32_t>()[r * width + k], want_i.data<int32_t>()[r * width + k])
              << "vocab " << vocab << " row " << r << " rank " << k;
        }
        for (int j = 0; j <= top_n; ++j) {
          const float g = got_v.data<float>()[r * (1 + top_n) + j];
          const float w = want_v.data<float>()[r * (1 + top_n) + j];
          if (std::isfinite(w)) {
            ASSERT_NEAR(g, w, 1e-4f + 1e-5f * std::fabs(w))
                << "vocab " << vocab << " row " << r << " value " << j;
          } else {
            ASSERT_EQ(g, w) << "vocab " << vocab << " row " << r << " value " << j;
          }
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 3 * 4 * kRows);

  constexpr int64_t kVocab = 128256;
  Tensor dev = ToGpu(RandomHost({kRows, kVocab}, 8.0f), DType::kF32);
  Tensor toks = PoisonedI32(kRows);
  SamplingBatch greedy;
  greedy.rows.resize(kRows);
  Tensor values = Poisoned(DType::kF32, {kRows, 6});
  absl::StatusOr<Tensor> ids = PoisonedI32(kRows * 5).Reshape({kRows, 5});
  ASSERT_TRUE(ids.ok());
  const auto time_us = [&](const auto& op) {
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(op().ok());
    EXPECT_TRUE(gpu_->Synchronize().ok());
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) EXPECT_TRUE(op().ok());
    EXPECT_TRUE(gpu_->Synchronize().ok());
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
               .count() /
           20;
  };
  const double sample = time_us([&] { return gpu_->Sample(dev, greedy, toks); });
  const double logprobs = time_us([&] { return gpu_->TokenLogprobs(dev, toks, 5, values, *ids); });
  std::printf("[ timing   ] [%lld, %lld] Sample greedy %.1f us, TokenLogprobs top 5 %.1f us\n",
              static_cast<long long>(kRows), static_cast<long long>(kVocab), sample, logprobs);
}

}  // namespace
}  // namespace sparseserve::testing
