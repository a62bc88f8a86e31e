// `sparseserve bench model`: prefill and decode throughput of a synthetic model (a real model's
// shape, random weights made on the device) set against the roofline of the device.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/core/mapped_file.h"
#include "common/core/status.h"
#include "common/engine/minference_config.h"
#include "common/engine/speculative_sequence.h"
#include "common/model/model_config.h"
#include "common/model/model_presets.h"
#include "common/spec/draft_shapes.h"
#include "tools/bench_model.h"
#include "tools/bench_spec.h"
#include "tools/command.h"
#include "tools/model_flags.h"
#include "tools/request_options_flags.h"

ABSL_FLAG(std::string, synthetic, "",
          "Model shape preset (required): llama3-8b, llama3-8b-tp2-rank (one TP 2 rank's share "
          "of it, without collectives), llama3-70b-layer, llama3-70b, mistral-7b "
          "(4096-token sliding window, rolling KV), qwen2-7b or tiny; or a Hugging Face "
          "config.json (or a directory holding one) for a real model's shape. The "
          "weights are uniform noise made on the device; no checkpoint is read.");
ABSL_FLAG(std::string, prefill_lengths, "4096,32768,131072",
          "Prompt lengths whose prefill is timed, comma-separated (empty: no prefill cases).");
ABSL_FLAG(std::string, decode_batches, "1,8,64",
          "Decode batch sizes, comma-separated; each runs at every --decode-contexts.");
ABSL_FLAG(std::string, decode_contexts, "1024,32768",
          "Tokens already in each decoding sequence's KV cache, comma-separated (empty: no "
          "decode cases).");
ABSL_FLAG(int, iters, 10, "Timed decode steps per decode case.");
ABSL_FLAG(int, warmup, 2,
          "Untimed decode steps before each decode case; when > 0, one untimed prefill chunk "
          "also runs before the first prefill case.");
ABSL_FLAG(double, peak_bandwidth_gbps, 0,
          "Memory bandwidth (1e9 bytes/s) for the bytes floor; 0 = measure it by timing a "
          "device-to-device copy (2 GiB on cuda, 256 MiB on cpu; read + write bytes counted).");
ABSL_FLAG(bool, op_profile, false,
          "After each case, run it again with every op synchronised and timed on its own, and "
          "print where a step's time goes (per op, per GEMM shape).");
ABSL_FLAG(double, peak_tflops, 0,
          "Peak dense TFLOP/s in the compute dtype for the arithmetic floor; 0 = 989 on cuda "
          "(H100/H200 SXM bf16 datasheet), none on cpu (the floor is then the bytes floor).");

ABSL_FLAG(int64_t, interleave_prompt, 0,
          "With N > 0, also time the decode scheduler's steps while an N-token prompt is "
          "prefilled in chunks beside --interleave-batch running sequences (each step at most "
          "--max-step-tokens rows): the running streams' inter-token latency during a long "
          "prefill.");
ABSL_FLAG(int, decode_draft, 0,
          "Decode cases run speculative decoding's verify step instead: each sequence feeds its "
          "token and this many draft rows (a chain) and every row is sampled; tokens/s counts one "
          "token per sequence per step (multiply by the steps compression a drafter reaches).");
ABSL_FLAG(std::string, decode_draft_tree, "",
          "Decode cases verify a method's widest draft instead of a chain: 'lookahead' (the full "
          "window and guesses of --lookahead-window/-ngram/-guesses, defaults scaled to the "
          "model, the paper's mask) or 'tokenswift' (the tree of --tokenswift-tree and 20 "
          "4-grams); the rows a serving step replaying graphs pads to. Empty = off.");
ABSL_FLAG(int, decode_window, 0,
          "Decode cases attend with a sliding window of this many keys (4 sinks); 0 = dense.");
ABSL_FLAG(bool, tokenselect_reselect, false,
          "With --decode-attention tokenselect: every decode step selects afresh (the selection "
          "cache never hits) instead of reusing the first step's selection (the bench repeats "
          "one query, so every later step hits).");
ABSL_FLAG(std::string, shadow_dense_rates, "",
          "Comma-separated rates in [0, 1] of the shadow-dense quality monitor "
          "(--shadow-dense-rate of the serving commands): each decode case runs once per rate and "
          "the throughput each loses against rate 0 is printed. Needs --decode-window (only sparse "
          "steps are shadowed) and many --iters (rate x iters steps are shadowed). Empty = off.");
ABSL_FLAG(int64_t, interleave_batch, 8, "Running sequences of the interleave case.");
ABSL_FLAG(int64_t, interleave_context, 1024, "Their context in tokens.");

namespace sparseserve::tools {
namespace {

// Larger than the serving default (512): long prompts on a GPU are prefilled in big steps.
constexpr int kDefaultPrefillChunk = 8192;

// "4096,32768" -> {4096, 32768}; "" -> {}. kInvalidArgument naming `flag` for anything else.
absl::StatusOr<std::vector<int64_t>> ParsePositiveList(const std::string& text, const char* flag) {
  std::vector<int64_t> values;
  if (text.empty()) return values;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(item, &v) || v <= 0 || v > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": '", item, "' is not a positive integer (in '", text, "')"));
    }
    values.push_back(v);
  }
  return values;
}

// --synthetic: a preset's name, or a config.json (or a directory holding one).
absl::StatusOr<model::ModelConfig> SyntheticShape(const std::string& name) {
  std::error_code error;
  if (name.find('/') == std::string::npos && !absl::EndsWith(name, ".json") &&
      !std::filesystem::exists(name, error)) {
    return model::SyntheticModelConfig(name);
  }
  const std::string path = absl::EndsWith(name, ".json")
                               ? name
                               : absl::StrCat(absl::StripSuffix(name, "/"), "/config.json");
  SS_ASSIGN_OR_RETURN(const std::string text, core::ReadFileToString(path));
  return model::ParseHfConfig(text, path);
}

// --decode-draft-tree: the method's widest draft on this model (spec/draft_shapes.h).
absl::StatusOr<spec::StepDraft> DraftTreeOf(const std::string& name,
                                            const engine::SpeculationChoice& choice,
                                            const model::ModelConfig& config) {
  if (name == "lookahead") {
    const spec::LookaheadParams params = engine::LookaheadParamsOf(choice, config);
    std::printf("decode draft: lookahead W=%d N=%d G=%d\n", params.window, params.ngram,
                params.guesses);
    return spec::FullLookaheadDraft(params, config.vocab_size);
  }
  if (name == "tokenswift") {
    const spec::TokenSwiftParams params = engine::TokenSwiftParamsOf(choice, config);
    const int heads = static_cast<int>(params.tree.size()) - 1;  // every level a head's
    std::printf("decode draft: tokenswift tree [%s], %d 4-grams\n",
                absl::StrJoin(params.tree, ",").c_str(), params.ngram_k);
    return spec::FullTokenSwiftDraft(params, heads, config.vocab_size);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--decode-draft-tree: '", name, "' is not a draft shape; valid: lookahead, tokenswift"));
}

// Every flag checked before anything is allocated: kInvalidArgument / kNotFound (unknown preset).
absl::StatusOr<ModelBenchOptions> ModelBenchOptionsFromFlags() {
  ModelBenchOptions o;
  o.preset = absl::GetFlag(FLAGS_synthetic);
  if (o.preset.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--synthetic is required; presets: ", absl::StrJoin(model::SyntheticModelNames(), ", ")));
  }
  SS_ASSIGN_OR_RETURN(o.config, SyntheticShape(o.preset));
  SS_ASSIGN_OR_RETURN(o.device, DeviceFromFlags());
  SS_ASSIGN_OR_RETURN(o.prefill_lengths,
                      ParsePositiveList(absl::GetFlag(FLAGS_prefill_lengths), "--prefill-lengths"));
  SS_ASSIGN_OR_RETURN(o.decode_batches,
                      ParsePositiveList(absl::GetFlag(FLAGS_decode_batches), "--decode-batches"));
  SS_ASSIGN_OR_RETURN(o.decode_contexts,
                      ParsePositiveList(absl::GetFlag(FLAGS_decode_contexts), "--decode-contexts"));
  if (o.decode_batches.empty()) o.decode_contexts.clear();
  if (o.prefill_lengths.empty() && o.decode_contexts.empty()) {
    return absl::InvalidArgumentError(
        "nothing to run: --prefill-lengths and --decode-contexts "
        "(or --decode-batches) are all empty");
  }
  o.iters = absl::GetFlag(FLAGS_iters);
  o.warmup = absl::GetFlag(FLAGS_warmup);
  o.block_tokens = BlockTokensFromFlags();
  o.step_graph_rows = CudaGraphBatchFromFlags();
  if (o.step_graph_rows < 0) return absl::InvalidArgumentError("--cuda-graph-batch must be >= 0");
  o.prefill_chunk = PrefillChunkFromFlags(kDefaultPrefillChunk);
  o.peak_bandwidth_gbps = absl::GetFlag(FLAGS_peak_bandwidth_gbps);
  o.peak_tflops = absl::GetFlag(FLAGS_peak_tflops);
  o.op_profile = absl::GetFlag(FLAGS_op_profile);
  o.interleave_prompt = absl::GetFlag(FLAGS_interleave_prompt);
  o.interleave_batch = absl::GetFlag(FLAGS_interleave_batch);
  o.interleave_context = absl::GetFlag(FLAGS_interleave_context);
  SS_ASSIGN_OR_RETURN(const engine::ModelRunnerOptions runner_options, RunnerOptionsFromFlags());
  o.max_step_tokens = runner_options.max_step_tokens;
  o.tensor_parallel = runner_options.tensor_parallel;
  if (o.tensor_parallel < 1) return absl::InvalidArgumentError("--tensor-parallel must be >= 1");
  if (o.interleave_prompt < 0 || o.interleave_batch < 1 || o.interleave_context < 1 ||
      o.max_step_tokens <= o.interleave_batch) {
    return absl::InvalidArgumentError(
        "--interleave-prompt must be >= 0, --interleave-batch and --interleave-context >= 1, "
        "and --max-step-tokens larger than --interleave-batch");
  }
  o.decode_window = absl::GetFlag(FLAGS_decode_window);
  o.decode_draft = absl::GetFlag(FLAGS_decode_draft);
  if (o.decode_draft < 0 || o.decode_draft > 64) {
    return absl::InvalidArgumentError("--decode-draft must be in [0, 64]");
  }
  SS_ASSIGN_OR_RETURN(const engine::RequestOptions request_options, RequestOptionsFromFlags());
  o.decode_draft_tree_name = absl::GetFlag(FLAGS_decode_draft_tree);
  if (!o.decode_draft_tree_name.empty()) {
    if (o.decode_draft > 0) {
      return absl::InvalidArgumentError("--decode-draft and --decode-draft-tree are exclusive");
    }
    SS_ASSIGN_OR_RETURN(o.decode_draft_tree,
                        DraftTreeOf(o.decode_draft_tree_name, request_options.spec, o.config));
  }
  if (request_options.prefill.method == engine::AttentionMethod::kMInference) {
    SS_ASSIGN_OR_RETURN(o.prefill_minference,
                        engine::MInferencePatternsFor(runner_options.minference_config,
                                                      runner_options.minference_planted,
                                                      o.config.num_layers, o.config.num_heads));
    std::printf("prefill attention: minference, %s index%s\n",
                runner_options.minference_planted ? "planted" : "estimated",
                runner_options.minference_planted ? " (issue 16's; random weights)" : "");
  }
  if (o.decode_window < 0) return absl::InvalidArgumentError("--decode-window must be >= 0");
  if (request_options.decode.method == engine::AttentionMethod::kTokenSelect) {
    kernels::TokenSelectParams p = engine::AttentionPatternOf(request_options.decode).tokenselect;
    if (absl::GetFlag(FLAGS_tokenselect_reselect)) p.theta = 2.0f;  // cosines never reach it
    o.decode_tokenselect = p;
    std::printf("decode attention: tokenselect k=%d initial=%d local=%d%s, %s\n", p.k, p.initial,
                p.local, p.per_kv_head ? " per KV head" : "",
                p.theta > 1 ? "every step selects" : "every step after the first reuses (hits)");
  }
  const std::string rates = absl::GetFlag(FLAGS_shadow_dense_rates);
  if (!rates.empty()) {
    for (absl::string_view item : absl::StrSplit(rates, ',')) {
      double rate = 0;
      if (!absl::SimpleAtod(item, &rate) || !(rate >= 0 && rate <= 1)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--shadow-dense-rates: '", item, "' is not a rate in [0, 1] (in '", rates, "')"));
      }
      o.shadow_dense_rates.push_back(rate);
    }
  }
  if (o.tensor_parallel > 1 && (!o.shadow_dense_rates.empty() || o.decode_tokenselect.has_value() ||
                                o.prefill_minference != nullptr)) {
    return absl::InvalidArgumentError(
        "--tensor-parallel > 1 runs dense or windowed attention only (no --shadow-dense-rates, "
        "TokenSelect or MInference yet)");
  }
  if (o.iters < 1) return absl::InvalidArgumentError("--iters must be >= 1");
  if (o.warmup < 0) return absl::InvalidArgumentError("--warmup must be >= 0");
  if (o.block_tokens <= 0 || o.block_tokens % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--block-tokens must be a positive multiple of 16, got ", o.block_tokens));
  }
  if (o.prefill_chunk < 1) return absl::InvalidArgumentError("--prefill-chunk must be >= 1");
  if (!(std::isfinite(o.peak_bandwidth_gbps) && o.peak_bandwidth_gbps >= 0)) {
    return absl::InvalidArgumentError("--peak-bandwidth-gbps must be >= 0");
  }
  if (!(std::isfinite(o.peak_tflops) && o.peak_tflops >= 0)) {
    return absl::InvalidArgumentError("--peak-tflops must be >= 0");
  }
  return o;
}

}  // namespace

int RunBenchCommand(const std::vector<char*>& positional) {
  if (positional.size() == 2 && std::string(positional[1]) == "spec") {
    return RunSpecBenchCommand();
  }
  if (positional.size() < 2 || std::string(positional[1]) != "model") {
    std::fprintf(stderr,
                 "error: %s; valid: model (sparseserve bench model --synthetic PRESET), spec "
                 "(sparseserve bench spec --model PATH)\n",
                 positional.size() < 2
                     ? "bench needs a target"
                     : absl::StrCat("unknown bench target '", positional[1], "'").c_str());
    return 2;
  }
  if (positional.size() > 2) {
    std::fprintf(stderr, "error: unexpected argument '%s' (flags start with --)\n", positional[2]);
    return 2;
  }
  absl::StatusOr<ModelBenchOptions> options = ModelBenchOptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  if (absl::Status s = RunModelBench(*options); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace sparseserve::tools