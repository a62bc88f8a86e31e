// Generator: runs one request from prompt text to finished continuation on a ModelRunner —
// tokenize, prefill, sample, decode, stream text — and measures it.
//
// The offline `sparseserve generate` uses it directly; the serving path batches many sequences
// in the decode worker instead. Not thread-safe: one request at a time on one engine thread.
#ifndef SPARSESERVE_COMMON_ENGINE_GENERATOR_H_
#define SPARSESERVE_COMMON_ENGINE_GENERATOR_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/engine/model_runner.h"
#include "common/engine/request_options.h"
#include "common/sampling/sampling_params.h"
#include "common/spec/draft_length_controller.h"
#include "common/tokenizer/tokenizer.h"

namespace sparseserve::engine {

struct GenerationRequest {
  std::string prompt;                  // text; tokenized with BOS per the tokenizer
  std::vector<int32_t> prompt_tokens;  // used instead of `prompt` when non-empty
  int max_tokens = 256;                // new tokens at most
  bool ignore_eos = false;             // keep going past end-of-generation tokens
  sampling::SamplingParams sampling;
  RequestOptions options;  // attention methods and speculation
};

enum class FinishReason { kLength, kStop, kContextFull, kAborted };
absl::string_view FinishReasonName(FinishReason reason);

struct GenerationResult {
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> output_tokens;
  std::string text;  // the decoded continuation
  FinishReason finish_reason = FinishReason::kLength;
  int num_cached_prompt_tokens = 0;
  // The fraction of dense attention work its prefill computed (1 for dense; MInference measures
  // it over the chunks it computed, the prefix-cache hit excluded).
  double prefill_attention_density = 1.0;
  // The same for its generated tokens (1 for dense; TokenSelect measures it), and TokenSelect's
  // selection-cache hits and queries summed over steps and layers.
  double decode_attention_density = 1.0;
  double selection_cache_hits = 0;
  double selection_cache_queries = 0;
  // Speculative decoding (options.spec): decode steps run, draft tokens verified and accepted.
  int decode_steps = 0;
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  // The most KV blocks the sequence held at once (bounded by the window under rolling KV).
  int peak_kv_blocks = 0;
  double time_to_first_token_s = 0;  // from the call to the first sampled token
  double total_s = 0;
};

// Called for every new token with the text it completes (may be empty while a multi-byte
// character is still incomplete).
using TokenCallback = std::function<void(int32_t token, absl::string_view text_delta)>;

class Generator {
 public:
  // Both borrowed; must outlive the generator.
  Generator(ModelRunner* runner, const tokenizer::Tokenizer* tokenizer)
      : runner_(runner), tokenizer_(tokenizer) {}

  // kInvalidArgument for an empty prompt, one that fills the context, bad sampling parameters
  // or max_tokens < 1; errors of the runner otherwise. The KV blocks are released either way.
  absl::StatusOr<GenerationResult> Generate(const GenerationRequest& request,
                                            const TokenCallback& on_token = nullptr);

 private:
  ModelRunner* runner_;
  const tokenizer::Tokenizer* tokenizer_;
  // Measured step times by rows, for the speculation controller: kept across requests.
  spec::StepCostModel step_cost_;
};

}  // namespace sparseserve::engine

#endif  // SPARSESERVE_COMMON_ENGINE_GENERATOR_H_
