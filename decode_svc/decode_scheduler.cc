#include "decode_svc/decode_scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/core/logging.h"
#include "common/core/move_matching.h"
#include "common/core/status.h"
#include "common/engine/kv_block_copy.h"
#include "common/engine/model_draft.h"
#include "common/engine/request_options.h"
#include "common/engine/speculative_sequence.h"
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
  // A local prefill in progress: `input` (the prompt, plus the tokens generated before a
  // preemption) is computed chunk by chunk; seq.tokens holds what is done.
  bool prefilling = false;
  std::vector<int32_t> input;
  kernels::AttentionPattern prefill_pattern, decode_pattern;  // from job.options
  // The next token's sampling row (its draw taken) and penalised ids, drawn once per token: a
  // step that fails for want of blocks, or the recompute after a preemption, reuses them, so the
  // random stream does not depend on pool pressure.
  std::optional<kernels::SamplingRow> pending_row;
  std::vector<int32_t> pending_penalized_ids;
  // Its speculative decoding (job.options.spec), or null for plain decoding. Decode steps go
  // through it (it takes the draws; pending_row is for the prompt's first token only).
  std::unique_ptr<engine::SpeculativeSequence> spec;

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
      eos_(options_.eos_ids.begin(), options_.eos_ids.end()) {
  if (options_.metrics != nullptr) {
    // The shadow-dense monitor's errors (--shadow-dense-rate) of every step, local prefill chunks
    // included, go to sparseserve_sparse_attention_error{role="decode", method}. Set before the
    // engine thread starts: it is the one that calls the observer.
    runner_->set_shadow_error_observer(
        [metrics = options_.metrics](absl::Span<const model::ShadowAttentionError> errors) {
          for (const model::ShadowAttentionError& e : errors) {
            metrics->sparse_attention_error(engine::AttentionMethodKindName(e.method))
                .Observe(e.relative_l2);
          }
        });
    runner_->set_allreduce_observer([metrics = options_.metrics](double seconds) {
      metrics->tp_allreduce_time().Observe(seconds);
    });
  }
  engine_ = std::thread([this] { EngineLoop(); });
}

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
  if (job.top_logprobs < -1 || job.top_logprobs > kernels::kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("top_logprobs ", job.top_logprobs,
                                                   " outside [0, ", kernels::kMaxTopLogprobs, "]"));
  }
  if (absl::Status s = sampling::Validate(job.sampling); !s.ok()) return s;
  if (absl::Status s = engine::Validate(job.options); !s.ok()) return s;
  if (job.sink == nullptr) return absl::InvalidArgumentError("no sink");
  auto r = std::make_unique<Running>();
  absl::StatusOr<kernels::AttentionPattern> prefill_pattern =
      runner_->PrefillPattern(job.options.prefill, static_cast<int64_t>(job.prompt.size()));
  if (!prefill_pattern.ok()) return prefill_pattern.status();
  absl::StatusOr<kernels::AttentionPattern> decode_pattern =
      runner_->DecodePattern(job.options.decode);
  if (!decode_pattern.ok()) return decode_pattern.status();
  r->prefill_pattern = *std::move(prefill_pattern);
  r->decode_pattern = *std::move(decode_pattern);
  if (job.options.spec.method != engine::SpecMethod::kNone) {
    absl::StatusOr<std::unique_ptr<engine::SpeculativeSequence>> spec =
        engine::SpeculativeSequence::Create(job.options.spec, *runner_);
    if (!spec.ok()) return spec.status();
    r->spec = *std::move(spec);
  }
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
    if (!running_.empty()) EngineStep();
  }
}

void DecodeScheduler::ApplyAborts() {
  absl::flat_hash_set<std::string> aborts;
  std::vector<std::unique_ptr<Running>> aborted;
  auto is_aborted = [&aborts](const std::unique_ptr<Running>& r) {
    return aborts.contains(r->job.request_id);
  };
  {
    absl::MutexLock lock(&mu_);
    if (aborts_.empty()) return;
    aborts.swap(aborts_);
    core::MoveMatching(waiting_, aborted, is_aborted);
  }
  core::MoveMatching(running_, aborted, is_aborted);
  for (auto& r : aborted) Finish(*r, absl::OkStatus(), engine::FinishReason::kAborted);
  absl::MutexLock lock(&mu_);
  num_running_ = static_cast<int>(running_.size());
}

void DecodeScheduler::AdmitWaiting() {
  const int cap = std::max(1, std::min(options_.max_running, options_.max_step_tokens));
  while (static_cast<int>(running_.size()) < cap) {
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

int DecodeScheduler::BlocksReserved() const {
  int blocks = 0;
  for (const auto& r : running_) {
    if (!r->prefilling) {
      ++blocks;  // a decoding sequence may start a new block next step
      continue;
    }
    const int hold =
        runner_->BlocksToHold(static_cast<int>(r->input.size()) + 1, options_.prefill_chunk);
    const int held = static_cast<int>(r->seq.block_ids.size()) - r->seq.released_blocks;
    blocks += std::max(0, hold - held);
  }
  return blocks;
}

bool DecodeScheduler::AdmitOne(std::unique_ptr<Running>& r) {
  DecodeJob& job = r->job;
  if (!job.prefilled_kv.empty()) {
    absl::Status s = CopyStagedKv(job, job.prefilled_kv.block_ids());
    if (s.ok()) s = runner_->AdoptPrefilledKv(job.prompt, std::move(job.prefilled_kv), r->seq);
    if (!s.ok()) {
      Finish(*r, s, engine::FinishReason::kAborted);  // the lease returns the blocks
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
                        absl::ToDoubleSeconds(absl::Now() - r->enqueued), 1.0);
    }
    running_.push_back(std::move(r));
    return true;
  }
  // A local prefill. After a preemption the tokens generated so far are recomputed with the
  // prompt. It is admitted while the pool can hold it beside what the running sequences will
  // take (the rest of their prompts, a block per decoder), so admitting it cannot make a step
  // fail for blocks and preempt it again at once; when nothing runs it either fits or fails
  // alone.
  r->input = job.prompt;
  r->input.insert(r->input.end(), r->generated.begin(), r->generated.end());
  const int needed =
      runner_->BlocksToHold(static_cast<int>(r->input.size()) + 1, options_.prefill_chunk);
  if (!running_.empty() && runner_->pool().num_free_blocks() < BlocksReserved() + needed) {
    return false;  // wait for running sequences to free blocks
  }
  absl::StatusOr<int> cached =
      runner_->BeginPrefill(r->input, r->seq, r->prefill_pattern, options_.prefill_chunk);
  if (!cached.ok()) {
    Finish(*r, cached.status(), engine::FinishReason::kAborted);
    return true;
  }
  r->prefilling = true;
  running_.push_back(std::move(r));
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
    // Scattered into every tensor-parallel rank's slice of the heads (one rank: a plain copy).
    SS_RETURN_IF_ERROR(runner_->CopyKvFromHost(l, area.layer(l), staging_ids, pool_ids));
  }
  if (options_.metrics != nullptr) {
    options_.metrics->kv_staging_copy_time().Observe(absl::ToDoubleSeconds(absl::Now() - start));
  }
  return absl::OkStatus();
}

bool DecodeScheduler::Emit(Running& r, int32_t token, const model::StepLogprobs* logprobs,
                           int64_t row) {
  const DecodeJob& job = r.job;
  const bool stop_token = std::find(job.stop_token_ids.begin(), job.stop_token_ids.end(), token) !=
                          job.stop_token_ids.end();
  if (stop_token || (!job.ignore_eos && eos_.contains(token))) {
    Finish(r, absl::OkStatus(), engine::FinishReason::kStop);
    return false;
  }
  r.generated.push_back(token);
  r.history.push_back(token);
  if (logprobs != nullptr && job.top_logprobs >= 0 && row >= 0 && row < logprobs->rows()) {
    const model::TokenLogprobs lp = logprobs->Row(row, job.top_logprobs);
    job.sink->OnToken(token, &lp);
  } else {
    job.sink->OnToken(token, nullptr);
  }
  if (static_cast<int>(r.generated.size()) >= job.max_tokens) {
    Finish(r, absl::OkStatus(), engine::FinishReason::kLength);
    return false;
  }
  // Every token but the last is in the KV cache when decoding plainly; counted on the history,
  // since a speculative step commits the KV of tokens not emitted yet.
  if (static_cast<int>(r.history.size()) >= runner_->max_context()) {
    Finish(r, absl::OkStatus(), engine::FinishReason::kContextFull);
    return false;
  }
  r.next_token = token;
  return true;
}

void DecodeScheduler::EngineStep() {
  // Decode rows first (every decoding sequence's root row, and the drafts of those that
  // speculate), then prefill chunks in admission order while the budget lasts. Each row that ends
  // a prompt, and every decode row, gets its token sampled on the backend with the sequence's own
  // draws. Drafts take what the roots and chunks leave of the budget, of the context and of the
  // free KV blocks, so speculation never delays a prompt or preempts a sequence.
  absl::Time step_start = absl::Now();
  int budget = options_.max_step_tokens;
  std::vector<engine::StepRows> rows;
  std::vector<Running*> owners;
  kernels::SamplingBatch sampling;
  sampling.penalized_begin.push_back(0);
  auto add_sampling_row = [&](Running& r) {
    sampling.rows.push_back(r.PendingRow());
    sampling.penalized_ids.insert(sampling.penalized_ids.end(), r.pending_penalized_ids.begin(),
                                  r.pending_penalized_ids.end());
    sampling.penalized_begin.push_back(static_cast<int32_t>(sampling.penalized_ids.size()));
  };
  std::vector<Running*> decoders;
  for (auto& r : running_) {
    if (!r->prefilling && static_cast<int>(decoders.size()) < budget) decoders.push_back(r.get());
  }
  budget -= static_cast<int>(decoders.size());
  // The prompt chunks this step takes (planned first: drafts get what they leave).
  std::vector<std::pair<Running*, int>> chunks;
  for (auto& r : running_) {
    if (!r->prefilling || budget == 0) continue;
    const int done = static_cast<int>(r->seq.tokens.size());
    const int total = static_cast<int>(r->input.size());
    const int len = engine::PrefillChunkLength(done, total, options_.prefill_chunk, budget);
    chunks.emplace_back(r.get(), len);
    budget -= len;
  }
  const std::vector<int> depths = DraftDepths(decoders, chunks, budget);
  // Sparse self-speculation drafts with forward passes of the model, batched, before the step.
  std::vector<engine::ModelDraftJob> model_drafts;
  for (size_t i = 0; i < decoders.size(); ++i) {
    Running& r = *decoders[i];
    if (r.spec != nullptr && r.spec->drafts_on_model() && depths[i] > 0) {
      model_drafts.push_back({r.spec.get(), &r.seq, r.history, r.sampler.get(), depths[i]});
    }
  }
  if (!model_drafts.empty()) {
    if (absl::Status s = engine::RunModelDrafts(*runner_, model_drafts, &step_cost_); !s.ok()) {
      SS_LOG_WARNING("model draft passes failed; verifying what they drafted: {}", s.ToString());
    }
    step_start = absl::Now();  // the draft passes are priced apart (StepCostModel)
  }
  bool has_decode = false, has_prefill = false;
  std::vector<Running*> planned;  // speculating sequences whose step was planned
  // TokenSwift without a draft pass reads its next draft in the step (the rows' token offsets).
  engine::StepDraftHeads heads(step_cost_);
  int32_t token_rows_planned = 0;
  for (size_t i = 0; i < decoders.size(); ++i) {
    Running& r = *decoders[i];
    engine::StepRows row;
    if (r.spec != nullptr) {
      r.spec->Plan(depths[i], r.history, &r.seq, r.decode_pattern, *r.sampler, &row, &sampling);
      planned.push_back(&r);
      heads.Add(r.spec.get(), token_rows_planned, static_cast<int32_t>(row.tokens.size()));
    } else {
      row.seq = &r.seq;
      row.tokens = {r.next_token};
      row.pattern = r.decode_pattern;
      add_sampling_row(r);
    }
    token_rows_planned += static_cast<int32_t>(row.tokens.size());
    rows.push_back(std::move(row));
    owners.push_back(&r);
    has_decode = true;
  }
  for (auto [r, len] : chunks) {
    const int done = static_cast<int>(r->seq.tokens.size());
    engine::StepRows row;
    row.seq = &r->seq;
    row.tokens.assign(r->input.begin() + done, r->input.begin() + done + len);
    row.pattern = r->prefill_pattern;
    row.prompt = true;
    const bool last_chunk = done + len == static_cast<int>(r->input.size());
    row.sample = last_chunk ? model::LogitRows::kLast : model::LogitRows::kNone;
    if (last_chunk) add_sampling_row(*r);
    if (last_chunk && r->spec != nullptr)
      heads.AddPromptEnd(r->spec.get(), token_rows_planned + len - 1);
    token_rows_planned += len;
    rows.push_back(std::move(row));
    owners.push_back(r);
    has_prefill = true;
  }
  // Log probabilities only when a sampled row's request asked for them (one more small kernel).
  model::StepLogprobs step_logprobs;
  bool want_logprobs = false;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].sample == model::LogitRows::kNone || owners[i]->job.top_logprobs < 0) continue;
    want_logprobs = true;
    step_logprobs.top_n = std::max(step_logprobs.top_n, owners[i]->job.top_logprobs);
  }
  model::StepLogprobs* logprobs = want_logprobs ? &step_logprobs : nullptr;
  absl::StatusOr<std::vector<int32_t>> next =
      runner_->Step(rows, sampling, nullptr, heads.pass(), logprobs);
  if (!next.ok()) {
    for (Running* r : planned) r->spec->Abandon();
  }
  if (next.status().code() == absl::StatusCode::kResourceExhausted && running_.size() > 1) {
    Preempt(*running_.back());  // newest first, as vLLM does; retried next iteration
    running_.pop_back();
  } else if (!next.ok()) {
    SS_LOG_ERROR("engine step failed: {}", next.status().ToString());
    for (Running* r : owners) Finish(*r, next.status(), engine::FinishReason::kAborted);
    std::erase_if(running_, [&](const std::unique_ptr<Running>& r) {
      return std::find(owners.begin(), owners.end(), r.get()) != owners.end();
    });
  } else {
    if (options_.metrics != nullptr) {
      (has_decode && has_prefill ? options_.metrics->engine_steps_mixed()
       : has_decode              ? options_.metrics->engine_steps_decode()
                                 : options_.metrics->engine_steps_prefill())
          .Increment();
      options_.metrics->engine_step_sequences().Observe(static_cast<double>(rows.size()));
      const engine::ModelRunner::SelectionCacheCounts counts = runner_->selection_cache_counts();
      options_.metrics->selection_cache_hits().Increment(counts.hits - counted_selection_.hits);
      options_.metrics->selection_cache_queries().Increment(counts.queries -
                                                            counted_selection_.queries);
      counted_selection_ = counts;
    }
    size_t k = 0;
    std::vector<Running*> finished;
    for (size_t i = 0; i < rows.size(); ++i) {
      Running& r = *owners[i];
      if (rows[i].sample == model::LogitRows::kNone) continue;  // a prompt's middle chunk
      const size_t sampled = rows[i].sample == model::LogitRows::kAll ? rows[i].tokens.size() : 1;
      const absl::Span<const int32_t> tokens = absl::MakeConstSpan(*next).subspan(k, sampled);
      const int64_t first_row = static_cast<int64_t>(k);
      k += sampled;
      if (!r.prefilling && r.spec != nullptr) {
        absl::StatusOr<engine::SpecStepResult> done =
            r.spec->Finish(tokens, *runner_, r.seq, *r.sampler);
        if (!done.ok()) {
          Finish(r, done.status(), engine::FinishReason::kAborted);
          finished.push_back(&r);
          continue;
        }
        CountSpeculation(r, *done);
        bool running = true;
        for (size_t j = 0; j < done->emitted.size() && running; ++j) {
          const int64_t row =
              j < done->emitted_rows.size() ? first_row + done->emitted_rows[j] : -1;
          running = Emit(r, done->emitted[j], logprobs, row);
        }
        if (!running) {
          finished.push_back(&r);
        } else {  // r.history ends with the emitted tokens
          heads.Deliver(r.spec.get(), done->emitted_rows.back(),
                        static_cast<int64_t>(r.history.size()));
        }
        continue;
      }
      const int32_t token = tokens.front();
      r.pending_row.reset();
      if (r.prefilling) {  // the prompt is done: this is its first token
        r.prefilling = false;
        r.input.clear();
        if (!r.started) {
          r.started = true;
          r.job.sink->OnStart(r.seq.num_cached_prompt_tokens,
                              absl::ToDoubleSeconds(absl::Now() - r.enqueued),
                              r.seq.prefill_attention_density());
        }
      }
      if (!Emit(r, token, logprobs, first_row)) {
        finished.push_back(&r);
      } else if (rows[i].prompt && r.spec != nullptr) {
        // The prompt's last row sampled the first token: its heads draft the first step.
        heads.Deliver(r.spec.get(), 0, static_cast<int64_t>(r.history.size()));
      }
    }
    engine::RecordStepCost(*runner_, rows, absl::ToDoubleSeconds(absl::Now() - step_start),
                           step_cost_);
    std::erase_if(running_, [&](const std::unique_ptr<Running>& r) {
      return std::find(finished.begin(), finished.end(), r.get()) != finished.end();
    });
  }
  absl::MutexLock lock(&mu_);
  num_running_ = static_cast<int>(running_.size());
}

std::vector<int> DecodeScheduler::DraftDepths(absl::Span<Running* const> decoders,
                                              absl::Span<const std::pair<Running*, int>> chunks,
                                              int budget) const {
  std::vector<int> depths(decoders.size(), 0);
  // Blocks the step may take beyond what the running sequences have reserved.
  const int bt = runner_->block_tokens();
  int spare_blocks = runner_->pool().num_free_blocks() - BlocksReserved();
  int base_rows = static_cast<int>(decoders.size());
  for (const auto& [r, len] : chunks) base_rows += len;
  std::vector<size_t> which;  // decoders[which[j]] is rooms[j]
  std::vector<engine::DraftRoom> rooms;
  for (size_t i = 0; i < decoders.size(); ++i) {
    const Running& r = *decoders[i];
    if (r.spec == nullptr) continue;
    const int committed = static_cast<int>(r.seq.tokens.size());
    which.push_back(i);
    rooms.push_back({r.spec.get(), std::min(budget, runner_->max_context() - committed - 1),
                     r.job.max_tokens - static_cast<int>(r.generated.size()) - 1});
  }
  if (which.empty()) return depths;
  std::vector<spec::DraftOption> options;
  const std::vector<int> chosen = engine::PickDraftDepths(step_cost_, rooms, base_rows, &options,
                                                          runner_->replays_step_graphs());
  // Within the budget and the spare blocks, in admission order.
  for (size_t j = 0; j < which.size(); ++j) {
    int depth = chosen[j];
    const Running& r = *decoders[which[j]];
    const int committed = static_cast<int>(r.seq.tokens.size());
    const int have =
        std::max(static_cast<int>(r.seq.block_ids.size()), (committed + 1 + bt - 1) / bt);
    while (depth > 0) {
      const int rows = options[j].rows_at[depth - 1];
      const int blocks = (committed + 1 + rows + bt - 1) / bt - have;
      if (rows <= budget && blocks <= spare_blocks) {
        budget -= rows;
        spare_blocks -= blocks;
        break;
      }
      --depth;
    }
    depths[which[j]] = depth;
  }
  return depths;
}

void DecodeScheduler::CountSpeculation(const Running& r, const engine::SpecStepResult& step) {
  if (options_.metrics == nullptr || step.drafted == 0) return;
  const absl::string_view method = engine::SpecMethodName(r.spec->method());
  metrics::ServingMetrics& m = *options_.metrics;
  m.spec_decode_draft_tokens(method).Increment(step.drafted);
  prometheus::Counter& accepted = m.spec_decode_accepted_tokens(method);
  accepted.Increment(step.accepted);
  for (int p = 0; p < step.accepted; ++p) {
    m.spec_decode_accepted_tokens_per_position(method, p).Increment();
  }
  prometheus::Counter& steps = m.spec_decode_verify_steps(method);
  steps.Increment();
  m.spec_decode_mean_accepted_length(method).Set(accepted.Value() / steps.Value());
}

void DecodeScheduler::Preempt(Running& r) {
  SS_LOG_INFO("request {}: preempted (KV pool full), will recompute {} tokens", r.job.request_id,
              r.job.prompt.size() + r.generated.size());
  runner_->Release(r.seq);
  r.prefilling = false;
  r.input.clear();
  absl::MutexLock lock(&mu_);
  // Requeued at the front so it resumes first; its sink keeps streaming afterwards.
  auto requeued = std::make_unique<Running>(std::move(r));
  waiting_.push_front(std::move(requeued));
}

void DecodeScheduler::Finish(Running& r, const absl::Status& status, engine::FinishReason reason) {
  DecodeWork work;
  work.attention_density = r.seq.decode_attention_density();
  work.selection_cache_hits = r.seq.selection_cache_hits;
  work.selection_cache_queries = r.seq.selection_cache_queries;
  runner_->Release(r.seq);
  r.job.prefilled_kv.Release();
  r.job.staged_kv.Reset();
  r.job.sink->OnFinish(status, reason, work);
  absl::MutexLock lock(&mu_);
  in_flight_.erase(r.job.request_id);
}

}  // namespace sparseserve::decode
