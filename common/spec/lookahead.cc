#include "common/spec/lookahead.h"

#include <algorithm>

#include "common/core/check.h"

namespace sparseserve::spec {

LookaheadParams DefaultLookaheadParams(int64_t num_parameters) {
  LookaheadParams p;
  if (num_parameters >= 30'000'000'000) {
    p.window = p.guesses = 7;
  } else if (num_parameters >= 10'000'000'000) {
    p.window = p.guesses = 10;
  }
  return p;
}

NgramPool::NgramPool(int ngram, int capacity) : ngram_(ngram), capacity_(capacity) {
  SS_CHECK(ngram >= 2 && capacity >= 1);
}

void NgramPool::Add(absl::Span<const int32_t> ngram) {
  SS_CHECK(ngram.size() == static_cast<size_t>(ngram_));
  std::deque<std::vector<int32_t>>& list = lists_[ngram[0]];
  const absl::Span<const int32_t> rest = ngram.subspan(1);
  for (auto it = list.begin(); it != list.end(); ++it) {
    if (absl::MakeConstSpan(*it) == rest) {
      if (it != list.begin()) {
        std::vector<int32_t> moved = std::move(*it);
        list.erase(it);
        list.push_front(std::move(moved));
      }
      return;
    }
  }
  list.emplace_front(rest.begin(), rest.end());
  ++size_;
  if (static_cast<int>(list.size()) > capacity_) {
    list.pop_back();
    --size_;
  }
}

const std::deque<std::vector<int32_t>>* NgramPool::Find(int32_t first) const {
  const auto it = lists_.find(first);
  return it == lists_.end() ? nullptr : &it->second;
}

LookaheadProposer::LookaheadProposer(const LookaheadParams& params)
    : params_(params), pool_(params.ngram, params.guesses) {
  SS_CHECK(params.window >= 2 && params.ngram >= 2 && params.guesses >= 1);
}

int LookaheadProposer::RowsAt(int depth) const {
  const int w = params_.window, n = params_.ngram;
  return (w - 1) + w * (n - 2) + params_.guesses * std::min(depth, n - 1);
}

int32_t LookaheadProposer::Filler(int64_t i) const {
  // The paper starts the window from random prompt tokens; a fixed hash keeps runs reproducible.
  const uint64_t h = (static_cast<uint64_t>(i) + 1) * 0x9e3779b97f4a7c15ULL + history_.size();
  return history_[static_cast<size_t>((h >> 17) % history_.size())];
}

void LookaheadProposer::Catch(absl::Span<const int32_t> history) {
  const size_t n = static_cast<size_t>(params_.ngram);
  for (size_t i = history_.size(); i < history.size(); ++i) {
    history_.push_back(history[i]);
    if (history_.size() >= n) pool_.Add(absl::MakeConstSpan(history_).subspan(history_.size() - n));
  }
  if (levels_.empty() && !history_.empty()) {
    std::vector<int32_t> level0(static_cast<size_t>(params_.window - 1));
    for (int i = 0; i < params_.window - 1; ++i) level0[i] = Filler(i);
    levels_.push_back(std::move(level0));
  }
}

void LookaheadProposer::Propose(absl::Span<const int32_t> history, int depth, bool verify_only,
                                StepDraft* draft) {
  draft->Clear();
  rows_.clear();
  if (history.empty() || depth < 1) return;
  Catch(history);
  depth = std::min(depth, max_depth());
  const int w = params_.window;
  const int num_levels = levels();
  if (!verify_only) {
    rows_.assign(static_cast<size_t>(num_levels), std::vector<int32_t>(static_cast<size_t>(w)));
    rows_[0][0] = 0;  // the root is level 0's column 0
    for (int i = 1; i < w; ++i) rows_[0][i] = draft->AddRow(levels_[0][i - 1], i, -1);
    for (int l = 1; l < num_levels; ++l) {
      for (int i = 0; i < w; ++i) rows_[l][i] = draft->AddRow(levels_[l][i], i + l, -1);
    }
  }
  if (const auto* candidates = pool_.Find(history.back()); candidates != nullptr) {
    int taken = 0;
    for (const std::vector<int32_t>& c : *candidates) {
      if (taken++ == params_.guesses) break;
      draft->AddChain(absl::MakeConstSpan(c).subspan(0, static_cast<size_t>(depth)));
    }
  }
  if (rows_.empty()) return;  // the tree mask
  const int n = draft->size() + 1;
  draft->mask.assign(static_cast<size_t>(n) * n, 0);
  auto see = [&](int row, int col) { draft->mask[static_cast<size_t>(row) * n + col] = 1; };
  see(0, 0);
  for (int l = 0; l < num_levels; ++l) {
    for (int i = (l == 0 ? 1 : 0); i < w; ++i) {
      const int row = rows_[l][i];
      see(row, 0);
      for (int j = 1; j <= i; ++j) see(row, rows_[0][j]);
      for (int k = 1; k <= l; ++k) see(row, rows_[k][i]);
    }
  }
  for (int r = 1; r < n; ++r) {
    if (draft->parents[r - 1] < 0) continue;
    see(r, 0);
    for (int32_t a = r; a != 0; a = draft->parents[a - 1]) see(r, a);
  }
}

void LookaheadProposer::Observe(const StepDraft& /*draft*/, absl::Span<const int32_t> sampled,
                                absl::Span<const int32_t> emitted) {
  if (rows_.empty() || emitted.empty()) return;
  const int w = params_.window, n = params_.ngram;
  const int num_levels = levels();
  // Every level as W columns (level 0's column 0 is the root, whose token ends history_ as of
  // the step), then the last level's outputs.
  std::vector<std::vector<int32_t>> full;
  full.reserve(static_cast<size_t>(num_levels) + 1);
  full.push_back({history_.back()});
  full[0].insert(full[0].end(), levels_[0].begin(), levels_[0].end());
  for (int l = 1; l < num_levels; ++l) full.push_back(levels_[l]);
  std::vector<int32_t> out(static_cast<size_t>(w));
  for (int i = 0; i < w; ++i) out[i] = sampled[static_cast<size_t>(rows_[num_levels - 1][i])];
  full.push_back(std::move(out));
  int drop = 0;
  if (static_cast<int>(full.size()) == n) {  // a full window: W new n-grams
    std::vector<int32_t> ngram(static_cast<size_t>(n));
    for (int i = 0; i < w; ++i) {
      for (int l = 0; l < n; ++l) ngram[l] = full[l][i];
      pool_.Add(ngram);
    }
    drop = 1;
  }
  // Slide: new level l is full[l + drop], its columns moved left by the tokens emitted (a token
  // at column j of full[l + drop] sits at position P + j + l + drop; the new root is at P + m).
  const int m = static_cast<int>(emitted.size());
  levels_.clear();
  for (int l = 0; l + drop < static_cast<int>(full.size()); ++l) {
    const std::vector<int32_t>& src = full[l + drop];
    std::vector<int32_t> level;
    for (int i = (l == 0 ? 1 : 0); i < w; ++i) {
      const int j = i + m - drop;
      level.push_back(j < w ? src[j] : Filler(static_cast<int64_t>(l) * w + i));
    }
    levels_.push_back(std::move(level));
  }
  rows_.clear();
}

}  // namespace sparseserve::spec
