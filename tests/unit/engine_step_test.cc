// ModelRunner::Step and Commit on the real stories260K model, CPU reference: the exactness that
// speculative decoding rests on. A verify step of k draft rows whose drafts are the greedy
// continuation yields exactly the tokens of k + 1 single steps; each row of a random draft tree
// (explicit positions, ancestor mask) picks exactly the token its path gets when run alone;
// Commit keeps exactly the chosen rows' KV (bitwise the KV of a plain run of those tokens) and
// returns the rest; speculative rows never reach the prefix cache; and sliding-window attention
// equals dense while the window covers the context.
#include <random>

#include "common/core/thread_pool.h"
#include "common/engine/model_runner.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/testing/test_model.h"

namespace sparseserve::engine {
namespace {

class StepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = testing::FindTestModelFile("stories260K.gguf");
    if (path.empty()) GTEST_SKIP() << "stories260K.gguf not found (run scripts/fetch_model.sh)";
    auto src = OpenModelSource(path);
    ASSERT_TRUE(src.ok()) << src.status();
    source_ = std::move(*src);
    for (int i = 0; i < 37; ++i) prompt_.push_back(3 + (i * 53) % 500);
    ModelRunnerOptions options;
    options.block_tokens = 16;
    auto runner = ModelRunner::Create(source_, &backend_, options);
    ASSERT_TRUE(runner.ok()) << runner.status();
    runner_ = std::move(*runner);
  }

  static kernels::SamplingBatch Greedy(int rows) {
    kernels::SamplingBatch b;
    b.rows.resize(rows);  // temperature 0
    return b;
  }

  // Prefills the prompt and returns its greedy first token.
  int32_t Start(SequenceKv& seq, const kernels::AttentionPattern& pattern = {}) {
    auto first = runner_->PrefillSampled(prompt_, seq, Greedy(1), pattern);
    EXPECT_TRUE(first.ok()) << first.status();
    return first.ok() ? *first : -1;
  }

  // Feeds `tokens` one step at a time (greedy) and returns the token each step picks.
  std::vector<int32_t> SingleSteps(SequenceKv& seq, const std::vector<int32_t>& tokens,
                                   const kernels::AttentionPattern& pattern = {}) {
    std::vector<int32_t> picked;
    for (int32_t t : tokens) {
      StepRows rows;
      rows.seq = &seq;
      rows.tokens = {t};
      rows.pattern = pattern;
      auto next = runner_->Step(absl::MakeConstSpan(&rows, 1), Greedy(1));
      EXPECT_TRUE(next.ok()) << next.status();
      if (!next.ok()) return picked;
      picked.push_back(next->front());
    }
    return picked;
  }

  // Greedy continuation of `n` tokens after `first` (run on a fresh sequence).
  std::vector<int32_t> Greedy(int32_t first, int n) {
    SequenceKv seq;
    Start(seq);
    std::vector<int32_t> out = {first};
    while (static_cast<int>(out.size()) < n) out.push_back(SingleSteps(seq, {out.back()}).front());
    runner_->Release(seq);
    return out;
  }

  core::ThreadPool pool_{2};
  kernels::CpuBackend backend_{&pool_};
  ModelSource source_;
  std::unique_ptr<ModelRunner> runner_;
  std::vector<int32_t> prompt_;
};

TEST_F(StepTest, VerifyStepOfTheGreedyDraftEqualsSingleSteps) {
  SequenceKv seq;
  const int32_t first = Start(seq);
  const int k = 6;
  const std::vector<int32_t> greedy = Greedy(first, k + 2);  // first, d1..dk, the bonus token
  // Rows: the last emitted token and the k drafts; every row samples.
  StepRows verify;
  verify.seq = &seq;
  verify.tokens.assign(greedy.begin(), greedy.begin() + k + 1);
  verify.sample = model::LogitRows::kAll;
  verify.speculative = true;
  auto picked = runner_->Step(absl::MakeConstSpan(&verify, 1), Greedy(k + 1));
  ASSERT_TRUE(picked.ok()) << picked.status();
  EXPECT_EQ(*picked, std::vector<int32_t>(greedy.begin() + 1, greedy.end()));
  ASSERT_EQ(seq.pending_tokens.size(), static_cast<size_t>(k + 1));
  std::vector<int32_t> keep(k + 1);
  for (int i = 0; i <= k; ++i) keep[i] = i;
  ASSERT_TRUE(runner_->Commit(seq, keep).ok());
  // Decoding on from the committed rows continues the plain greedy output.
  const std::vector<int32_t> more = Greedy(first, k + 12);
  EXPECT_EQ(SingleSteps(seq, std::vector<int32_t>(more.begin() + k + 1, more.end() - 1)),
            std::vector<int32_t>(more.begin() + k + 2, more.end()));
  runner_->Release(seq);
}

TEST_F(StepTest, EachTreeRowPicksWhatItsPathPicksAlone) {
  std::mt19937 rng(5);
  SequenceKv seq;
  const int32_t first = Start(seq);
  const int base = static_cast<int>(seq.tokens.size());
  const int n = 10;  // row 0 is the last emitted token, the root
  std::vector<int> parent(n, -1), depth(n, 0);
  std::vector<int32_t> tokens = {first};
  for (int i = 1; i < n; ++i) {
    parent[i] = std::uniform_int_distribution<int>(0, i - 1)(rng);
    depth[i] = depth[parent[i]] + 1;
    tokens.push_back(std::uniform_int_distribution<int32_t>(3, 400)(rng));
  }
  StepRows tree;
  tree.seq = &seq;
  tree.tokens = tokens;
  tree.mask.assign(static_cast<size_t>(n) * n, 0);
  for (int i = 0; i < n; ++i) {
    tree.positions.push_back(base + depth[i]);  // siblings share a position
    for (int a = i; a >= 0; a = parent[a]) tree.mask[i * n + a] = 1;
  }
  tree.sample = model::LogitRows::kAll;
  tree.speculative = true;
  auto picked = runner_->Step(absl::MakeConstSpan(&tree, 1), Greedy(n));
  ASSERT_TRUE(picked.ok()) << picked.status();
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> path;
    for (int a = i; a >= 0; a = parent[a]) path.insert(path.begin(), tokens[a]);
    SequenceKv alone;
    ASSERT_EQ(Start(alone), first);
    EXPECT_EQ(SingleSteps(alone, path).back(), (*picked)[i]) << "row " << i;
    runner_->Release(alone);
  }
  ASSERT_TRUE(runner_->Commit(seq, {}).ok());  // reject everything
  EXPECT_EQ(static_cast<int>(seq.tokens.size()), base);
  runner_->Release(seq);
}

TEST_F(StepTest, CommitKeepsExactlyTheChosenRowsKv) {
  SequenceKv seq, plain;
  const int32_t first = Start(seq);
  ASSERT_EQ(Start(plain), first);
  const int base = static_cast<int>(seq.tokens.size());
  // A chain 0 -> 2 -> 5 inside a tree of 12 rows: the others are rejected branches.
  const std::vector<int> parent = {-1, 0, 0, 1, 2, 2, 4, 1, 3, 6, 0, 5};
  const std::vector<int32_t> tokens = {first, 11, 22, 33, 44, 55, 66, 77, 88, 99, 111, 122};
  const int n = static_cast<int>(tokens.size());
  StepRows tree;
  tree.seq = &seq;
  tree.tokens = tokens;
  tree.mask.assign(static_cast<size_t>(n) * n, 0);
  for (int i = 0; i < n; ++i) {
    int d = 0;
    for (int a = i; a >= 0; a = parent[a]) {
      tree.mask[i * n + a] = 1;
      if (a != i) ++d;
    }
    tree.positions.push_back(base + d);
  }
  tree.sample = model::LogitRows::kNone;
  tree.speculative = true;
  const int blocks_before = runner_->pool().num_used_blocks();
  ASSERT_TRUE(runner_->Step(absl::MakeConstSpan(&tree, 1), Greedy(0)).ok());
  EXPECT_EQ(runner_->pool().num_used_blocks(), blocks_before + 1);  // 37 + 12 rows: a 4th block
  ASSERT_TRUE(runner_->Commit(seq, {0, 2, 5}).ok());
  EXPECT_EQ(seq.tokens.size(), static_cast<size_t>(base + 3));
  EXPECT_EQ(seq.block_ids.size(), 3u);  // 40 tokens in blocks of 16: the 4th went back
  EXPECT_EQ(runner_->pool().num_used_blocks(), blocks_before);
  SingleSteps(plain, {first, 22});
  StepRows last;
  last.seq = &plain;
  last.tokens = {55};
  last.sample = model::LogitRows::kNone;
  ASSERT_TRUE(runner_->Step(absl::MakeConstSpan(&last, 1), Greedy(0)).ok());
  ASSERT_EQ(seq.tokens, plain.tokens);
  // The committed rows' KV is bitwise that of the plain run, slot for slot.
  const auto& shape = runner_->cache().shape();
  const int64_t per_token = int64_t{shape.num_kv_heads} * shape.head_dim;
  for (int l = 0; l < shape.num_layers; ++l) {
    const float* kv = runner_->cache().layer(l).data<float>();
    for (int p = 0; p < base + 3; ++p) {
      for (int part = 0; part < 2; ++part) {
        auto at = [&](const SequenceKv& s) {
          const int64_t block = s.block_ids[p / 16];
          return kv + ((block * 2 + part) * 16 + p % 16) * per_token;
        };
        for (int64_t e = 0; e < per_token; ++e) {
          ASSERT_EQ(at(seq)[e], at(plain)[e]) << "layer " << l << " position " << p;
        }
      }
    }
  }
  EXPECT_EQ(SingleSteps(seq, {7, 8, 9}), SingleSteps(plain, {7, 8, 9}));
  EXPECT_EQ(runner_->Commit(seq, {0}).code(),
            absl::StatusCode::kInvalidArgument);  // nothing pending
  runner_->Release(seq);
  runner_->Release(plain);
  EXPECT_EQ(runner_->pool().num_used_blocks(), 0);
}

TEST_F(StepTest, SpeculativeRowsNeverEnterThePrefixCache) {
  SequenceKv seq;
  const int32_t first = Start(seq);  // 37 tokens: blocks 0 and 1 are full and cached
  const size_t cached_before = runner_->pool().CachedHashes().size();
  EXPECT_EQ(cached_before, 2u);
  // 12 speculative rows reach KV index 48: block 2 would be full if they were all kept.
  StepRows verify;
  verify.seq = &seq;
  verify.tokens = {first, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  verify.sample = model::LogitRows::kNone;
  verify.speculative = true;
  ASSERT_TRUE(runner_->Step(absl::MakeConstSpan(&verify, 1), Greedy(0)).ok());
  EXPECT_EQ(runner_->pool().CachedHashes().size(), cached_before);
  EXPECT_EQ(runner_->Step(absl::MakeConstSpan(&verify, 1), Greedy(0)).status().code(),
            absl::StatusCode::kInvalidArgument);   // commit first
  ASSERT_TRUE(runner_->Commit(seq, {0, 1}).ok());  // 39 tokens: block 2 still partial
  EXPECT_EQ(runner_->pool().CachedHashes().size(), cached_before);
  const std::vector<kv::BlockHash> committed = kv::ComputeBlockHashes(seq.tokens, 16);
  for (kv::BlockHash h : runner_->pool().CachedHashes()) {
    EXPECT_NE(std::find(committed.begin(), committed.end(), h), committed.end());
  }
  runner_->Release(seq);
}

// Sparse self-speculation's draft passes (model_draft.h): draft rows go after the pending ones
// and see them, other steps stay refused while rows are pending, and DiscardPending gives the
// draft's blocks back so the verification step computes the same rows again.
TEST_F(StepTest, DraftRowsExtendThePendingRowsAndDiscardGivesTheirBlocksBack) {
  SequenceKv seq;
  const int32_t first = Start(seq);  // 37 tokens in 3 blocks of 16
  const std::vector<int32_t> greedy = Greedy(first, 16);
  const int blocks_before = runner_->pool().num_used_blocks();
  std::vector<int32_t> chain;
  for (int i = 0; i < 14; ++i) {  // KV indices 37..50: a 4th block
    StepRows draft;
    draft.seq = &seq;
    draft.tokens = {i == 0 ? first : chain.back()};
    draft.draft = true;
    auto next = runner_->Step(absl::MakeConstSpan(&draft, 1), Greedy(1));
    ASSERT_TRUE(next.ok()) << next.status();
    chain.push_back(next->front());
  }
  // A dense draft is the greedy continuation itself: each draft row saw the ones before it.
  EXPECT_EQ(chain, std::vector<int32_t>(greedy.begin() + 1, greedy.begin() + 15));
  EXPECT_EQ(seq.pending_tokens.size(), 14u);
  EXPECT_EQ(seq.tokens.size(), prompt_.size());
  EXPECT_EQ(runner_->pool().num_used_blocks(), blocks_before + 1);
  StepRows plain;
  plain.seq = &seq;
  plain.tokens = {first};
  EXPECT_EQ(runner_->Step(absl::MakeConstSpan(&plain, 1), Greedy(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  runner_->DiscardPending(seq);
  EXPECT_TRUE(seq.pending_tokens.empty());
  EXPECT_EQ(runner_->pool().num_used_blocks(), blocks_before);
  // The verification step over the same KV indices, then every row kept.
  StepRows verify;
  verify.seq = &seq;
  verify.tokens = {first};
  verify.tokens.insert(verify.tokens.end(), chain.begin(), chain.end());
  verify.sample = model::LogitRows::kAll;
  verify.speculative = true;
  auto sampled = runner_->Step(absl::MakeConstSpan(&verify, 1), Greedy(15));
  ASSERT_TRUE(sampled.ok()) << sampled.status();
  EXPECT_EQ(*sampled, std::vector<int32_t>(greedy.begin() + 1, greedy.end()));
  std::vector<int32_t> all(15);
  for (int i = 0; i < 15; ++i) all[i] = i;
  ASSERT_TRUE(runner_->Commit(seq, all).ok());
  EXPECT_EQ(seq.tokens.size(), prompt_.size() + 15);
  runner_->Release(seq);
  EXPECT_EQ(runner_->pool().num_used_blocks(), 0);
}

TEST_F(StepTest, SlidingWindowCoveringTheContextEqualsDenseAndASmallOneDiffers) {
  kernels::AttentionPattern wide;
  wide.kind = kernels::AttentionMethodKind::kSlidingWindow;
  wide.window = 512;  // the whole context of stories260K
  wide.sink_tokens = 4;
  kernels::AttentionPattern narrow = wide;
  narrow.window = 8;
  narrow.sink_tokens = 0;
  SequenceKv dense, covering, small;
  const int32_t a = Start(dense), b = Start(covering, wide), c = Start(small, narrow);
  EXPECT_EQ(a, b);
  std::vector<int32_t> ta = {a}, tb = {b}, tc = {c};
  for (int i = 0; i < 40; ++i) {
    ta.push_back(SingleSteps(dense, {ta.back()}).front());
    tb.push_back(SingleSteps(covering, {tb.back()}, wide).front());
    tc.push_back(SingleSteps(small, {tc.back()}, narrow).front());
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
  for (SequenceKv* s : {&dense, &covering, &small}) runner_->Release(*s);
}

}  // namespace
}  // namespace sparseserve::engine
