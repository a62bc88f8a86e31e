// The speculation library without a model: draft trees and the verification walk, prompt
// lookup's n-gram index, Lookahead's mask and window against the paper's rules, and the
// controller's arithmetic.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/spec/draft.h"
#include "common/spec/draft_length_controller.h"
#include "common/spec/lookahead.h"
#include "common/spec/prompt_lookup.h"
#include "gtest/gtest.h"

namespace sparseserve::spec {
namespace {

// Rows per depth of a chain drafter (DraftOption::rows_at views them).
const std::vector<int> kOneDepth = {1};
const std::vector<int> kFourDepths = {1, 2, 3, 4};

using ::testing::Test;

TEST(StepDraftTest, ChainsShareTheirPrefixAndTheWalkFollowsTheSampledTokens) {
  StepDraft d;
  EXPECT_EQ(d.AddChain({5, 6, 7}), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(d.AddChain({5, 8}), (std::vector<int32_t>{1, 4}));  // shares row 1
  EXPECT_EQ(d.size(), 4);
  EXPECT_EQ(d.MaxDepth(), 3);
  EXPECT_EQ(d.offsets, (std::vector<int32_t>{1, 2, 3, 2}));
  EXPECT_EQ(d.Positions(10), (std::vector<int32_t>{10, 11, 12, 13, 12}));  // root first
  const std::vector<uint8_t> mask = d.FullMask();
  // Row 4 (token 8) sees the root, row 1 and itself only.
  EXPECT_EQ(std::vector<uint8_t>(mask.begin() + 20, mask.begin() + 25),
            (std::vector<uint8_t>{1, 1, 0, 0, 1}));
  // Sampled per row (root first): the root says 5, row 1 says 8, row 4 says 9.
  AcceptedDraft a = AcceptDraft(d, {5, 8, 0, 0, 9});
  EXPECT_EQ(a.emitted, (std::vector<int32_t>{5, 8, 9}));
  EXPECT_EQ(a.kept, (std::vector<int32_t>{0, 1, 4}));
  EXPECT_EQ(a.accepted(), 2);
  a = AcceptDraft(d, {4, 8, 0, 0, 9});  // the first draft token is rejected
  EXPECT_EQ(a.emitted, (std::vector<int32_t>{4}));
  EXPECT_EQ(a.kept, (std::vector<int32_t>{0}));
  a = AcceptDraft(d, {5, 6, 7, 1, 0});  // the whole chain, then the bonus token
  EXPECT_EQ(a.emitted, (std::vector<int32_t>{5, 6, 7, 1}));
  EXPECT_EQ(MatchedDepth(d, {5, 6, 7, 1}), 3);
  EXPECT_EQ(MatchedDepth(d, {5, 8}), 2);
  EXPECT_EQ(MatchedDepth(d, {6}), 0);
}

// Padding a tree to a fixed row count keeps its mask and its walk; the padding rows see only the
// root and themselves, are never walked into, and are not verification rows.
TEST(StepDraftTest, PaddingAddsAuxiliaryRowsThatChangeNothingButTheShape) {
  StepDraft d;
  d.AddChain({5, 6});
  d.AddChain({5, 8});
  EXPECT_FALSE(d.IsChain());
  const std::vector<uint8_t> tree = d.FullMask();  // 4 x 4
  d.PadWithAuxiliaryRows(5, 42);
  ASSERT_EQ(d.size(), 5);
  EXPECT_EQ(d.tokens, (std::vector<int32_t>{5, 6, 8, 42, 42}));
  EXPECT_EQ(d.parents, (std::vector<int32_t>{0, 1, 1, -1, -1}));
  EXPECT_EQ(d.NumVerificationRows(), 3);
  EXPECT_EQ(d.MaxDepth(), 2);
  const std::vector<uint8_t> mask = d.FullMask();  // 6 x 6
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 6; ++c) {
      EXPECT_EQ(mask[r * 6 + c], c < 4 ? tree[r * 4 + c] : 0) << r << "," << c;
    }
  }
  EXPECT_EQ(std::vector<uint8_t>(mask.begin() + 24, mask.begin() + 30),
            (std::vector<uint8_t>{1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(std::vector<uint8_t>(mask.begin() + 30, mask.end()),
            (std::vector<uint8_t>{1, 0, 0, 0, 0, 1}));
  // Padding rows that sampled the draft's tokens are not children of anything.
  const AcceptedDraft a = AcceptDraft(d, {5, 8, 0, 9, 6, 6});
  EXPECT_EQ(a.emitted, (std::vector<int32_t>{5, 8, 9}));
  EXPECT_EQ(a.kept, (std::vector<int32_t>{0, 1, 3}));
  d.PadWithAuxiliaryRows(3, 42);  // already larger: unchanged
  EXPECT_EQ(d.size(), 5);
  // A draft with its own mask (Lookahead's) keeps it in the padded one.
  d.PadWithAuxiliaryRows(6, 7);
  ASSERT_EQ(d.size(), 6);
  const std::vector<uint8_t> again = d.FullMask();  // 7 x 7
  for (int r = 0; r < 6; ++r) {
    for (int c = 0; c < 7; ++c) {
      EXPECT_EQ(again[r * 7 + c], c < 6 ? mask[r * 6 + c] : 0) << r << "," << c;
    }
  }
  EXPECT_EQ(std::vector<uint8_t>(again.begin() + 42, again.end()),
            (std::vector<uint8_t>{1, 0, 0, 0, 0, 0, 1}));

  StepDraft chain;
  chain.AddChain({1, 2, 3});
  EXPECT_TRUE(chain.IsChain());
}

TEST(NgramIndexTest, FindsTheLatestEarlierOccurrenceButNeverTheSuffixItself) {
  NgramIndex index;
  const std::vector<int32_t> h = {1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3};
  index.Update(h);
  EXPECT_EQ(index.Find({1, 2, 3}), 7);  // ends at index 6, not at the suffix (10)
  EXPECT_EQ(index.Find({3}), 7);
  EXPECT_EQ(index.Find({9}), 4);
  EXPECT_EQ(index.Find({4}), -1);
  EXPECT_EQ(index.indexed(), 10);
}

TEST(PromptLookupTest, ProposesWhatFollowedTheLongestMatchingNgram) {
  PromptLookupProposer p(3);
  StepDraft d;
  p.Propose({1, 2, 3, 9, 8, 5, 2, 3}, 3, false, &d);  // "2 3" matched: 9 8 5
  EXPECT_EQ(d.tokens, (std::vector<int32_t>{9, 8, 5}));
  p.Propose({1, 2, 3, 9, 8, 5, 2, 3, 9}, 2, false, &d);  // "2 3 9": 8 5
  EXPECT_EQ(d.tokens, (std::vector<int32_t>{8, 5}));
  PromptLookupProposer q(4);
  q.Propose({4, 5, 6}, 4, false, &d);  // nothing repeats
  EXPECT_TRUE(d.empty());
  q.Propose({4, 5, 6, 4}, 4, false, &d);  // the continuation stops at the history's end
  EXPECT_EQ(d.tokens, (std::vector<int32_t>{5, 6, 4}));
}

TEST(NgramPoolTest, KeepsTheMostRecentGuessesPerFirstToken) {
  NgramPool pool(3, 2);
  pool.Add({1, 2, 3});
  pool.Add({1, 4, 5});
  pool.Add({1, 2, 3});  // moves to the front
  pool.Add({1, 6, 7});  // drops {4, 5}
  const auto* list = pool.Find(1);
  ASSERT_NE(list, nullptr);
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0], (std::vector<int32_t>{6, 7}));
  EXPECT_EQ((*list)[1], (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(pool.Find(2), nullptr);
}

// A "model" whose next token depends on the current token only: every row predicts f(its token).
int32_t F(int32_t t) {
  return (t * 7 + 3) % 61;
}

TEST(LookaheadTest, MaskIsThePapersAndTheWindowLearnsTheTrajectory) {
  const LookaheadParams params{5, 4, 5};  // W, N, G
  LookaheadProposer p(params);
  std::vector<int32_t> history = {1, 2, 3, 4, 5, 6, 7, 8};
  int steps = 0, emitted_total = 0;
  while (steps < 200) {
    StepDraft d;
    p.Propose(history, 3, false, &d);
    const int n = d.size() + 1;
    ASSERT_EQ(d.mask.size(), static_cast<size_t>(n) * n);
    // Window rows: level l column i at offset i + l, seeing exactly the root, level-0 columns
    // 1..i and column i of levels 1..l (papers/lookahead.md §1).
    const int levels = p.levels();
    std::map<std::pair<int, int>, int> cell;  // (level, column) -> row
    cell[{0, 0}] = 0;
    int row = 1;
    for (int i = 1; i < params.window; ++i) cell[{0, i}] = row++;
    for (int l = 1; l < levels; ++l) {
      for (int i = 0; i < params.window; ++i) cell[{l, i}] = row++;
    }
    for (const auto& [lc, r] : cell) {
      if (r == 0) continue;
      const auto [l, i] = lc;
      EXPECT_EQ(d.offsets[r - 1], i + l);
      EXPECT_EQ(d.parents[r - 1], -1);
      std::set<int> sees = {0};
      for (int j = 1; j <= i; ++j) sees.insert(cell[{0, j}]);
      for (int k = 1; k <= l; ++k) sees.insert(cell[{k, i}]);
      for (int c = 0; c < n; ++c) {
        EXPECT_EQ(d.mask[static_cast<size_t>(r) * n + c], sees.count(c) ? 1 : 0)
            << "level " << l << " column " << i << " key row " << c;
      }
    }
    // Candidate rows see the root and their ancestors only.
    for (int r = row; r < n; ++r) {
      ASSERT_GE(d.parents[r - 1], 0);
      std::set<int> sees = {0};
      for (int a = r; a != 0; a = d.parents[a - 1]) sees.insert(a);
      for (int c = 0; c < n; ++c) {
        EXPECT_EQ(d.mask[static_cast<size_t>(r) * n + c], sees.count(c) ? 1 : 0);
      }
    }
    // The step: each row's output is F of its token; the root's is F(root).
    std::vector<int32_t> sampled = {F(history.back())};
    for (int32_t t : d.tokens) sampled.push_back(F(t));
    const AcceptedDraft a = AcceptDraft(d, sampled);
    for (size_t j = 0; j < a.emitted.size(); ++j) {
      EXPECT_EQ(a.emitted[j], F(j == 0 ? history.back() : a.emitted[j - 1]));  // lossless
    }
    p.Observe(d, sampled, a.emitted);
    history.insert(history.end(), a.emitted.begin(), a.emitted.end());
    ++steps;
    emitted_total += static_cast<int>(a.emitted.size());
  }
  EXPECT_EQ(p.levels(), params.ngram - 1);
  // Once the window has converged onto F's trajectory its n-grams are right: most steps accept
  // all N-1 drafts.
  EXPECT_GT(emitted_total, 3 * steps) << "steps compression " << double(emitted_total) / steps;
}

TEST(LookaheadTest, VerifyOnlyProposalsHoldThePoolsGuessesAndNoWindow) {
  LookaheadProposer p({4, 3, 2});
  StepDraft d;
  // The prompt's 3-grams seed the pool: 1 2 1, 2 1 3, 1 3 1. The root 1 has two guesses, most
  // recent first.
  p.Propose({1, 2, 1, 3, 1}, 2, true, &d);
  EXPECT_TRUE(d.mask.empty());
  EXPECT_EQ(d.tokens, (std::vector<int32_t>{3, 1, 2, 1}));
  EXPECT_EQ(d.parents, (std::vector<int32_t>{0, 1, 0, 3}));
  EXPECT_EQ(p.levels(), 1);
  p.Propose({1, 2, 1, 3, 1}, 1, false, &d);  // with the window: 3 level-0 rows, then guesses
  EXPECT_EQ(d.size(), 3 + 2);
  EXPECT_FALSE(d.mask.empty());
}

TEST(AcceptanceStatsTest, ExpectedAcceptedFollowsTheMeasuredRates) {
  AcceptanceStats s(4, 1.0);                            // no decay
  EXPECT_DOUBLE_EQ(s.ExpectedAccepted(2), 0.5 + 0.25);  // the Beta(1, 1) prior
  for (int i = 0; i < 98; ++i) s.Record(4, 4);          // always accepted
  EXPECT_NEAR(s.Alpha(1), 99.0 / 100, 1e-12);
  EXPECT_GT(s.ExpectedAccepted(4), 3.8);
  AcceptanceStats z(4, 1.0);
  for (int i = 0; i < 98; ++i) z.Record(4, 0);  // never
  EXPECT_NEAR(z.Alpha(1), 1.0 / 100, 1e-12);
  EXPECT_NEAR(z.Alpha(2), 0.5, 1e-12);  // never reached: the prior
  EXPECT_LT(z.ExpectedAccepted(4), 0.02);
}

TEST(StepCostModelTest, PricesRowsByTheirShapeWhileTheLevelFollowsGrowingContexts) {
  StepCostModel m;
  EXPECT_EQ(m.Estimate(7), 1.0);
  for (int i = 0; i < 20; ++i) m.Record(4, 2.0);
  EXPECT_NEAR(m.Estimate(4), 2.0, 1e-9);
  EXPECT_NEAR(m.Estimate(8), 2.5, 1e-9);          // the prior: 1 + log2(8 / 4) / 4
  for (int i = 0; i < 40; ++i) m.Record(8, 4.0);  // twice the rows, twice the time
  EXPECT_NEAR(m.Estimate(8) / m.Estimate(4), 2.0, 0.05);
  EXPECT_NEAR(m.Estimate(6) / m.Estimate(4), 1.5, 0.05);  // interpolated
  // Plain steps while the cost grows (longer contexts): the level follows, and 8 rows still cost
  // twice 4, though they were last measured when everything was cheaper.
  for (int i = 0; i < 200; ++i) m.Record(4, 2.0 + 0.01 * i);
  EXPECT_NEAR(m.Estimate(4), 3.99, 0.1);
  EXPECT_NEAR(m.Estimate(8) / m.Estimate(4), 2.0, 0.1);
  // Speculative steps have their own shape: here a jump of 50% whatever the rows.
  EXPECT_NEAR(m.Estimate(8, true), m.Estimate(8), 1e-9);  // none measured: the plain shape
  for (int i = 0; i < 40; ++i) m.Record(5, 1.5 * m.Estimate(4), true);
  EXPECT_NEAR(m.Estimate(5, true) / m.Estimate(4), 1.5, 0.05);
  // The benchmarks' log line: the level and every bucket's shape.
  EXPECT_EQ(m.Describe().substr(0, 15),
            absl::StrFormat("level %.3f ms", m.Estimate(4) * 1e3).substr(0, 15));
  EXPECT_NE(m.Describe().find("plain 4:1.00 8:2."), std::string::npos) << m.Describe();
  EXPECT_NE(m.Describe().find("speculative 5:1.5"), std::string::npos) << m.Describe();
  EXPECT_EQ(StepCostModel::Bucket(13), 13);
  EXPECT_EQ(StepCostModel::Bucket(100), 96);
  EXPECT_EQ(StepCostModel::Bucket(1000), 960);
}

// A speculative step that only set up a step graph measured nothing: exploring stays due until
// a speculative step is recorded, instead of waiting kExploreSteps for the next chance.
TEST(StepCostModelTest, AnUnmeasuredSpeculativeStepKeepsExploringDue) {
  StepCostModel m;
  for (int i = 0; i < 10; ++i) m.Record(1, 1.0);
  EXPECT_FALSE(m.ExploreDue());
  m.NoteUnmeasured(/*speculative=*/false);  // a plain step's graph setup: nothing to explore
  EXPECT_FALSE(m.ExploreDue());
  m.NoteUnmeasured(/*speculative=*/true);
  EXPECT_TRUE(m.ExploreDue());
  m.Record(1, 1.0);  // plain steps keep it due
  EXPECT_TRUE(m.ExploreDue());
  m.Record(20, 1.5, /*speculative=*/true);
  EXPECT_FALSE(m.ExploreDue());
  EXPECT_NEAR(m.Estimate(20, true), 1.5, 1e-9);
  // A shape captured again at every step (its layout moves with the contexts) stops retrying
  // after kExploreRetries unmeasured steps in a row.
  for (int i = 0; i < StepCostModel::kExploreRetries; ++i) {
    m.NoteUnmeasured(true);
    EXPECT_TRUE(m.ExploreDue()) << i;
  }
  m.NoteUnmeasured(true);
  EXPECT_FALSE(m.ExploreDue());
  m.Record(20, 1.5, true);  // measured at last: the next one may retry again
  m.NoteUnmeasured(true);
  EXPECT_TRUE(m.ExploreDue());
}

TEST(StepCostModelTest, ALongPlainRunIsDecidedOnlyOnEveryEighthStep) {
  StepCostModel m;
  constexpr int k = StepCostModel::kSettledSteps;
  for (int i = 0; i < k - 1; ++i) m.Record(1, 1.0);
  EXPECT_FALSE(m.DecisionSettled());  // k - 1 plain steps: not yet a run
  m.Record(1, 1.0);
  // From here each window of k steps decides on exactly one step, the phase of the unmeasured
  // drafters' explores (ExploreDue(k)), and on every step an explore is due.
  int decided = 0;
  for (int i = 0; i < 4 * k; ++i) {
    const bool settled = m.DecisionSettled();
    EXPECT_EQ(settled, !m.ExploreDue() && !m.ExploreDue(StepCostModel::kExploreUnmeasuredSteps))
        << "step " << m.steps();
    decided += !settled;
    m.Record(1, 1.0);
  }
  EXPECT_EQ(decided, 4);
  // A speculative step ends the run: every step decides until k plain ones follow.
  m.Record(3, 2.0, /*speculative=*/true);
  for (int i = 0; i < k; ++i) {
    EXPECT_FALSE(m.DecisionSettled()) << i;
    m.Record(1, 1.0);
  }
  // An explore due is always decided (the schedule's first explore comes at kExploreSteps - 1).
  while (!m.ExploreDue()) m.Record(1, 1.0);
  EXPECT_FALSE(m.DecisionSettled());
}

TEST(ChooseDraftDepthsTest, SpeculatesOnlyWhereTheExpectedTokensPayForTheRows) {
  AcceptanceStats good(4, 1.0), bad(4, 1.0);
  for (int i = 0; i < 200; ++i) {
    good.Record(4, 4);
    bad.Record(4, 0);
  }
  const DraftOption g{&good, kFourDepths}, b{&bad, kFourDepths};
  // Nothing measured yet: plain, whose step prices every other (a speculative step first would
  // leave the model without a level for good).
  EXPECT_EQ(ChooseDraftDepths(StepCostModel(), std::vector<DraftOption>{g}, 1),
            (std::vector<int>{0}));
  StepCostModel flat;  // extra rows cost nothing
  for (int rows : {2, 6, 2, 6}) flat.Record(rows, 1.0);
  EXPECT_EQ(ChooseDraftDepths(flat, std::vector<DraftOption>{g, b}, 2), (std::vector<int>{4, 0}));
  StepCostModel linear;  // every row costs as much as the first
  for (int i = 0; i < 10; ++i) {
    for (int rows : {1, 8}) linear.Record(rows, rows);
  }
  EXPECT_EQ(ChooseDraftDepths(linear, std::vector<DraftOption>{g}, 1), (std::vector<int>{0}));
  StepCostModel mild;  // a row costs a tenth of a step
  for (int rows : {2, 6, 2, 6}) mild.Record(rows, 1.0 + 0.1 * (rows - 2));
  EXPECT_EQ(ChooseDraftDepths(mild, std::vector<DraftOption>{g, b}, 2), (std::vector<int>{4, 0}));
  // A jump of 30% for any speculative step, rows free: one draft token of one good sequence of
  // eight does not pay for it (+12% tokens), of all eight it does, and so do four of one.
  StepCostModel jump;
  for (int i = 0; i < 4; ++i) {
    jump.Record(8, 1.0);
    jump.Record(12, 1.3, true);
    jump.Record(40, 1.3, true);
  }
  const DraftOption g1{&good, kOneDepth};
  EXPECT_EQ(ChooseDraftDepths(jump, std::vector<DraftOption>(8, g1), 8), std::vector<int>(8, 1));
  std::vector<DraftOption> one_good(8, b);
  one_good[0] = g1;
  EXPECT_EQ(ChooseDraftDepths(jump, one_good, 8), std::vector<int>(8, 0));
  one_good[0] = g;
  EXPECT_EQ(ChooseDraftDepths(jump, one_good, 8), (std::vector<int>{4, 0, 0, 0, 0, 0, 0, 0}));
  // Uniform steps (graph-replaying backends): one depth for all, so the good sequence's draft
  // must pay for the bad ones' rows too. Rows at a tenth of a step each: alone it pays (12 tokens
  // for 2.0 against 8 for 1.6), with the bad ones' 28 rows it does not; eight good ones draft.
  EXPECT_EQ(ChooseDraftDepths(mild, one_good, 8), (std::vector<int>{4, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(ChooseDraftDepths(mild, one_good, 8, /*uniform=*/true), std::vector<int>(8, 0));
  EXPECT_EQ(ChooseDraftDepths(mild, std::vector<DraftOption>(8, g), 8, /*uniform=*/true),
            std::vector<int>(8, 4));
  // A streak of speculative steps leaves the level stale: then one plain step runs.
  for (int i = 0; i < StepCostModel::kPlainSteps; ++i) jump.Record(40, 1.3, true);
  EXPECT_TRUE(jump.PlainDue());
  EXPECT_EQ(ChooseDraftDepths(jump, std::vector<DraftOption>(8, g), 8), std::vector<int>(8, 0));
  jump.Record(8, 1.0);
  EXPECT_FALSE(jump.PlainDue());
}

// A cold first step (a graph's first replay) must not set the level: it is the least of the first
// two plain steps, and nothing speculates before both ran (a level twice too high priced 128-row
// speculative steps at half a plain one for a whole PlainDue streak).
TEST(StepCostModelTest, TheLevelIsTheLeastOfTheFirstPlainSteps) {
  StepCostModel cost;
  cost.Record(64, 0.7);
  EXPECT_FALSE(cost.measured());
  AcceptanceStats prior(4);
  EXPECT_EQ(
      ChooseDraftDepths(cost, std::vector<DraftOption>(64, DraftOption{&prior, kFourDepths}), 64),
      std::vector<int>(64, 0));
  cost.Record(64, 0.31);
  EXPECT_TRUE(cost.measured());
  EXPECT_NEAR(cost.Estimate(64), 0.31, 1e-12);
  cost.Record(64, 0.41);  // then the usual average
  EXPECT_NEAR(cost.Estimate(64), 0.33, 1e-12);
}

// Contexts that shrink under a speculative streak (fresh short requests after long ones): the
// plain step PlainDue brings replaces the stale level, and the streak's speculative shapes keep
// the seconds they measured — with the level's usual average (a fifth of the way per plain step)
// a 5.5 s speculative step stayed priced at 4.8 s against 8.7 s plain ones.
TEST(StepCostModelTest, APlainStepAfterAStreakReplacesAStaleLevel) {
  StepCostModel cost;
  for (int i = 0; i < 8; ++i) cost.Record(8, 10.0);
  for (int i = 0; i < StepCostModel::kPlainSteps; ++i) cost.Record(40, 5.5, true);
  ASSERT_TRUE(cost.PlainDue());
  cost.Record(8, 3.6);
  EXPECT_FALSE(cost.PlainDue());
  EXPECT_NEAR(cost.Estimate(8), 3.6, 1e-9);
  EXPECT_NEAR(cost.Estimate(40, true), 5.5, 1e-9);
  // Drafts whose acceptance is nearly nil no longer pay: 8 tokens for 3.6 s beat 8.4 for 5.5 s.
  AcceptanceStats poor(4);
  for (int i = 0; i < 50; ++i) poor.Record(4, 0);
  const DraftOption option{&poor, kFourDepths};
  EXPECT_EQ(ChooseDraftDepths(cost, std::vector<DraftOption>(8, option), 8),
            std::vector<int>(8, 0));
  // Later plain steps average as before.
  cost.Record(8, 4.6);
  EXPECT_NEAR(cost.Estimate(8), 3.8, 1e-9);
}

// A sequence that speculated to its end, then a fresh one that starts plain at half the context
// (longgen at batch 1): the streak's seconds were the old context's, so its shapes carry over
// instead — keeping the seconds priced a 2.2x step at 4-5x, and nothing speculated for a whole
// sequence. At the streak's own contexts the seconds are kept, as above.
TEST(StepCostModelTest, AStreakAtOtherContextsKeepsItsShapesNotItsSeconds) {
  for (const int64_t context : {4100, 8200}) {
    StepCostModel cost;
    for (int i = 0; i < 8; ++i) cost.Record(1, 0.2, false, 7900);
    for (int i = 0; i < StepCostModel::kPlainSteps; ++i) {
      cost.Record(39, 0.44, true, 8000 + 5 * i);
    }
    ASSERT_TRUE(cost.PlainDue());
    cost.Record(1, 0.12, false, context);
    EXPECT_NEAR(cost.Estimate(1), 0.12, 1e-9);
    EXPECT_NEAR(cost.Estimate(39, true), context == 4100 ? 0.12 * 2.2 : 0.44, 1e-9) << context;
  }
}

// Past twice its largest bucket plus kHorizonRows a step is priced in proportion to its rows:
// TokenSwift's trees at batch 64 (2,432 rows) were priced at 1.9 plain steps from flat buckets of
// 112 and 128 rows, and each such step cost 4-9 of its estimates.
TEST(StepCostModelTest, StepsFarPastTheMeasuredOnesArePricedInProportionToTheirRows) {
  StepCostModel cost;
  for (int i = 0; i < 4; ++i) cost.Record(64, 0.3);
  const double at192 = 1 + 0.25 * std::log2(3.0);  // the prior, up to 2 * 64 + 64 rows
  EXPECT_NEAR(cost.Estimate(128) / 0.3, 1.25, 1e-9);
  EXPECT_NEAR(cost.Estimate(192) / 0.3, at192, 1e-9);
  EXPECT_NEAR(cost.Estimate(1664) / 0.3, at192 * 1664 / 192, 1e-9);
  EXPECT_NEAR(cost.Estimate(1664, true), cost.Estimate(1664), 1e-12);  // the plain shape
  for (int i = 0; i < 4; ++i) {
    cost.Record(112, 0.57, true);
    cost.Record(128, 0.57, true);
  }
  EXPECT_NEAR(cost.Estimate(320, true), 0.57, 1e-9);  // the flat slope, up to 2 * 128 + 64
  EXPECT_NEAR(cost.Estimate(2432, true), 0.57 * StepCostModel::Bucket(2432) / 320, 1e-9);
}

// A price too high keeps speculation off, so only explores lower it: an explore that measures a
// bucket cheaper replaces its shape; other speculative steps move it a fifth of the way.
TEST(StepCostModelTest, ACheaperExploreReplacesTheBucketsShape) {
  StepCostModel cost;
  for (int i = 0; i < 10; ++i) cost.Record(1, 0.2);
  for (int i = 0; i < 4; ++i) cost.Record(39, 0.9, true);
  EXPECT_NEAR(cost.Estimate(39, true), 0.9, 1e-9);
  while (!cost.ExploreDue()) cost.Record(1, 0.2);
  cost.Record(39, 0.44, true);
  EXPECT_NEAR(cost.Estimate(39, true), 0.44, 1e-9);
  cost.Record(39, 0.3, true);  // not an explore
  EXPECT_NEAR(cost.Estimate(39, true), 0.44 + 0.2 * (0.3 - 0.44), 1e-9);
  cost.Record(39, 0.9, true);  // dearer: averaged as before
  EXPECT_GT(cost.Estimate(39, true), 0.44);
}

// Shapes need not grow with the rows: one slow measurement of a shallow draft's bucket must not
// keep the deep drafts, measured cheaper, from being chosen (the cheap way out priced every
// speculative step at the fewest rows' estimate).
TEST(ChooseDraftDepthsTest, ASlowShallowBucketDoesNotHideCheaperDeepDrafts) {
  StepCostModel cost;
  for (int i = 0; i < 4; ++i) cost.Record(1, 1.0);
  for (int i = 0; i < 4; ++i) cost.Record(39, 2.2, /*speculative=*/true);
  cost.Record(11, 8.7, /*speculative=*/true);
  EXPECT_NEAR(cost.Estimate(5, true), 8.7, 1e-9);  // below every bucket: no cheaper
  EXPECT_NEAR(cost.LeastEstimate(5, true), 2.2, 1e-9);
  EXPECT_NEAR(cost.LeastEstimate(39, true), 2.2, 1e-9);
  EXPECT_NEAR(cost.LeastEstimate(40, true), cost.Estimate(40, true), 1e-9);
  AcceptanceStats good(9, 1.0);
  for (int i = 0; i < 20; ++i) good.Record(9, 9);
  const std::vector<int> rows_at = {4, 10, 20, 23, 26, 29, 32, 35, 38};
  const std::vector<DraftOption> options = {DraftOption{&good, rows_at}};
  EXPECT_EQ(ChooseDraftDepths(cost, options, 1, /*uniform=*/true), std::vector<int>{9});
}

// An explore at a large batch drafts for as few sequences as the step has rows for, in turn: 64
// sequences of Lookahead's 29-119-row drafts explore two at a time, others each time; prompt
// lookup's few rows explore many sequences, never more draft rows than roots.
TEST(ChooseDraftDepthsTest, ExploresDraftOnlyAsManySequencesAsTheStepHasRows) {
  // Acceptances that plain decoding beats but explores retry (within half of plain's rate): the
  // prior's for the big drafts, none for the small.
  AcceptanceStats prior(4, 1.0), bad(4, 1.0);
  for (int i = 0; i < 200; ++i) bad.Record(4, 0);
  for (const std::vector<int>& rows_at :
       {std::vector<int>{29, 59, 89, 119}, std::vector<int>{1, 2, 3, 4}}) {
    SCOPED_TRACE(rows_at.back());
    const bool big = rows_at.back() > 64;
    const std::vector<DraftOption> options(64, DraftOption{big ? &prior : &bad, rows_at});
    StepCostModel cost;
    if (big) {
      // Every sequence's draft, 1,920 rows, is priced past the horizon: far below half of plain's
      // rate, not explored — unless such a step was measured at twice a plain one.
      for (int i = 0; i < 2; ++i) cost.Record(64, 1.0);
      EXPECT_LT(cost.Estimate(64 + 64 * 29, true), 64 * 1.5 * 0.5);
      cost.Record(64 + 64 * 29, 2.0, /*speculative=*/true);
    }
    std::vector<std::vector<int>> explores;
    for (int i = 0; i < 2 * StepCostModel::kExploreSteps; ++i) {
      const std::vector<int> depth = ChooseDraftDepths(cost, options, 64, /*uniform=*/true);
      if (std::any_of(depth.begin(), depth.end(), [](int d) { return d > 0; })) {
        explores.push_back(depth);
      }
      cost.Record(64, 1.0);
    }
    ASSERT_EQ(explores.size(), 2u);
    for (const std::vector<int>& depth : explores) {
      int rows = 0, drafting = 0;
      for (const int d : depth) {
        rows += d > 0 ? rows_at[d - 1] : 0;
        drafting += d > 0;
      }
      ASSERT_GE(drafting, 1);
      EXPECT_LE(rows, std::max(64, rows_at.back()));
      EXPECT_GT(rows + rows / drafting, 64);  // as many as fit (uniform: one depth for all)
    }
    const auto drafting =
        std::count_if(explores[0].begin(), explores[0].end(), [](int d) { return d > 0; });
    if (drafting < 64) {
      EXPECT_NE(explores[0], explores[1]);  // other sequences' turn
    }
  }
}

// Speculation must be estimated at least 5% faster than plain decoding: a break-even estimate
// loses to the estimates' scatter. Rows free here, so the rate is 1 + α of one draft token.
TEST(ChooseDraftDepthsTest, SpeculationMustBeatPlainByAMargin) {
  StepCostModel free_rows;
  for (int i = 0; i < 4; ++i) {
    free_rows.Record(1, 1.0);
    free_rows.Record(2, 1.0, /*speculative=*/true);
  }
  auto depth_at = [&](int accepted_of_98) {
    AcceptanceStats stats(1, 1.0);
    for (int i = 0; i < 98; ++i) stats.Record(1, i < accepted_of_98 ? 1 : 0);
    return ChooseDraftDepths(free_rows, std::vector<DraftOption>{DraftOption{&stats, kOneDepth}},
                             1)[0];
  };
  EXPECT_EQ(depth_at(2), 0);  // α = 3%
  EXPECT_EQ(depth_at(7), 1);  // α = 8%
}

// Explores that change nothing come ever less often (128, 256, 512, then every 1024 steps); a
// step that chooses speculation between two explores brings them back to every 128. (Priced
// near plain's rate: explores of steps far from it stop once measured, below.)
TEST(ChooseDraftDepthsTest, ExploresBackOffWhileNothingChoosesSpeculation) {
  AcceptanceStats bad(4);
  for (int i = 0; i < 200; ++i) bad.Record(4, 0);
  const std::vector<DraftOption> options(8, DraftOption{&bad, kFourDepths});
  // Drafters whose acceptance only explores measure (a model drafter here; Lookahead) back off
  // alike once it is measured: their explores cost the most (op-by-op draft passes).
  std::vector<DraftOption> model_drafted = options;
  model_drafted[3].model_draft = true;
  const auto explores_of = [](const std::vector<DraftOption>& opts, StepCostModel& cost) {
    std::vector<int> explores;
    while (cost.steps() < 3000) {
      const std::vector<int> depth = ChooseDraftDepths(cost, opts, 8);
      const int extra = std::accumulate(depth.begin(), depth.end(), 0);
      if (extra > 0) {
        explores.push_back(static_cast<int>(cost.steps()));
        cost.Record(8 + extra, 1.05, /*speculative=*/true);
      } else {
        cost.Record(8, 1.0);
      }
    }
    return explores;
  };
  StepCostModel cost, passes;
  for (int i = 0; i < 8; ++i) passes.Record(8, 1.0);
  for (int i = 0; i < 4; ++i) passes.RecordDraftPass(1, 0.01);  // cheap passes: near plain's rate
  EXPECT_EQ(explores_of(options, cost), (std::vector<int>{127, 383, 895, 1919, 2943}));
  EXPECT_EQ(explores_of(model_drafted, passes), (std::vector<int>{127, 383, 895, 1919, 2943}));
  // A first measurement that was a cold outlier (2.5x) is re-measured by the next explore and
  // replaced (a bucket's first two measurements give their least): speculation then pays.
  AcceptanceStats good(4);
  for (int i = 0; i < 200; ++i) good.Record(4, 4);
  StepCostModel cold;
  for (int i = 0; i < 8; ++i) cold.Record(8, 1.0);
  cold.Record(16, 3.0, /*speculative=*/true);  // plain wins at this price: 16 tokens for 3.0
  const std::vector<DraftOption> good_options(8, DraftOption{&good, kOneDepth});
  int first_explore = -1;
  for (int step = 0; step < 256 && first_explore < 0; ++step) {
    const std::vector<int> depth = ChooseDraftDepths(cold, good_options, 8);
    const int extra = std::accumulate(depth.begin(), depth.end(), 0);
    if (extra > 0) first_explore = step;
    cold.Record(8 + extra, extra > 0 ? 1.2 : 1.0, extra > 0);
  }
  EXPECT_EQ(first_explore, StepCostModel::kExploreSteps - 1 - 9);  // 9 steps were recorded before
  EXPECT_NEAR(cold.Estimate(16, true), 1.2, 1e-9);
  EXPECT_EQ(ChooseDraftDepths(cold, good_options, 8), std::vector<int>(8, 1));
  // A chosen speculative step (the acceptance rose) between explores: the next explore's
  // interval is 128 again.
  StepCostModel chosen = cost;
  while (!chosen.ExploreDue()) chosen.Record(8, 1.0);
  chosen.Record(12, 1.3, true);  // the explore
  chosen.Record(12, 1.1, true);  // chosen
  int until = 0;
  while (!chosen.ExploreDue()) {
    chosen.Record(8, 1.0);
    ++until;
  }
  EXPECT_EQ(until, StepCostModel::kExploreSteps - 1);
  // The unmeasured model drafters' schedule does not back off.
  int every8 = 0;
  for (int i = 0; i < 64; ++i, cost.Record(8, 1.0)) {
    every8 += cost.ExploreDue(StepCostModel::kExploreUnmeasuredSteps);
  }
  EXPECT_EQ(every8, 8);
}

// Model drafters (sparse-self): a depth-k draft also costs k draft passes, priced by the
// sequences in each pass, so drafting pays only where a pass is cheap next to a step; and an
// acceptance never measured (no shadow drafts) is explored once per kExploreSteps steps whatever
// its price.
TEST(ChooseDraftDepthsTest, ModelDraftsPayForTheirDraftPasses) {
  AcceptanceStats good(4, 1.0);
  for (int i = 0; i < 200; ++i) good.Record(4, 4);
  DraftOption g{&good, kFourDepths};
  g.model_draft = true;
  StepCostModel flat;  // rows free; a draft pass as dear as a step until measured
  for (int rows : {2, 6, 2, 6}) flat.Record(rows, 1.0);
  EXPECT_NEAR(flat.EstimateDraftPass(2), 1.0, 1e-9);
  // 1 + ~4 tokens for 1 + 4 passes of 1.0 each: not worth a plain step's 1 token for 1.0...
  // (two sequences: 2 + ~8 tokens for 1 + 4 passes)
  EXPECT_EQ(ChooseDraftDepths(flat, std::vector<DraftOption>{g, g}, 2), (std::vector<int>{0, 0}));
  // ... but passes at a fifth of a step are: 10 tokens for 1.8.
  for (int i = 0; i < 20; ++i) flat.RecordDraftPass(2, 0.2);
  EXPECT_NEAR(flat.EstimateDraftPass(2), 0.2, 1e-6);
  EXPECT_EQ(ChooseDraftDepths(flat, std::vector<DraftOption>{g, g}, 2), (std::vector<int>{4, 4}));
  // One pass for every depth (TokenSwift's heads): 10 tokens for 1 + 1 pass at 1.0 each wins
  // where 4 passes did not.
  StepCostModel pass_as_dear_as_a_step;
  for (int rows : {2, 6, 2, 6}) pass_as_dear_as_a_step.Record(rows, 1.0);
  DraftOption one = g;
  one.one_pass = true;
  EXPECT_EQ(ChooseDraftDepths(pass_as_dear_as_a_step, std::vector<DraftOption>{one, one}, 2),
            (std::vector<int>{4, 4}));
  // The same draft from a proposer with no passes (prompt lookup) runs at any pass price.
  StepCostModel dear = flat;
  for (int i = 0; i < 40; ++i) dear.RecordDraftPass(2, 4.0);
  EXPECT_EQ(ChooseDraftDepths(dear, std::vector<DraftOption>{g, g}, 2), (std::vector<int>{0, 0}));
  DraftOption lookup = g;
  lookup.model_draft = false;
  EXPECT_EQ(ChooseDraftDepths(dear, std::vector<DraftOption>{lookup, lookup}, 2),
            (std::vector<int>{4, 4}));
  // Unmeasured acceptance (the prior, 0.5 per position) at a price that plain beats by far:
  // plain, except on every 8th step, which drafts to measure it.
  AcceptanceStats fresh(4, 1.0);
  DraftOption f{&fresh, kFourDepths};
  f.model_draft = true;
  int explored = 0;
  for (int i = 0; i < StepCostModel::kExploreSteps; ++i) {
    const std::vector<int> depth = ChooseDraftDepths(dear, std::vector<DraftOption>{f, f}, 2);
    explored += depth[0] > 0 || depth[1] > 0;
    dear.Record(2, dear.Estimate(2));
  }
  EXPECT_EQ(explored, StepCostModel::kExploreSteps / StepCostModel::kExploreUnmeasuredSteps);
  // Measured: nothing accepted in 8 drafts; no exploring past the half-rate bar now.
  for (int i = 0; i < StepCostModel::kMinAcceptanceSamples; ++i) fresh.Record(4, 0);
  for (int i = 0; i < StepCostModel::kExploreSteps; ++i) {
    EXPECT_EQ(ChooseDraftDepths(dear, std::vector<DraftOption>{f, f}, 2), (std::vector<int>{0, 0}));
    dear.Record(2, dear.Estimate(2));
  }
}

}  // namespace
}  // namespace sparseserve::spec
