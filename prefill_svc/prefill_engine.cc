#include "prefill_svc/prefill_engine.h"

#include "absl/strings/str_cat.h"
#include "common/core/logging.h"
#include "common/core/status.h"
#include "common/sampling/sampler.h"

namespace sparseserve::prefill {

PrefillEngine::PrefillEngine(engine::ModelRunner* runner, transfer::KvTransferSource* source,
                             KvStagingRing* ring, int max_queued, absl::Duration put_delay)
    : runner_(runner),
      source_(source),
      ring_(ring),
      max_queued_(max_queued),
      put_delay_(put_delay),
      engine_([this] { EngineLoop(); }) {}

PrefillEngine::~PrefillEngine() {
  std::deque<Item> left;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  engine_.join();
  {
    absl::MutexLock lock(&mu_);
    left.swap(queue_);
  }
  for (Item& item : left) item.done(absl::CancelledError("prefill worker shutting down"));
}

kv::KvLayout PrefillEngine::layout() const {
  kv::KvLayout layout;
  layout.dtype = runner_->cache().dtype();
  layout.block_tokens = runner_->block_tokens();
  layout.num_layers = runner_->config().num_layers;
  layout.num_kv_heads = runner_->config().num_kv_heads;
  layout.head_dim = runner_->config().head_dim;
  return layout;
}

absl::Status PrefillEngine::Submit(PrefillTask task, PrefillDone done) {
  absl::MutexLock lock(&mu_);
  if (static_cast<int>(queue_.size()) >= max_queued_) {
    return absl::ResourceExhaustedError(absl::StrCat("prefill queue full (", queue_.size(), ")"));
  }
  queue_.push_back({std::move(task), std::move(done)});
  return absl::OkStatus();
}

bool PrefillEngine::Abort(const std::string& request_id) {
  PrefillDone done;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (it->task.request_id == request_id) {
        done = std::move(it->done);
        queue_.erase(it);
        break;
      }
    }
  }
  if (!done) return false;
  done(absl::CancelledError("aborted"));
  return true;
}

int PrefillEngine::num_queued() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queue_.size());
}

void PrefillEngine::EngineLoop() {
  while (true) {
    Item item;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](PrefillEngine* e)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) { return e->stopping_ || !e->queue_.empty(); },
          this));
      if (stopping_) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    item.done(Run(item.task));
  }
}

absl::StatusOr<PrefillResult> PrefillEngine::Run(const PrefillTask& task) {
  const absl::Time start = absl::Now();
  std::unique_ptr<transfer::KvWriteSession> session;
  const PrefillTarget* target = task.target ? &*task.target : nullptr;
  if (target != nullptr) {
    if (source_ == nullptr) {
      return absl::FailedPreconditionError("this prefill worker has no KV transport (UCX off)");
    }
    SS_RETURN_IF_ERROR(kv::CheckCompatible(layout(), target->layout));
    const int needed = (static_cast<int>(task.prompt.size()) + runner_->block_tokens() - 1) /
                       runner_->block_tokens();
    if (static_cast<int>(target->remote_blocks.size()) != needed || target->first_block < 0 ||
        target->first_block > needed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reservation has ", target->remote_blocks.size(), " blocks, the prompt needs ", needed));
    }
    SS_ASSIGN_OR_RETURN(session, source_->Connect(target->pool));
    // The previous request's session is gone: nothing PUT from the ring can still be read.
    if (ring_ != nullptr) ring_->Reset();
  }
  engine::SequenceKv seq;
  absl::Time first_put = absl::InfiniteFuture();
  auto put_layer = [&](int layer) -> absl::Status {
    if (session == nullptr) return absl::OkStatus();
    if (first_put == absl::InfiniteFuture()) first_put = absl::Now();
    const int first = target->first_block;
    const std::vector<int32_t> local(seq.block_ids.begin() + first, seq.block_ids.end());
    const std::vector<int32_t> remote(target->remote_blocks.begin() + first,
                                      target->remote_blocks.end());
    // The call's deadline ends before the reservation's lease (the router sets it so): past it
    // the decode worker may reuse the blocks, so no new PUT may start.
    if (absl::Now() >= task.deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("KV transfer stopped before layer ", layer,
                       ": the request's deadline (bounded by the KV lease) has passed"));
    }
    if (ring_ != nullptr) {
      SS_RETURN_IF_ERROR(ring_->StageAndPut(runner_->backend(), runner_->cache().layer(layer),
                                            layer, local, remote, *session, task.deadline));
    } else {
      SS_RETURN_IF_ERROR(
          session->PutBlocks(layer, runner_->cache().layer(layer).raw_data(), local, remote));
    }
    if (put_delay_ > absl::ZeroDuration()) absl::SleepFor(put_delay_);  // fault injection
    return absl::OkStatus();
  };
  // The first token is sampled on the backend, from the seeded stream the decode worker then
  // continues (it skips this draw).
  sampling::Sampler sampler(task.sampling);
  kernels::SamplingBatch first_row;
  first_row.rows = {sampler.NextRow(task.prompt, &first_row.penalized_ids)};
  first_row.penalized_begin = {0, static_cast<int32_t>(first_row.penalized_ids.size())};
  absl::Status status = engine::Validate(task.options);
  if (status.ok()) status = engine::CheckImplemented(task.options);
  // The hook sees the blocks of `seq` once the step has allocated them (before any forward).
  absl::StatusOr<int32_t> first = absl::UnknownError("not run");
  if (!status.ok()) {
    first = status;
  } else {
    first = runner_->PrefillSampled(task.prompt, seq, first_row,
                                    engine::AttentionPatternOf(task.options.prefill), put_layer);
  }
  PrefillResult result;
  status = first.status();
  if (status.ok() && session != nullptr) {
    const absl::Duration left = task.deadline - absl::Now();
    status = session->Flush(left > absl::ZeroDuration() ? left : absl::Milliseconds(1));
    result.transfer_seconds = absl::ToDoubleSeconds(absl::Now() - first_put);
    result.transferred_bytes = session->bytes_transferred();
    if (ring_ != nullptr) {
      result.staged = true;
      result.staging_copy_seconds = absl::ToDoubleSeconds(ring_->copy_time());
    }
  }
  // Destroying the session closes the endpoint: no PUT of ours lands after this point.
  session.reset();
  if (status.ok()) {
    result.first_token = *first;
    result.cached_tokens = seq.num_cached_prompt_tokens;
    result.computed_tokens = static_cast<int>(task.prompt.size()) - result.cached_tokens;
  }
  runner_->Release(seq);  // the blocks stay in the local prefix cache
  result.prefill_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (!status.ok()) {
    SS_LOG_WARNING("request {}: prefill failed: {}", task.request_id, status.ToString());
    return status;
  }
  return result;
}

}  // namespace sparseserve::prefill
