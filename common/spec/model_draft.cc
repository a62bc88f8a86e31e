#include "common/spec/model_draft.h"

#include <algorithm>

namespace sparseserve::spec {

void ModelDraftProposer::Propose(absl::Span<const int32_t> history, int depth, bool verify_only,
                                 StepDraft* draft) {
  (void)history;
  draft->Clear();
  if (verify_only) return;  // a shadow draft would need the forward passes
  const size_t n = std::min(chain_.size(), static_cast<size_t>(std::max(depth, 0)));
  draft->AddChain(absl::MakeConstSpan(chain_).subspan(0, n));
  chain_.clear();
}

}  // namespace sparseserve::spec
