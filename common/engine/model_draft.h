// RunModelDrafts: the draft passes of sequences whose drafter is the model itself — sparse
// self-speculation (issue 15; papers/tokenswift.md §3.2, MagicDec): the target model drafts with
// sparse attention over its own full KV cache and verifies with dense attention.
//
// Before a step that verifies a draft of depth d, a drafting sequence runs d decode steps under
// its draft pattern (SpeculativeSequence::draft_pattern): the root, then each drafted token, every
// drafting sequence of the batch in the same step. Their rows are pending draft rows
// (StepRows::draft) after the committed KV, dropped at the end (ModelRunner::DiscardPending): the
// verification step computes the root and the drafted tokens again at the same KV indices with
// the dense pattern, so only verified, dense-computed KV is ever committed and the output is plain
// decoding's. The draft token at depth i is sampled from the draft's distribution with the
// sequence's own i-th next draw, the draw its verification row samples with (draft.h): greedy,
// the draft's argmax; sampling, a draft whose distribution is close to the target's is accepted
// with high probability (the draws are coupled), and the sampler's stream is left as it was.
#ifndef SPARSESERVE_COMMON_ENGINE_MODEL_DRAFT_H_
#define SPARSESERVE_COMMON_ENGINE_MODEL_DRAFT_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/engine/model_runner.h"
#include "common/engine/speculative_sequence.h"
#include "common/sampling/sampler.h"
#include "common/spec/draft_length_controller.h"

namespace sparseserve::engine {

struct ModelDraftJob {
  SpeculativeSequence* spec = nullptr;  // drafts_on_model()
  SequenceKv* seq = nullptr;            // no pending rows
  absl::Span<const int32_t> history;    // prompt + emitted tokens; the last is the root
  sampling::Sampler* sampler = nullptr;
  int depth = 0;  // tokens to draft; 0 = none
};

// TokenSwift drafts in one pass (SpeculativeSequence::DraftPassesAt), whose draft heads
// (LlamaModel::LoadDraftHeads) also give candidates for the tokens after the drafted one.
// Kangaroo's passes exit early through its adapter (model::DraftPass::early_exit: steps of their
// own) and a sequence's draft stops before the first token whose top probability is at most its
// η, so later passes carry fewer rows.
//
// Drafts each job's chain into its SpeculativeSequence (SetModelDraft). On an error of a draft
// step (the pool out of blocks, a backend failure) every job keeps what it drafted before it —
// its next step verifies a shorter draft or runs plain — and the error is returned for the
// caller to log; nothing is left pending. `cost`, when given, records each pass's time
// (StepCostModel::RecordDraftPass: the controller prices draft depths with it).
absl::Status RunModelDrafts(ModelRunner& runner, absl::Span<const ModelDraftJob> jobs,
                            spec::StepCostModel* cost = nullptr);

// TokenSwift without a draft pass (SpeculativeSequence::drafts_from_last_step) reads its next
// draft from the draft heads at the row whose logits sampled its next root — a row already
// computed against the full cache (SetModelDraft). After a prefill, before any other step,
// DraftFromLastStep reads them at the prompt's last row (LlamaModel::DraftHeadsAtLastStep).
struct HeadDraftJob {
  SpeculativeSequence* spec = nullptr;  // drafts_from_last_step()
  // The token row of the last step that sampled the root; -1: its last row (a prompt's).
  int32_t row = -1;
  // The history the next step sees is `history` followed by `emitted` (a caller whose history
  // already ends with the emitted tokens passes none): the heads' rows take its repetition
  // penalty.
  absl::Span<const int32_t> history;
  absl::Span<const int32_t> emitted;
  sampling::Sampler* sampler = nullptr;
};
// On an error no job gets candidates (their next drafts are the 4-grams alone) and the error is
// returned for the caller to log.
absl::Status DraftFromLastStep(ModelRunner& runner, absl::Span<const HeadDraftJob> jobs);

// The draft heads a decode step reads for TokenSwift without a draft pass: every row of each
// sequence that wants its next draft from the step (SpeculativeSequence::WantsDraftHeads), in the
// step itself (model::DraftPass::head_rows: queued behind the step, ranked on the device), since
// which row samples the next root is known only after it.
class StepDraftHeads {
 public:
  // `cost`: the decode loop's step-cost model (WantsDraftHeads' cadence). Borrowed.
  explicit StepDraftHeads(const spec::StepCostModel& cost) : cost_(cost) {}
  // Before the step, after spec's Plan: its rows in it start at token row `first_row` and number
  // `rows`; read when it wants them (SpeculativeSequence::WantsDraftHeads).
  void Add(const SpeculativeSequence* spec, int32_t first_row, int32_t rows);
  // A prompt's last chunk ending at token row `row` (it samples the first token): read for every
  // sequence that drafts from the heads.
  void AddPromptEnd(const SpeculativeSequence* spec, int32_t row);
  // The DraftPass to run the step with (null when no sequence was added). Its head rows are
  // padded to a power of 2 (repeating the last; Deliver ignores the copies): a graph-replayed
  // step is one graph per head-row count, and the count of the sequences that want the heads
  // moves from step to step (at batch 64, ~30 counts, each captured op by op, cost more than the
  // reads). No more rows may be added after it.
  model::DraftPass* pass();
  // After the step (and spec's Finish): its candidates at its row `row` (0 = its first;
  // SpecStepResult::emitted_rows.back()) become its next draft, for a history of
  // `history_size` tokens (prompt + emitted, the next root last); empty candidates when the step
  // read none. Nothing for a sequence not added.
  void Deliver(SpeculativeSequence* spec, int32_t row, int64_t history_size) const;

 private:
  void Read(const SpeculativeSequence* spec, int32_t first_row, int32_t rows);

  const spec::StepCostModel& cost_;
  model::DraftPass pass_;
  // Each added sequence and where its rows start in pass_.head_rows.
  absl::flat_hash_map<const SpeculativeSequence*, int32_t> added_;
};

}  // namespace sparseserve::engine

#endif  // SPARSESERVE_COMMON_ENGINE_MODEL_DRAFT_H_
