// ModelDraftProposer: the drafter of methods whose draft tokens come from forward passes of the
// model itself — sparse self-speculation (the target model under sparse attention), Kangaroo (its
// first layers and an early-exit adapter) and, through its subclass TokenSwiftProposer,
// TokenSwift. The engine runs those passes (engine/model_draft.h)
// just before the step and hands what they drafted in; Propose turns it into the step's draft. It
// cannot make a draft without them, so a plain step has no shadow draft (verify_only proposes
// nothing) and acceptance is measured on speculative steps only. Not thread-safe.
#ifndef SPARSESERVE_COMMON_SPEC_MODEL_DRAFT_H_
#define SPARSESERVE_COMMON_SPEC_MODEL_DRAFT_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "common/spec/draft_proposer.h"

namespace sparseserve::spec {

// What one step's draft passes made for one sequence.
struct ModelDraft {
  // One token per pass, each sampled from the pass's logits with the draw its verification row
  // samples with (engine/model_draft.h).
  std::vector<int32_t> chain;
  // The draft heads' candidates (TokenSwift), when the model has them and the drafter asked:
  // head_candidates[i] = candidates for the token i + 1 places after the token the heads' row
  // predicts itself, best first — chain[0] after a draft pass; without one (heads read at the
  // row that sampled the root: engine/model_draft.h, DraftFromLastStep) the root.
  std::vector<std::vector<int32_t>> head_candidates;
  // Without a draft pass: the history length (prompt + emitted, the root last) the candidates
  // follow; a draft for another length is stale and unused. -1 after a draft pass.
  int64_t history_size = -1;
};

class ModelDraftProposer : public DraftProposer {
 public:
  // `max_depth`: tokens drafted per step at most (>= 1).
  explicit ModelDraftProposer(int max_depth) : max_depth_(max_depth) {}

  int max_depth() const override { return max_depth_; }
  int RowsAt(int depth) const override { return depth; }
  // Forward passes a draft of `depth` (>= 1) needs: one per token.
  virtual int PassesAt(int depth) const { return depth; }
  // Candidates per draft head the first pass should return; 0 = no heads.
  virtual int HeadTopK() const { return 0; }
  // What the passes drafted for the next step (cleared by the Propose that uses it).
  void SetDraft(ModelDraft draft) { draft_ = std::move(draft); }
  void Propose(absl::Span<const int32_t> history, int depth, bool verify_only,
               StepDraft* draft) override;
  // No passes run on a plain step, so there is nothing to shadow-draft.
  bool shadow_predicts_acceptance() const override { return false; }

 protected:
  ModelDraft draft_;

 private:
  int max_depth_;
};

// Kangaroo's draft length γ (papers/lookahead.md §2: γ = 6; η stops most drafts earlier).
inline constexpr int kDefaultKangarooDepth = 6;

// Sparse self-speculation's default draft length (MagicDec drafts 2-4 tokens per step; the
// controller shortens it where acceptance or step cost say so).
inline constexpr int kDefaultSparseSelfDepth = 4;

}  // namespace sparseserve::spec

#endif  // SPARSESERVE_COMMON_SPEC_MODEL_DRAFT_H_
