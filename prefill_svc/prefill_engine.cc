#include "prefill_svc/prefill_engine.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/core/logging.h"
#include "common/core/move_matching.h"
#include "common/core/status.h"
#include "common/sampling/sampler.h"

namespace sparseserve::prefill {

struct PrefillEngine::Running {
  PrefillTask task;
  PrefillDone done;
  // When its prefill started (prefill_seconds counts from here); InfinitePast while waiting.
  absl::Time admitted = absl::InfinitePast();
  kernels::AttentionPattern pattern;
  std::unique_ptr<transfer::KvWriteSession> session;  // while admitted, with a target
  engine::SequenceKv seq;                             // empty while waiting
  // The first token's sampling row, drawn once at admission: the decode worker continues the
  // same seeded stream (it skips this draw).
  kernels::SamplingBatch first_row;
  // Of the step holding its last chunk: its staging ring lane, the first failure of its PUTs
  // (later layers are then skipped; the request fails alone), when its first PUT started.
  int lane_idx = -1;
  absl::Status transfer_status;
  absl::Time first_put = absl::InfiniteFuture();
  int32_t first_token = -1;  // sampled by the step holding its last chunk
  std::optional<model::TokenLogprobs> first_token_logprobs;
};

PrefillEngine::PrefillEngine(engine::ModelRunner* runner, transfer::KvTransferSource* source,
                             KvStagingRing* ring, PrefillEngineOptions options)
    : runner_(runner), source_(source), ring_(ring), options_(options), engine_([this] {
        EngineLoop();
      }) {}

PrefillEngine::~PrefillEngine() {
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
  const absl::Status cancelled = absl::CancelledError("prefill worker shutting down");
  for (auto& r : waiting) Finish(*r, cancelled);
  for (auto& r : running_) Finish(*r, cancelled);
}

kv::KvLayout PrefillEngine::layout() const {
  return runner_->kv_layout();
}

absl::Status PrefillEngine::Submit(PrefillTask task, PrefillDone done) {
  auto r = std::make_unique<Running>();
  r->task = std::move(task);
  r->done = std::move(done);
  absl::MutexLock lock(&mu_);
  if (static_cast<int>(waiting_.size()) >= options_.max_queued) {
    return absl::ResourceExhaustedError(absl::StrCat("prefill queue full (", waiting_.size(), ")"));
  }
  ++in_flight_[r->task.request_id];
  waiting_.push_back(std::move(r));
  stats_.num_waiting = static_cast<int>(waiting_.size());
  return absl::OkStatus();
}

bool PrefillEngine::Abort(const std::string& request_id) {
  absl::MutexLock lock(&mu_);
  if (!in_flight_.contains(request_id)) return false;
  aborts_.insert(request_id);
  return true;
}

int PrefillEngine::num_queued() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(waiting_.size());
}

PrefillEngineStats PrefillEngine::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void PrefillEngine::EngineLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](PrefillEngine* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) {
            return e->stopping_ || !e->waiting_.empty() || !e->aborts_.empty() ||
                   e->stats_.num_running > 0;
          },
          this));
      if (stopping_) return;
    }
    ApplyAborts();
    AdmitWaiting();
    if (!running_.empty()) EngineStep();
    absl::MutexLock lock(&mu_);
    stats_.num_running = static_cast<int>(running_.size());
    stats_.num_waiting = static_cast<int>(waiting_.size());
  }
}

void PrefillEngine::ApplyAborts() {
  absl::flat_hash_set<std::string> aborts;
  std::vector<std::unique_ptr<Running>> aborted;
  auto is_aborted = [&aborts](const std::unique_ptr<Running>& r) {
    return aborts.contains(r->task.request_id);
  };
  {
    absl::MutexLock lock(&mu_);
    if (aborts_.empty()) return;
    aborts.swap(aborts_);
    core::MoveMatching(waiting_, aborted, is_aborted);
  }
  core::MoveMatching(running_, aborted, is_aborted);
  for (auto& r : aborted) Finish(*r, absl::CancelledError("aborted"));
}

int PrefillEngine::BlocksReserved() const {
  int blocks = 0;
  for (const auto& r : running_) {
    const int hold =
        runner_->BlocksToHold(static_cast<int>(r->task.prompt.size()), options_.prefill_chunk);
    const int held = static_cast<int>(r->seq.block_ids.size()) - r->seq.released_blocks;
    blocks += std::max(0, hold - held);
  }
  return blocks;
}

void PrefillEngine::AdmitWaiting() {
  while (static_cast<int>(running_.size()) < std::max(1, options_.max_running)) {
    std::unique_ptr<Running> r;
    {
      absl::MutexLock lock(&mu_);
      if (waiting_.empty()) return;
      r = std::move(waiting_.front());
      waiting_.pop_front();
    }
    if (!AdmitOne(r)) {
      absl::MutexLock lock(&mu_);
      waiting_.push_front(std::move(r));
      return;
    }
  }
}

bool PrefillEngine::AdmitOne(std::unique_ptr<Running>& r) {
  const PrefillTask& task = r->task;
  const PrefillTarget* target = task.target ? &*task.target : nullptr;
  const int bt = runner_->block_tokens();
  const int needed = (static_cast<int>(task.prompt.size()) + bt - 1) / bt;
  absl::Status status = engine::Validate(task.options);
  if (status.ok()) {
    absl::StatusOr<kernels::AttentionPattern> pattern =
        runner_->PrefillPattern(task.options.prefill, static_cast<int64_t>(task.prompt.size()));
    status = pattern.status();
    if (pattern.ok()) r->pattern = *std::move(pattern);
  }
  if (status.ok() && target != nullptr) {
    if (source_ == nullptr) {
      status = absl::FailedPreconditionError("this prefill worker has no KV transport (UCX off)");
    } else {
      status = kv::CheckCompatible(layout(), target->layout);
    }
    if (status.ok() && (static_cast<int>(target->remote_blocks.size()) != needed ||
                        target->first_block < 0 || target->first_block > needed)) {
      status = absl::InvalidArgumentError(absl::StrCat(
          "reservation has ", target->remote_blocks.size(), " blocks, the prompt needs ", needed));
    }
  }
  if (!status.ok()) {
    Finish(*r, status);
    return true;
  }
  // Admitted while the pool can hold the whole prompt beside what the running prompts will still
  // take, so a step never runs out of blocks half-way through the batch; when nothing runs the
  // prompt either fits or fails alone.
  if (!running_.empty() &&
      runner_->pool().num_free_blocks() <
          BlocksReserved() +
              runner_->BlocksToHold(static_cast<int>(task.prompt.size()), options_.prefill_chunk)) {
    return false;
  }
  if (target != nullptr) {
    absl::StatusOr<std::unique_ptr<transfer::KvWriteSession>> session =
        source_->Connect(target->pool);
    if (!session.ok()) {
      Finish(*r, session.status());
      return true;
    }
    r->session = *std::move(session);
  }
  if (absl::Status s =
          runner_->BeginPrefill(task.prompt, r->seq, r->pattern, options_.prefill_chunk).status();
      !s.ok()) {
    Finish(*r, s);
    return true;
  }
  sampling::Sampler sampler(task.sampling);
  r->first_row = kernels::SamplingBatch();
  r->first_row.rows = {sampler.NextRow(task.prompt, &r->first_row.penalized_ids)};
  r->first_row.penalized_begin = {0, static_cast<int32_t>(r->first_row.penalized_ids.size())};
  r->admitted = absl::Now();
  r->transfer_status = absl::OkStatus();
  r->first_put = absl::InfiniteFuture();
  running_.push_back(std::move(r));
  return true;
}

absl::Status PrefillEngine::PutLayer(Running& r, int layer) {
  const PrefillTarget& target = *r.task.target;
  if (r.first_put == absl::InfiniteFuture()) r.first_put = absl::Now();
  // The step has allocated every block of the prompt before its forward pass began.
  const int first = target.first_block;
  const std::vector<int32_t> local(r.seq.block_ids.begin() + first, r.seq.block_ids.end());
  const std::vector<int32_t> remote(target.remote_blocks.begin() + first,
                                    target.remote_blocks.end());
  // The call's deadline ends before the reservation's lease (the router sets it so): past it
  // the decode worker may reuse the blocks, so no new PUT may start.
  if (absl::Now() >= r.task.deadline) {
    return absl::DeadlineExceededError(
        absl::StrCat("KV transfer stopped before layer ", layer,
                     ": the request's deadline (bounded by the KV lease) has passed"));
  }
  if (ring_ != nullptr) {
    // Every tensor-parallel rank's heads, gathered into the whole-heads layout that moves between
    // workers (kv::KvLayout).
    const KvStagingRing::CopyToHost copy = [&](absl::Span<const int32_t> blocks, const Tensor& host,
                                               absl::Span<const int32_t> slots) {
      return runner_->CopyKvToHost(layer, blocks, host, slots);
    };
    return ring_->StageAndPut(r.lane_idx, copy, layer, local, remote, *r.session, r.task.deadline);
  }
  return r.session->PutBlocks(layer, runner_->cache().layer(layer).raw_data(), local, remote);
}

void PrefillEngine::EngineStep() {
  // A prompt whose transfer may no longer start is not computed further.
  const absl::Time now = absl::Now();
  std::vector<std::unique_ptr<Running>> expired;
  for (auto& r : running_) {
    if (r->session != nullptr && now >= r->task.deadline) expired.push_back(std::move(r));
  }
  std::erase(running_, nullptr);
  for (auto& r : expired) {
    Finish(*r, absl::DeadlineExceededError(
                   "KV transfer not started: the request's deadline (bounded by the KV lease) "
                   "passed while its prompt was being prefilled"));
  }
  // Chunks of the running prompts in admission order while the budget lasts. A prompt's last
  // chunk samples its first token and, with a target, PUTs its KV layer by layer; when staged,
  // each such transfer needs a lane of the ring, so a step holds at most as many as the ring
  // has blocks.
  int budget = options_.max_step_tokens;
  int lanes_left = ring_ != nullptr ? ring_->num_blocks() : std::numeric_limits<int>::max();
  std::vector<engine::StepRows> rows;
  std::vector<Running*> owners, transfers;
  kernels::SamplingBatch sampling;
  sampling.penalized_begin.push_back(0);
  for (auto& r : running_) {
    if (budget == 0) break;
    const int n = static_cast<int>(r->task.prompt.size());
    const int done = static_cast<int>(r->seq.tokens.size());
    const int len = engine::PrefillChunkLength(done, n, options_.prefill_chunk, budget);
    const bool last_chunk = done + len == n;
    if (last_chunk && r->session != nullptr) {
      if (lanes_left == 0) continue;
      --lanes_left;
      transfers.push_back(r.get());
    }
    engine::StepRows row;
    row.seq = &r->seq;
    row.tokens.assign(r->task.prompt.begin() + done, r->task.prompt.begin() + done + len);
    row.pattern = r->pattern;
    row.prompt = true;
    row.sample = last_chunk ? model::LogitRows::kLast : model::LogitRows::kNone;
    if (last_chunk) {
      const kernels::SamplingBatch& first = r->first_row;
      sampling.rows.push_back(first.rows.front());
      sampling.penalized_ids.insert(sampling.penalized_ids.end(), first.penalized_ids.begin(),
                                    first.penalized_ids.end());
      sampling.penalized_begin.push_back(static_cast<int32_t>(sampling.penalized_ids.size()));
    }
    rows.push_back(std::move(row));
    owners.push_back(r.get());
    budget -= len;
  }
  if (rows.empty()) return;
  if (ring_ != nullptr && !transfers.empty()) {
    // Every PUT from the ring was flushed, or its session closed, when the last step's transfers
    // finished.
    if (absl::Status s = ring_->Reset(static_cast<int>(transfers.size())); !s.ok()) {
      SS_LOG_ERROR("staging ring: {}", s.ToString());  // a broken invariant of this loop
      for (Running* r : transfers) r->transfer_status = s;
    }
    for (size_t i = 0; i < transfers.size(); ++i) transfers[i]->lane_idx = static_cast<int>(i);
  }
  std::function<absl::Status(int)> on_layer_done;
  if (!transfers.empty()) {
    // GPU to GPU (no ring, KV cache on the device): the layer's K/V writes are queued on the
    // device and a PUT reads the memory as it is when UCX's copy runs, so wait for them once.
    const bool wait_for_device =
        ring_ == nullptr && runner_->cache().layer(0).device() != Device::kHost;
    on_layer_done = [&, wait_for_device](int layer) {
      if (wait_for_device) {
        if (absl::Status s = runner_->backend().Synchronize(); !s.ok()) {
          for (Running* r : transfers) r->transfer_status.Update(s);
          return absl::OkStatus();  // the step's own status reports the device error
        }
      }
      bool put = false;
      for (Running* r : transfers) {
        if (!r->transfer_status.ok()) continue;  // failed earlier: its request fails alone
        r->transfer_status = PutLayer(*r, layer);
        put = true;
      }
      if (put && options_.put_delay > absl::ZeroDuration()) {
        absl::SleepFor(options_.put_delay);  // fault injection
      }
      return absl::OkStatus();
    };
  }
  model::StepLogprobs step_logprobs;
  bool want_logprobs = false;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].sample == model::LogitRows::kNone || owners[i]->task.top_logprobs < 0) continue;
    want_logprobs = true;
    step_logprobs.top_n = std::max(step_logprobs.top_n, owners[i]->task.top_logprobs);
  }
  absl::StatusOr<std::vector<int32_t>> next = runner_->Step(
      rows, sampling, on_layer_done, nullptr, want_logprobs ? &step_logprobs : nullptr);
  if (!next.ok()) {
    // PUTs of this step may still read the ring: every transfer's session is flushed (or the
    // request fails) before a later step reuses the ring.
    for (Running* r : transfers) {
      if (r->first_put == absl::InfiniteFuture() || !r->transfer_status.ok()) continue;
      const absl::Duration left = r->task.deadline - absl::Now();
      r->transfer_status =
          r->session->Flush(left > absl::ZeroDuration() ? left : absl::Milliseconds(1));
    }
    if (next.status().code() == absl::StatusCode::kResourceExhausted && running_.size() > 1) {
      // Admission keeps this from happening; should it anyway, the newest prompt waits again
      // and the others go on.
      std::unique_ptr<Running> newest = std::move(running_.back());
      running_.pop_back();
      SS_LOG_INFO("request {}: prefill preempted (KV pool full)", newest->task.request_id);
      newest->session.reset();
      runner_->Release(newest->seq);
      absl::MutexLock lock(&mu_);
      waiting_.push_front(std::move(newest));
      return;
    }
    SS_LOG_ERROR("prefill step failed: {}", next.status().ToString());
    for (Running* r : owners) Finish(*r, next.status());
    std::erase_if(running_, [&](const std::unique_ptr<Running>& r) {
      return std::find(owners.begin(), owners.end(), r.get()) != owners.end();
    });
    return;
  }
  if (options_.metrics != nullptr) {
    options_.metrics->engine_steps_prefill().Increment();
    options_.metrics->engine_step_sequences().Observe(static_cast<double>(rows.size()));
  }
  {
    absl::MutexLock lock(&mu_);
    ++stats_.num_steps;
    if (rows.size() > 1) ++stats_.num_shared_steps;
    stats_.max_step_prompts = std::max(stats_.max_step_prompts, static_cast<int>(rows.size()));
  }
  // Prompts whose last chunk ran are done: flush, close, release and report each, before the
  // next step writes the KV cache or reuses the ring.
  size_t k = 0;
  std::vector<Running*> finished;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].sample == model::LogitRows::kNone) continue;
    Running& r = *owners[i];
    if (want_logprobs && r.task.top_logprobs >= 0) {
      r.first_token_logprobs = step_logprobs.Row(static_cast<int64_t>(k), r.task.top_logprobs);
    }
    r.first_token = (*next)[k++];
    Finish(r, r.transfer_status);
    finished.push_back(&r);
  }
  std::erase_if(running_, [&](const std::unique_ptr<Running>& r) {
    return std::find(finished.begin(), finished.end(), r.get()) != finished.end();
  });
}

void PrefillEngine::Finish(Running& r, absl::Status status) {
  const PrefillTask& task = r.task;
  PrefillResult result;
  if (status.ok() && r.session != nullptr) {
    const absl::Duration left = task.deadline - absl::Now();
    status = r.session->Flush(left > absl::ZeroDuration() ? left : absl::Milliseconds(1));
    result.transfer_seconds = absl::ToDoubleSeconds(absl::Now() - r.first_put);
    result.transferred_bytes = r.session->bytes_transferred();
    if (ring_ != nullptr && r.lane_idx >= 0) {
      result.staged = true;
      result.staging_copy_seconds = absl::ToDoubleSeconds(ring_->copy_time(r.lane_idx));
    }
  }
  // Destroying the session closes the endpoint: no PUT of ours lands after this point.
  r.session.reset();
  if (status.ok()) {
    result.first_token = r.first_token;
    result.first_token_logprobs = r.first_token_logprobs;
    result.cached_tokens = r.seq.num_cached_prompt_tokens;
    result.computed_tokens = static_cast<int>(task.prompt.size()) - result.cached_tokens;
    result.attention_density = r.seq.prefill_attention_density();
  }
  runner_->Release(r.seq);  // the blocks stay in the local prefix cache
  if (r.admitted != absl::InfinitePast()) {
    result.prefill_seconds = absl::ToDoubleSeconds(absl::Now() - r.admitted);
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = in_flight_.find(task.request_id);
    if (it != in_flight_.end() && --it->second == 0) in_flight_.erase(it);
  }
  if (!status.ok()) {
    if (status.code() != absl::StatusCode::kCancelled) {
      SS_LOG_WARNING("request {}: prefill failed: {}", task.request_id, status.ToString());
    }
    r.done(status);
    return;
  }
  r.done(result);
}

}  // namespace sparseserve::prefill
