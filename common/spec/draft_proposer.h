// DraftProposer: one sequence's drafter — the interface the engine drives for every speculation
// method (prompt lookup, Lookahead; TokenSwift and Kangaroo in issue 15).
//
// The engine owns one proposer per speculating sequence, beside its KV state, and per step:
// asks how many rows each draft depth costs (the controller weighs them against the expected
// accepted tokens), asks for the draft at the chosen depth, runs the step, and hands back what it
// sampled for every row and what it emitted. A proposer sees token ids only, never the model.
// Not thread-safe: one engine thread drives it.
#ifndef SPARSESERVE_COMMON_SPEC_DRAFT_PROPOSER_H_
#define SPARSESERVE_COMMON_SPEC_DRAFT_PROPOSER_H_

#include <cstdint>

#include "absl/types/span.h"
#include "common/spec/draft.h"

namespace sparseserve::spec {

class DraftProposer {
 public:
  virtual ~DraftProposer() = default;

  // Deepest draft it makes (chain length of its verification rows).
  virtual int max_depth() const = 0;
  // Rows a step with a draft of `depth` (1..max_depth) adds after the root at most.
  virtual int RowsAt(int depth) const = 0;

  // The draft for the next step, at most `depth` deep, into `draft` (cleared first; may stay
  // empty when there is nothing to propose). `history`: prompt and emitted tokens; its last token
  // is the step's root. `verify_only`: only verification rows (no auxiliary work), for the
  // controller's shadow measurement of a plain step; the proposer's state does not change then.
  virtual void Propose(absl::Span<const int32_t> history, int depth, bool verify_only,
                       StepDraft* draft) = 0;

  // Whether its verify-only draft at a plain step predicts what a real step would accept (the
  // controller's shadow measurement). Lookahead's does not: its window feeds the n-gram pool only
  // on speculative steps, so on plain steps its guesses go stale and the shadow would price it
  // out for good; its acceptance is then measured on the steps that explore it.
  virtual bool shadow_predicts_acceptance() const { return true; }

  // After a step that ran `draft` (possibly empty: a plain step): `sampled` per row, root first,
  // and `emitted`, the tokens the step emitted (history now ends with them).
  virtual void Observe(const StepDraft& draft, absl::Span<const int32_t> sampled,
                       absl::Span<const int32_t> emitted) {
    (void)draft, (void)sampled, (void)emitted;
  }
};

}  // namespace sparseserve::spec

#endif  // SPARSESERVE_COMMON_SPEC_DRAFT_PROPOSER_H_
