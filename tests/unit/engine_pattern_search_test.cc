// MInference's offline pattern search (common/engine/pattern_search.h): the selection is the
// per-head argmin with ties to the earlier candidate; errors are relative L2 over every added
// step; the candidates stay within the budget by the cost model (A-shape exactly), come in the
// documented order and reject bad targets and short samples. And the attention probe through
// ModelRunner on stories260K: one call per layer per chunk with the dense output, none once unset.
#include <cmath>
#include <vector>

#include "common/core/thread_pool.h"
#include "common/engine/model_runner.h"
#include "common/engine/pattern_search.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/testing/test_model.h"

namespace sparseserve::engine {
namespace {

using kernels::HeadPattern;
using kernels::HeadPatternKind;

TEST(PatternSearchTest, SelectsTheSmallestErrorTiesToTheEarlier) {
  EXPECT_EQ(SelectCandidate(std::vector<double>{0.3, 0.1, 0.2}), 1);
  EXPECT_EQ(SelectCandidate(std::vector<double>{0.2, 0.1, 0.1}), 1);
  EXPECT_EQ(SelectCandidate(std::vector<double>{0.0, 0.0, 0.0}), 0);
  EXPECT_EQ(SelectCandidate(std::vector<double>{0.5}), 0);
}

TEST(PatternSearchTest, PicksEachHeadsClosestCandidate) {
  // 1 layer, 2 heads, head_dim 2, 3 candidates; dense rows [1, 0] per head.
  PatternSearch search(1, 2, 3);
  const std::vector<float> dense = {1, 0, 1, 0, 1, 0, 1, 0};  // [2 rows, 2 heads, 2]
  // Candidate c is off by err[c][head] in every element of that head.
  const double err[3][2] = {{0.5, 0.0}, {0.1, 0.3}, {0.1, 0.2}};
  for (int c = 0; c < 3; ++c) {
    std::vector<float> sparse = dense;
    for (int r = 0; r < 2; ++r) {
      for (int h = 0; h < 2; ++h) sparse[(r * 2 + h) * 2] += static_cast<float>(err[c][h]);
    }
    search.AddOutputs(0, c, sparse.data(), dense.data(), 2, 2);
  }
  EXPECT_NEAR(search.Error(0, 0, 0), 0.5, 1e-6);
  EXPECT_NEAR(search.Error(0, 1, 1), 0.3, 1e-6);
  std::vector<PatternCandidate> candidates(3);
  candidates[0].pattern = {HeadPatternKind::kVerticalSlash, 30, 100};
  candidates[1].pattern = {HeadPatternKind::kAShape, 64, 256};
  candidates[2].pattern = {HeadPatternKind::kBlockSparse, 4, 0};
  const PatternSearch::Selection s = search.Select(candidates);
  EXPECT_EQ(s.chosen, (std::vector<int>{1, 0}));  // head 0: 1 and 2 tie at 0.1
  EXPECT_EQ(s.config.at(0, 0), candidates[1].pattern);
  EXPECT_EQ(s.config.at(0, 1), candidates[0].pattern);
  EXPECT_NEAR(s.scores[0], 0.1, 1e-6);
  EXPECT_EQ(s.scores[1], 0.0);
}

TEST(PatternSearchTest, ErrorsAccumulateOverSteps) {
  // Two steps of one row: errors 3 (of norm 4) and 0 (of norm 3): sqrt(9 / 25), not a mean.
  PatternSearch search(1, 1, 1);
  const float dense_a[1] = {4}, sparse_a[1] = {7}, dense_b[1] = {3};
  search.AddOutputs(0, 0, sparse_a, dense_a, 1, 1);
  search.AddOutputs(0, 0, dense_b, dense_b, 1, 1);
  EXPECT_NEAR(search.Error(0, 0, 0), 0.6, 1e-9);
  // A zero reference: 0 when equal, 1 when not.
  PatternSearch zero(1, 1, 2);
  const float z[1] = {0}, one[1] = {1};
  zero.AddOutputs(0, 0, z, z, 1, 1);
  zero.AddOutputs(0, 1, one, z, 1, 1);
  EXPECT_EQ(zero.Error(0, 0, 0), 0.0);
  EXPECT_EQ(zero.Error(0, 0, 1), 1.0);
  search.AddWork(0, 10, 40);
  search.AddWork(0, 20, 60);
  EXPECT_NEAR(search.MeasuredDensity(0), 0.3, 1e-12);
}

TEST(PatternSearchTest, CandidatesMatchTheBudget) {
  for (const int64_t n : {511, 4096, 8191}) {
    for (const double target : {0.1, 0.3}) {
      absl::StatusOr<std::vector<PatternCandidate>> c = PatternCandidates(n, target);
      ASSERT_TRUE(c.ok()) << c.status();
      ASSERT_GE(c->size(), 3u);
      EXPECT_EQ(c->front().pattern.kind, HeadPatternKind::kVerticalSlash);
      EXPECT_EQ(c->back().pattern.kind, HeadPatternKind::kBlockSparse);
      int a_shapes = 0;
      for (const PatternCandidate& cand : *c) {
        const HeadPattern& p = cand.pattern;
        const bool at_minimum =
            (p.kind == HeadPatternKind::kVerticalSlash && p.v == 30 && p.s == 100) ||
            (p.kind == HeadPatternKind::kBlockSparse && p.v == 3);
        if (!at_minimum) {
          EXPECT_LE(cand.estimated_density, target) << CandidateName(p);
        }
        if (p.kind == HeadPatternKind::kAShape) {
          ++a_shapes;
          // The widest window within budget: one more key per row would exceed it.
          HeadPattern wider = p;
          ++wider.s;
          EXPECT_GT(static_cast<double>(EstimatedPairs(wider, n)),
                    target * static_cast<double>(n * (n + 1) / 2));
        }
      }
      EXPECT_EQ(a_shapes, 1);
    }
  }
  // A-shape's estimate is exact: 4 rows, 1 sink, window 2 -> 1 + 2 + 3 + 3.
  EXPECT_EQ(EstimatedPairs({HeadPatternKind::kAShape, 1, 2}, 4), 9);
  EXPECT_FALSE(PatternCandidates(127, 0.1).ok());
  EXPECT_FALSE(PatternCandidates(4096, 0).ok());
  EXPECT_FALSE(PatternCandidates(4096, 1.5).ok());
  EXPECT_EQ(CandidateName({HeadPatternKind::kBlockSparse, 7, 0}), "block_sparse(7)");
  EXPECT_EQ(CandidateName({HeadPatternKind::kAShape, 64, 350}), "stream_llm(64, 350)");
}

TEST(PatternSearchTest, ProbeSeesEveryLayerOfEveryChunk) {
  const std::string path = testing::FindTestModelFile("stories260K.gguf");
  if (path.empty()) GTEST_SKIP() << "stories260K.gguf not found (run scripts/fetch_model.sh)";
  absl::StatusOr<ModelSource> source = OpenModelSource(path);
  ASSERT_TRUE(source.ok()) << source.status();
  core::ThreadPool pool(2);
  kernels::CpuBackend backend(&pool);
  ModelRunnerOptions options;
  options.block_tokens = 16;
  options.prefill_chunk_tokens = 32;  // a 50-token prompt takes two chunks
  options.enable_prefix_cache = false;
  absl::StatusOr<std::unique_ptr<ModelRunner>> runner =
      ModelRunner::Create(*source, &backend, options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  const model::ModelConfig& c = (*runner)->config();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 50; ++i) prompt.push_back(3 + (i * 53) % 500);
  std::vector<int> layers;
  std::vector<int64_t> rows;
  (*runner)->set_attention_probe([&](int layer, const kernels::AttentionPlan& plan, const Tensor& q,
                                     const Tensor& kv_layer, const Tensor& out) {
    layers.push_back(layer);
    rows.push_back(out.dim(0));
    EXPECT_EQ(plan.batch->sequences.size(), 1u);
    EXPECT_EQ(q.shape(), out.shape());
    EXPECT_EQ(out.dim(1), c.num_heads);
    EXPECT_FALSE(kv_layer.empty());
    return absl::OkStatus();
  });
  SequenceKv seq;
  ASSERT_TRUE((*runner)->Prefill(prompt, seq).ok());
  ASSERT_EQ(static_cast<int>(layers.size()), 2 * c.num_layers);
  for (int i = 0; i < 2 * c.num_layers; ++i) {
    EXPECT_EQ(layers[i], i % c.num_layers);
    EXPECT_EQ(rows[i], i < c.num_layers ? 32 : 18);
  }
  // A probe error aborts the step; unset, the probe is never called.
  (*runner)->Release(seq);
  (*runner)->set_attention_probe([](int, const kernels::AttentionPlan&, const Tensor&,
                                    const Tensor&,
                                    const Tensor&) { return absl::InternalError("probe failed"); });
  EXPECT_EQ((*runner)->Prefill(prompt, seq).status().code(), absl::StatusCode::kInternal);
  (*runner)->set_attention_probe(nullptr);
  layers.clear();
  ASSERT_TRUE((*runner)->Prefill(prompt, seq).ok());
  EXPECT_TRUE(layers.empty());
}

}  // namespace
}  // namespace sparseserve::engine
