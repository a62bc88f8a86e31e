#include "common/spec/prompt_lookup.h"

#include <algorithm>

#include "common/core/check.h"

namespace sparseserve::spec {

uint64_t NgramIndex::Key(absl::Span<const int32_t> ngram) {
  // Token ids are < 2^21 for every vocabulary we load (kMaxSamplingVocab is 2^23; 3 x 21 bits
  // would not fit 64 bits with the length), so mix instead of packing: FNV-style over the ids and
  // the length, which keeps n-grams of different n apart.
  uint64_t h = 0xcbf29ce484222325ULL ^ ngram.size();
  for (const int32_t t : ngram) {
    h ^= static_cast<uint32_t>(t);
    h *= 0x100000001b3ULL;
    h ^= h >> 29;
  }
  return h;
}

void NgramIndex::Update(absl::Span<const int32_t> history) {
  const int64_t end = static_cast<int64_t>(history.size()) - 1;  // the last token stays out
  for (; indexed_ < end; ++indexed_) {
    // The n-grams ending at indexed_ (inclusive): later occurrences overwrite earlier ones.
    for (int n = 1; n <= kMaxN && n <= indexed_ + 1; ++n) {
      last_end_[Key(history.subspan(static_cast<size_t>(indexed_ + 1 - n), n))] = indexed_ + 1;
    }
  }
}

int64_t NgramIndex::Find(absl::Span<const int32_t> ngram) const {
  const auto it = last_end_.find(Key(ngram));
  return it == last_end_.end() ? -1 : it->second;
}

PromptLookupProposer::PromptLookupProposer(int max_depth) : max_depth_(max_depth) {
  SS_CHECK(max_depth >= 1);
}

void PromptLookupProposer::Propose(absl::Span<const int32_t> history, int depth,
                                   bool /*verify_only*/, StepDraft* draft) {
  draft->Clear();
  if (history.empty() || depth < 1) return;
  index_.Update(history);
  const int64_t len = static_cast<int64_t>(history.size());
  for (int n = std::min<int64_t>(NgramIndex::kMaxN, len); n >= 1; --n) {
    const int64_t end = index_.Find(history.subspan(static_cast<size_t>(len - n)));
    if (end < 0) continue;
    // A hash collision could name a different n-gram: check it (the draft stays lossless either
    // way; this keeps acceptance honest).
    if (!std::equal(history.begin() + (end - n), history.begin() + end, history.end() - n)) {
      continue;
    }
    const int64_t take = std::min<int64_t>(depth, len - end);
    if (take <= 0) continue;
    draft->AddChain(history.subspan(static_cast<size_t>(end), static_cast<size_t>(take)));
    return;
  }
}

}  // namespace sparseserve::spec
