// StepDraft: the rows one sequence adds to a speculative step, and AcceptDraft, the walk that
// turns what the step sampled into the tokens it emits.
//
// A speculative step's row 0 (the root) is the sequence's current token: emitted, not yet in the
// KV cache, at position P. The draft adds rows after it. A *verification* row has a parent (the
// root or an earlier verification row): the rows form a tree whose root-to-node paths are the
// continuations being verified (a chain for prompt lookup, several for Lookahead's n-grams). An
// *auxiliary* row (parent -1) is any other work the drafter wants from the forward pass —
// Lookahead's lookahead branch — whose sampled token goes back to the drafter, never to the output.
//
// Lossless verification (papers/lookahead.md §1, "Sampling, lossless") by sampling and matching:
// every verification row at depth d is sampled with the sequence's own d-th next draw from the
// target distribution given its path; the walk starts at the root, emits the root's sample, moves
// to the first child whose token equals it, and repeats until no child matches. Each emitted token
// is therefore drawn from exactly the distribution, and with exactly the draw, that plain decoding
// would have used (greedy: the argmax), so the output equals plain decoding token for token under
// the same seed. For deterministic drafts the chance of accepting a child is the sum of the target
// probabilities of the distinct child tokens — the acceptance of Lookahead's progressive rule
// (accept x with min(1, p(x)), else zero it, renormalise and try the next) — so no acceptance is
// lost to this coupling. A value type; thread-safe when not mutated.
#ifndef SPARSESERVE_COMMON_SPEC_DRAFT_H_
#define SPARSESERVE_COMMON_SPEC_DRAFT_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace sparseserve::spec {

struct StepDraft {
  // Rows after the root, in step order: token, position offset from the root (>= 0), and parent
  // (0 = the root, r = draft row r, rows numbered from 1; -1 = auxiliary). A verification row's
  // parent comes before it and its offset is its depth.
  std::vector<int32_t> tokens;
  std::vector<int32_t> offsets;
  std::vector<int32_t> parents;
  // uint8 [(size() + 1)^2] over the root and the rows (row i sees row j where mask[i * (n + 1) +
  // j]); empty = the tree mask (each verification row sees its ancestors and itself). Drafts with
  // auxiliary rows set it.
  std::vector<uint8_t> mask;

  int size() const { return static_cast<int>(tokens.size()); }
  bool empty() const { return tokens.empty(); }
  void Clear();
  // Adds `chain` as a path from the root (offsets 1, 2, ...), sharing the longest prefix with the
  // verification rows already there. Returns the rows of the chain's tokens (1-based).
  std::vector<int32_t> AddChain(absl::Span<const int32_t> chain);
  // Adds one row; returns its 1-based index.
  int32_t AddRow(int32_t token, int32_t offset, int32_t parent);
  // The mask over root + rows: `mask` or the tree mask.
  std::vector<uint8_t> FullMask() const;
  // The positions of the root and the rows when the root sits at `root_position`.
  std::vector<int32_t> Positions(int32_t root_position) const;
  // Whether the rows are one path from the root (row r's parent is r − 1, no mask): the causal
  // default needs no mask.
  bool IsChain() const;
  // Pads to `rows` rows with auxiliary rows (`token` at offset 1, each seeing the root and itself;
  // their samples go unused), setting the mask: a step's shape then follows the draft depth alone,
  // so a backend that replays one graph per step shape captures once instead of once per size.
  void PadWithAuxiliaryRows(int rows, int32_t token);
  // Depth of row r (0 = the root); -1 for auxiliary rows.
  int Depth(int32_t row) const;
  // Depth of the deepest verification row.
  int MaxDepth() const;
  // Verification rows (the draft tokens being verified).
  int NumVerificationRows() const;
};

struct AcceptedDraft {
  std::vector<int32_t> emitted;  // tokens emitted by the step: the accepted drafts, then one more
  std::vector<int32_t> kept;     // rows whose KV stays: the root (0), then the accepted rows
  int accepted() const { return static_cast<int>(emitted.size()) - 1; }
};

// The walk above. `sampled` holds each row's sampled token, root first ([size() + 1]).
AcceptedDraft AcceptDraft(const StepDraft& draft, absl::Span<const int32_t> sampled);

// How many leading tokens of `actual` (the tokens emitted after the root) the draft's tree holds
// as one path: what a step with this draft would have accepted, measured without running it (the
// controller's shadow measurement of a plain step, draft_length_controller.h).
int MatchedDepth(const StepDraft& draft, absl::Span<const int32_t> actual);

}  // namespace sparseserve::spec

#endif  // SPARSESERVE_COMMON_SPEC_DRAFT_H_
