#include "common/engine/generator.h"

#include <chrono>
#include <deque>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/engine/model_draft.h"
#include "common/engine/speculative_sequence.h"
#include "common/sampling/sampler.h"
#include "common/tokenizer/streaming_decoder.h"
#include "kernels/sampling_plan.h"

namespace sparseserve::engine {

absl::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kContextFull: return "context_full";
    case FinishReason::kAborted: return "aborted";
  }
  return "?";
}

absl::StatusOr<GenerationResult> Generator::Generate(const GenerationRequest& request,
                                                     const TokenCallback& on_token) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  auto seconds_since_start = [&] {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  SS_RETURN_IF_ERROR(sampling::Validate(request.sampling));
  if (request.max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens must be >= 1, got ", request.max_tokens));
  }
  GenerationResult result;
  if (!request.prompt_tokens.empty()) {
    result.prompt_tokens = request.prompt_tokens;
  } else {
    if (request.prompt.empty()) return absl::InvalidArgumentError("empty prompt");
    SS_ASSIGN_OR_RETURN(result.prompt_tokens, tokenizer_->Encode(request.prompt, true));
  }
  for (int32_t t : result.prompt_tokens) {
    if (t < 0 || t >= runner_->config().vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt token id ", t, " outside the ", "vocabulary of ", runner_->config().vocab_size));
    }
  }

  SS_RETURN_IF_ERROR(Validate(request.options));
  SS_ASSIGN_OR_RETURN(const kernels::AttentionPattern prefill_pattern,
                      runner_->PrefillPattern(request.options.prefill,
                                              static_cast<int64_t>(result.prompt_tokens.size())));
  SS_ASSIGN_OR_RETURN(const kernels::AttentionPattern decode_pattern,
                      runner_->DecodePattern(request.options.decode));

  sampling::Sampler sampler(request.sampling);
  std::vector<int32_t> history = result.prompt_tokens;  // for the repetition penalty
  // Every token, the first included, is picked on the backend from the sequence's one random
  // stream (Backend::Sample).
  kernels::SamplingBatch next_sampling;
  auto next_row = [&] {
    next_sampling.penalized_ids.clear();
    next_sampling.rows = {sampler.NextRow(history, &next_sampling.penalized_ids)};
    next_sampling.penalized_begin = {0, static_cast<int32_t>(next_sampling.penalized_ids.size())};
  };
  SequenceKv seq;
  next_row();
  SS_ASSIGN_OR_RETURN(int32_t token, runner_->PrefillSampled(result.prompt_tokens, seq,
                                                             next_sampling, prefill_pattern));
  result.num_cached_prompt_tokens = seq.num_cached_prompt_tokens;
  result.prefill_attention_density = seq.prefill_attention_density();
  // Only generated tokens go through it: the first one keeps its leading space.
  tokenizer::StreamingDecoder decoder(*tokenizer_, /*at_sequence_start=*/false);
  std::unique_ptr<SpeculativeSequence> spec;
  if (request.options.spec.method != SpecMethod::kNone) {
    absl::StatusOr<std::unique_ptr<SpeculativeSequence>> created =
        SpeculativeSequence::Create(request.options.spec, *runner_);
    if (!created.ok()) {
      runner_->Release(seq);
      return created.status();
    }
    spec = std::move(*created);
    if (spec->drafts_from_last_step()) {  // the prompt's last row drafts the first step
      const HeadDraftJob job{spec.get(), -1, history, absl::MakeConstSpan(&token, 1), &sampler};
      if (absl::Status s = DraftFromLastStep(*runner_, absl::MakeConstSpan(&job, 1)); !s.ok()) {
        runner_->Release(seq);
        return s;
      }
    }
  }
  // Tokens a speculative step emitted that are not handed out yet (the first is `token`).
  std::deque<int32_t> emitted;
  absl::Status status;
  while (true) {
    if (result.output_tokens.empty()) result.time_to_first_token_s = seconds_since_start();
    if (!request.ignore_eos && tokenizer_->IsEndOfGeneration(token)) {
      result.finish_reason = FinishReason::kStop;
      break;
    }
    result.output_tokens.push_back(token);
    history.push_back(token);
    const std::string delta = decoder.Push(token);
    result.text += delta;
    if (on_token) on_token(token, delta);
    const int produced = static_cast<int>(result.output_tokens.size());
    if (produced >= request.max_tokens) {
      result.finish_reason = FinishReason::kLength;
      break;
    }
    // The context is full when every token so far but the last is in the KV cache: counted on
    // the history, since a speculative step commits the KV of tokens not handed out yet.
    if (static_cast<int>(history.size()) > runner_->max_context()) {
      result.finish_reason = FinishReason::kContextFull;
      break;
    }
    if (!emitted.empty()) {
      token = emitted.front();
      emitted.pop_front();
      continue;
    }
    const int committed = static_cast<int>(seq.tokens.size());
    StepRows rows;
    ++result.decode_steps;
    if (spec == nullptr) {
      next_row();
      rows.seq = &seq;
      rows.tokens = {token};
      rows.pattern = decode_pattern;
      absl::StatusOr<std::vector<int32_t>> next =
          runner_->Step(absl::MakeConstSpan(&rows, 1), next_sampling);
      if (!next.ok()) {
        status = next.status();
        break;
      }
      token = next->front();
      continue;
    }
    // Speculative: the draft rows must fit the context beside the root, and no deeper draft
    // than the tokens still wanted after the root's.
    const int room = runner_->max_context() - committed - 1;
    const int wanted = request.max_tokens - produced - 1;
    const DraftRoom draft_room{spec.get(), room, wanted};
    const int depth = PickDraftDepths(step_cost_, absl::MakeConstSpan(&draft_room, 1), 1)[0];
    if (spec->drafts_on_model() && depth > 0) {
      const ModelDraftJob job{spec.get(), &seq, history, &sampler, depth};
      if (absl::Status drafted =
              RunModelDrafts(*runner_, absl::MakeConstSpan(&job, 1), &step_cost_);
          !drafted.ok()) {
        status = drafted;
        break;
      }
    }
    const Clock::time_point step_start = Clock::now();  // the draft passes are priced apart
    kernels::SamplingBatch sampling;
    spec->Plan(depth, history, &seq, decode_pattern, sampler, &rows, &sampling);
    StepDraftHeads heads(step_cost_);  // TokenSwift without a draft pass reads them in the step
    heads.Add(spec.get(), 0, static_cast<int32_t>(rows.tokens.size()));
    absl::StatusOr<std::vector<int32_t>> next =
        runner_->Step(absl::MakeConstSpan(&rows, 1), sampling, nullptr, heads.pass());
    if (!next.ok()) {
      spec->Abandon();
      status = next.status();
      break;
    }
    absl::StatusOr<SpecStepResult> done = spec->Finish(*next, *runner_, seq, sampler);
    if (!done.ok()) {
      status = done.status();
      break;
    }
    heads.Deliver(spec.get(), done->emitted_rows.back(),
                  static_cast<int64_t>(history.size() + done->emitted.size()));
    RecordStepCost(*runner_, absl::MakeConstSpan(&rows, 1),
                   std::chrono::duration<double>(Clock::now() - step_start).count(), step_cost_);
    result.spec_draft_tokens += done->drafted;
    result.spec_accepted_tokens += done->accepted;
    emitted.assign(done->emitted.begin() + 1, done->emitted.end());
    token = done->emitted.front();
  }
  result.decode_attention_density = seq.decode_attention_density();
  result.selection_cache_hits = seq.selection_cache_hits;
  result.selection_cache_queries = seq.selection_cache_queries;
  result.peak_kv_blocks = seq.peak_blocks;
  runner_->Release(seq);
  SS_RETURN_IF_ERROR(status);
  const std::string tail = decoder.Flush();
  result.text += tail;
  if (on_token && !tail.empty()) on_token(-1, tail);
  result.total_s = seconds_since_start();
  return result;
}

}  // namespace sparseserve::engine
