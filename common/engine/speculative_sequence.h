// SpeculativeSequence: one sequence's speculative decoding in the engine — its drafter
// (spec::DraftProposer), its measured acceptance and the bookkeeping that turns a drafted step
// into emitted tokens, for every speculation method (issue 14; papers/lookahead.md).
//
// The decode loop (DecodeScheduler for serving, Generator offline) keeps one beside each
// sequence that speculates and, per step: offers the controller its Option (rows per draft depth,
// within the context and the tokens still wanted), Plans the step at the depth the controller
// chose — the root (the current token) and the draft rows with explicit positions and mask, all
// sampled on the backend, verification rows with the sequence's own next draws (draft.h) — runs
// the step with every other sequence's rows, then Finishes it: walks the draft, commits the
// accepted rows' KV (ModelRunner::Commit), rewinds the sampler to the draws of the emitted tokens
// and returns those tokens. A step at depth 0 is a plain decode row; the draft the proposer
// would have made is then matched against the tokens that come, so acceptance stays measured.
// If the step fails, Abandon rewinds the sampler; the step can be planned again.
// Not thread-safe: the engine thread drives it.
#ifndef SPARSESERVE_COMMON_ENGINE_SPECULATIVE_SEQUENCE_H_
#define SPARSESERVE_COMMON_ENGINE_SPECULATIVE_SEQUENCE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/engine/model_runner.h"
#include "common/engine/request_options.h"
#include "common/model/model_config.h"
#include "common/sampling/sampler.h"
#include "common/spec/draft.h"
#include "common/spec/draft_length_controller.h"
#include "common/spec/draft_proposer.h"
#include "common/spec/lookahead.h"
#include "common/spec/model_draft.h"
#include "common/spec/tokenswift.h"
#include "kernels/sampling_plan.h"

namespace sparseserve::engine {

// What one finished step drafted and accepted, for the spec_decode metrics.
struct SpecStepResult {
  // Inline: every speculating sequence makes one per step, most of them plain ones.
  using Tokens = absl::InlinedVector<int32_t, 8>;
  Tokens emitted;  // the tokens the step emitted, in order
  // For each emitted token, the verification row it was sampled from (0 = the root): its
  // logits are that row's (logprobs).
  Tokens emitted_rows;
  int drafted = 0;   // verification rows (draft tokens) it ran; 0 = a plain step
  int depth = 0;     // the draft's depth (longest chain)
  int accepted = 0;  // draft tokens accepted: emitted.size() - 1
};

class SpeculativeSequence {
 public:
  // kInvalidArgument for SpecMethod::kNone, for Lookahead and sparse-self on a model with its own
  // sliding window (ModelConfig::sliding_window) and for a sparse-self draft attention the
  // runner refuses (ModelRunner::DecodePattern: TokenSelect's k above the server's), kUnimplemented
  // for a method this build lacks. The model's size scales Lookahead's defaults. Where the runner
  // replays step graphs, tree and branch drafts are padded to their depth's rows (one graph per
  // depth). Validate must have passed for a request with this choice.
  static absl::StatusOr<std::unique_ptr<SpeculativeSequence>> Create(
      const SpeculationChoice& choice, const ModelRunner& runner);

  // With a drafter of the caller's (benchmarks: an oracle with a forced acceptance rate);
  // choice.method names it in metrics. REQUIRES: proposer non-null.
  static std::unique_ptr<SpeculativeSequence> CreateWithProposer(
      const SpeculationChoice& choice, std::unique_ptr<spec::DraftProposer> proposer);

  SpecMethod method() const { return choice_.method; }
  // Whether the controller picks its draft depths (choice.controller), else FixedDepth.
  bool controlled() const { return choice_.controller; }
  // Deepest draft: choice.max_draft or the method's default, within what the proposer makes.
  int max_depth() const { return max_depth_; }
  const spec::AcceptanceStats& acceptance() const { return acceptance_; }

  // Whether its drafts are forward passes of the model (sparse-self, TokenSwift, Kangaroo): the
  // decode loop runs them with RunModelDrafts (model_draft.h) under draft_pattern() before Plan,
  // at the planned depth.
  bool drafts_on_model() const { return model_draft_ != nullptr; }
  const kernels::AttentionPattern& draft_pattern() const { return draft_pattern_; }
  // Forward passes a draft of `depth` takes, and the draft heads' candidates the first asks for
  // (0 = none). REQUIRES: drafts_on_model().
  int DraftPassesAt(int depth) const { return model_draft_->PassesAt(depth); }
  int DraftHeadTopK() const { return model_draft_->HeadTopK(); }
  // Kangaroo: the passes exit early through the adapter (model::DraftPass::early_exit), and the
  // draft stops before the first token whose top probability is at most DraftStopProbability().
  bool DraftEarlyExit() const { return draft_early_exit_; }
  float DraftStopProbability() const { return choice_.kangaroo_eta; }
  // What those passes drafted; the next Plan verifies it (at most its depth).
  // REQUIRES: drafts_on_model().
  void SetModelDraft(spec::ModelDraft draft);
  // TokenSwift without a draft pass (SpeculationChoice::tokenswift_draft_pass false, with draft
  // heads): the next draft comes from the heads at the row of a step that samples the next root —
  // the decode loops read them in the step (StepDraftHeads, model_draft.h) when WantsDraftHeads
  // says so, and after a prefill (DraftFromLastStep).
  bool drafts_from_last_step() const { return heads_after_step_; }
  // After Plan: whether the step should read the heads for the next. A sequence that drafts in it
  // (or has no controller) may draft again next step; a plain one under the controller needs
  // them only for a shadow draft, on every shadow_every_-th step of `cost` (a power of 2: the
  // same steps for every sequence, one read for all of them), and on the step before the
  // controller may explore (StepCostModel::ExploreDueNext: an explore whose heads were not read
  // would draft the 4-grams alone).
  bool WantsDraftHeads(const spec::StepCostModel& cost) const;

  // The controller's choices for this step: `room` is the most rows the sequence may add after
  // its root (context left, KV blocks the step may take), `wanted` the tokens it still wants
  // after the root's (no draft deeper than that pays off). Without the controller (choice.
  // controller false) ChooseDepth does not need it.
  spec::DraftOption Option(int room, int wanted) const;
  // The depth to run when the controller is off: max_depth() within `room` and `wanted`.
  int FixedDepth(int room, int wanted) const;

  // Builds the step at `depth` (0 = a plain row): `rows` for seq (whose last emitted token,
  // history.back(), is the root) under `pattern`, and its sampling rows appended to `sampling`
  // (history: prompt + emitted tokens, for the penalty window and the drafter).
  void Plan(int depth, absl::Span<const int32_t> history, SequenceKv* seq,
            const kernels::AttentionPattern& pattern, sampling::Sampler& sampler, StepRows* rows,
            kernels::SamplingBatch* sampling);
  // After the step ran: `sampled` holds its sampled tokens (one per row, root first). Commits
  // the accepted rows on `runner` and leaves `sampler` after the emitted tokens' draws. Errors
  // from ModelRunner::Commit (the sequence should be finished then).
  absl::StatusOr<SpecStepResult> Finish(absl::Span<const int32_t> sampled, ModelRunner& runner,
                                        SequenceKv& seq, sampling::Sampler& sampler);
  // The step did not run: forgets the plan (the sampler's draws were only peeked at).
  void Abandon();

  // The walk Finish verifies drafts with: spec::AcceptDraft; tests swap in a deliberately biased
  // one to show that the lossless-sampling check can fail.
  using Verifier = spec::AcceptedDraft (*)(const spec::StepDraft& draft,
                                           absl::Span<const int32_t> sampled);
  void set_verifier(Verifier verifier) { verifier_ = verifier; }

 private:
  SpeculativeSequence(const SpeculationChoice& choice,
                      std::unique_ptr<spec::DraftProposer> proposer, int max_depth);
  // Create's drafter for the method, before the runner's step-graph choice.
  static absl::StatusOr<std::unique_ptr<SpeculativeSequence>> ForMethod(
      const SpeculationChoice& choice, const ModelRunner& runner);
  // A sequence whose drafter is the model, drafting under `pattern` (`early_exit`: through
  // Kangaroo's adapter).
  static std::unique_ptr<SpeculativeSequence> ModelDrafted(
      const SpeculationChoice& choice, std::unique_ptr<spec::ModelDraftProposer> drafter, int depth,
      kernels::AttentionPattern pattern, bool early_exit);
  // The drafter when it is the model (sparse-self, TokenSwift; owned by proposer_), and its
  // attention.
  spec::ModelDraftProposer* model_draft_ = nullptr;
  kernels::AttentionPattern draft_pattern_;
  bool draft_early_exit_ = false;
  bool heads_after_step_ = false;  // drafts_from_last_step()
  int planned_depth_ = 0;          // the depth of the last Plan
  // The history length the last heads' candidates were read for (SetModelDraft; -1 = none): a
  // plain step of a heads-drafted sequence shadow-drafts when they are fresh.
  int64_t heads_for_history_ = -1;
  // Adds the emitted tokens to a pending shadow draft and records it once it is decided.
  void FeedShadow(absl::Span<const int32_t> emitted);

  SpeculationChoice choice_;
  std::unique_ptr<spec::DraftProposer> proposer_;
  int max_depth_;
  std::vector<int> rows_at_;  // proposer_->RowsAt(k) at [k - 1], k = 1..max_depth_ (per step)
  spec::AcceptanceStats acceptance_;
  // The planned step: its draft (empty: a plain row) and the sampler's stream before it.
  spec::StepDraft draft_;
  bool planned_ = false;
  // Pad tree and branch drafts to the depth's rows (StepDraft::PadWithAuxiliaryRows): the runner
  // replays one step graph per step shape.
  bool pad_drafts_ = false;
  // A draft made at a plain step and the tokens that came after its root so far.
  spec::StepDraft shadow_;
  std::vector<int32_t> shadow_actual_;
  bool deeper_shadow_ = false;  // the planned step's shadow is its deepest draft (Plan)
  static constexpr int kShadowEvery = 8;
  int plain_steps_since_shadow_ = kShadowEvery - 1;  // the first plain step makes one
  // Heads-drafted sequences: the steps between head reads for shadow drafts. It doubles, up to
  // kMaxShadowEvery, at each read that follows only plain steps, and is kShadowEvery again after
  // a speculative one: the reads are the cost of measuring (at batch 64 on the long-context test
  // model, reads every 8th step cost ~10% of plain decoding where nothing was chosen), and a
  // sequence that the controller keeps plain learns its acceptance more slowly at no loss.
  static constexpr int kMaxShadowEvery = 64;
  int shadow_every_ = kShadowEvery;
  bool drafted_since_shadow_ = true;  // the first read (after the prefill) does not double it
  std::vector<int32_t> path_;         // a row's draft path
  Verifier verifier_ = &spec::AcceptDraft;
};

// Records in `cost` a step over `rows` that took `seconds` (planning to finishing: host work
// included) — unless the runner's last step warmed up or captured a step graph, whose time says
// nothing of the steps after it (a speculative one makes the controller explore again soon:
// StepCostModel::NoteUnmeasured). Speculative when some row is.
void RecordStepCost(const ModelRunner& runner, absl::Span<const StepRows> rows, double seconds,
                    spec::StepCostModel& cost);

// Lookahead's parameters of `spec` on a model of `config`: the paper's defaults by model size,
// then the request's W, N, G where it sets them.
spec::LookaheadParams LookaheadParamsOf(const SpeculationChoice& spec,
                                        const model::ModelConfig& config);

// TokenSwift's parameters of `spec` on a model of `config` (the defaults of TokenSwiftParams;
// the 4-gram lag scaled down to an eighth of a shorter context).
spec::TokenSwiftParams TokenSwiftParamsOf(const SpeculationChoice& spec,
                                          const model::ModelConfig& config);

// One speculating sequence's room in a step: the rows it may add after its root and the tokens
// it still wants after the root's (SpeculativeSequence::Option).
struct DraftRoom {
  const SpeculativeSequence* seq = nullptr;
  int room = 0;
  int wanted = 0;
};

// Each sequence's draft depth this step: the controller's (spec::ChooseDraftDepths over every
// sequence that uses it, `base_rows` being the step's other rows), FixedDepth for the others.
// `options`, when given, receives each sequence's option (its rows per depth; empty for a
// controlled sequence while cost.DecisionSettled(): it stays plain without being read).
// `uniform` as spec::ChooseDraftDepths (ModelRunner::replays_step_graphs()).
std::vector<int> PickDraftDepths(const spec::StepCostModel& cost,
                                 absl::Span<const DraftRoom> sequences, int base_rows,
                                 std::vector<spec::DraftOption>* options = nullptr,
                                 bool uniform = false);

}  // namespace sparseserve::engine

#endif  // SPARSESERVE_COMMON_ENGINE_SPECULATIVE_SEQUENCE_H_
