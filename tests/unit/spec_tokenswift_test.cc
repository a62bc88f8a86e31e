// TokenSwiftProposer and FourGramTable: the tree [1, 3, 3, 3] built from the draft heads'
// candidates, the 4-grams merged into it, the table counting only what lies W tokens behind the
// end, the row bound the controller prices, and the depth without heads; the widest drafts
// bench model times (draft_shapes.h) against the proposers' row counts.
#include "common/spec/tokenswift.h"

#include <vector>

#include "common/spec/draft_shapes.h"
#include "gtest/gtest.h"

namespace sparseserve::spec {
namespace {

TEST(FourGramTableTest, CountsFourGramsUpToTheEndAndRanksByCount) {
  FourGramTable table;
  const std::vector<int32_t> h = {5, 1, 2, 3, 5, 1, 2, 3, 5, 1, 2, 4, 5, 9, 9, 9};
  table.Update(h, 4);  // only 5 1 2 3
  ASSERT_EQ(table.Top(5, 10).size(), 1u);
  table.Update(h, static_cast<int64_t>(h.size()));
  const std::vector<FourGramTable::Continuation> top = table.Top(5, 10);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0], (FourGramTable::Continuation{1, 2, 3}));  // twice
  EXPECT_EQ(top[1], (FourGramTable::Continuation{1, 2, 4}));  // once; ties: smaller tokens first
  EXPECT_EQ(top[2], (FourGramTable::Continuation{9, 9, 9}));
  EXPECT_EQ(table.Top(5, 1).size(), 1u);
  FourGramTable::Continuation best;
  ASSERT_TRUE(table.Best(5, &best));
  EXPECT_EQ(best, top[0]);
  EXPECT_FALSE(table.Best(7, &best));
  EXPECT_TRUE(table.Top(7, 5).empty());
  // Each 4-gram counted once, across calls; updating again with the same end adds nothing.
  table.Update(h, static_cast<int64_t>(h.size()));
  EXPECT_EQ(table.Count(5, {1, 2, 3}), 2);
  EXPECT_EQ(table.Count(5, {1, 2, 4}), 1);
  EXPECT_EQ(table.Count(5, {9, 9, 9}), 1);
  EXPECT_EQ(table.Count(1, {2, 3, 5}), 2);
  EXPECT_EQ(table.Count(7, {1, 2, 3}), 0);
  EXPECT_EQ(table.counted_end(), static_cast<int64_t>(h.size()));
}

TEST(TokenSwiftProposerTest, BuildsTheTreeFromTheHeadsCandidates) {
  TokenSwiftParams params;
  params.ngram_k = 0;
  TokenSwiftProposer proposer(params, /*heads=*/3, /*max_depth=*/8);
  EXPECT_EQ(proposer.max_depth(), 4);
  EXPECT_EQ(proposer.HeadTopK(), 3);
  EXPECT_EQ(proposer.PassesAt(4), 1);
  EXPECT_EQ(proposer.RowsAt(1), 1);
  EXPECT_EQ(proposer.RowsAt(2), 4);
  EXPECT_EQ(proposer.RowsAt(4), 40);
  ModelDraft made;
  made.chain = {10};
  made.head_candidates = {{20, 21, 22}, {30, 31, 32}, {40, 41, 42}};
  proposer.SetDraft(made);
  StepDraft draft;
  const std::vector<int32_t> history = {1, 2, 3};
  proposer.Propose(history, 4, /*verify_only=*/false, &draft);
  ASSERT_EQ(draft.size(), 40);
  EXPECT_EQ(draft.MaxDepth(), 4);
  EXPECT_EQ(draft.tokens[0], 10);
  EXPECT_EQ(draft.parents[0], 0);
  // Every path root -> 10 -> 2x -> 3x -> 4x is in the tree.
  for (const int32_t a : {20, 21, 22}) {
    for (const int32_t b : {30, 31, 32}) {
      for (const int32_t c : {40, 41, 42}) {
        StepDraft copy = draft;
        const std::vector<int32_t> path = {10, a, b, c};
        copy.AddChain(path);
        EXPECT_EQ(copy.size(), 40) << a << " " << b << " " << c;  // nothing new
      }
    }
  }
  // A shallower step cuts the tree; the draft is used once.
  proposer.SetDraft(made);
  proposer.Propose(history, 2, false, &draft);
  EXPECT_EQ(draft.size(), 4);
  proposer.Propose(history, 2, false, &draft);
  EXPECT_TRUE(draft.empty());
  // A shadow proposal (a plain step) has no draft pass to use.
  proposer.SetDraft(made);
  proposer.Propose(history, 4, /*verify_only=*/true, &draft);
  EXPECT_TRUE(draft.empty());
}

TEST(TokenSwiftProposerTest, MergesTheFourGramsOfTheDraftedTokenBehindTheLag) {
  TokenSwiftParams params;
  params.tree = {1, 2};
  params.ngram_k = 2;
  params.ngram_lag = 4;
  TokenSwiftProposer proposer(params, /*heads=*/1, /*max_depth=*/4);
  EXPECT_EQ(proposer.max_depth(), 4);  // the 4-grams reach deeper than the tree
  EXPECT_EQ(proposer.RowsAt(4), 1 + 2 + 2 * 3);
  // 7 8 9 6 occurs twice, 7 8 5 5 once, 7 3 3 3 once but only in the last 4 tokens.
  const std::vector<int32_t> history = {7, 8, 9, 6, 1, 7, 8, 9, 6, 7, 8, 5, 5, 2, 7, 3, 3, 3};
  ModelDraft made;
  made.chain = {7};
  made.head_candidates = {{8, 4}};
  proposer.SetDraft(made);
  StepDraft draft;
  proposer.Propose(history, 4, false, &draft);
  // Tree: 7 -> {8, 4}; the 4-grams 7 8 9 6 and 7 8 5 5 share 7 8 with it: 2 + 2 new rows each.
  EXPECT_EQ(draft.size(), 3 + 2 + 2);
  EXPECT_EQ(draft.MaxDepth(), 4);
  StepDraft copy = draft;
  for (const std::vector<int32_t>& path :
       {std::vector<int32_t>{7, 8, 9, 6}, {7, 8, 5, 5}, {7, 4}}) {
    copy.AddChain(path);
  }
  EXPECT_EQ(copy.size(), draft.size());
  copy.AddChain(std::vector<int32_t>{7, 3, 3, 3});  // behind the lag: not in the draft
  EXPECT_EQ(copy.size(), draft.size() + 3);
}

TEST(TokenSwiftProposerTest, WithoutHeadsTheDraftedTokenAndTheFourGramsAreTheDraft) {
  TokenSwiftParams params;
  EXPECT_EQ(TokenSwiftProposer::DepthOf(params, 0), 4);
  params.ngram_k = 0;
  EXPECT_EQ(TokenSwiftProposer::DepthOf(params, 0), 1);
  EXPECT_EQ(TokenSwiftProposer::DepthOf(params, 2), 3);
  TokenSwiftProposer proposer(params, /*heads=*/0, /*max_depth=*/4);
  EXPECT_EQ(proposer.max_depth(), 1);
  EXPECT_EQ(proposer.HeadTopK(), 0);
  ModelDraft made;
  made.chain = {3};
  proposer.SetDraft(made);
  StepDraft draft;
  proposer.Propose(std::vector<int32_t>{1, 2}, 1, false, &draft);
  ASSERT_EQ(draft.size(), 1);
  EXPECT_EQ(draft.tokens[0], 3);
}

TEST(TokenSwiftProposerTest, WithoutTheDraftPassTheHeadsAndFourGramsStartAtTheRoot) {
  TokenSwiftParams params;  // tree 1,3,3,3: the heads fill 3,3,3
  params.draft_pass = false;
  params.ngram_k = 1;
  params.ngram_lag = 0;
  EXPECT_EQ(TokenSwiftProposer::DepthOf(params, 3), 3);
  EXPECT_EQ(TokenSwiftProposer::DepthOf(params, 0), 3);  // the 4-grams: 3 tokens after the root
  params.ngram_k = 0;
  EXPECT_EQ(TokenSwiftProposer::DepthOf(params, 0), 1);
  EXPECT_EQ(TokenSwiftProposer::DepthOf(params, 2), 2);
  params.ngram_k = 1;
  TokenSwiftProposer proposer(params, /*heads=*/3, /*max_depth=*/8);
  EXPECT_EQ(proposer.max_depth(), 3);
  EXPECT_EQ(proposer.PassesAt(3), 0);
  EXPECT_EQ(proposer.HeadTopK(), 3);
  EXPECT_TRUE(proposer.shadow_predicts_acceptance());
  EXPECT_EQ(proposer.RowsAt(1), 3 + 1);
  EXPECT_EQ(proposer.RowsAt(3), 3 + 9 + 27 + 3);
  // The root is 5; 5 6 7 8 is the sequence's one 4-gram starting with it.
  const std::vector<int32_t> history = {5, 6, 7, 8, 9, 5};
  ModelDraft made;
  made.head_candidates = {{20, 21, 22}, {30, 31, 32}, {40, 41, 42}};
  made.history_size = static_cast<int64_t>(history.size());
  proposer.SetDraft(made);
  StepDraft draft;
  proposer.Propose(history, 3, /*verify_only=*/false, &draft);
  ASSERT_EQ(draft.size(), 3 + 9 + 27 + 3);
  EXPECT_EQ(draft.MaxDepth(), 3);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(draft.parents[static_cast<size_t>(r)], 0);
  StepDraft copy = draft;
  for (const std::vector<int32_t>& path :
       {std::vector<int32_t>{20, 30, 40}, {22, 32, 42}, {21, 31}, {6, 7, 8}}) {
    copy.AddChain(path);
  }
  EXPECT_EQ(copy.size(), draft.size());  // every path was there, the 4-gram after the root too
  // Plain steps shadow-draft from the same candidates.
  proposer.SetDraft(made);
  proposer.Propose(history, 3, /*verify_only=*/true, &draft);
  EXPECT_EQ(draft.size(), 3 + 9 + 27 + 3);
  // Candidates read for another history (a step ago) are stale: only the 4-gram is drafted.
  made.history_size -= 1;
  proposer.SetDraft(made);
  proposer.Propose(history, 3, false, &draft);
  ASSERT_EQ(draft.size(), 3);
  EXPECT_EQ(draft.tokens, (std::vector<int32_t>{6, 7, 8}));
}

TEST(TokenSwiftProposerTest, ChainedFourGramsDeepenTheFourGramsAndTheHeadsBestPath) {
  TokenSwiftParams params;  // tree 1,3,3,3 without the pass: the heads fill 3,3,3
  params.draft_pass = false;
  params.ngram_k = 1;
  params.ngram_lag = 0;
  params.ngram_chain = 3;  // 9 tokens of 4-grams; the heads' 3 levels and 6 more
  EXPECT_EQ(TokenSwiftProposer::DepthOf(params, 3), 9);
  EXPECT_EQ(TokenSwiftProposer::DepthOf(params, 0), 9);
  EXPECT_EQ(TokenSwiftProposer::DepthOf(params, 1), 9);  // 1 + 6 < 9
  TokenSwiftProposer proposer(params, /*heads=*/3, /*max_depth=*/7);
  EXPECT_EQ(proposer.max_depth(), 7);
  EXPECT_EQ(proposer.RowsAt(3), 39 + 3);            // no depth for the chains to add yet
  EXPECT_EQ(proposer.RowsAt(7), 39 + 7 + (7 - 3));  // the 4-gram chain, the best path's 4 more
  // The root is 5. Its 4-gram 5 6 7 8 goes on by 8's (8 9 10 11), then 11's (11 5 6 7). The
  // heads' best path 20 30 40 goes on by 40's 4-gram (40 41 42 43), then 43's (none).
  const std::vector<int32_t> history = {5, 6, 7, 8, 9, 10, 11, 5, 6, 7, 40, 41, 42, 43, 5};
  ModelDraft made;
  made.head_candidates = {{20, 21, 22}, {30, 31, 32}, {40, 41, 42}};
  made.history_size = static_cast<int64_t>(history.size());
  proposer.SetDraft(made);
  StepDraft draft;
  proposer.Propose(history, 7, /*verify_only=*/false, &draft);
  EXPECT_EQ(draft.MaxDepth(), 7);
  EXPECT_EQ(draft.size(), 39 + 7 + 3);
  StepDraft copy = draft;
  for (const std::vector<int32_t>& path :
       {std::vector<int32_t>{20, 30, 40, 41, 42, 43}, {6, 7, 8, 9, 10, 11, 5}, {22, 32, 42}}) {
    copy.AddChain(path);
  }
  EXPECT_EQ(copy.size(), draft.size());  // every path was there
  // 5 6 7 8 | 9 10 11 was chained from 8's most frequent 4-gram, not from the root's again.
  EXPECT_EQ(MatchedDepth(draft, std::vector<int32_t>{6, 7, 8, 9, 10, 11, 5, 6}), 7);
  EXPECT_EQ(MatchedDepth(draft, std::vector<int32_t>{20, 30, 40, 41, 42, 43, 1}), 6);
  // At the paper's chain of 1 the draft is the one of the test above.
  params.ngram_chain = 1;
  TokenSwiftProposer paper(params, 3, 7);
  EXPECT_EQ(paper.max_depth(), 3);
  paper.SetDraft(made);
  paper.Propose(history, 7, false, &draft);
  EXPECT_EQ(draft.size(), 39 + 3);
  // With the draft pass the 4-grams start at the drafted token and go on the same way.
  params.draft_pass = true;
  params.ngram_chain = 2;
  EXPECT_EQ(TokenSwiftProposer::DepthOf(params, 3), 7);  // 1 + 6; the heads' path 4 + 3
  EXPECT_EQ(TokenSwiftProposer::DepthOf(params, 0), 7);
  TokenSwiftProposer pass(params, 3, 8);
  made.chain = {5};
  made.head_candidates = {{6, 21, 22}, {7, 31, 32}, {8, 41, 42}};
  made.history_size = -1;
  pass.SetDraft(made);
  pass.Propose(history, 7, false, &draft);
  EXPECT_EQ(MatchedDepth(draft, std::vector<int32_t>{5, 6, 7, 8, 9, 10, 11, 0}), 7);
}

}  // namespace
}  // namespace sparseserve::spec

namespace sparseserve::spec {
namespace {

// The full shapes bench model times must be the ones the proposers make at their widest.
TEST(FullDraftShapeTest, LookaheadFillsItsWindowAndGuesses) {
  const LookaheadParams small{/*window=*/4, /*ngram=*/3, /*guesses=*/2};
  const StepDraft d = FullLookaheadDraft(small, 1000);
  EXPECT_EQ(d.size(), LookaheadProposer(small).RowsAt(2));  // 3 + 4 + 2 x 2
  EXPECT_EQ(d.NumVerificationRows(), 4);                    // two chains of N − 1, unpadded
  EXPECT_EQ(d.MaxDepth(), 2);
  ASSERT_EQ(d.mask.size(), static_cast<size_t>(d.size() + 1) * (d.size() + 1));
  const LookaheadParams paper;  // W = 15, N = 5, G = 15
  const StepDraft full = FullLookaheadDraft(paper, 32000);
  EXPECT_EQ(full.size(), 119);
  EXPECT_EQ(full.NumVerificationRows(), 60);
  // Every row sees the root and itself.
  const size_t n = static_cast<size_t>(full.size()) + 1;
  for (size_t r = 0; r < n; ++r) {
    EXPECT_EQ(full.mask[r * n], 1) << r;
    EXPECT_EQ(full.mask[r * n + r], 1) << r;
  }
}

TEST(FullDraftShapeTest, TokenSwiftFillsItsTreeAndFourGrams) {
  const TokenSwiftParams paper;  // tree [1, 3, 3, 3], 20 4-grams
  const StepDraft d = FullTokenSwiftDraft(paper, /*heads=*/3, 32000);
  EXPECT_EQ(d.size(), TokenSwiftProposer(paper, 3, 4).RowsAt(4));  // 40 + 60
  EXPECT_EQ(d.size(), 100);
  EXPECT_EQ(d.NumVerificationRows(), 100);
  EXPECT_EQ(d.MaxDepth(), 4);
  EXPECT_FALSE(d.IsChain());
  // Without heads: the drafted token and its 4-grams.
  EXPECT_EQ(FullTokenSwiftDraft(paper, /*heads=*/0, 32000).size(), 61);
  // A vocabulary too small for distinct tokens merges rows; padding keeps the shape.
  EXPECT_EQ(FullTokenSwiftDraft(paper, 3, 5).size(), 100);
}

}  // namespace
}  // namespace sparseserve::spec
