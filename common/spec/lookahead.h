// LookaheadProposer: Lookahead decoding (papers/lookahead.md §1) — a 2D window of W future
// positions × N−1 Jacobi levels runs beside verification in the same forward pass, every step
// turns each window column into an N-gram for the pool, and the pool's n-grams that start with
// the current token (at most G) are verified.
//
// Step layout (rows after the root, the current token at position P): level 0 holds W−1 tokens
// at P+1..P+W−1 (column 0 is the root itself); level ℓ = 1..N−2 holds W tokens, column i at
// P+i+ℓ; then the candidates, G chains of up to N−1 tokens at P+1, P+2, ... (merged where they
// share a prefix). The mask is the paper's: level 0 is causal; a level-ℓ token in column i sees
// the root, level-0 columns 1..i and column i of levels 1..ℓ; candidates see the root and their
// own prefix; the branches never see each other. The window's rows are sampled greedily (the
// paper forces the lookahead branch greedy, so its n-grams are one-hot drafts); the candidates
// are verified under the request's sampling (draft.h).
//
// After a step the outputs of the last level give W new N-grams (column i: the column's tokens
// and its output), the window slides by one level and by the tokens emitted (columns shift
// left; columns past the window's end are refilled from the history), and during the first N−2
// steps (warm-up) the outputs become a new level instead. The pool is seeded with the prompt's
// N-grams (the paper's prompt-as-reference) and also takes the output's as they are emitted.
// Not thread-safe.
#ifndef SPARSESERVE_COMMON_SPEC_LOOKAHEAD_H_
#define SPARSESERVE_COMMON_SPEC_LOOKAHEAD_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "common/spec/draft_proposer.h"

namespace sparseserve::spec {

struct LookaheadParams {
  int window = 15;   // W: parallel Jacobi positions (columns)
  int ngram = 5;     // N: n-gram size; the window has N−1 levels, candidates N−1 tokens
  int guesses = 15;  // G: candidates verified per step at most
};

// The paper's defaults by model size (§1, A100): 7B W=15 N=5 G=15, 13B W=10, 34B W=7 (G = W);
// smaller models keep 15: their steps have the most spare FLOPs.
LookaheadParams DefaultLookaheadParams(int64_t num_parameters);

// First token -> up to `capacity` continuations of n−1 tokens, most recently added first; adding
// one already present moves it to the front, a full list drops its least recent (LRU).
class NgramPool {
 public:
  NgramPool(int ngram, int capacity);
  // `ngram`: n tokens.
  void Add(absl::Span<const int32_t> ngram);
  // Continuations of `first`, most recent first (each n−1 tokens).
  const std::deque<std::vector<int32_t>>* Find(int32_t first) const;
  int64_t size() const { return size_; }

 private:
  int ngram_, capacity_;
  int64_t size_ = 0;
  absl::flat_hash_map<int32_t, std::deque<std::vector<int32_t>>> lists_;
};

class LookaheadProposer : public DraftProposer {
 public:
  // REQUIRES: window >= 2, ngram >= 2, guesses >= 1.
  explicit LookaheadProposer(const LookaheadParams& params);

  int max_depth() const override { return params_.ngram - 1; }
  int RowsAt(int depth) const override;
  bool shadow_predicts_acceptance() const override { return false; }
  void Propose(absl::Span<const int32_t> history, int depth, bool verify_only,
               StepDraft* draft) override;
  void Observe(const StepDraft& draft, absl::Span<const int32_t> sampled,
               absl::Span<const int32_t> emitted) override;

  const NgramPool& pool() const { return pool_; }
  int levels() const { return static_cast<int>(levels_.size()); }  // warm-up: < N−1

 private:
  // Seeds the pool with the history's n-grams not seen yet and starts the window.
  void Catch(absl::Span<const int32_t> history);
  // A filler token for window column `i`, from the history (deterministic).
  int32_t Filler(int64_t i) const;

  LookaheadParams params_;
  NgramPool pool_;
  std::vector<int32_t> history_;  // what the pool has seen (prompt and output)
  // levels_[0]: columns 1..W−1 (column 0 is the root); levels_[l >= 1]: columns 0..W−1.
  std::vector<std::vector<int32_t>> levels_;
  // Rows of the last proposed window in its draft: rows_[l][i] for level l, column i (level 0's
  // column 0 is the root, row 0). Empty when the last draft had no window.
  std::vector<std::vector<int32_t>> rows_;
};

}  // namespace sparseserve::spec

#endif  // SPARSESERVE_COMMON_SPEC_LOOKAHEAD_H_
