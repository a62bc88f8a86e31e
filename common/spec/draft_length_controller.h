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
// starts again when its drafts start matching — except for drafters whose plain-step drafts
// predict nothing (model drafters; Lookahead, DraftProposer::shadow_predicts_acceptance), which
// are measured on the steps that explore them.
//
// StepCostModel, one per engine: the wall time of a whole step (forward pass, sampling, commits
// and host work) as level × shape(rows). The level follows the cost as contexts grow (an
// exponential average of the steps in a reference bucket: the plain steps' row count, re-anchored
// when the batch moves; replaced by the first such step after a speculative streak, whose shapes
// keep their seconds); the shape, 1 at the reference, is an exponential average per row bucket
// (exact up to 64 rows) of each step's time over the level — so a speculative step measured at a
// short context still prices its rows right at a long one. Between measured buckets the shape is
// interpolated; past the largest it extends the last two buckets' slope, and with one bucket
// measured a step of r rows against r0 is assumed to cost 1 + log2(r / r0) / 4 times as much
// (optimistic where rows are nearly free, as on a GPU, so that the first speculative steps get to
// measure the truth) — up to twice the largest bucket's rows plus kHorizonRows; past that the
// cost grows in proportion to the rows: a GPU step is nearly free in rows only while it is bound
// by its launches, and steps of thousands of rows priced by a flat slope (TokenSwift's trees at
// batch 64: 2,432 rows priced at 1.9 plain steps from buckets of 112 and 128; at batch 8, 216 rows
// priced at 2.2 from one bucket of 8) measured at 4x their estimate, the most one measurement
// counts for (past 128 rows a step has no step graph and runs op by op). Speculative steps have
// their own shape, which falls back to the plain one until measured, and so do the draft passes of
// drafters that are the model itself (sparse-self: a depth-k draft costs k forward passes of the
// drafting sequences before the step, priced per pass by its sequences, and its step's measured
// time leaves them out). ChooseDraftDepths maximises the step's expected emitted tokens per second,
// Σ_s (1 + E_s(k_s)) / cost(base + Σ_s rows_s(k_s)), by coordinate ascent from all zeros and from
// every uniform depth (a GPU's jump from plain to speculative steps is paid once per step, so one
// sequence alone may not pay for it where all of them do), keeping the best; once every
// StepCostModel::kExploreSteps steps a plain decision becomes the best speculative one — for as
// many sequences, in turn, as keep its draft rows within the step's other rows — so a bad
// first measurement cannot keep speculation off for good (≤ 1/128 of the steps — fewer while
// explores change nothing: StepCostModel::ExploreDue backs off, also for drafters whose
// acceptance only explores measure (Lookahead, model drafters: their last measure holds longer;
// at batch 64 their explores every 128 steps, op-by-op draft passes, cost 10%) — and only a choice
// estimated at no worse than half of plain's rate — or any, once every 8 steps, while a model
// drafter's acceptance rests on fewer than 8 drafts: it has no shadow draft to measure it on plain
// steps; and after a speculative step that set up a step graph, until one is measured), and a
// plain step runs whenever the
// level is stale (StepCostModel::PlainDue). A measurement counts for at most 4x the
// estimate it updates (a first launch of a kernel must not price a bucket out of reach). At
// acceptance 0, every E is 0 and every depth stays 0: plain decoding. Not thread-safe.
#ifndef SPARSESERVE_COMMON_SPEC_DRAFT_LENGTH_CONTROLLER_H_
#define SPARSESERVE_COMMON_SPEC_DRAFT_LENGTH_CONTROLLER_H_

#include <cstdint>
#include <map>
#include <string>
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
  // E(k), k in 0..max_depth (kept up to date by Record: the controller reads it for every
  // sequence at every step).
  double ExpectedAccepted(int depth) const;
  int max_depth() const { return static_cast<int>(reached_.size()); }
  // Drafts recorded (decayed): below a few, the prior still weighs on every α.
  double samples() const { return reached_.empty() ? 0 : reached_[0]; }

 private:
  void UpdateExpected();
  double decay_;
  std::vector<double> reached_, accepted_;  // [max_depth], decayed
  std::vector<double> expected_;            // [max_depth + 1]: E(k)
};

class StepCostModel {
 public:
  // `speculative`: some sequence in the step verified a draft (multi-row sequences: on a GPU such
  // a step cannot replay a decode graph and takes other kernels, a jump in cost that rows alone
  // do not show), so those steps have a shape of their own.
  // `context_tokens`: the step's sequences' tokens in all (-1: not known); see the level's
  // replacement after a streak in Record.
  void Record(int rows, double seconds, bool speculative = false, int64_t context_tokens = -1);
  // Estimated seconds of a step of `rows` rows; 1 when nothing was measured.
  double Estimate(int rows, bool speculative = false) const;
  // The least Estimate of a step of at least `rows` rows: shapes need not grow with the rows (one
  // bucket's slow first measurement), so the fewest rows are not always the cheapest.
  double LeastEstimate(int rows, bool speculative = false) const;
  // A model drafter's draft pass (one row per drafting sequence, `rows` of them), and its
  // estimate: a plain step of as many rows until one was measured.
  void RecordDraftPass(int rows, double seconds);
  double EstimateDraftPass(int rows) const;
  // Whether the level every estimate scales was measured: the least of its first kLevelWarmup
  // plain steps (a first step is often a cold one: a graph's first replay), as each bucket's
  // shape is the least of its first kLevelWarmup measurements before it averages.
  static constexpr int kLevelWarmup = 2;
  bool measured() const { return level_samples_ >= kLevelWarmup; }
  // The bucket `rows` is measured in (its smallest row count).
  static int Bucket(int rows);
  // How far past twice its largest measured bucket a shape is extrapolated optimistically.
  static constexpr int kHorizonRows = 64;
  // True once every kExploreSteps recorded steps: ChooseDraftDepths then runs its best
  // speculative choice even where plain decoding looks better, to measure it again. Also true
  // after a speculative step that measured nothing (NoteUnmeasured) until one is recorded. While
  // no step chose speculation between two explores, the interval doubles up to kMaxExploreSteps
  // (an explore on a GPU costs several plain steps: a new shape is run op by op and captured
  // before its replay is measured — at batch 64 on a small model, explores every 128 steps cost
  // 7-10% with nothing accepted); a step that chooses speculation sets it back to kExploreSteps.
  // An explore that measures its bucket below the bucket's shape replaces the shape: a price too
  // high keeps speculation off, so only explores can lower it (by a fifth each, several hundred
  // steps apart), while a price too low lets speculative steps run and measure it every step.
  static constexpr int kExploreSteps = 128;
  static constexpr int kMaxExploreSteps = 1024;
  bool ExploreDue() const { return retry_explore_ || steps_ >= next_explore_; }
  // Whether the step after the one now planned may explore (it is due, or due once the one now
  // planned is recorded): drafters that draft from what a step computes (TokenSwift's heads
  // without a pass) have it computed in this one.
  bool ExploreDueNext() const { return ExploreDue() || steps_ + 1 >= next_explore_; }
  // Every `every`-th step (or after an unmeasured speculative step), without backing off.
  bool ExploreDue(int every) const { return retry_explore_ || steps_ % every == every - 1; }
  // A step that was not recorded (it set up a step graph: warm-up or capture, far slower than
  // its replays). When it was speculative, the next steps explore again, so the shape's first
  // replay is measured within a few steps instead of kExploreSteps later — on a GPU a new
  // speculative shape costs two such steps before it measures anything. At most
  // kExploreRetries in a row: a shape whose graph is captured again at every step (its plan's
  // layout moved with the contexts) would otherwise explore at every step.
  static constexpr int kExploreRetries = 2;
  void NoteUnmeasured(bool speculative) {
    if (!speculative) return;
    retry_explore_ = unmeasured_in_row_ < kExploreRetries;
    ++unmeasured_in_row_;
  }
  // While a model-drafted sequence's acceptance rests on fewer than kMinAcceptanceSamples drafts
  // (it has no shadow drafts: only its speculative steps measure it), every
  // kExploreUnmeasuredSteps-th step explores instead.
  static constexpr int kMinAcceptanceSamples = 8;
  static constexpr int kExploreUnmeasuredSteps = 8;
  // True when no step of the reference bucket ran for kPlainSteps steps: the level (which only
  // plain steps of that bucket update) may be stale — contexts shrank or grew under a streak of
  // speculative steps, which would otherwise keep pricing themselves against an old level —
  // so ChooseDraftDepths runs one plain step.
  static constexpr int kPlainSteps = 32;
  bool PlainDue() const { return measured() && steps_ - reference_seen_ >= kPlainSteps; }
  // While the last kSettledSteps recorded steps were plain and no explore is due, the decision
  // is taken only on every kSettledSteps-th step (the phase of ExploreDue(kExploreUnmeasuredSteps),
  // whose explores stay): PickDraftDepths keeps its controlled sequences plain in between without
  // reading them. At batch 64 on the 6-layer test model choosing took 8-18 us of a 0.3-0.44 ms
  // step, 4-9 with this (H100); a change of acceptance now waits at most kSettledSteps - 1 steps.
  static constexpr int kSettledSteps = kExploreUnmeasuredSteps;
  bool DecisionSettled() const {
    return measured() && plain_run_ >= kSettledSteps && !ExploreDue() &&
           steps_ % kSettledSteps != kSettledSteps - 1;
  }
  // Steps recorded so far (plain, speculative; not draft passes).
  int64_t steps() const { return steps_; }
  // What the model has learned, for benchmarks' logs: the level and each measured bucket's
  // shape, e.g. "level 0.905 ms; plain 64:1.00 128:1.31; speculative 72:1.52; draft pass -".
  std::string Describe() const;

 private:
  double Shape(int rows, bool speculative) const;
  double ShapeIn(const std::map<int, double>& shapes, int rows) const;
  // Updates `bucket`'s shape in `shapes` with a measurement (`samples` counts them).
  static void Learn(std::map<int, double>& shapes, std::map<int, int>& samples, int bucket,
                    double measured);
  double level_ = 0;
  int reference_ = 0;          // the plain bucket whose shape is 1 (see Record)
  int64_t level_samples_ = 0;  // plain steps of the reference bucket recorded
  int64_t steps_ = 0, reference_seen_ = 0;
  int64_t plain_run_ = 0;       // plain steps recorded since the last speculative one
  bool retry_explore_ = false;  // NoteUnmeasured saw a speculative step
  int unmeasured_in_row_ = 0;   // speculative steps NoteUnmeasured saw since one was recorded
  int64_t spec_context_ = -1;   // context_tokens of the last speculative step recorded
  // ExploreDue's schedule: the step count of the next explore, the interval that put it there,
  // and whether a speculative step that was not an explore was recorded since the last one.
  int64_t next_explore_ = kExploreSteps - 1;
  int explore_interval_ = kExploreSteps;
  bool chosen_since_explore_ = false;
  // bucket -> step time / level (plain, speculative, draft pass)
  std::map<int, double> shape_, spec_shape_, draft_shape_;
  std::map<int, int> shape_samples_, spec_samples_, draft_samples_;  // measurements per bucket
};

// One speculating sequence's choices for a step.
struct DraftOption {
  const AcceptanceStats* stats = nullptr;
  // Extra rows a draft of depth k adds (k = 1..), [max depth allowed]; rows_at[k - 1]. A view
  // of its sequence's table (valid while the sequence lives: built for every sequence at every
  // step, a copy was a large part of the controller's host time at batch 64).
  absl::Span<const int> rows_at;
  // The model drafts it (sparse-self, Kangaroo): depth k also costs k draft passes before the
  // step, shared with the other model-drafted sequences (StepCostModel::EstimateDraftPass; one
  // price for every kind of pass: a batch mixing Kangaroo's early exits with full passes is priced
  // roughly); `one_pass` (TokenSwift): every depth costs one.
  bool model_draft = false;
  bool one_pass = false;
};

// Depth per option (0 = plain), for a step whose other rows (every sequence's root row, prefill
// chunks) number `base_rows`. `uniform`: one depth for every sequence (within its own options),
// for backends that replay step graphs per step shape — per-sequence depths make many shapes,
// each run op by op and captured before it replays.
std::vector<int> ChooseDraftDepths(const StepCostModel& cost, absl::Span<const DraftOption> options,
                                   int base_rows, bool uniform = false);

}  // namespace sparseserve::spec

#endif  // SPARSESERVE_COMMON_SPEC_DRAFT_LENGTH_CONTROLLER_H_
