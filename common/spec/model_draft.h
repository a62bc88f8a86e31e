// ModelDraftProposer: the drafter of methods whose draft tokens come from forward passes of the
// model itself (sparse self-speculation: the target model under sparse attention). The engine
// runs those passes (engine/model_draft.h) just before the step and hands the drafted chain in;
// Propose returns it as the step's draft. It cannot make a draft without them, so a plain step
// has no shadow draft (verify_only proposes nothing) and acceptance is measured on speculative
// steps only. Not thread-safe.
#ifndef SPARSESERVE_COMMON_SPEC_MODEL_DRAFT_H_
#define SPARSESERVE_COMMON_SPEC_MODEL_DRAFT_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "common/spec/draft_proposer.h"

namespace sparseserve::spec {

class ModelDraftProposer : public DraftProposer {
 public:
  // `max_depth`: tokens drafted per step at most (>= 1).
  explicit ModelDraftProposer(int max_depth) : max_depth_(max_depth) {}

  int max_depth() const override { return max_depth_; }
  int RowsAt(int depth) const override { return depth; }
  // The chain the model drafted for the next step (cleared by the Propose that uses it).
  void SetChain(std::vector<int32_t> chain) { chain_ = std::move(chain); }
  void Propose(absl::Span<const int32_t> history, int depth, bool verify_only,
               StepDraft* draft) override;

 private:
  int max_depth_;
  std::vector<int32_t> chain_;
};

// Sparse self-speculation's default draft length (MagicDec drafts 2-4 tokens per step; the
// controller shortens it where acceptance or step cost say so).
inline constexpr int kDefaultSparseSelfDepth = 4;

}  // namespace sparseserve::spec

#endif  // SPARSESERVE_COMMON_SPEC_MODEL_DRAFT_H_
