// Tiny Hugging Face checkpoints (tools/make_tiny_hf.py, transformers float32): our tokenizer
// ids, every prompt position's top-5 logits (1e-4 relative) and 16 greedy tokens must match; for
// the sliding-window models also a prompt of several windows and 200 greedy tokens after it.
#include <algorithm>
#include <fstream>

#include "common/core/thread_pool.h"
#include "common/engine/generator.h"
#include "common/engine/model_runner.h"
#include "common/engine/model_source.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "nlohmann/json.hpp"

namespace sparseserve::engine {
namespace {

class HfGoldenTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    dir_ = std::string(SPARSESERVE_TEST_DATA_DIR) + "/" + GetParam();
    std::ifstream in(dir_ + "/golden.json");
    ASSERT_TRUE(in.good()) << dir_;
    golden_ = nlohmann::json::parse(in);
    auto src = OpenModelSource(dir_);
    ASSERT_TRUE(src.ok()) << src.status();
    source_ = std::move(*src);
  }

  std::string dir_;
  nlohmann::json golden_;
  ModelSource source_;
  core::ThreadPool pool_{2};
  kernels::CpuBackend backend_{&pool_};
};

TEST_P(HfGoldenTest, TokenizerIdsMatch) {
  for (const auto& c : golden_["tokenizer"]) {
    const std::string text = c["text"];
    auto ids = source_.tokenizer->Encode(text, true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<int32_t>>()) << "text: " << text;
    auto raw = source_.tokenizer->Encode(text, false);
    ASSERT_TRUE(raw.ok());
    EXPECT_EQ(*raw, c["ids_no_special"].get<std::vector<int32_t>>()) << "text: " << text;
  }
}

TEST_P(HfGoldenTest, PromptLogitsMatchTransformers) {
  auto model = model::LlamaModel::Load(source_.config, *source_.weights, source_.naming, &backend_);
  ASSERT_TRUE(model.ok()) << model.status();
  model::PagedKvCacheShape shape{source_.config.num_layers, 8, 16, source_.config.num_kv_heads,
                                 source_.config.head_dim};
  auto cache = model::PagedKvCache::Create(shape, backend_);
  ASSERT_TRUE(cache.ok());
  for (const auto& p : golden_["prompts"]) {
    model::ForwardSequence seq;
    seq.tokens = p["ids"].get<std::vector<int32_t>>();
    seq.block_table = {3, 1, 6, 0, 2, 7, 4, 5};  // scattered on purpose
    seq.logits = model::LogitRows::kAll;
    auto logits = (*model)->Forward({seq}, **cache);
    ASSERT_TRUE(logits.ok()) << logits.status();
    ASSERT_EQ(logits->dim(0), static_cast<int64_t>(seq.tokens.size()));
    for (size_t row = 0; row < seq.tokens.size(); ++row) {
      const auto& top5 = p["top5"][row];
      for (int k = 0; k < 5; ++k) {
        const int id = top5["ids"][k];
        const float ref = top5["logits"][k];
        const float got = logits->GetFloat({static_cast<int64_t>(row), id});
        EXPECT_NEAR(got, ref, 1e-4f * std::max(1.0f, std::abs(ref)))
            << GetParam() << " prompt '" << p["text"] << "' row " << row << " token " << id;
      }
    }
  }
}

TEST_P(HfGoldenTest, GreedyContinuationMatchesTransformers) {
  ModelRunnerOptions options;
  options.block_tokens = 16;
  auto runner = ModelRunner::Create(source_, &backend_, options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  const int vocab = source_.config.vocab_size;
  for (const auto& p : golden_["prompts"]) {
    SequenceKv seq;
    auto logits = (*runner)->Prefill(p["ids"].get<std::vector<int32_t>>(), seq);
    ASSERT_TRUE(logits.ok()) << logits.status();
    std::vector<int32_t> out;
    for (int step = 0; step < 16; ++step) {
      const float* row = logits->data<float>();
      const int32_t next = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
      out.push_back(next);
      if (step == 15) break;
      logits = (*runner)->Decode({&seq}, {next});
      ASSERT_TRUE(logits.ok()) << logits.status();
    }
    EXPECT_EQ(out, p["greedy"].get<std::vector<int32_t>>()) << GetParam() << ": " << p["text"];
    (*runner)->Release(seq);
  }
  EXPECT_EQ((*runner)->pool().num_used_blocks(), 0);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, HfGoldenTest,
                         ::testing::Values("tiny_llama", "tiny_qwen2", "tiny_mistral",
                                           "tiny_qwen2_swa"));

// Sliding-window models (issue 17): golden.json's "long" prompt spans about five windows and
// transformers generated 200 tokens after it, one full forward pass per token (its eager
// attention with the sliding-window mask: the brute-force reference).
using HfWindowGoldenTest = HfGoldenTest;

TEST_P(HfWindowGoldenTest, LongPromptLogitsMatchTransformersEverywhere) {
  const auto& g = golden_["long"];
  auto model = model::LlamaModel::Load(source_.config, *source_.weights, source_.naming, &backend_);
  ASSERT_TRUE(model.ok()) << model.status();
  model::ForwardSequence seq;
  seq.tokens = g["ids"].get<std::vector<int32_t>>();
  const int blocks = static_cast<int>(seq.tokens.size() + 15) / 16;
  model::PagedKvCacheShape shape{source_.config.num_layers, blocks, 16, source_.config.num_kv_heads,
                                 source_.config.head_dim};
  auto cache = model::PagedKvCache::Create(shape, backend_);
  ASSERT_TRUE(cache.ok());
  for (int b = 0; b < blocks; ++b) seq.block_table.push_back(blocks - 1 - b);  // reversed
  seq.logits = model::LogitRows::kAll;
  auto logits = (*model)->Forward({seq}, **cache);
  ASSERT_TRUE(logits.ok()) << logits.status();
  for (size_t row = 0; row < seq.tokens.size(); ++row) {
    const auto& top5 = g["top5"][row];
    for (int k = 0; k < 5; ++k) {
      const int id = top5["ids"][k];
      const float ref = top5["logits"][k];
      const float got = logits->GetFloat({static_cast<int64_t>(row), id});
      ASSERT_NEAR(got, ref, 1e-4f * std::max(1.0f, std::abs(ref)))
          << GetParam() << " row " << row << " token " << id;
    }
  }
}

// Prefill in 16-token chunks and 200 greedy decode steps, with a KV pool too small for the whole
// sequence (10 blocks of 16 tokens for 500) where every layer is windowed: blocks that left the
// window go back to the pool as the sequence goes (rolling KV), at most window / block + 2 held.
TEST_P(HfWindowGoldenTest, LongGreedyMatchesTransformersWithRollingKv) {
  const auto& g = golden_["long"];
  const model::ModelConfig& c = source_.config;
  ASSERT_GT(c.sliding_window, 0);
  ModelRunnerOptions options;
  options.block_tokens = 16;
  options.prefill_chunk_tokens = 16;
  const bool rolling = c.AllLayersWindowed();
  options.kv_cache_tokens = rolling ? 10 * 16 : 512;
  auto runner = ModelRunner::Create(source_, &backend_, options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_EQ((*runner)->rolling_window(), rolling ? c.sliding_window : 0);
  const std::vector<int32_t> want = g["greedy"].get<std::vector<int32_t>>();
  const int vocab = c.vocab_size;
  SequenceKv seq;
  auto logits = (*runner)->Prefill(g["ids"].get<std::vector<int32_t>>(), seq);
  ASSERT_TRUE(logits.ok()) << logits.status();
  std::vector<int32_t> out;
  for (size_t step = 0; step < want.size(); ++step) {
    const float* row = logits->data<float>();
    out.push_back(static_cast<int32_t>(std::max_element(row, row + vocab) - row));
    if (step + 1 == want.size()) break;
    logits = (*runner)->Decode({&seq}, {out.back()});
    ASSERT_TRUE(logits.ok()) << logits.status() << " at step " << step;
  }
  EXPECT_EQ(out, want) << GetParam();
  if (rolling) {
    EXPECT_LE(seq.peak_blocks, c.sliding_window / 16 + 2);
    EXPECT_GT(seq.released_blocks, 0);
    // Only the window's blocks are still held.
    EXPECT_LE((*runner)->pool().num_used_blocks(), c.sliding_window / 16 + 2);
  }
  (*runner)->Release(seq);
  EXPECT_EQ((*runner)->pool().num_used_blocks(), 0);
}

// Under rolling KV the blocks that left the window stay in the prefix cache until evicted: the
// same prompt again reuses them (the part before its window is released again at once) and gives
// the same output.
TEST_P(HfWindowGoldenTest, PrefixCacheServesARollingModelsPrompt) {
  const auto& g = golden_["long"];
  ModelRunnerOptions options;
  options.block_tokens = 16;
  options.prefill_chunk_tokens = 32;
  options.kv_cache_tokens = 64 * 16;  // every block of the prompt stays cached
  auto runner = ModelRunner::Create(source_, &backend_, options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  Generator generator(runner->get(), source_.tokenizer.get());
  GenerationRequest request;
  request.prompt_tokens = g["ids"].get<std::vector<int32_t>>();
  request.max_tokens = 40;
  request.ignore_eos = true;
  request.sampling.temperature = 0;
  auto first = generator.Generate(request);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = generator.Generate(request);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(first->num_cached_prompt_tokens, 0);
  EXPECT_GT(second->num_cached_prompt_tokens, 256) << GetParam();
  EXPECT_EQ(second->output_tokens, first->output_tokens);
  const std::vector<int32_t> want = g["greedy"].get<std::vector<int32_t>>();
  EXPECT_EQ(second->output_tokens, std::vector<int32_t>(want.begin(), want.begin() + 40));
  if ((*runner)->rolling_window() > 0) {
    EXPECT_LE(second->peak_kv_blocks, source_.config.sliding_window / 16 + 2);
  }
}

// Prompt lookup drafts chains (each row at its own position), so it stays exact with the window
// and rolling KV; Lookahead's window rows would not be, and are refused by name.
TEST_P(HfWindowGoldenTest, PromptLookupEqualsTransformersAndLookaheadIsRefused) {
  const auto& g = golden_["long"];
  ModelRunnerOptions options;
  options.block_tokens = 16;
  options.prefill_chunk_tokens = 32;
  options.kv_cache_tokens = 512;
  auto runner = ModelRunner::Create(source_, &backend_, options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  Generator generator(runner->get(), source_.tokenizer.get());
  GenerationRequest request;
  request.prompt_tokens = g["ids"].get<std::vector<int32_t>>();
  request.max_tokens = 200;
  request.ignore_eos = true;
  request.sampling.temperature = 0;
  request.options.spec.method = SpecMethod::kPromptLookup;
  request.options.spec.max_draft = 4;
  request.options.spec.controller = false;
  auto result = generator.Generate(request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->output_tokens, g["greedy"].get<std::vector<int32_t>>()) << GetParam();
  EXPECT_GT(result->spec_draft_tokens, 0);
  request.options.spec.method = SpecMethod::kLookahead;
  auto refused = generator.Generate(request);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_NE(refused.status().message().find("sliding window"), std::string::npos);
  EXPECT_EQ((*runner)->pool().num_used_blocks(), 0);
}

INSTANTIATE_TEST_SUITE_P(WindowedModels, HfWindowGoldenTest,
                         ::testing::Values("tiny_mistral", "tiny_qwen2_swa"));

}  // namespace
}  // namespace sparseserve::engine
