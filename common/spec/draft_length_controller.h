// The speculation controller (issue 14, "never slower"): per step, picks each speculating
// sequence's draft depth (0 = plain decoding) from its measured acceptance and the measured cost
// of a step of that many rows at the current batch.
//
// AcceptanceStats, one per sequence: for each draft position i, the decayed counts of drafts
// that reached it and of those accepted there; α_i = P(position i accepted | i − 1 accepted),
// with a Beta(1, 1) prior, and the expected accepted tokens of a depth-k draft
// E(k) = Σ_{i≤k} Π_{j≤i} α_j (the chain form of Lookahead's scaling law, papers/lookahead.md §1).
// Plain steps keep measuring it: the engine matches the draft the proposer would have made
// against the tokens that came (draft.h MatchedDepth), so a sequence that stopped speculating
// starts again when its drafts start matching.
//
// StepCostModel, one per engine: the wall time of a whole step (forward pass, sampling and host
// work) by its total rows, as an exponential average per row bucket; between measured buckets it
// interpolates, past the largest it extends the last two measured buckets' slope, and with one
// measured bucket it assumes the same cost (optimistic: the next step measures it).
//
// ChooseDraftDepths maximises the step's expected emitted tokens per second:
// Σ_s (1 + E_s(k_s)) / cost(base + Σ_s rows_s(k_s)), by coordinate ascent from all zeros. At
// acceptance 0, every E is 0 and every depth stays 0: plain decoding. Not thread-safe.
#ifndef SPARSESERVE_COMMON_SPEC_DRAFT_LENGTH_CONTROLLER_H_
#define SPARSESERVE_COMMON_SPEC_DRAFT_LENGTH_CONTROLLER_H_

#include <map>
#include <vector>

#include "absl/types/span.h"

namespace sparseserve::spec {

class AcceptanceStats {
 public:
  // `decay`: weight kept by older counts per recorded draft (0.95: a half-life of ~14 drafts).
  explicit AcceptanceStats(int max_depth, double decay = 0.95);

  // A draft of `depth` positions of which the first `accepted` were accepted.
  void Record(int depth, int accepted);
  // α_i for position i (1-based).
  double Alpha(int position) const;
  // E(k), k in 0..max_depth.
  double ExpectedAccepted(int depth) const;
  int max_depth() const { return static_cast<int>(reached_.size()); }

 private:
  double decay_;
  std::vector<double> reached_, accepted_;  // [max_depth], decayed
};

class StepCostModel {
 public:
  void Record(int rows, double seconds);
  // Estimated seconds of a step of `rows` rows; 1 when nothing was measured.
  double Estimate(int rows) const;
  // The bucket `rows` is measured in (its smallest row count).
  static int Bucket(int rows);

 private:
  std::map<int, double> mean_;  // bucket -> exponential average of seconds
};

// One speculating sequence's choices for a step.
struct DraftOption {
  const AcceptanceStats* stats = nullptr;
  // Extra rows a draft of depth k adds (k = 1..), [max depth allowed]; rows_at[k - 1].
  std::vector<int> rows_at;
};

// Depth per option (0 = plain), for a step whose other rows (every sequence's root row, prefill
// chunks) number `base_rows`.
std::vector<int> ChooseDraftDepths(const StepCostModel& cost, absl::Span<const DraftOption> options,
                                   int base_rows);

}  // namespace sparseserve::spec

#endif  // SPARSESERVE_COMMON_SPEC_DRAFT_LENGTH_CONTROLLER_H_
