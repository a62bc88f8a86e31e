#include "common/engine/model_draft.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "common/core/check.h"

namespace sparseserve::engine {

absl::Status RunModelDrafts(ModelRunner& runner, absl::Span<const ModelDraftJob> jobs,
                            spec::StepCostModel* cost) {
  struct Drafting {
    const ModelDraftJob* job;
    int passes;                 // forward passes its draft takes at most
    std::vector<double> draws;  // the sequence's next draws, one per pass
    spec::ModelDraft made;
    bool stopped = false;  // Kangaroo's second exit: a token below η ends the draft
  };
  std::vector<Drafting> drafting;
  int head_top_k = 0;
  for (const ModelDraftJob& job : jobs) {
    // TokenSwift without its pass drafts from the heads read after the last step.
    if (job.depth <= 0 || job.spec->DraftPassesAt(job.depth) == 0) continue;
    SS_CHECK(job.spec != nullptr && job.spec->drafts_on_model() && !job.history.empty());
    Drafting d{&job, job.spec->DraftPassesAt(job.depth), {}, {}};
    // Peeked, not taken: the verification step draws the same ones again.
    for (int i = 0; i < d.passes; ++i) d.draws.push_back(job.sampler->PeekUniform(i));
    // Heads draft depths 2 and deeper: a depth-1 draft has no use for them.
    if (runner.num_draft_heads() > 0 && job.depth >= 2) {
      head_top_k = std::max(head_top_k, job.spec->DraftHeadTopK());
    }
    drafting.push_back(std::move(d));
  }
  absl::Status status;
  // Full-depth passes (sparse-self, TokenSwift) and early-exit ones (Kangaroo) are separate
  // steps: a step runs one layer stack for all its rows.
  for (const bool early_exit : {false, true}) {
    for (int step = 0; status.ok(); ++step) {
      std::vector<StepRows> rows;
      std::vector<Drafting*> owners;
      kernels::SamplingBatch sampling;
      sampling.penalized_begin.push_back(0);
      for (Drafting& d : drafting) {
        const ModelDraftJob& job = *d.job;
        if (job.spec->DraftEarlyExit() != early_exit || d.stopped || step >= d.passes) continue;
        std::vector<int32_t>& chain = d.made.chain;
        StepRows row;
        row.seq = job.seq;
        row.tokens = {step == 0 ? job.history.back() : chain.back()};
        row.pattern = job.spec->draft_pattern();
        row.draft = true;
        rows.push_back(std::move(row));
        owners.push_back(&d);
        // Sampled as its verification row will be: after the history and the chain so far.
        sampling.rows.push_back(job.sampler->RowWithDraw(
            job.history, chain, d.draws[static_cast<size_t>(step)], &sampling.penalized_ids));
        sampling.penalized_begin.push_back(static_cast<int32_t>(sampling.penalized_ids.size()));
      }
      if (rows.empty()) break;
      // The first full pass also runs the draft heads when a drafter wants their candidates.
      model::DraftPass pass;
      pass.early_exit = early_exit;
      pass.head_top_k = step == 0 && !early_exit ? head_top_k : 0;
      const bool special = pass.early_exit || pass.head_top_k > 0;
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<std::vector<int32_t>> next =
          runner.Step(rows, sampling, nullptr, special ? &pass : nullptr);
      if (!next.ok()) {
        status = next.status();
        break;
      }
      if (cost != nullptr && !runner.last_step_was_graph_setup()) {
        cost->RecordDraftPass(
            static_cast<int>(rows.size()),
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      const size_t m = owners.size();
      for (size_t i = 0; i < m; ++i) {
        Drafting& d = *owners[i];
        if (early_exit && pass.top_probability[i] <= d.job->spec->DraftStopProbability()) {
          d.stopped = true;  // not confident enough: the draft ends before this token
          continue;
        }
        d.made.chain.push_back((*next)[i]);
        const int want = d.job->depth >= 2 ? d.job->spec->DraftHeadTopK() : 0;
        if (pass.head_top_k == 0 || want == 0) continue;
        for (int h = 0; h < runner.num_draft_heads(); ++h) {
          const int32_t* best =
              pass.head_tokens.data() + (static_cast<size_t>(h) * m + i) * pass.head_top_k;
          d.made.head_candidates.emplace_back(best, best + want);
        }
      }
    }
  }
  for (Drafting& d : drafting) {
    runner.DiscardPending(*d.job->seq);
    d.job->spec->SetModelDraft(std::move(d.made));
  }
  return status;
}

absl::Status DraftFromLastStep(ModelRunner& runner, absl::Span<const HeadDraftJob> jobs) {
  if (jobs.empty()) return absl::OkStatus();
  int top_k = 0;
  std::vector<int32_t> rows;
  kernels::SamplingBatch sampling;
  sampling.penalized_begin.push_back(0);
  for (const HeadDraftJob& job : jobs) {
    SS_CHECK(job.spec != nullptr && job.spec->drafts_from_last_step());
    top_k = std::max(top_k, job.spec->DraftHeadTopK());
    rows.push_back(job.row);
    // The root's own row as the next step will sample it (its draw does not matter here).
    sampling.rows.push_back(
        job.sampler->RowWithDraw(job.history, job.emitted, 0.0, &sampling.penalized_ids));
    sampling.penalized_begin.push_back(static_cast<int32_t>(sampling.penalized_ids.size()));
  }
  const absl::StatusOr<std::vector<int32_t>> heads =
      runner.DraftHeadsAtLastStep(rows, sampling, top_k);
  const size_t m = jobs.size();
  for (size_t i = 0; i < m; ++i) {
    const HeadDraftJob& job = jobs[i];
    spec::ModelDraft made;
    made.history_size = static_cast<int64_t>(job.history.size() + job.emitted.size());
    if (heads.ok()) {
      const int want = job.spec->DraftHeadTopK();
      for (int h = 0; h < runner.num_draft_heads(); ++h) {
        const int32_t* best = heads->data() + (static_cast<size_t>(h) * m + i) * top_k;
        made.head_candidates.emplace_back(best, best + want);
      }
    }
    job.spec->SetModelDraft(std::move(made));
  }
  return heads.status();
}

void StepDraftHeads::Add(const SpeculativeSequence* spec, int32_t first_row, int32_t rows) {
  if (spec->WantsDraftHeads(cost_)) Read(spec, first_row, rows);
}

void StepDraftHeads::AddPromptEnd(const SpeculativeSequence* spec, int32_t row) {
  if (spec->drafts_from_last_step()) Read(spec, row, 1);
}

model::DraftPass* StepDraftHeads::pass() {
  std::vector<int32_t>& rows = pass_.head_rows;
  if (rows.empty()) return nullptr;
  size_t padded = 1;
  while (padded < rows.size()) padded *= 2;
  rows.resize(padded, rows.back());
  return &pass_;
}

void StepDraftHeads::Read(const SpeculativeSequence* spec, int32_t first_row, int32_t rows) {
  added_.emplace(spec, static_cast<int32_t>(pass_.head_rows.size()));
  for (int32_t r = 0; r < rows; ++r) pass_.head_rows.push_back(first_row + r);
  pass_.head_top_k = std::max(pass_.head_top_k, spec->DraftHeadTopK());
}

void StepDraftHeads::Deliver(SpeculativeSequence* spec, int32_t row, int64_t history_size) const {
  const auto it = added_.find(spec);
  if (it == added_.end()) return;  // it did not want them this step
  spec::ModelDraft made;
  made.history_size = history_size;
  const size_t rows = pass_.head_rows.size(), k = static_cast<size_t>(pass_.head_top_k);
  const size_t heads = k == 0 ? 0 : pass_.head_tokens.size() / (rows * k);
  const size_t at = static_cast<size_t>(it->second) + static_cast<size_t>(row);
  const size_t want = static_cast<size_t>(spec->DraftHeadTopK());
  for (size_t h = 0; h < heads && at < rows; ++h) {
    const int32_t* best = pass_.head_tokens.data() + (h * rows + at) * k;
    made.head_candidates.emplace_back(best, best + want);
  }
  spec->SetModelDraft(std::move(made));
}

}  // namespace sparseserve::engine
