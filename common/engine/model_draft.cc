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
    std::vector<double> draws;  // the sequence's next draws, one per draft depth
    std::vector<int32_t> chain;
  };
  std::vector<Drafting> drafting;
  int depth = 0;
  for (const ModelDraftJob& job : jobs) {
    if (job.depth <= 0) continue;
    SS_CHECK(job.spec != nullptr && job.spec->drafts_on_model() && !job.history.empty());
    Drafting d{&job, {}, {}};
    // Peeked, not taken: the verification step draws the same ones again.
    const sampling::Sampler::Stream before = job.sampler->stream();
    for (int i = 0; i < job.depth; ++i) d.draws.push_back(job.sampler->DrawUniform());
    job.sampler->set_stream(before);
    drafting.push_back(std::move(d));
    depth = std::max(depth, job.depth);
  }
  absl::Status status;
  for (int step = 0; step < depth && status.ok(); ++step) {
    std::vector<StepRows> rows;
    std::vector<Drafting*> owners;
    kernels::SamplingBatch sampling;
    sampling.penalized_begin.push_back(0);
    for (Drafting& d : drafting) {
      const ModelDraftJob& job = *d.job;
      if (step >= job.depth) continue;
      StepRows row;
      row.seq = job.seq;
      row.tokens = {step == 0 ? job.history.back() : d.chain.back()};
      row.pattern = job.spec->draft_pattern();
      row.draft = true;
      rows.push_back(std::move(row));
      owners.push_back(&d);
      // Sampled as its verification row will be: after the history and the chain so far.
      sampling.rows.push_back(job.sampler->RowWithDraw(
          job.history, d.chain, d.draws[static_cast<size_t>(step)], &sampling.penalized_ids));
      sampling.penalized_begin.push_back(static_cast<int32_t>(sampling.penalized_ids.size()));
    }
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<int32_t>> next = runner.Step(rows, sampling);
    if (!next.ok()) {
      status = next.status();
      break;
    }
    if (cost != nullptr && !runner.last_step_was_graph_setup()) {
      cost->RecordDraftPass(
          static_cast<int>(rows.size()),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    for (size_t i = 0; i < owners.size(); ++i) owners[i]->chain.push_back((*next)[i]);
  }
  for (Drafting& d : drafting) {
    runner.DiscardPending(*d.job->seq);
    d.job->spec->SetModelDraft(std::move(d.chain));
  }
  return status;
}

}  // namespace sparseserve::engine
