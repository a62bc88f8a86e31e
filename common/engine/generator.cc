#include "common/engine/generator.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/sampling/sampler.h"
#include "common/tokenizer/streaming_decoder.h"

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

  SequenceKv seq;
  SS_ASSIGN_OR_RETURN(Tensor logits, runner_->Prefill(result.prompt_tokens, seq));
  result.num_cached_prompt_tokens = seq.num_cached_prompt_tokens;
  sampling::Sampler sampler(request.sampling);
  // Only generated tokens go through it: the first one keeps its leading space.
  tokenizer::StreamingDecoder decoder(*tokenizer_, /*at_sequence_start=*/false);
  std::vector<int32_t> history = result.prompt_tokens;  // for the repetition penalty
  const int vocab = runner_->config().vocab_size;
  absl::Status status;
  const bool greedy = sampling::IsPlainGreedy(request.sampling);
  int32_t greedy_next = -1;  // after the first token of a greedy run: picked on the backend
  while (true) {
    const int32_t token =
        greedy_next >= 0 ? greedy_next : sampler.Sample(logits.data<float>(), vocab, history);
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
    if (static_cast<int>(result.output_tokens.size()) >= request.max_tokens) {
      result.finish_reason = FinishReason::kLength;
      break;
    }
    if (static_cast<int>(seq.tokens.size()) + 1 > runner_->max_context()) {
      result.finish_reason = FinishReason::kContextFull;
      break;
    }
    if (greedy) {
      absl::StatusOr<std::vector<int32_t>> next = runner_->DecodeGreedy({&seq}, {token});
      if (!next.ok()) {
        status = next.status();
        break;
      }
      greedy_next = next->front();
      continue;
    }
    absl::StatusOr<Tensor> next = runner_->Decode({&seq}, {token});
    if (!next.ok()) {
      status = next.status();
      break;
    }
    logits = *std::move(next);
  }
  runner_->Release(seq);
  SS_RETURN_IF_ERROR(status);
  const std::string tail = decoder.Flush();
  result.text += tail;
  if (on_token && !tail.empty()) on_token(-1, tail);
  result.total_s = seconds_since_start();
  return result;
}

}  // namespace sparseserve::engine
