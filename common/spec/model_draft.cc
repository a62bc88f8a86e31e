#include "common/spec/model_draft.h"

#include <algorithm>

namespace sparseserve::spec {

void ModelDraftProposer::Propose(absl::Span<const int32_t> history, int depth, bool verify_only,
                                 StepDraft* draft) {
  (void)history;
  draft->Clear();
  if (verify_only) return;  // a shadow draft would need the forward passes
  const size_t n = std::min(draft_.chain.size(), static_cast<size_t>(std::max(depth, 0)));
  draft->AddChain(absl::MakeConstSpan(draft_.chain).subspan(0, n));
  draft_ = ModelDraft();
}

}  // namespace sparseserve::spec
