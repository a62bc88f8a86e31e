// `sparseserve generate`: offline generation with streaming output.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "common/core/status.h"
#include "common/engine/generator.h"
#include "common/engine/model_source.h"
#include "kernels/backend.h"
#include "tools/command.h"
#include "tools/model_flags.h"

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

namespace sparseserve::tools {
namespace {

absl::Status Generate() {
  if (absl::GetFlag(FLAGS_prompt).empty()) {
    return absl::InvalidArgumentError("--prompt is required (see --help)");
  }
  SS_ASSIGN_OR_RETURN(Device device, DeviceFromFlags());
  SS_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Backend> backend, kernels::CreateBackend(device));
  SS_ASSIGN_OR_RETURN(engine::ModelSource source, engine::OpenModelSource(ModelPathFromFlags()));
  const engine::ModelRunnerOptions options = RunnerOptionsFromFlags();
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
