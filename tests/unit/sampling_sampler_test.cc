#include "common/sampling/sampler.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/sampling/sampling_params.h"
#include "gtest/gtest.h"
#include "kernels/sampling_plan.h"
#include "kernels/sampling_reference.h"

namespace sparseserve::sampling {
namespace {

SamplingParams Greedy() {
  SamplingParams params;
  params.temperature = 0.0f;
  return params;
}

// Logits whose softmax (at temperature 1) is exactly `probs`.
std::vector<float> LogitsOf(const std::vector<float>& probs) {
  std::vector<float> logits;
  for (const float p : probs) logits.push_back(std::log(p));
  return logits;
}

int32_t SampleOnce(const SamplingParams& params, const std::vector<float>& logits,
                   const std::vector<int32_t>& history = {}) {
  Sampler sampler(params);
  return sampler.Sample(logits.data(), static_cast<int>(logits.size()), history);
}

std::vector<float> ProbsOf(const SamplingParams& params, const std::vector<float>& logits,
                           const std::vector<int32_t>& history = {}) {
  Sampler sampler(params);
  return sampler.Probabilities(logits.data(), static_cast<int>(logits.size()), history);
}

TEST(SamplerTest, GreedyIsArgmax) {
  EXPECT_EQ(SampleOnce(Greedy(), {0.1f, 2.0f, -1.0f, 1.5f}), 1);
  EXPECT_EQ(SampleOnce(Greedy(), {-5.0f, -7.0f, -4.5f}), 2);
  EXPECT_EQ(ProbsOf(Greedy(), {0.1f, 2.0f, -1.0f}), (std::vector<float>{0.0f, 1.0f, 0.0f}));
}

TEST(SamplerTest, GreedyTiesGoToLowestId) {
  EXPECT_EQ(SampleOnce(Greedy(), {1.0f, 3.0f, 3.0f, 0.0f}), 1);
  EXPECT_EQ(SampleOnce(Greedy(), {2.0f, 2.0f}), 0);
}

TEST(SamplerTest, TopKOneIsGreedyAtAnyTemperature) {
  const std::vector<float> logits = {0.5f, 1.0f, 0.9f, 0.95f, -2.0f};
  for (const float temperature : {0.3f, 1.0f, 10.0f}) {
    SamplingParams params;
    params.temperature = temperature;
    params.top_k = 1;
    Sampler sampler(params);
    for (int i = 0; i < 50; ++i) EXPECT_EQ(sampler.Sample(logits.data(), 5, {}), 1);
  }
}

TEST(SamplerTest, TopKKeepsTheKMostProbable) {
  SamplingParams params;
  params.top_k = 2;
  const std::vector<float> probs = ProbsOf(params, LogitsOf({0.1f, 0.5f, 0.3f, 0.1f}));
  EXPECT_FLOAT_EQ(probs[0], 0.0f);
  EXPECT_NEAR(probs[1], 0.625f, 1e-6);
  EXPECT_NEAR(probs[2], 0.375f, 1e-6);
  EXPECT_FLOAT_EQ(probs[3], 0.0f);
}

TEST(SamplerTest, TinyTopPKeepsOnlyTheMax) {
  SamplingParams params;
  params.top_p = 1e-6f;
  const std::vector<float> logits = LogitsOf({0.3f, 0.35f, 0.2f, 0.15f});
  EXPECT_EQ(ProbsOf(params, logits), (std::vector<float>{0.0f, 1.0f, 0.0f, 0.0f}));
  Sampler sampler(params);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sampler.Sample(logits.data(), 4, {}), 1);
}

TEST(SamplerTest, TopPKeepsTheSmallestSetReachingTheMass) {
  SamplingParams params;
  params.top_p = 0.7f;  // 0.5 < 0.7 <= 0.5 + 0.3
  const std::vector<float> probs = ProbsOf(params, LogitsOf({0.15f, 0.5f, 0.05f, 0.3f}));
  EXPECT_FLOAT_EQ(probs[0], 0.0f);
  EXPECT_NEAR(probs[1], 0.625f, 1e-6);
  EXPECT_FLOAT_EQ(probs[2], 0.0f);
  EXPECT_NEAR(probs[3], 0.375f, 1e-6);
}

TEST(SamplerTest, MinPDropsTokensBelowFractionOfMax) {
  SamplingParams params;
  params.min_p = 0.2f;  // threshold 0.2 * 0.5 = 0.1: drops 0.05, keeps 0.15
  const std::vector<float> probs = ProbsOf(params, LogitsOf({0.5f, 0.3f, 0.15f, 0.05f}));
  EXPECT_NEAR(probs[0], 0.5f / 0.95f, 1e-6);
  EXPECT_NEAR(probs[1], 0.3f / 0.95f, 1e-6);
  EXPECT_NEAR(probs[2], 0.15f / 0.95f, 1e-6);
  EXPECT_FLOAT_EQ(probs[3], 0.0f);
}

TEST(SamplerTest, TiesAtFilterBoundaryKeepLowestIds) {
  const std::vector<float> flat(100, 0.0f);  // 100 equally likely tokens
  SamplingParams params;
  params.top_p = 0.045f;  // 5 tokens reach the mass; which 5 must not depend on sort stability
  std::vector<float> probs = ProbsOf(params, flat);
  for (size_t i = 0; i < probs.size(); ++i) {
    EXPECT_FLOAT_EQ(probs[i], i < 5 ? 0.2f : 0.0f) << "token " << i;
  }
  params = SamplingParams{};
  params.top_k = 3;
  probs = ProbsOf(params, flat);
  for (size_t i = 0; i < probs.size(); ++i) {
    EXPECT_NEAR(probs[i], i < 3 ? 1.0f / 3 : 0.0f, 1e-6) << "token " << i;
  }
}

TEST(SamplerTest, RepetitionPenaltyChangesGreedyChoice) {
  SamplingParams params = Greedy();
  params.repetition_penalty = 1.2f;
  EXPECT_EQ(SampleOnce(params, {2.0f, 1.9f, 0.0f}, {0}), 1);  // 2.0 / 1.2 < 1.9
  EXPECT_EQ(SampleOnce(params, {-1.0f, -1.1f}, {0}), 1);      // -1.0 * 1.2 < -1.1
  EXPECT_EQ(SampleOnce(params, {2.0f, 1.9f, 0.0f}, {2}), 0);  // the leader was not repeated
  // Each distinct token is penalised once, however often it occurs: 2.0 / 1.2 > 1.5.
  EXPECT_EQ(SampleOnce(params, {2.0f, 1.5f}, {0, 0, 0, 0}), 0);
}

TEST(SamplerTest, RepetitionPenaltyOnlyWithinWindow) {
  SamplingParams params = Greedy();
  params.repetition_penalty = 1.2f;
  const std::vector<float> logits = {2.0f, 1.9f, 0.0f};
  const std::vector<int32_t> history = {0, 2, 2, 2};
  params.penalty_window = 3;  // token 0 is just outside
  EXPECT_EQ(SampleOnce(params, logits, history), 0);
  params.penalty_window = 4;
  EXPECT_EQ(SampleOnce(params, logits, history), 1);
  params.penalty_window = 0;  // whole history
  EXPECT_EQ(SampleOnce(params, logits, history), 1);
}

TEST(SamplerTest, PenaltyStateDoesNotLeakBetweenCalls) {
  SamplingParams params = Greedy();
  params.repetition_penalty = 1.2f;
  Sampler sampler(params);
  const std::vector<float> logits = {2.0f, 1.9f};
  EXPECT_EQ(sampler.Sample(logits.data(), 2, std::vector<int32_t>{0}), 1);
  EXPECT_EQ(sampler.Sample(logits.data(), 2, {}), 0);
}

std::vector<int32_t> Draws(uint64_t seed, int n) {
  SamplingParams params;
  params.seed = seed;
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = 0.05f * static_cast<float>(i % 7);
  Sampler sampler(params);
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(sampler.Sample(logits.data(), 50, {}));
  return tokens;
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedDifferent) {
  const std::vector<int32_t> a = Draws(42, 100);
  EXPECT_EQ(a, Draws(42, 100));
  EXPECT_NE(a, Draws(43, 100));
  // The RNG advances across calls: a sequence of draws is not one token repeated.
  int num_distinct = 0;
  std::vector<bool> seen(50, false);
  for (const int32_t t : a) {
    if (!seen[static_cast<size_t>(t)]) ++num_distinct;
    seen[static_cast<size_t>(t)] = true;
  }
  EXPECT_GT(num_distinct, 20);
}

TEST(SamplerTest, FrequenciesMatchSoftmaxAtTemperatureOne) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, 3.0f, -1.0f};
  std::vector<double> expected(logits.size());
  double z = 0.0;
  for (const float l : logits) z += std::exp(static_cast<double>(l));
  for (size_t i = 0; i < logits.size(); ++i) expected[i] = std::exp(logits[i]) / z;

  SamplingParams params;
  params.seed = 7;
  Sampler sampler(params);
  constexpr int kDraws = 20000;
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < kDraws; ++i) {
    ++counts[static_cast<size_t>(sampler.Sample(logits.data(), 5, {}))];
  }
  for (size_t i = 0; i < logits.size(); ++i) {
    // 0.012 absolute is > 4 standard errors for every p here (sqrt(0.25 / 20000) = 0.0035).
    EXPECT_NEAR(static_cast<double>(counts[i]) / kDraws, expected[i], 0.012) << "token " << i;
  }
}

TEST(SamplerTest, HandlesNegativeInfinityAndGrowingVocab) {
  SamplingParams params;
  Sampler sampler(params);
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::vector<float> small = {ninf, 0.0f, ninf};
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sampler.Sample(small.data(), 3, {}), 1);
  std::vector<float> large(1000, ninf);
  large[777] = 1.0f;
  EXPECT_EQ(sampler.Sample(large.data(), 1000, {}), 777);
}

TEST(SamplingParamsTest, ValidateRejectsEachBadField) {
  EXPECT_TRUE(Validate(SamplingParams{}).ok());
  EXPECT_TRUE(Validate(Greedy()).ok());
  const auto rejected = [](auto mutate) {
    SamplingParams params;
    mutate(params);
    return Validate(params).code() == absl::StatusCode::kInvalidArgument;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(rejected([](SamplingParams& p) { p.temperature = -0.1f; }));
  EXPECT_TRUE(rejected([&](SamplingParams& p) { p.temperature = nan; }));
  EXPECT_TRUE(rejected([](SamplingParams& p) { p.top_k = -1; }));
  EXPECT_TRUE(rejected([](SamplingParams& p) { p.top_p = 0.0f; }));
  EXPECT_TRUE(rejected([](SamplingParams& p) { p.top_p = 1.01f; }));
  EXPECT_TRUE(rejected([&](SamplingParams& p) { p.top_p = nan; }));
  EXPECT_TRUE(rejected([](SamplingParams& p) { p.min_p = -0.01f; }));
  EXPECT_TRUE(rejected([](SamplingParams& p) { p.min_p = 1.5f; }));
  EXPECT_TRUE(rejected([](SamplingParams& p) { p.repetition_penalty = 0.0f; }));
  EXPECT_TRUE(rejected([](SamplingParams& p) { p.repetition_penalty = -1.2f; }));
  EXPECT_TRUE(rejected([](SamplingParams& p) { p.penalty_window = -1; }));
  EXPECT_FALSE(rejected([](SamplingParams& p) { p.min_p = 1.0f; }));
  EXPECT_FALSE(rejected([](SamplingParams& p) { p.top_p = 1.0f; }));
}

TEST(SamplerTest, SkipDrawContinuesTheStreamOfAnotherSampler) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 42;
  const std::vector<float> logits = {0.1f, 0.5f, 0.2f, 0.9f, 0.3f};
  Sampler whole(params);
  std::vector<int32_t> expected;
  for (int i = 0; i < 20; ++i) expected.push_back(whole.Sample(logits.data(), 5, {}));
  Sampler first(params);  // draws token 0 (the prefill worker)
  Sampler rest(params);   // continues with tokens 1.. (the decode worker)
  EXPECT_EQ(first.Sample(logits.data(), 5, {}), expected[0]);
  rest.SkipDraw();
  for (int i = 1; i < 20; ++i) EXPECT_EQ(rest.Sample(logits.data(), 5, {}), expected[i]) << i;
}

// Speculative steps peek at the draws ahead and take only the emitted tokens': peeking changes
// nothing a later draw sees, however far it looked, and greedy samplers have no draws.
TEST(SamplerTest, PeekedDrawsAreTheNextDrawsAndTakingThemContinuesTheStream) {
  SamplingParams params;
  params.temperature = 0.8f;
  params.seed = 7;
  Sampler plain(params), peeking(params);
  std::vector<double> draws;
  std::vector<int32_t> ids;
  for (int i = 0; i < 12; ++i) draws.push_back(plain.NextRow({}, &ids).uniform);
  EXPECT_EQ(peeking.PeekUniform(3), draws[3]);  // the 4th draw, peeked first
  EXPECT_EQ(peeking.PeekUniform(0), draws[0]);
  EXPECT_EQ(peeking.PeekUniform(3), draws[3]);  // peeking twice takes nothing
  peeking.SkipDraw();                           // one token emitted
  EXPECT_EQ(peeking.PeekUniform(0), draws[1]);
  EXPECT_EQ(peeking.PeekUniform(5), draws[6]);  // past what was peeked before
  peeking.SkipDraw();
  peeking.SkipDraw();
  for (int i = 3; i < 12; ++i) EXPECT_EQ(peeking.NextRow({}, &ids).uniform, draws[i]) << i;
  params.temperature = 0.0f;
  Sampler greedy(params);
  EXPECT_EQ(greedy.PeekUniform(2), 0.0);
}

// The draw walks the kept ids in ascending id order, not in probability order: with
// probabilities {0.2, 0.5, 0.3}, the thirds of [0, 1) below 0.2, 0.7 and 1 go to ids 0, 1, 2.
TEST(SampleRowTest, DrawWalksKeptIdsInAscendingOrder) {
  const std::vector<float> logits = LogitsOf({0.2f, 0.5f, 0.3f});
  kernels::SamplingScratch scratch;
  kernels::SamplingRow row;
  row.temperature = 1.0f;
  const auto pick = [&](double uniform) {
    row.uniform = uniform;
    return kernels::SampleRow(logits, row, {}, &scratch);
  };
  EXPECT_EQ(pick(0.0), 0);
  EXPECT_EQ(pick(0.19), 0);
  EXPECT_EQ(pick(0.21), 1);
  EXPECT_EQ(pick(0.69), 1);
  EXPECT_EQ(pick(0.71), 2);
  EXPECT_EQ(pick(0.999999), 2);
  row.top_k = 2;  // drops id 0: ids 1, 2 share [0, 1) as 0.625 / 0.375
  EXPECT_EQ(pick(0.0), 1);
  EXPECT_EQ(pick(0.62), 1);
  EXPECT_EQ(pick(0.63), 2);
}

TEST(SampleRowTest, RepeatedPenalisedIdIsPenalisedOnce) {
  kernels::SamplingScratch scratch;
  kernels::SamplingRow row;  // greedy
  row.repetition_penalty = 1.2f;
  const std::vector<float> logits = {2.0f, 1.5f};  // 2 / 1.2 > 1.5, but 2 / 1.44 < 1.5
  EXPECT_EQ(kernels::SampleRow(logits, row, std::vector<int32_t>{0}, &scratch), 0);
  EXPECT_EQ(kernels::SampleRow(logits, row, std::vector<int32_t>{0, 0, 0}, &scratch), 0);
}

TEST(SampleRowTest, NanCountsAsNegativeInfinityAndNonFiniteMaxIsArgmax) {
  kernels::SamplingScratch scratch;
  kernels::SamplingRow row;
  row.temperature = 1.0f;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const double u : {0.0, 0.3, 0.6, 0.99}) {
    row.uniform = u;
    EXPECT_EQ(kernels::SampleRow(std::vector<float>{nan, 0.0f, nan}, row, {}, &scratch), 1);
    EXPECT_EQ(kernels::SampleRow(std::vector<float>{-inf, -inf, nan}, row, {}, &scratch), 0);
    EXPECT_EQ(kernels::SampleRow(std::vector<float>{0.0f, inf, 5.0f, inf}, row, {}, &scratch), 1);
  }
}

// Sample is NextRow (one draw) followed by the reference on the same row and penalised ids.
TEST(SamplerTest, SampleIsNextRowThenTheReference) {
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 20;
  params.top_p = 0.95f;
  params.repetition_penalty = 1.3f;
  params.penalty_window = 8;
  params.seed = 99;
  Sampler whole(params), split(params);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> logit(-3.0f, 3.0f);
  std::vector<int32_t> history = {1, 2, 3, 2, 1};
  kernels::SamplingScratch scratch;
  for (int step = 0; step < 200; ++step) {
    std::vector<float> logits(64);
    for (float& l : logits) l = logit(rng);
    const int32_t want = whole.Sample(logits.data(), 64, history);
    std::vector<int32_t> ids = {7};  // NextRow appends
    const kernels::SamplingRow row = split.NextRow(history, &ids);
    ASSERT_EQ(kernels::SampleRow(logits, row, absl::MakeConstSpan(ids).subspan(1), &scratch), want)
        << "step " << step;
    history.push_back(want);
  }
}

TEST(SamplerTest, NextRowDrawsOncePerSampledTokenAndNeverWhenGreedy) {
  SamplingParams params;
  params.seed = 3;
  Sampler a(params), b(params);
  std::vector<int32_t> ids;
  const double first = a.NextRow({}, &ids).uniform;
  b.SkipDraw();
  EXPECT_EQ(a.NextRow({}, &ids).uniform, b.NextRow({}, &ids).uniform);
  EXPECT_NE(first, a.NextRow({}, &ids).uniform);
  EXPECT_GE(first, 0.0);
  EXPECT_LT(first, 1.0);

  params.temperature = 0.0f;
  Sampler greedy(params);
  const kernels::SamplingRow row = greedy.NextRow({}, &ids);
  EXPECT_EQ(row.temperature, 0.0f);
  EXPECT_EQ(row.uniform, 0.0);
  EXPECT_TRUE(ids.empty()) << "no penalty, no ids";
}

TEST(SamplerTest, NextRowListsTheWindowsDistinctIds) {
  SamplingParams params;
  params.repetition_penalty = 1.2f;
  params.penalty_window = 4;
  Sampler sampler(params);
  std::vector<int32_t> ids = {42};
  const std::vector<int32_t> history = {5, 9, 3, 5, 7, 3};  // window: 3 5 7 3
  const kernels::SamplingRow row = sampler.NextRow(history, &ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{42, 3, 5, 7}));
  EXPECT_EQ(row.repetition_penalty, 1.2f);
  ids.clear();
  sampler.NextRow(history, &ids);  // the marks of the previous call were cleared
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 5, 7}));
  params.repetition_penalty = 1.0f;
  Sampler off(params);
  ids.clear();
  off.NextRow(history, &ids);
  EXPECT_TRUE(ids.empty());
}

}  // namespace
}  // namespace sparseserve::sampling
