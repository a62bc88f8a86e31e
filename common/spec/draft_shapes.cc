#include "common/spec/draft_shapes.h"

#include <algorithm>
#include <array>
#include <vector>

#include "common/core/check.h"

namespace sparseserve::spec {
namespace {

// Distinct tokens in turn (wrapping past the vocabulary; repeats then merge rows, and the
// padding puts them back).
class TokenCounter {
 public:
  explicit TokenCounter(int32_t vocab_size) : vocab_size_(vocab_size) { SS_CHECK(vocab_size >= 2); }
  int32_t Next() { return static_cast<int32_t>(next_++ % vocab_size_); }

 private:
  int32_t vocab_size_;
  int64_t next_ = 1;  // 0 is the root's
};

}  // namespace

StepDraft FullLookaheadDraft(const LookaheadParams& params, int32_t vocab_size) {
  TokenCounter tokens(vocab_size);
  const int32_t root = 0;
  // A history in which the root has G distinct continuations, then the root again: the pool
  // seeded from it holds G candidates.
  std::vector<int32_t> history;
  for (int g = 0; g < params.guesses; ++g) {
    history.push_back(root);
    for (int t = 1; t < params.ngram; ++t) history.push_back(tokens.Next());
  }
  history.push_back(root);
  LookaheadProposer proposer(params);
  const int depth = proposer.max_depth();
  StepDraft draft;
  // Warm-up: each step adds a window level until there are N−1; every step emits the root again
  // so the candidates stay those of the root.
  for (;;) {
    proposer.Propose(history, depth, /*verify_only=*/false, &draft);
    if (proposer.levels() == params.ngram - 1) break;
    std::vector<int32_t> sampled(static_cast<size_t>(draft.size()) + 1);
    for (int32_t& s : sampled) s = tokens.Next();
    sampled[0] = root;
    const std::array<int32_t, 1> emitted = {root};
    proposer.Observe(draft, sampled, emitted);
    history.push_back(root);
  }
  draft.PadWithAuxiliaryRows(proposer.RowsAt(depth), root);
  return draft;
}

StepDraft FullTokenSwiftDraft(const TokenSwiftParams& params, int heads, int32_t vocab_size) {
  SS_CHECK(!params.tree.empty() && params.tree[0] == 1 && heads >= 0);
  TokenCounter tokens(vocab_size);
  const int depth = TokenSwiftProposer::DepthOf(params, heads);
  const int levels = std::min(static_cast<int>(params.tree.size()), heads + 1);
  StepDraft draft;
  const int32_t first = tokens.Next();
  std::vector<int32_t> level = {draft.AddRow(first, 1, 0)};
  for (int d = 2; d <= std::min(depth, levels); ++d) {
    std::vector<int32_t> next;
    for (const int32_t parent : level) {
      for (int c = 0; c < params.tree[static_cast<size_t>(d - 1)]; ++c) {
        next.push_back(draft.AddRow(tokens.Next(), d, parent));
      }
    }
    level = std::move(next);
  }
  if (params.ngram_k > 0 && depth >= 2) {
    const size_t len = static_cast<size_t>(std::min(depth, kTokenSwiftNgramLength));
    for (int k = 0; k < params.ngram_k; ++k) {
      const std::array<int32_t, kTokenSwiftNgramLength> chain = {first, tokens.Next(),
                                                                 tokens.Next(), tokens.Next()};
      draft.AddChain(absl::MakeConstSpan(chain.data(), len));
    }
  }
  draft.PadWithAuxiliaryRows(TokenSwiftProposer(params, heads, depth).RowsAt(depth), first);
  return draft;
}

}  // namespace sparseserve::spec
