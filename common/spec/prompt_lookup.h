// PromptLookupProposer: drafts by finding the last n-gram of the history (n = 3, then 2, then 1)
// earlier in the prompt or output, and proposing what followed it there (prompt lookup decoding,
// Saxena 2023; vLLM's "ngram" speculator). Useful wherever outputs copy their input: summaries,
// code edits, retrieval answers, repetitive long generations.
//
// NgramIndex keeps, for every n-gram of the history, where it last ended, updated as tokens are
// appended, so a step costs O(n) however long the prompt (a 128K prompt is indexed once, when the
// sequence starts speculating). Not thread-safe.
#ifndef SPARSESERVE_COMMON_SPEC_PROMPT_LOOKUP_H_
#define SPARSESERVE_COMMON_SPEC_PROMPT_LOOKUP_H_

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "common/spec/draft_proposer.h"

namespace sparseserve::spec {

// Last occurrence of each n-gram (n = 1..kMaxN) in a growing token sequence.
class NgramIndex {
 public:
  static constexpr int kMaxN = 3;

  // Indexes the n-grams of `history` that end before its last token and are not yet indexed
  // (the suffix itself must not find itself). `history` only grows between calls (REQUIRES, the
  // same sequence: a prefix of the next call's).
  void Update(absl::Span<const int32_t> history);
  // Index just past the most recent earlier occurrence of `ngram` (1..kMaxN tokens), or -1.
  int64_t Find(absl::Span<const int32_t> ngram) const;
  int64_t indexed() const { return indexed_; }

 private:
  static uint64_t Key(absl::Span<const int32_t> ngram);
  absl::flat_hash_map<uint64_t, int64_t> last_end_;  // key -> index just past the n-gram
  int64_t indexed_ = 0;  // n-grams ending before this index are in the map
};

class PromptLookupProposer : public DraftProposer {
 public:
  // `max_depth`: tokens drafted per step at most (>= 1).
  explicit PromptLookupProposer(int max_depth);

  int max_depth() const override { return max_depth_; }
  int RowsAt(int depth) const override { return depth; }
  void Propose(absl::Span<const int32_t> history, int depth, bool verify_only,
               StepDraft* draft) override;

 private:
  int max_depth_;
  NgramIndex index_;
};

// Prompt lookup's default draft length (vLLM's num_speculative_tokens examples use 3–5).
inline constexpr int kDefaultPromptLookupDepth = 4;

}  // namespace sparseserve::spec

#endif  // SPARSESERVE_COMMON_SPEC_PROMPT_LOOKUP_H_
