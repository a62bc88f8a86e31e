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

bool FourGramTable::Best(int32_t first, Continuation* best) const {
  const auto it = counts_.find(first);
  if (it == counts_.end() || it->second.empty()) return false;
  int64_t most = -1;
  for (const auto& [cont, count] : it->second) {
    if (count > most || (count == most && cont < *best)) {
      most = count;
      *best = cont;
    }
  }
  return true;
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

int TokenSwiftProposer::TreeLevels(const TokenSwiftParams& params, int heads) {
  const int tree = static_cast<int>(params.tree.size());
  return params.draft_pass ? std::min(tree, heads + 1) : std::min(tree - 1, heads);
}

int TokenSwiftProposer::DepthOf(const TokenSwiftParams& params, int heads) {
  if (params.ngram_k == 0) return std::max(TreeLevels(params, heads), 1);
  // A 4-gram is the drafted token and 3 more with the pass, 3 after the root without; each
  // chained one adds 3, to the 4-grams and to the heads' best path alike.
  const int extension = (kTokenSwiftNgramLength - 1) * (params.ngram_chain - 1);
  const int ngram = (params.draft_pass ? 1 : 0) + kTokenSwiftNgramLength - 1 + extension;
  const int levels = TreeLevels(params, heads);
  const bool head_levels = levels > (params.draft_pass ? 1 : 0);
  return std::max({head_levels ? levels + extension : levels, ngram, 1});
}

int TokenSwiftProposer::Branching(int d) const {
  return params_.tree[static_cast<size_t>(params_.draft_pass ? d - 1 : d)];
}

int TokenSwiftProposer::NgramChainRows(int depth) const {
  const int length = (kTokenSwiftNgramLength - 1) * params_.ngram_chain;
  // With the pass the chain's first token is the drafted one, a row of the tree already.
  return params_.draft_pass ? std::max(std::min(depth, length + 1) - 1, 0)
                            : std::min(depth, length);
}

int TokenSwiftProposer::HeadPathRows(int depth) const {
  // Only a path the heads made: with the pass the drafted token alone is the 4-grams' start.
  const int levels = TreeLevels(params_, heads_);
  if (params_.ngram_k == 0 || levels <= (params_.draft_pass ? 1 : 0)) return 0;
  const int extension = (kTokenSwiftNgramLength - 1) * (params_.ngram_chain - 1);
  return std::max(std::min(depth, levels + extension) - levels, 0);
}

void TokenSwiftProposer::ExtendByFourGrams(size_t length, std::vector<int32_t>* chain) const {
  while (!chain->empty() && chain->size() < length) {
    FourGramTable::Continuation best;
    if (!table_.Best(chain->back(), &best)) return;
    for (const int32_t token : best) {
      if (chain->size() == length) break;
      chain->push_back(token);
    }
  }
}

int TokenSwiftProposer::RowsAt(int depth) const {
  int rows = 0, level = 1;
  for (int d = 1; d <= std::min(depth, TreeLevels(params_, heads_)); ++d) {
    level *= Branching(d);
    rows += level;
  }
  return rows + params_.ngram_k * NgramChainRows(depth) + HeadPathRows(depth);
}

int TokenSwiftProposer::HeadTopK() const {
  int k = 0;
  const int levels = TreeLevels(params_, heads_);
  // The heads fill the levels after the drafted token's with the pass, every level without.
  for (int d = params_.draft_pass ? 2 : 1; d <= levels; ++d) k = std::max(k, Branching(d));
  return k;
}

void TokenSwiftProposer::Propose(absl::Span<const int32_t> history, int depth, bool verify_only,
                                 StepDraft* draft) {
  draft->Clear();
  if (verify_only && params_.draft_pass) return;  // a shadow draft would need the draft pass
  // A shadow (verify_only) leaves the candidates for the step's own draft.
  ModelDraft made = verify_only ? draft_ : std::move(draft_);
  if (!verify_only) draft_ = ModelDraft();
  depth = std::min(depth, max_depth());
  if (depth < 1 || history.empty()) return;
  std::vector<int32_t> level;  // the rows of the tree's last level so far (0 = the root)
  std::vector<int32_t> best;   // the tokens of the tree's best path (each level's first candidate)
  int32_t first;               // the token the 4-grams start with
  int d = 1;                   // the tree level the heads fill next
  if (params_.draft_pass) {
    if (made.chain.empty()) return;
    first = made.chain[0];
    level = {draft->AddRow(first, 1, 0)};
    best = {first};
    d = 2;
  } else {
    first = history.back();
    level = {0};
    // Candidates read after another step than the last one follow another root.
    if (made.history_size != static_cast<int64_t>(history.size())) made.head_candidates.clear();
  }
  // The tree, level by level: every node of a level gets the next head's top candidates.
  for (; d <= std::min(depth, TreeLevels(params_, heads_)); ++d) {
    const size_t head = static_cast<size_t>(params_.draft_pass ? d - 2 : d - 1);
    if (head >= made.head_candidates.size() || made.head_candidates[head].empty()) break;
    const std::vector<int32_t>& candidates = made.head_candidates[head];
    const size_t take = std::min(candidates.size(), static_cast<size_t>(Branching(d)));
    std::vector<int32_t> next;
    for (const int32_t parent : level) {
      for (size_t c = 0; c < take; ++c) {
        const auto before = candidates.begin() + static_cast<std::ptrdiff_t>(c);
        if (std::find(candidates.begin(), before, candidates[c]) != before) continue;  // a repeat
        next.push_back(draft->AddRow(candidates[c], d, parent));
      }
    }
    level = std::move(next);
    best.push_back(candidates[0]);
  }
  if (params_.ngram_k == 0) return;
  table_.Update(history, static_cast<int64_t>(history.size()) - params_.ngram_lag);
  // Chained reutilization: the best path goes on by the 4-grams of its last token.
  if (HeadPathRows(depth) > 0 && best.size() > (params_.draft_pass ? 1U : 0U)) {
    const size_t tree_depth = best.size();
    ExtendByFourGrams(static_cast<size_t>(depth), &best);
    if (best.size() > tree_depth) draft->AddChain(best);
  }
  // Token reutilization: the 4-grams that start with `first`, merged into the tree (with the
  // pass the chain starts at the drafted token, a tree row; without, after the root).
  const int chain_rows = NgramChainRows(depth);
  if (chain_rows == 0) return;
  const size_t from = params_.draft_pass ? 0 : 1;
  std::vector<int32_t> chain;
  for (const FourGramTable::Continuation& cont : table_.Top(first, params_.ngram_k)) {
    chain = {first, cont[0], cont[1], cont[2]};
    const size_t length = 1 + static_cast<size_t>(chain_rows);  // `first` and the rows
    if (chain.size() > length) chain.resize(length);
    ExtendByFourGrams(length, &chain);
    draft->AddChain(absl::MakeConstSpan(chain).subspan(from));
  }
}

}  // namespace sparseserve::spec
