// `sparseserve`: one binary, one subcommand per role (like `vllm serve` / `trtllm-serve`).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tools/command.h"

namespace sparseserve::tools {

// The request-option flags `bench spec` takes (one literal: a list of flag files follows).
constexpr char kBenchSpecOptionFlags[] =
    "tools/request_options_flags.cc:spec_max_draft,spec_controller,lookahead_window,"
    "lookahead_ngram,lookahead_guesses,tokenswift_tree";

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {"generate",
       "generate text from a prompt with a local model (offline, streaming)",
       "sparseserve generate --model PATH --prompt TEXT [--max-tokens N] [--temperature T] ...",
       "Loads a model (a .gguf file or a Hugging Face directory with config.json,\n"
       "*.safetensors and tokenizer.json), encodes the prompt, and streams the continuation to\n"
       "stdout as it is generated. A one-line summary (prompt tokens, new tokens, time to first\n"
       "token, tokens/s) goes to stderr. --temperature 0 is greedy decoding. The attention and\n"
       "speculation flags choose the request's methods; with --server only those changed from\n"
       "their defaults are sent, and the server's defaults fill the rest.",
       {"tools/generate_command.cc", "tools/request_options_flags.cc", "tools/model_path_flag.cc",
        "tools/model_flags.cc"},
       &RunGenerateCommand},
      {"eval",
       "long-context accuracy: run RULER-style tasks and print a table per task and length",
       "sparseserve eval --tasks FILE.jsonl (--model PATH | --server HOST:PORT) [flags]",
       "Runs the tasks of a JSON-lines file written by `python3 tools/longctx --tokenizer ...`\n"
       "(passkey, multi-key, multi-value, variable tracking, common words, long generation)\n"
       "greedily, in process or through a running server, with the attention and speculation\n"
       "flags of `generate`. A task scores the fraction of its answers found in the output\n"
       "(RULER's string match). Prints one row per task and length: prompts, score, attention\n"
       "density (from these flags), mean prompt and new tokens, time to first token, decode\n"
       "tokens/s; --out writes every output as JSON. Progress goes to stderr.",
       {"tools/eval_command.cc", "tools/generate_command.cc:server,timeout_seconds",
        "tools/request_options_flags.cc", "tools/model_path_flag.cc", "tools/model_flags.cc"},
       &RunEvalCommand},
      {"decode",
       "run a decode worker (continuous batching, KV import over UCX)",
       "sparseserve decode --model PATH [--address HOST:PORT] [--metrics-address HOST:PORT] ...",
       "Serves sparseserve.v1.DecodeWorker (plus grpc.health.v1 and reflection) for a router:\n"
       "local or disaggregated prefill, continuous batching of decode steps, KV reservations\n"
       "that prefill workers fill over UCX. Prometheus metrics on /metrics. Prints\n"
       "'READY decode <address> metrics <address>' on stdout once serving; SIGINT/SIGTERM drain\n"
       "in-flight requests and exit.",
       {"tools/decode_command.cc", "tools/kv_staging_flags.cc:kv_staging,kv_staging_mb",
        "tools/request_options_flags.cc", "tools/serve_flags.cc", "tools/model_path_flag.cc",
        "tools/model_flags.cc"},
       &RunDecodeCommand},
      {"prefill",
       "run a prefill worker (chunked prefill, KV export over UCX)",
       "sparseserve prefill --model PATH [--address HOST:PORT] ...",
       "Serves sparseserve.v1.PrefillWorker: computes a prompt's KV (with its own prefix\n"
       "cache) and PUTs each layer's blocks over UCX into the decode worker's reservation as\n"
       "soon as the layer is done, then returns the first token. Prints 'READY prefill ...'.",
       {"tools/prefill_command.cc", "tools/decode_command.cc:max_running",
        "tools/kv_staging_flags.cc:kv_staging,prefill_kv_staging_mb",
        "tools/request_options_flags.cc", "tools/serve_flags.cc", "tools/model_path_flag.cc",
        "tools/model_flags.cc"},
       &RunPrefillCommand},
      RouterCommand(),
      {"up",
       "start router + prefill + decode workers on this machine (first run)",
       "sparseserve up [--model PATH] [--num-prefill N] [--num-decode M] ...",
       "Starts N prefill and M decode worker processes with the model, then serves the router\n"
       "in this process and prints one 'WORKER <role> <address> metrics <address> pid <pid>'\n"
       "line per worker, then 'READY up <address> metrics <address>'. Use `sparseserve generate\n"
       "--server <address>` to talk to it. SIGINT/SIGTERM stop everything cleanly.",
       {"tools/up_command.cc", "tools/router_command.cc", "tools/kv_staging_flags.cc",
        "tools/request_options_flags.cc", "tools/serve_flags.cc", "tools/model_path_flag.cc",
        "tools/model_flags.cc"},
       &RunUpCommand},
      {"search-patterns",
       "MInference's offline pattern search: a per-head pattern config from a sample",
       "sparseserve search-patterns --model PATH --sample FILE --out CONFIG [--device cuda]\n"
       "       [--target-density D] [--sample-tokens N] [--prefill-chunk N]",
       "MInference's kernel-aware pattern search (paper Alg. 1). Prefills the --sample text\n"
       "with dense attention in --prefill-chunk chunks; in every layer of every chunk it runs\n"
       "each candidate pattern on that layer's queries and KV (index built from the chunk's last\n"
       "64 queries, as served) and measures, per query head, the relative L2 error of its\n"
       "attention output against dense, over the whole sample. Each (layer, head) keeps the\n"
       "candidate with the smallest error (ties: the earlier one) and --out gets MInference's\n"
       "JSON layout (score = that error), ready for --minference-config.\n"
       "Candidates, all sized to one budget, --target-density of the causal (row, key) pairs at\n"
       "the sample's length (a cost model counting what the kernels compute):\n"
       "  vertical_and_slash(v, s) x4: the budget left after the forced 30 columns and 100\n"
       "      slashes all to slashes (64 keys each at most), 2/3, 1/3, none (all to columns);\n"
       "  stream_llm(sinks, window): A-shape, min(64, keys per row / 4) sinks, widest window;\n"
       "  block_sparse(k): the most 64-key blocks per 64-row query block (at least 3).\n"
       "The candidate table prints each one's estimated and measured density (heads the dense\n"
       "switch ran dense count whole), mean error and how many heads chose it; then a row per\n"
       "layer (heads per type, mean and max error) and the density of the chosen config,\n"
       "measured by one more MInference prefill of the sample. Progress goes to stderr. The\n"
       "search costs about (1 + candidates x (density + index)) dense prefills of the sample.\n"
       "Exit code 2 for bad flags or inputs (missing files, a sample under 128 tokens); 1 when\n"
       "the run fails.",
       {"tools/search_patterns_command.cc", "tools/eval_command.cc:out", "tools/model_path_flag.cc",
        "tools/model_flags.cc:device,kv_cache_tokens,gpu_memory_fraction,block_tokens,"
        "prefill_chunk,max_step_tokens"},
       &RunSearchPatternsCommand},
      {"synthetic-tokenizer",
       "write a synthetic model's tokenizer as a Hugging Face tokenizer directory",
       "sparseserve synthetic-tokenizer --preset PRESET --tokenizer-dir DIR",
       "A synthetic model (--model synthetic:PRESET on generate, prefill, decode, router and up:\n"
       "the preset's shape with random weights, for serving benchmarks of models whose\n"
       "weights are not here) tokenizes with a generated byte-level BPE vocabulary of the\n"
       "preset's size. This writes the same vocabulary as tokenizer.json and\n"
       "tokenizer_config.json, so a load generator (aiperf --tokenizer DIR) counts tokens as the\n"
       "server does. Exit code 2 for bad flags or an unknown preset.",
       {"tools/synthetic_tokenizer_command.cc"},
       &RunSyntheticTokenizerCommand},
      {"bench",
       "time prefill and decode of a synthetic model against the device's roofline, or\n"
       "speculative decoding against plain decoding on a real model",
       "sparseserve bench model --synthetic PRESET [--device cuda|cpu] [--prefill-lengths L,..]\n"
       "       [--decode-batches B,..] [--decode-contexts C,..] [--iters N] [--warmup N] ...\n"
       "sparseserve bench spec --model PATH [--spec-batches B,..] [--spec-modes M,..]\n"
       "       [--spec-tokens N] [--spec-max-draft K] [--spec-controller=false] ...",
       "Builds a model of a real shape with random weights made on the device (no checkpoint;\n"
       "presets llama3-8b, llama3-8b-tp2-rank = one TP 2 rank's share of it, llama3-70b-layer =\n"
       "one layer of Llama-3.1-70B, llama3-70b, mistral-7b\n"
       "with its 4096-token sliding window, qwen2-7b, tiny; or a config.json's shape) and\n"
       "one KV cache sized for the largest case that fits the free device memory (10% kept\n"
       "free); a case needing more prints 'skipped: needs X GiB of KV, Y GiB free'. Then times:\n"
       "  prefill  each --prefill-lengths prompt once, in --prefill-chunk steps: tokens/s, ms;\n"
       "  decode   every --decode-batches x --decode-contexts case: B sequences with C cached\n"
       "           tokens (random KV; each sequence its own blocks while the cache holds them,\n"
       "           else shared copies, noted in the row) add one greedy token per step (argmax\n"
       "           on the device);\n"
       "           --warmup untimed, then --iters timed steps: tokens/s = B*iters/time;\n"
       "           --decode-draft K or --decode-draft-tree lookahead|tokenswift make them\n"
       "           speculative decoding's verify steps (a chain, or the method's widest draft);\n"
       "Each case is set against its roofline: the bytes floor (weights read per step + KV read\n"
       "and written, at the bandwidth measured by a device copy or --peak-bandwidth-gbps) and\n"
       "the arithmetic floor (2 FLOPs per weight per token + attention, at --peak-tflops);\n"
       "'% roofline' = the larger floor / the measured time (100% = at the hardware limit).\n"
       "Progress goes to stderr, the table to stdout. Exit code 2 for bad flags or an unknown\n"
       "preset; 1 when the run fails (e.g. --device cuda in a build without CUDA) or a case\n"
       "does (its row reads 'failed: ...'; the other cases still run).\n"
       "bench spec prefills --spec-batches prompts of a real model and decodes them in lockstep\n"
       "(greedy, --spec-tokens each), plainly and under each --spec-modes mode: prompt-lookup,\n"
       "lookahead, or oracle:A, a drafter that knows the plain output and gets each draft token\n"
       "right with probability A (what the controller makes of acceptance A). Its table: tokens/s\n"
       "and the ratio to plain, steps compression (tokens per step), accepted/drafted, acceptance\n"
       "by draft position, and whether the greedy output equals plain decoding's.",
       {"tools/bench_command.cc", "tools/bench_spec.cc", kBenchSpecOptionFlags,
        "tools/model_path_flag.cc",
        "tools/model_flags.cc:device,block_tokens,prefill_chunk,max_step_tokens"},
       &RunBenchCommand},
  };
  return commands;
}

namespace {

void PrintTopLevelHelp() {
  std::printf(
      "usage: sparseserve <command> [flags]\n\n"
      "sparseserve serves long-context LLMs. Commands:\n");
  for (const Command& c : Commands()) std::printf("  %-10s %s\n", c.name, c.summary);
  std::printf("\nRun 'sparseserve <command> --help' for the flags of a command.\n");
}

}  // namespace
}  // namespace sparseserve::tools

int main(int argc, char** argv) {
  using sparseserve::tools::Command;
  using sparseserve::tools::Commands;
  sparseserve::tools::InstallCrashHandler(argv[0]);
  if (argc < 2 || sparseserve::tools::IsHelpFlag(argv[1])) {
    sparseserve::tools::PrintTopLevelHelp();
    return argc < 2 ? 2 : 0;
  }
  const Command* command = nullptr;
  for (const Command& c : Commands()) {
    if (std::strcmp(c.name, argv[1]) == 0) command = &c;
  }
  if (command == nullptr) {
    std::fprintf(stderr, "error: unknown command '%s'\n\n", argv[1]);
    sparseserve::tools::PrintTopLevelHelp();
    return 2;
  }
  // argv[1] becomes the program name for absl.
  return sparseserve::tools::RunCommand(*command, std::string("sparseserve ") + command->name,
                                        argc - 1, argv + 1);
}
