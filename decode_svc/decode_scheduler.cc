#include "decode_svc/decode_scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/core/logging.h"
#include "common/core/status.h"
#include "common/engine/kv_block_copy.h"
#include "common/sampling/sampler.h"
#include "kernels/sampling_plan.h"

namespace sparseserve::decode {

struct DecodeScheduler::Running {
  DecodeJob job;
  absl::Time enqueued;
  std::unique_ptr<sampling::Sampler> sampler;  // kept across preemption: seeded draws go on
  std::vector<int32_t> generated;              // tokens emitted so far
  std::vector<int32_t> history;                // prompt + generated, for the penalty window
  engine::SequenceKv seq;                      // empty while waiting
  int32_t next_token = -1;                     // emitted, not yet in the KV cache
  bool started = false;                        // sink->OnStart was called
  // The next token's sampling row (its draw taken) and penalised ids, drawn once per token: a
  // step that fails for want of blocks, or the recompute after a preemption, reuses them, so the
  // random stream does not depend on pool pressure.
  std::optional<kernels::SamplingRow> pending_row;
  std::vector<int32_t> pending_penalized_ids;

  const kernels::SamplingRow& PendingRow() {
    if (!pending_row.has_value()) {
      pending_penalized_ids.clear();
      pending_row = sampler->NextRow(history, &pending_penalized_ids);
    }
    return *pending_row;
  }
};

DecodeScheduler::DecodeScheduler(engine::ModelRunner* runner, DecodeSchedulerOptions options)
    : runner_(runner),
      options_(std::move(options)),
      eos_(options_.eos_ids.begin(), options_.eos_ids.end()),
      engine_([this] { EngineLoop(); }) {}

DecodeScheduler::~DecodeScheduler() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  engine_.join();
  std::deque<std::unique_ptr<Running>> waiting;
  {
    absl::MutexLock lock(&mu_);
    waiting.swap(waiting_);
  }
  const absl::Status cancelled = absl::CancelledError("decode worker shutting down");
  for (auto& r : waiting) Finish(*r, cancelled, engine::FinishReason::kAborted);
  for (auto& r : running_) Finish(*r, cancelled, engine::FinishReason::kAborted);
}

absl::Status DecodeScheduler::Submit(DecodeJob job) {
  const int context = runner_->max_context();
  if (job.prompt.empty()) return absl::InvalidArgumentError("empty prompt");
  if (static_cast<int>(job.prompt.size()) >= context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt of ", job.prompt.size(), " tokens does not fit the context of ", context));
  }
  for (int32_t t : job.prompt) {
    if (t < 0 || t >= runner_->config().vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", t, " outside the vocabulary"));
    }
  }
  if (job.max_tokens < 1) return absl::InvalidArgumentError("max_tokens must be >= 1");
  if (absl::Status s = sampling::Validate(job.sampling); !s.ok()) return s;
  if (job.sink == nullptr) return absl::InvalidArgumentError("no sink");
  auto r = std::make_unique<Running>();
  r->sampler = std::make_unique<sampling::Sampler>(job.sampling);
  r->history = job.prompt;
  r->job = std::move(job);
  r->enqueued = absl::Now();
  absl::MutexLock lock(&mu_);
  if (static_cast<int>(waiting_.size()) >= options_.max_waiting) {
    return absl::ResourceExhaustedError(
        absl::StrCat("decode queue full (", waiting_.size(), " requests waiting)"));
  }
  if (!in_flight_.insert(r->job.request_id).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("request ", r->job.request_id, " is already in flight"));
  }
  waiting_.push_back(std::move(r));
  return absl::OkStatus();
}

bool DecodeScheduler::Abort(const std::string& request_id) {
  absl::MutexLock lock(&mu_);
  if (!in_flight_.contains(request_id)) return false;
  aborts_.insert(request_id);
  return true;
}

DecodeSchedulerStats DecodeScheduler::stats() const {
  absl::MutexLock lock(&mu_);
  return {num_running_, static_cast<int>(waiting_.size())};
}

void DecodeScheduler::EngineLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](DecodeScheduler* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
            return s->stopping_ || !s->waiting_.empty() || !s->aborts_.empty() ||
                   s->num_running_ > 0;
          },
          this));
      if (stopping_) return;
    }
    ApplyAborts();
    AdmitWaiting();
    if (!running_.empty()) DecodeStep();
  }
}

void DecodeScheduler::ApplyAborts() {
  absl::flat_hash_set<std::string> aborts;
  std::vector<std::unique_ptr<Running>> aborted;
  {
    absl::MutexLock lock(&mu_);
    if (aborts_.empty()) return;
    aborts.swap(aborts_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (aborts.contains((*it)->job.request_id)) {
        aborted.push_back(std::move(*it));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& r : aborted) Finish(*r, absl::OkStatus(), engine::FinishReason::kAborted);
  for (auto& r : running_) {
    if (aborts.contains(r->job.request_id)) {
      Finish(*r, absl::OkStatus(), engine::FinishReason::kAborted);
      r.reset();
    }
  }
  std::erase(running_, nullptr);
  absl::MutexLock lock(&mu_);
  num_running_ = static_cast<int>(running_.size());
}

void DecodeScheduler::AdmitWaiting() {
  while (static_cast<int>(running_.size()) < options_.max_running) {
    std::unique_ptr<Running> r;
    {
      absl::MutexLock lock(&mu_);
      if (waiting_.empty()) break;
      r = std::move(waiting_.front());
      waiting_.pop_front();
    }
    if (!AdmitOne(r)) {
      absl::MutexLock lock(&mu_);
      waiting_.push_front(std::move(r));
      break;
    }
  }
  absl::MutexLock lock(&mu_);
  num_running_ = static_cast<int>(running_.size());
}

bool DecodeScheduler::AdmitOne(std::unique_ptr<Running>& r) {
  DecodeJob& job = r->job;
  int32_t first = -1;
  if (job.prefilled_blocks.has_value()) {
    std::vector<int32_t> blocks = std::move(*job.prefilled_blocks);
    job.prefilled_blocks.reset();
    absl::Status s = CopyStagedKv(job, blocks);
    if (s.ok()) s = runner_->AdoptPrefilledKv(job.prompt, blocks, r->seq);
    if (!s.ok()) {
      runner_->mutable_pool().Release(blocks);
      Finish(*r, s, engine::FinishReason::kAborted);
      return true;
    }
    // The prefill worker's first token was already streamed by the router: it is not emitted
    // again, only fed to the next decode step (and kept with the prompt for recomputation).
    job.prompt.push_back(job.first_token);
    r->history.push_back(job.first_token);
    r->next_token = job.first_token;
    r->sampler->SkipDraw();  // the prefill worker drew it from the same seed
    if (!r->started) {
      r->started = true;
      job.sink->OnStart(r->seq.num_cached_prompt_tokens,
                        absl::ToDoubleSeconds(absl::Now() - r->enqueued));
    }
    running_.push_back(std::move(r));
    return true;
  } else {
    // After a preemption the tokens generated so far are recomputed with the prompt.
    std::vector<int32_t> input = job.prompt;
    input.insert(input.end(), r->generated.begin(), r->generated.end());
    absl::StatusOr<Tensor> logits = runner_->Prefill(input, r->seq);
    if (logits.status().code() == absl::StatusCode::kResourceExhausted && !running_.empty()) {
      return false;  // wait for running sequences to free blocks
    }
    if (!logits.ok()) {
      Finish(*r, logits.status(), engine::FinishReason::kAborted);
      return true;
    }
    const kernels::SamplingRow& row = r->PendingRow();
    first = kernels::SampleRow(
        absl::MakeConstSpan(logits->data<float>(), static_cast<size_t>(logits->numel())), row,
        r->pending_penalized_ids, &host_sampling_);
    r->pending_row.reset();
  }
  if (!r->started) {
    r->started = true;
    job.sink->OnStart(r->seq.num_cached_prompt_tokens,
                      absl::ToDoubleSeconds(absl::Now() - r->enqueued));
  }
  if (Emit(*r, first)) running_.push_back(std::move(r));
  return true;
}

absl::Status DecodeScheduler::CopyStagedKv(DecodeJob& job, absl::Span<const int32_t> blocks) {
  if (job.staged_kv.empty()) return absl::OkStatus();
  KvStagingLease staged = std::move(job.staged_kv);  // returns the blocks when done
  const std::vector<int32_t>& staging_ids = staged.block_ids();
  const KvStagingArea& area = *staged.area();
  const int num_layers = runner_->cache().shape().num_layers;
  if (job.first_staged_block < 0 ||
      static_cast<size_t>(job.first_staged_block) + staging_ids.size() != blocks.size() ||
      area.num_layers() != num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("request ", job.request_id, ": ", staging_ids.size(),
                     " staged blocks from block ", job.first_staged_block, " of ", blocks.size(),
                     ", ", area.num_layers(), " staged layers for ", num_layers));
  }
  const absl::Time start = absl::Now();
  const absl::Span<const int32_t> pool_ids = blocks.subspan(job.first_staged_block);
  for (int l = 0; l < num_layers; ++l) {
    SS_RETURN_IF_ERROR(engine::CopyKvBlocksFromHost(runner_->backend(), area.layer(l), staging_ids,
                                                    runner_->cache().layer(l), pool_ids));
  }
  if (options_.metrics != nullptr) {
    options_.metrics->kv_staging_copy_time().Observe(absl::ToDoubleSeconds(absl::Now() - start));
  }
  return absl::OkStatus();
}

bool DecodeScheduler::Emit(Running& r, int32_t token) {
  const DecodeJob& job = r.job;
  const bool stop_token = std::find(job.stop_token_ids.begin(), job.stop_token_ids.end(), token) !=
                          job.stop_token_ids.end();
  if (stop_token || (!job.ignore_eos && eos_.contains(token))) {
    Finish(r, absl::OkStatus(), engine::FinishReason::kStop);
    return false;
  }
  r.generated.push_back(token);
  r.history.push_back(token);
  job.sink->OnToken(token);
  if (static_cast<int>(r.generated.size()) >= job.max_tokens) {
    Finish(r, absl::OkStatus(), engine::FinishReason::kLength);
    return false;
  }
  if (static_cast<int>(r.seq.tokens.size()) + 1 >= runner_->max_context()) {
    Finish(r, absl::OkStatus(), engine::FinishReason::kContextFull);
    return false;
  }
  r.next_token = token;
  return true;
}

void DecodeScheduler::DecodeStep() {
  // Every sequence picks its next token on the backend (greedy ones are temperature-0 rows), so
  // only token ids come back from the step.
  std::vector<engine::SequenceKv*> seqs;
  std::vector<int32_t> tokens;
  kernels::SamplingBatch sampling;
  sampling.penalized_begin.push_back(0);
  for (auto& r : running_) {
    seqs.push_back(&r->seq);
    tokens.push_back(r->next_token);
    sampling.rows.push_back(r->PendingRow());
    sampling.penalized_ids.insert(sampling.penalized_ids.end(), r->pending_penalized_ids.begin(),
                                  r->pending_penalized_ids.end());
    sampling.penalized_begin.push_back(static_cast<int32_t>(sampling.penalized_ids.size()));
  }
  absl::StatusOr<std::vector<int32_t>> next = runner_->DecodeSampled(seqs, tokens, sampling);
  if (next.status().code() == absl::StatusCode::kResourceExhausted) {
    Preempt(*running_.back());  // newest first, as vLLM does; retried next iteration
    running_.pop_back();
  } else if (!next.ok()) {
    SS_LOG_ERROR("decode step failed: {}", next.status().ToString());
    for (auto& r : running_) Finish(*r, next.status(), engine::FinishReason::kAborted);
    running_.clear();
  } else {
    for (size_t i = 0; i < running_.size(); ++i) {
      Running& r = *running_[i];
      r.pending_row.reset();
      if (!Emit(r, (*next)[i])) running_[i].reset();
    }
    std::erase(running_, nullptr);
  }
  absl::MutexLock lock(&mu_);
  num_running_ = static_cast<int>(running_.size());
}

void DecodeScheduler::Preempt(Running& r) {
  SS_LOG_INFO("request {}: preempted (KV pool full), will recompute {} tokens", r.job.request_id,
              r.job.prompt.size() + r.generated.size());
  runner_->Release(r.seq);
  absl::MutexLock lock(&mu_);
  // Requeued at the front so it resumes first; its sink keeps streaming afterwards.
  auto requeued = std::make_unique<Running>(std::move(r));
  waiting_.push_front(std::move(requeued));
}

void DecodeScheduler::Finish(Running& r, const absl::Status& status, engine::FinishReason reason) {
  runner_->Release(r.seq);
  if (r.job.prefilled_blocks.has_value()) {
    runner_->mutable_pool().Release(*r.job.prefilled_blocks);
    r.job.prefilled_blocks.reset();
  }
  r.job.staged_kv.Reset();
  r.job.sink->OnFinish(status, reason);
  absl::MutexLock lock(&mu_);
  in_flight_.erase(r.job.request_id);
}

}  // namespace sparseserve::decode
