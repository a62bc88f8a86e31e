// TokenSwiftProposer: TokenSwift's drafter (papers/tokenswift.md; issue 15 item 1). One draft
// pass of the model over its partial KV cache (the sparse self-drafting attention of sparse-self:
// sinks plus TokenSelect's selection or a window) drafts the token after the root from the model's
// own logits and, with trained multi-token heads (LlamaModel::LoadDraftHeads), candidates for the
// tokens after it; the step verifies a tree of them against the full cache:
//   - the tree [1, 3, 3, 3]: the drafted token, then every path through the top 3 of heads 1..3
//     (27 paths, 40 nodes);
//   - token reutilization: the ngram_k most frequent 4-grams of the sequence so far (prompt and
//     output) that start with the drafted token, each a chain (merged with the tree where they
//     share a prefix); the table counts the 4-grams that end ngram_lag (W) tokens or more before
//     the end.
//   - chained reutilization (params.ngram_chain c > 1; not in the paper): each 4-gram chain, and
//     the path through every head's best candidate, goes on by the most frequent 4-gram of its
//     last token, c - 1 times — 3 tokens each. Both arrangements above draft at most 3-4 tokens a
//     step and accept nearly all of them on repetitive outputs (bench/RESULTS.md, session 27), so
//     depth, not acceptance, is what bounds a step there.
// Without the draft pass (params.draft_pass false) the heads read the residual stream of the row
// that sampled the root, in the step that verified it (the Medusa arrangement): that row has
// already run against the full cache, so a step is one pass of the weights instead of two (the
// paper's pitfall) and the root is the target's own token, not a draft. The tree loses its first
// level — head d gives depth d: [3, 3, 3] from the default — and the 4-grams start with the root.
// Its drafts exist on plain steps too, so they measure acceptance there (shadow drafts).
// Verification is the framework's sample-and-match walk (draft.h): one target sample per tree
// node, with the draw plain decoding would use, so the output equals plain decoding under
// sampling too (the paper's code samples one token per branch, which is biased). Without heads
// the tree is the drafted token alone and the 4-grams carry the depth. Not thread-safe.
#ifndef SPARSESERVE_COMMON_SPEC_TOKENSWIFT_H_
#define SPARSESERVE_COMMON_SPEC_TOKENSWIFT_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "common/spec/model_draft.h"

namespace sparseserve::spec {

// Counts of the 4-grams of a growing token sequence, by first token.
class FourGramTable {
 public:
  using Continuation = std::array<int32_t, 3>;
  // Counts the 4-grams of `history` that end at or before index `end` and were not counted yet.
  // `history` only grows between calls (REQUIRES: a prefix of the next call's).
  void Update(absl::Span<const int32_t> history, int64_t end);
  // Up to `k` continuations of `first`, most frequent first (ties: smaller tokens first, so the
  // order does not depend on hashing).
  std::vector<Continuation> Top(int32_t first, int k) const;
  // Top(first, 1)'s continuation without building the list (chained reutilization asks for it
  // several times per draft); false when `first` has none.
  bool Best(int32_t first, Continuation* best) const;
  // How often `first` followed by `continuation` was counted.
  int64_t Count(int32_t first, const Continuation& continuation) const;
  int64_t counted_end() const { return counted_end_; }

 private:
  absl::flat_hash_map<int32_t, absl::flat_hash_map<Continuation, int64_t>> counts_;
  int64_t counted_end_ = 0;  // the 4-grams ending at or before this index are counted
};

struct TokenSwiftParams {
  // Candidates per depth: tree[0] must be 1 (the token the model drafted), tree[d] the top
  // tree[d] tokens of draft head d (the token d places after it); levels without a head are cut.
  std::vector<int> tree = {1, 3, 3, 3};
  int ngram_k = 20;      // 4-grams reused per step (the paper's top-k); 0 = off
  int ngram_lag = 1024;  // W (papers/tokenswift.md, [code]); >= 0
  // 4-grams chained into one candidate (above); 1 = the paper's single 4-gram; >= 1.
  int ngram_chain = 1;
  // The paper's draft pass over the partial KV cache; false = the heads at the root's own row
  // (above). tree[0] stays 1 either way (unused without the pass).
  bool draft_pass = true;
};

class TokenSwiftProposer : public ModelDraftProposer {
 public:
  // `heads`: the model's draft heads (0 = none). `max_depth` caps the tree and the 4-grams.
  TokenSwiftProposer(const TokenSwiftParams& params, int heads, int max_depth);

  int RowsAt(int depth) const override;
  int PassesAt(int depth) const override { return depth > 0 && params_.draft_pass ? 1 : 0; }
  int HeadTopK() const override;
  void Propose(absl::Span<const int32_t> history, int depth, bool verify_only,
               StepDraft* draft) override;
  // Without the draft pass the heads' candidates exist before a plain step too.
  bool shadow_predicts_acceptance() const override { return !params_.draft_pass; }

  // The deepest draft these parameters make with `heads` draft heads (at least 1).
  static int DepthOf(const TokenSwiftParams& params, int heads);

 private:
  // Tree levels: with the draft pass, the drafted token's level and those the heads fill; without
  // it, the heads' levels (tree[1..]).
  static int TreeLevels(const TokenSwiftParams& params, int heads);
  // Candidates at tree level d (1-based; tree[d - 1] with the pass, tree[d] without).
  int Branching(int d) const;
  // Draft tokens a 4-gram chain adds at `depth`.
  int NgramChainRows(int depth) const;
  // Draft tokens the heads' best path gains from chained 4-grams at `depth`.
  int HeadPathRows(int depth) const;
  // `chain` grown to `length` tokens (at most) by the most frequent 4-gram of its last token.
  void ExtendByFourGrams(size_t length, std::vector<int32_t>* chain) const;

  TokenSwiftParams params_;
  int heads_;
  FourGramTable table_;
};

// The n-grams token reutilization counts (TokenSwift's 4-gram table).
inline constexpr int kTokenSwiftNgramLength = 4;

}  // namespace sparseserve::spec

#endif  // SPARSESERVE_COMMON_SPEC_TOKENSWIFT_H_
