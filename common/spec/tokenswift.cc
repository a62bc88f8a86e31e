#include "common/spec/tokenswift.h"

#include <algorithm>

#include "common/core/check.h"

namespace sparseserve::spec {

void FourGramTable::Update(absl::Span<const int32_t> history, int64_t end) {
  end = std::min<int64_t>(end, static_cast<int64_t>(history.size()));
  for (int64_t e = std::max<int64_t>(counted_end_ + 1, kTokenSwiftNgramLength); e <= end; ++e) {
    const int32_t* g = history.data() + e - kTokenSwiftNgramLength;
    ++counts_[g[0]][Continuation{g[1], g[2], g[3]}];
  }
  counted_end_ = std::max(counted_end_, end);
}

int64_t FourGramTable::Count(int32_t first, const Continuation& continuation) const {
  const auto it = counts_.find(first);
  if (it == counts_.end()) return 0;
  const auto c = it->second.find(continuation);
  return c == it->second.end() ? 0 : c->second;
}

std::vector<FourGramTable::Continuation> FourGramTable::Top(int32_t first, int k) const {
  std::vector<Continuation> out;
  const auto it = counts_.find(first);
  if (it == counts_.end() || k <= 0) return out;
  std::vector<std::pair<int64_t, Continuation>> all;
  all.reserve(it->second.size());
  for (const auto& [cont, count] : it->second) all.emplace_back(count, cont);
  const size_t n = std::min(all.size(), static_cast<size_t>(k));
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(),
                    [](const auto& a, const auto& b) {
                      return a.first > b.first || (a.first == b.first && a.second < b.second);
                    });
  for (size_t i = 0; i < n; ++i) out.push_back(all[i].second);
  return out;
}

TokenSwiftProposer::TokenSwiftProposer(const TokenSwiftParams& params, int heads, int max_depth)
    : ModelDraftProposer(std::min(max_depth, DepthOf(params, heads))),
      params_(params),
      heads_(heads) {
  SS_CHECK(!params_.tree.empty() && params_.tree[0] == 1 && heads_ >= 0);
}

int TokenSwiftProposer::DepthOf(const TokenSwiftParams& params, int heads) {
  const int tree = std::min(static_cast<int>(params.tree.size()), heads + 1);
  return std::max(tree, params.ngram_k > 0 ? kTokenSwiftNgramLength : 1);
}

int TokenSwiftProposer::TreeLevels() const {
  return std::min(static_cast<int>(params_.tree.size()), heads_ + 1);
}

int TokenSwiftProposer::RowsAt(int depth) const {
  int rows = 0, level = 1;
  for (int d = 1; d <= std::min(depth, TreeLevels()); ++d) {
    level *= params_.tree[static_cast<size_t>(d - 1)];
    rows += level;
  }
  // Each 4-gram chain adds at most its tokens after the drafted one.
  const int chain = std::min(depth, kTokenSwiftNgramLength) - 1;
  return rows + params_.ngram_k * std::max(chain, 0);
}

int TokenSwiftProposer::HeadTopK() const {
  int k = 0;
  for (int d = 1; d < TreeLevels(); ++d) k = std::max(k, params_.tree[static_cast<size_t>(d)]);
  return k;
}

void TokenSwiftProposer::Propose(absl::Span<const int32_t> history, int depth, bool verify_only,
                                 StepDraft* draft) {
  draft->Clear();
  if (verify_only) return;  // a shadow draft would need the draft pass
  const ModelDraft made = std::move(draft_);
  draft_ = ModelDraft();
  depth = std::min(depth, max_depth());
  if (made.chain.empty() || depth < 1) return;
  const int32_t first = made.chain[0];
  // The tree, level by level: every node of a level gets the next head's top candidates.
  std::vector<int32_t> level = {draft->AddRow(first, 1, 0)};
  for (int d = 2; d <= std::min(depth, TreeLevels()); ++d) {
    const size_t head = static_cast<size_t>(d - 2);
    if (head >= made.head_candidates.size()) break;
    const std::vector<int32_t>& candidates = made.head_candidates[head];
    const size_t take =
        std::min(candidates.size(), static_cast<size_t>(params_.tree[static_cast<size_t>(d - 1)]));
    std::vector<int32_t> next;
    for (const int32_t parent : level) {
      for (size_t c = 0; c < take; ++c) {
        const auto before = candidates.begin() + static_cast<std::ptrdiff_t>(c);
        if (std::find(candidates.begin(), before, candidates[c]) != before) continue;  // a repeat
        next.push_back(draft->AddRow(candidates[c], d, parent));
      }
    }
    level = std::move(next);
  }
  // Token reutilization: the 4-grams that start with the drafted token, merged into the tree.
  if (params_.ngram_k > 0 && depth >= 2) {
    table_.Update(history, static_cast<int64_t>(history.size()) - params_.ngram_lag);
    const size_t len = static_cast<size_t>(std::min(depth, kTokenSwiftNgramLength));
    for (const FourGramTable::Continuation& cont : table_.Top(first, params_.ngram_k)) {
      const std::array<int32_t, 4> chain = {first, cont[0], cont[1], cont[2]};
      draft->AddChain(absl::MakeConstSpan(chain.data(), len));
    }
  }
}

}  // namespace sparseserve::spec
