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
    int passes;                 // forward passes its draft takes
    std::vector<double> draws;  // the sequence's next draws, one per pass
    spec::ModelDraft made;
  };
  std::vector<Drafting> drafting;
  int passes = 0, head_top_k = 0;
  for (const ModelDraftJob& job : jobs) {
    if (job.depth <= 0) continue;
    SS_CHECK(job.spec != nullptr && job.spec->drafts_on_model() && !job.history.empty());
    Drafting d{&job, job.spec->DraftPassesAt(job.depth), {}, {}};
    // Peeked, not taken: the verification step draws the same ones again.
    const sampling::Sampler::Stream before = job.sampler->stream();
    for (int i = 0; i < d.passes; ++i) d.draws.push_back(job.sampler->DrawUniform());
    job.sampler->set_stream(before);
    passes = std::max(passes, d.passes);
    if (runner.num_draft_heads() > 0) head_top_k = std::max(head_top_k, job.spec->DraftHeadTopK());
    drafting.push_back(std::move(d));
  }
  absl::Status status;
  for (int step = 0; step < passes && status.ok(); ++step) {
    std::vector<StepRows> rows;
    std::vector<Drafting*> owners;
    kernels::SamplingBatch sampling;
    sampling.penalized_begin.push_back(0);
    for (Drafting& d : drafting) {
      const ModelDraftJob& job = *d.job;
      if (step >= d.passes) continue;
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
    // The first pass also runs the draft heads when a drafter wants their candidates.
    model::DraftHeadTokens heads{.top_k = step == 0 ? head_top_k : 0, .tokens = {}};
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<int32_t>> next =
        runner.Step(rows, sampling, nullptr, heads.top_k > 0 ? &heads : nullptr);
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
      d.made.chain.push_back((*next)[i]);
      const int want = d.job->spec->DraftHeadTopK();
      if (heads.top_k == 0 || want == 0) continue;
      for (int h = 0; h < runner.num_draft_heads(); ++h) {
        const int32_t* best = heads.tokens.data() + (static_cast<size_t>(h) * m + i) * heads.top_k;
        d.made.head_candidates.emplace_back(best, best + want);
      }
    }
  }
  for (Drafting& d : drafting) {
    runner.DiscardPending(*d.job->seq);
    d.job->spec->SetModelDraft(std::move(d.made));
  }
  return status;
}

}  // namespace sparseserve::engine
