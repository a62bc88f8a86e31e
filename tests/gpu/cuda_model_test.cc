// The whole model on the CUDA backend against the CPU reference: stories260K (GGUF, head_dim 8:
// the generic attention kernel) and the tiny Hugging Face checkpoints (head_dim 16), logits
// within 2e-2 relative (bf16) and stories260K's greedy continuation token for token.
#include <algorithm>
#include <fstream>

#include "common/engine/model_runner.h"
#include "common/engine/model_source.h"
#include "nlohmann/json.hpp"
#include "tests/gpu/cuda_test_util.h"
#include "tests/testing/test_model.h"

namespace sparseserve::testing {
namespace {

using engine::ModelRunner;
using engine::ModelRunnerOptions;
using engine::SequenceKv;

// The checkpoint's tensors rounded to bf16 (kept as f32): the CPU reference of the model the GPU
// actually runs, so the comparison measures the kernels, not the weights' rounding.
class Bf16RoundedFile final : public model::TensorFile {
 public:
  explicit Bf16RoundedFile(std::unique_ptr<model::TensorFile> inner) : inner_(std::move(inner)) {}
  std::vector<std::string> TensorNames() const override { return inner_->TensorNames(); }
  bool HasTensor(absl::string_view name) const override { return inner_->HasTensor(name); }
  absl::StatusOr<Tensor> GetTensor(absl::string_view name) const override {
    absl::StatusOr<Tensor> t = inner_->GetTensor(name);
    if (!t.ok()) return t;
    absl::StatusOr<Tensor> f32 = t->ToF32();
    if (!f32.ok()) return f32;
    float* p = f32->data<float>();
    for (int64_t i = 0; i < f32->numel(); ++i) p[i] = Bf16ToF32(F32ToBf16(p[i]));
    return f32;
  }

 private:
  std::unique_ptr<model::TensorFile> inner_;
};

class CudaModelTest : public CudaTest {
 protected:
  // Greedy-decodes `steps` tokens after `prompt` on `backend`; collects every logits row.
  static void Greedy(const engine::ModelSource& source, kernels::Backend& backend,
                     const std::vector<int32_t>& prompt, int steps, std::vector<int32_t>& tokens,
                     std::vector<Tensor>& logits_rows) {
    ModelRunnerOptions options;
    options.block_tokens = 16;
    options.kv_cache_tokens = 4096;
    auto runner = ModelRunner::Create(source, &backend, options);
    ASSERT_TRUE(runner.ok()) << runner.status();
    SequenceKv seq;
    auto logits = (*runner)->Prefill(prompt, seq);
    ASSERT_TRUE(logits.ok()) << logits.status();
    const int vocab = source.config.vocab_size;
    for (int step = 0; step < steps; ++step) {
      logits_rows.push_back(*logits);
      const float* row = logits->data<float>();
      const int32_t next = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
      tokens.push_back(next);
      if (step + 1 == steps) break;
      logits = (*runner)->Decode({&seq}, {next});
      ASSERT_TRUE(logits.ok()) << logits.status();
    }
    (*runner)->Release(seq);
    EXPECT_EQ((*runner)->pool().num_used_blocks(), 0);
  }

  // Per-step ‖Δlogits‖/‖ref‖ while both runs still see the same tokens: {median, worst}.
  static std::pair<double, double> StepErrors(const std::vector<Tensor>& got,
                                              const std::vector<int32_t>& got_ids,
                                              const std::vector<Tensor>& ref,
                                              const std::vector<int32_t>& ref_ids) {
    std::vector<double> errors;
    for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
      errors.push_back(RelError(got[i], ref[i]));
      if (got_ids[i] != ref_ids[i]) break;
    }
    if (errors.empty()) return {0, 0};
    const double worst = *std::max_element(errors.begin(), errors.end());
    std::nth_element(errors.begin(), errors.begin() + errors.size() / 2, errors.end());
    return {errors[errors.size() / 2], worst};
  }

  void CompareOnModel(const std::string& path, int steps, bool require_same_tokens,
                      double median_bound, double worst_bound) {
    auto source = engine::OpenModelSource(path);
    ASSERT_TRUE(source.ok()) << source.status();
    auto rounded = engine::OpenModelSource(path);
    ASSERT_TRUE(rounded.ok()) << rounded.status();
    rounded->weights = std::make_unique<Bf16RoundedFile>(std::move(rounded->weights));
    auto prompt = source->tokenizer->Encode("Once upon a time", true);
    ASSERT_TRUE(prompt.ok());
    std::vector<int32_t> cpu_tokens, bf16_tokens, gpu_tokens;
    std::vector<Tensor> cpu_logits, bf16_logits, gpu_logits;
    Greedy(*source, cpu_, *prompt, steps, cpu_tokens, cpu_logits);
    Greedy(*rounded, cpu_, *prompt, steps, bf16_tokens, bf16_logits);
    Greedy(*source, *gpu_, *prompt, steps, gpu_tokens, gpu_logits);
    ASSERT_EQ(gpu_logits.size(), cpu_logits.size());
    // The reference is the CPU running the same bf16-rounded weights in f32: what remains is the
    // bf16 activations and KV of the CUDA path. The criterion is the typical step (median); the
    // worst step may reach a few times that where a step's logits are nearly flat, so it only has
    // a looser guard against real faults.
    const auto [median, worst] = StepErrors(gpu_logits, gpu_tokens, bf16_logits, bf16_tokens);
    const auto [median_f32, worst_f32] = StepErrors(gpu_logits, gpu_tokens, cpu_logits, cpu_tokens);
    const auto [median_w, worst_w] = StepErrors(bf16_logits, bf16_tokens, cpu_logits, cpu_tokens);
    std::printf(
        "%s, %zu steps, logits rel err median / worst: CUDA vs CPU with the same bf16 weights "
        "%.2e / %.2e; vs CPU with the file's weights %.2e / %.2e (rounding the weights alone "
        "%.2e / %.2e)\n",
        path.c_str(), cpu_logits.size(), median, worst, median_f32, worst_f32, median_w, worst_w);
    EXPECT_LT(median, median_bound) << path;
    EXPECT_LT(worst, worst_bound) << path;
    if (require_same_tokens) {
      EXPECT_EQ(gpu_tokens, cpu_tokens) << path;
    }
  }
};

TEST_F(CudaModelTest, Stories260KMatchesCpuAndGolden) {
  const std::string path = FindTestModelFile("stories260K.gguf");
  if (path.empty()) GTEST_SKIP() << "stories260K not found (set SPARSESERVE_MODEL_MIRROR)";
  // The CPU run equals llama2.c's golden continuation (tests/unit, cli_generate_test.sh), so the
  // same tokens here make the CUDA run golden too.
  CompareOnModel(path, 60, /*require_same_tokens=*/true, /*median_bound=*/2e-2,
                 /*worst_bound=*/6e-2);
}

TEST_F(CudaModelTest, TinyHfCheckpointsMatchCpu) {
  for (const char* name : {"tiny_llama", "tiny_qwen2"}) {
    // Random-weight checkpoints are touchier than a trained model: rounding their weights to bf16
    // alone moves the logits by ~1.5e-2 (median) and 3.6e-2 (worst step), so their bf16 runs get
    // 3e-2 / 1e-1. Their prompt logits meet 2e-2 against transformers
    // (TinyHfPromptLogitsMatchTransformers).
    CompareOnModel(TestDataDir() + "/" + name, 16, /*require_same_tokens=*/false,
                   /*median_bound=*/3e-2, /*worst_bound=*/1e-1);
  }
}

TEST_F(CudaModelTest, TinyHfPromptLogitsMatchTransformers) {
  for (const char* name : {"tiny_llama", "tiny_qwen2"}) {
    const std::string dir = TestDataDir() + "/" + name;
    std::ifstream in(dir + "/golden.json");
    ASSERT_TRUE(in.good()) << dir;
    const nlohmann::json golden = nlohmann::json::parse(in);
    auto source = engine::OpenModelSource(dir);
    ASSERT_TRUE(source.ok()) << source.status();
    auto model =
        model::LlamaModel::Load(source->config, *source->weights, source->naming, gpu_.get());
    ASSERT_TRUE(model.ok()) << model.status();
    model::PagedKvCacheShape shape{source->config.num_layers, 8, 16, source->config.num_kv_heads,
                                   source->config.head_dim};
    auto cache = model::PagedKvCache::Create(shape, *gpu_);
    ASSERT_TRUE(cache.ok());
    for (const auto& p : golden["prompts"]) {
      model::ForwardSequence seq;
      seq.tokens = p["ids"].get<std::vector<int32_t>>();
      seq.block_table = {3, 1, 6, 0, 2, 7, 4, 5};
      seq.logits = model::LogitRows::kAll;
      auto logits = (*model)->Forward({seq}, **cache);
      ASSERT_TRUE(logits.ok()) << logits.status();
      double num = 0, den = 0;
      for (size_t row = 0; row < seq.tokens.size(); ++row) {
        for (int k = 0; k < 5; ++k) {
          const int id = p["top5"][row]["ids"][k];
          const double ref = p["top5"][row]["logits"][k].get<double>();
          const double got = logits->GetFloat({static_cast<int64_t>(row), id});
          num += (got - ref) * (got - ref);
          den += ref * ref;
        }
      }
      EXPECT_LT(std::sqrt(num / den), 2e-2) << name << " prompt " << p["text"];
    }
  }
}

// On CUDA a row's rounding may depend on its batch (GEMM tilings differ between one row and
// many), unlike the CPU reference: measured here, not required. 16 stories260K prompts decoded
// greedily alone and all together, and prefilled in chunks of 1, 7 and 64 tokens; prints how
// many sequences' tokens differ and where, and requires most of them to agree (a broken mixed
// step would disagree everywhere).
TEST_F(CudaModelTest, BatchedAndChunkedGreedyFlipsAreRare) {
  const std::string path = FindTestModelFile("stories260K.gguf");
  if (path.empty()) GTEST_SKIP() << "stories260K not found (set SPARSESERVE_MODEL_MIRROR)";
  auto source = engine::OpenModelSource(path);
  ASSERT_TRUE(source.ok()) << source.status();
  constexpr int kSeqs = 16, kSteps = 100;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kSeqs; ++i) {
    std::vector<int32_t> p = {1};
    for (int t = 0; t < 20 + 5 * i; ++t) p.push_back(3 + (t * 31 + i * 17) % 500);
    prompts.push_back(p);
  }
  kernels::SamplingBatch one;
  one.rows.resize(1);
  // Greedy continuations of every prompt: batched (one step for all) or alone, with a chunk size.
  auto run = [&](bool batched, int chunk) {
    ModelRunnerOptions options;
    options.block_tokens = 16;
    options.kv_cache_tokens = 16 * 1024;
    options.prefill_chunk_tokens = chunk;
    auto runner = ModelRunner::Create(*source, gpu_.get(), options);
    EXPECT_TRUE(runner.ok()) << runner.status();
    std::vector<SequenceKv> seqs(kSeqs);
    std::vector<std::vector<int32_t>> out(kSeqs);
    for (int i = 0; i < kSeqs; ++i) {
      auto first = (*runner)->PrefillSampled(prompts[i], seqs[i], one);
      EXPECT_TRUE(first.ok()) << first.status();
      out[i].push_back(*first);
    }
    for (int step = 1; step < kSteps; ++step) {
      if (batched) {
        std::vector<engine::StepRows> rows(kSeqs);
        kernels::SamplingBatch greedy;
        greedy.rows.resize(kSeqs);
        for (int i = 0; i < kSeqs; ++i) {
          rows[i].seq = &seqs[i];
          rows[i].tokens = {out[i].back()};
        }
        auto next = (*runner)->Step(rows, greedy);
        EXPECT_TRUE(next.ok()) << next.status();
        for (int i = 0; i < kSeqs; ++i) out[i].push_back((*next)[i]);
      } else {
        for (int i = 0; i < kSeqs; ++i) {
          engine::StepRows row;
          row.seq = &seqs[i];
          row.tokens = {out[i].back()};
          auto next = (*runner)->Step(absl::MakeConstSpan(&row, 1), one);
          EXPECT_TRUE(next.ok()) << next.status();
          out[i].push_back(next->front());
        }
      }
    }
    for (SequenceKv& seq : seqs) (*runner)->Release(seq);
    return out;
  };
  const auto alone = run(false, 512);
  auto report = [&](const char* what, const std::vector<std::vector<int32_t>>& got) {
    int flipped = 0;
    std::string where;
    for (int i = 0; i < kSeqs; ++i) {
      const auto diff = std::mismatch(got[i].begin(), got[i].end(), alone[i].begin());
      if (diff.first != got[i].end()) {
        ++flipped;
        where += " " + std::to_string(diff.first - got[i].begin());
      }
    }
    std::printf("greedy flips, %s vs alone (chunk 512): %d of %d sequences of %d tokens%s%s\n",
                what, flipped, kSeqs, kSteps, flipped ? "; first differing token at" : "",
                where.c_str());
    EXPECT_LE(flipped, kSeqs / 4) << what;
  };
  report("batched decode of 16", run(true, 512));
  report("prefill chunk 1", run(false, 1));
  report("prefill chunk 7", run(false, 7));
  report("prefill chunk 64", run(false, 64));
}

}  // namespace
}  // namespace sparseserve::testing
