// `sparseserve generate`: offline generation with streaming output.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "common/core/status.h"
#include "common/engine/generator.h"
#include "common/engine/model_source.h"
#include "common/engine/request_options.h"
#include "kernels/backend.h"
#include "router/generation_client.h"
#include "tools/command.h"
#include "tools/model_flags.h"
#include "tools/request_options_flags.h"
#include "tools/serve_flags.h"

ABSL_FLAG(std::string, prompt, "", "Prompt text (required).");
ABSL_FLAG(int, max_tokens, 256, "Maximum number of new tokens to generate.");
ABSL_FLAG(double, temperature, 1.0, "Sampling temperature; 0 = greedy (argmax).");
ABSL_FLAG(int, top_k, 0, "Keep only the k most likely tokens (0 = off).");
ABSL_FLAG(double, top_p, 1.0, "Nucleus sampling: smallest set with probability >= p (1 = off).");
ABSL_FLAG(double, min_p, 0.0, "Drop tokens with probability < min_p * max probability (0 = off).");
ABSL_FLAG(double, repetition_penalty, 1.0,
          "Penalty > 1 for tokens seen in the penalty window (1 = off; TokenSwift uses 1.2).");
ABSL_FLAG(int, penalty_window, 0,
          "Recent tokens the repetition penalty looks at (0 = whole history; TokenSwift 1024).");
ABSL_FLAG(uint64_t, seed, 0, "Random seed; the same seed gives the same output.");
ABSL_FLAG(bool, ignore_eos, false, "Keep generating past end-of-sequence tokens.");
ABSL_FLAG(std::string, server, "",
          "Router address (host:port): generate through a running server instead of loading "
          "the model in this process (--tls-ca CA.pem: verify a TLS router with it; "
          "$SPARSESERVE_API_KEY: the API key when the router has --api-key-file).");
ABSL_FLAG(double, timeout_seconds, 600, "With --server: deadline of the whole request.");

namespace sparseserve::tools {
namespace {

void PrintSummary(size_t prompt_tokens, int cached, size_t new_tokens, absl::string_view finish,
                  double ttft_s, double total_s) {
  const double decode_s = total_s - ttft_s;
  const size_t decoded = new_tokens == 0 ? 0 : new_tokens - 1;
  std::fprintf(stderr, "%s\n",
               absl::StrFormat("prompt tokens: %d (cached %d), new tokens: %d, finish: %s, "
                               "time to first token: %.2f ms, decode: %.1f tokens/s, "
                               "total: %.3f s",
                               prompt_tokens, cached, new_tokens, finish, ttft_s * 1e3,
                               decode_s > 0 ? decoded / decode_s : 0.0, total_s)
                   .c_str());
}

absl::Status GenerateRemote() {
  v1::GenerateRequest request;
  request.set_text(absl::GetFlag(FLAGS_prompt));
  request.set_max_tokens(absl::GetFlag(FLAGS_max_tokens));
  request.set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  SS_RETURN_IF_ERROR(SetRequestOptionsFromChangedFlags(&request));
  v1::SamplingParams* s = request.mutable_sampling();
  s->set_temperature(static_cast<float>(absl::GetFlag(FLAGS_temperature)));
  s->set_top_k(absl::GetFlag(FLAGS_top_k));
  s->set_top_p(static_cast<float>(absl::GetFlag(FLAGS_top_p)));
  s->set_min_p(static_cast<float>(absl::GetFlag(FLAGS_min_p)));
  s->set_repetition_penalty(static_cast<float>(absl::GetFlag(FLAGS_repetition_penalty)));
  s->set_penalty_window(absl::GetFlag(FLAGS_penalty_window));
  s->set_seed(absl::GetFlag(FLAGS_seed));
  SS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                      ClientCredentialsFromFlags());
  router::GenerationClient client(absl::GetFlag(FLAGS_server), credentials, ApiKeyFromEnv());
  SS_ASSIGN_OR_RETURN(router::RemoteGeneration result,
                      client.Generate(request, absl::Seconds(absl::GetFlag(FLAGS_timeout_seconds)),
                                      [](absl::string_view delta) {
                                        std::fwrite(delta.data(), 1, delta.size(), stdout);
                                        std::fflush(stdout);
                                      }));
  std::fputc('\n', stdout);
  std::fflush(stdout);
  std::string finish = v1::FinishReason_Name(result.finish_reason);
  PrintSummary(result.usage.prompt_tokens(), result.usage.cached_prompt_tokens(),
               result.tokens.size(), finish, result.timings.time_to_first_token_seconds(),
               result.timings.e2e_seconds());
  return absl::OkStatus();
}

// "shadow-dense: ..." on stderr: how many (sequence, layer) calls were shadowed and their
// relative L2 errors against dense attention (mean and max per method).
void PrintShadowSummary(const std::vector<model::ShadowAttentionError>& errors) {
  if (errors.empty()) {
    std::fprintf(stderr, "shadow-dense: no sparse attention call was shadowed\n");
    return;
  }
  struct MethodStats {
    int64_t calls = 0;
    double sum = 0;
    float max = 0;
  };
  std::map<std::string, MethodStats> per_method;
  for (const model::ShadowAttentionError& e : errors) {
    MethodStats& m = per_method[std::string(engine::AttentionMethodKindName(e.method))];
    ++m.calls;
    m.sum += e.relative_l2;
    m.max = std::max(m.max, e.relative_l2);
  }
  for (const auto& [method, m] : per_method) {
    std::fprintf(stderr, "%s\n",
                 absl::StrFormat("shadow-dense: %s, %d calls shadowed, relative L2 error vs dense: "
                                 "mean %.6g, max %.6g",
                                 method, m.calls, m.sum / m.calls, m.max)
                     .c_str());
  }
}

absl::Status Generate() {
  if (absl::GetFlag(FLAGS_prompt).empty()) {
    return absl::InvalidArgumentError("--prompt is required (see --help)");
  }
  if (!absl::GetFlag(FLAGS_server).empty()) return GenerateRemote();
  // Checked before the model loads: a bad flag fails at once.
  SS_ASSIGN_OR_RETURN(const engine::RequestOptions request_options, RequestOptionsFromFlags());
  SS_ASSIGN_OR_RETURN(Device device, DeviceFromFlags());
  SS_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Backend> backend, kernels::CreateBackend(device));
  SS_ASSIGN_OR_RETURN(engine::ModelSource source, engine::OpenModelSource(ModelPathFromFlags()));
  SS_ASSIGN_OR_RETURN(const engine::ModelRunnerOptions options, RunnerOptionsFromFlags());
  SS_ASSIGN_OR_RETURN(std::unique_ptr<engine::ModelRunner> runner,
                      engine::ModelRunner::Create(source, backend.get(), options));

  engine::GenerationRequest request;
  request.prompt = absl::GetFlag(FLAGS_prompt);
  request.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  request.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  request.sampling.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  request.sampling.top_k = absl::GetFlag(FLAGS_top_k);
  request.sampling.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  request.sampling.min_p = static_cast<float>(absl::GetFlag(FLAGS_min_p));
  request.sampling.repetition_penalty = static_cast<float>(absl::GetFlag(FLAGS_repetition_penalty));
  request.sampling.penalty_window = absl::GetFlag(FLAGS_penalty_window);
  request.sampling.seed = absl::GetFlag(FLAGS_seed);
  request.options = request_options;

  // --shadow-dense-rate: the errors the monitor measured, summarised after the output.
  std::vector<model::ShadowAttentionError> shadow_errors;
  runner->set_shadow_error_observer(
      [&shadow_errors](absl::Span<const model::ShadowAttentionError> errors) {
        shadow_errors.insert(shadow_errors.end(), errors.begin(), errors.end());
      });

  engine::Generator generator(runner.get(), source.tokenizer.get());
  SS_ASSIGN_OR_RETURN(engine::GenerationResult result,
                      generator.Generate(request, [](int32_t, absl::string_view delta) {
                        std::fwrite(delta.data(), 1, delta.size(), stdout);
                        std::fflush(stdout);
                      }));
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const double decode_s = result.total_s - result.time_to_first_token_s;
  const size_t decoded = result.output_tokens.empty() ? 0 : result.output_tokens.size() - 1;
  std::fprintf(
      stderr, "%s\n",
      absl::StrFormat("prompt tokens: %d (cached %d), new tokens: %d, finish: %s, "
                      "time to first token: %.2f ms, decode: %.1f tokens/s, "
                      "total: %.3f s",
                      result.prompt_tokens.size(), result.num_cached_prompt_tokens,
                      result.output_tokens.size(), engine::FinishReasonName(result.finish_reason),
                      result.time_to_first_token_s * 1e3, decode_s > 0 ? decoded / decode_s : 0.0,
                      result.total_s)
          .c_str());
  if (request.options.prefill.method == engine::AttentionMethod::kMInference) {
    std::fprintf(stderr, "prefill attention density: %.4f\n", result.prefill_attention_density);
  }
  if (request.options.decode.method == engine::AttentionMethod::kTokenSelect) {
    std::fprintf(stderr,
                 "decode attention density: %.4f, selection cache: %.0f hits / %.0f queries\n",
                 result.decode_attention_density, result.selection_cache_hits,
                 result.selection_cache_queries);
  }
  if (request.options.spec.method != engine::SpecMethod::kNone) {
    // Steps compression: generated tokens after the first per decode step (1 = plain decoding).
    std::fprintf(stderr,
                 "speculation (%s): %d decode steps, %.2f tokens per step, %lld draft tokens, "
                 "%lld accepted (%.1f%%)\n",
                 std::string(engine::SpecMethodName(request.options.spec.method)).c_str(),
                 result.decode_steps,
                 result.decode_steps > 0 ? static_cast<double>(decoded) / result.decode_steps : 0.0,
                 static_cast<long long>(result.spec_draft_tokens),
                 static_cast<long long>(result.spec_accepted_tokens),
                 result.spec_draft_tokens > 0
                     ? 100.0 * result.spec_accepted_tokens / result.spec_draft_tokens
                     : 0.0);
  }
  if (options.shadow_dense_rate > 0) PrintShadowSummary(shadow_errors);
  return absl::OkStatus();
}

}  // namespace

int RunGenerateCommand(const std::vector<char*>& positional) {
  if (positional.size() > 1) {
    std::fprintf(stderr, "error: unexpected argument '%s' (flags start with --)\n", positional[1]);
    return 2;
  }
  absl::Status s = Generate();
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace sparseserve::tools
