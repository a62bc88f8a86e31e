// LlamaModel's TokenSwift draft heads (LoadDraftHeads, ForwardSample's DraftPass) on the CPU
// backend with the random `tiny` model: a head with a zero projection repeats the model's own
// logits (h_i = h_{i-1}), a head whose projection flips the residual stream ranks the vocabulary
// upside down (the final norm is scale-free), the repetition penalty is applied before ranking,
// the heads read after a step (TokenSwift without a draft pass) equal those of the step's own
// pass at the same rows, and bad adapters and steps are refused with messages naming what is
// wrong.
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "common/core/thread_pool.h"
#include "common/model/llama_model.h"
#include "common/model/model_presets.h"
#include "common/model/safetensors_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/unit/model_file_writers.h"

namespace sparseserve::model {
namespace {

using ::testing::HasSubstr;

class DraftHeadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ModelConfig> c = SyntheticModelConfig("tiny");
    ASSERT_TRUE(c.ok()) << c.status();
    config_ = *c;
    absl::StatusOr<std::unique_ptr<LlamaModel>> model =
        LlamaModel::CreateRandom(config_, &backend_, 7);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    PagedKvCacheShape shape;
    shape.num_layers = config_.num_layers;
    shape.num_blocks = 4;
    shape.block_tokens = 16;
    shape.num_kv_heads = config_.num_kv_heads;
    shape.head_dim = config_.head_dim;
    absl::StatusOr<std::unique_ptr<PagedKvCache>> cache = PagedKvCache::Create(shape, backend_);
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = std::move(*cache);
  }

  // An adapter of heads whose projections are `scale` times the identity (norm weights 1).
  absl::Status LoadHeads(const std::vector<float>& scales, int64_t hidden = -1) {
    if (hidden < 0) hidden = config_.hidden_size;
    std::vector<testing::SafetensorsTestTensor> tensors;
    for (size_t j = 0; j < scales.size(); ++j) {
      std::vector<float> norm(static_cast<size_t>(hidden), 1.0f);
      std::vector<float> proj(static_cast<size_t>(hidden * hidden), 0.0f);
      for (int64_t i = 0; i < hidden; ++i) proj[static_cast<size_t>(i * hidden + i)] = scales[j];
      tensors.push_back(
          {absl::StrCat("heads.", j, ".norm.weight"), "F32", {hidden}, testing::RawBytes(norm)});
      tensors.push_back({absl::StrCat("heads.", j, ".proj.weight"),
                         "F32",
                         {hidden, hidden},
                         testing::RawBytes(proj)});
    }
    bytes_ = testing::BuildSafetensors(tensors);
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::FromBuffer(
        "heads", reinterpret_cast<const uint8_t*>(bytes_.data()), bytes_.size(), nullptr);
    if (!file.ok()) return file.status();
    return model_->LoadDraftHeads(**file);
  }

  // Two sequences of prompts, every row's logits (Forward) and its heads' top `k` (ForwardSample).
  struct Run {
    std::vector<float> logits;   // [rows, vocab]
    std::vector<int32_t> heads;  // [heads][rows][k]
    std::vector<int32_t> sampled;
  };
  absl::StatusOr<Run> RunStep(int k, const kernels::SamplingBatch* sampling = nullptr) {
    std::vector<ForwardSequence> batch(2);
    for (int s = 0; s < 2; ++s) {
      for (int i = 0; i < 5 + s; ++i) batch[s].tokens.push_back((i * 31 + s * 7 + 3) % 200);
      batch[s].block_table = {2 * s, 2 * s + 1};
      batch[s].logits = LogitRows::kAll;
    }
    Run run;
    absl::StatusOr<Tensor> logits = model_->Forward(batch, *cache_);
    if (!logits.ok()) return logits.status();
    run.logits.assign(logits->data<float>(), logits->data<float>() + logits->numel());
    kernels::SamplingBatch greedy;
    greedy.rows.resize(11);  // temperature 0: argmax
    DraftPass pass;
    pass.head_top_k = k;
    absl::StatusOr<std::vector<int32_t>> next = model_->ForwardSample(
        batch, *cache_, sampling != nullptr ? *sampling : greedy, nullptr, &pass);
    if (!next.ok()) return next.status();
    run.sampled = *next;
    run.heads = pass.head_tokens;
    return run;
  }

  // The `k` best ids of row `r` of `logits` (descending, ties to the lower id); `flip` ranks by
  // the negated logits.
  std::vector<int32_t> Best(const std::vector<float>& logits, int r, int k, bool flip) const {
    const int64_t v = config_.vocab_size;
    std::vector<int32_t> ids(static_cast<size_t>(v));
    std::iota(ids.begin(), ids.end(), 0);
    const float* row = logits.data() + r * v;
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
      return flip ? row[a] < row[b] : row[a] > row[b];
    });
    return std::vector<int32_t>(ids.begin(), ids.begin() + k);
  }

  core::ThreadPool pool_{2};
  kernels::CpuBackend backend_{&pool_};
  ModelConfig config_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<PagedKvCache> cache_;
  std::string bytes_;
};

TEST_F(DraftHeadsTest, ZeroProjectionRepeatsTheLogitsAndAFlipReversesTheRanking) {
  // Head 0 is -1e4 I: h1 = h0 (1 - 1e4 / rms(h0)), the residual stream negated and scaled, so
  // its logits are the model's negated. Head 1 (zero) keeps h1; head 2 flips back.
  ASSERT_TRUE(LoadHeads({-1e4f, 0.0f, -1e4f}).ok());
  ASSERT_EQ(model_->num_draft_heads(), 3);
  absl::StatusOr<Run> run = RunStep(4);
  ASSERT_TRUE(run.ok()) << run.status();
  const int rows = 11, k = 4;
  ASSERT_EQ(run->heads.size(), static_cast<size_t>(3 * rows * k));
  for (int r = 0; r < rows; ++r) {
    const auto head = [&](int h) {
      const int32_t* p = run->heads.data() + (h * rows + r) * k;
      return std::vector<int32_t>(p, p + k);
    };
    EXPECT_EQ(head(0), Best(run->logits, r, k, /*flip=*/true)) << "row " << r;
    EXPECT_EQ(head(1), head(0)) << "row " << r;
    EXPECT_EQ(head(2), Best(run->logits, r, k, /*flip=*/false)) << "row " << r;
    EXPECT_EQ(head(2)[0], run->sampled[r]) << "row " << r;  // the greedy token
  }
}

TEST_F(DraftHeadsTest, RepetitionPenaltyIsAppliedBeforeRanking) {
  ASSERT_TRUE(LoadHeads({0.0f}).ok());
  absl::StatusOr<Run> plain = RunStep(2);
  ASSERT_TRUE(plain.ok()) << plain.status();
  // Row 0's best id, penalised hard (twice listed: once), drops out of its top 2.
  const int32_t best = plain->heads[0];
  kernels::SamplingBatch sampling;
  sampling.rows.resize(11);
  sampling.rows[0].repetition_penalty = 1e6f;
  sampling.penalized_ids = {best, best};
  sampling.penalized_begin.assign(12, 2);
  sampling.penalized_begin[0] = 0;
  absl::StatusOr<Run> penalised = RunStep(2, &sampling);
  ASSERT_TRUE(penalised.ok()) << penalised.status();
  EXPECT_NE(penalised->heads[0], best);
  EXPECT_NE(penalised->heads[1], best);
  EXPECT_EQ(penalised->heads[0], plain->heads[1]);  // the runner-up moves up
  for (int r = 1; r < 11; ++r) EXPECT_EQ(penalised->heads[r * 2], plain->heads[r * 2]) << r;
}

TEST_F(DraftHeadsTest, BadAdaptersAndStepsAreRefused) {
  absl::Status s = LoadHeads({0.0f}, config_.hidden_size + 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("heads.0.norm.weight"));
  EXPECT_EQ(model_->num_draft_heads(), 0);  // nothing half-loaded
  s = LoadHeads({});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("heads.0.proj.weight"));
  ASSERT_TRUE(LoadHeads({0.0f}).ok());
  // The heads start from every row: a step with rows without logits is refused.
  ForwardSequence seq;
  seq.tokens = {3, 4, 5};
  seq.block_table = {0};
  seq.logits = LogitRows::kLast;
  kernels::SamplingBatch sampling;
  sampling.rows.resize(1);
  DraftPass pass;
  pass.head_top_k = 2;
  absl::StatusOr<std::vector<int32_t>> next =
      model_->ForwardSample({seq}, *cache_, sampling, nullptr, &pass);
  EXPECT_EQ(next.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(next.status().message(), HasSubstr("every row"));
  // An early exit without Kangaroo's adapter.
  seq.logits = LogitRows::kAll;
  sampling.rows.resize(3);
  pass = DraftPass();
  pass.early_exit = true;
  next = model_->ForwardSample({seq}, *cache_, sampling, nullptr, &pass);
  EXPECT_EQ(next.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(DraftHeadsTest, HeadsReadAfterAStepEqualThoseOfItsOwnPassAtTheSameRows) {
  ASSERT_TRUE(LoadHeads({-1e4f, 0.5f}).ok());
  kernels::SamplingBatch none;
  // Nothing ran yet: no residual stream to read.
  absl::StatusOr<std::vector<int32_t>> heads = model_->DraftHeadsAtLastStep({0}, none, 3);
  EXPECT_EQ(heads.status().code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<Run> run = RunStep(3);  // the pass's heads at all 11 rows
  ASSERT_TRUE(run.ok()) << run.status();
  const int rows = 11, k = 3;
  // Rows 10 (the second sequence's last), 4 and 0, penalty-free; then the same rows again.
  const std::vector<int32_t> picked = {10, 4, 0};
  for (int round = 0; round < 2; ++round) {
    heads = model_->DraftHeadsAtLastStep(picked, none, k);
    ASSERT_TRUE(heads.ok()) << heads.status();
    ASSERT_EQ(heads->size(), 2u * picked.size() * k);
    for (int h = 0; h < 2; ++h) {
      for (size_t i = 0; i < picked.size(); ++i) {
        const int32_t* got = heads->data() + (h * picked.size() + i) * k;
        const int32_t* want = run->heads.data() + (h * rows + picked[i]) * k;
        EXPECT_EQ(std::vector<int32_t>(got, got + k), std::vector<int32_t>(want, want + k))
            << "head " << h << " row " << picked[i] << " round " << round;
      }
    }
  }
  heads = model_->DraftHeadsAtLastStep({11}, none, k);
  EXPECT_EQ(heads.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(heads.status().message(), HasSubstr("row 11"));
}

}  // namespace
}  // namespace sparseserve::model
