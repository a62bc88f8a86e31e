#include "tools/request_options_flags.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/core/status.h"

ABSL_FLAG(std::string, attention, "",
          "Shorthand attention method: dense or sliding-window set both phases, minference the "
          "prefill one, tokenselect the decode one. --prefill-attention and --decode-attention "
          "win over it. Empty = dense.");
ABSL_FLAG(std::string, prefill_attention, "",
          "Attention method of prompts: dense, sliding-window, minference or tokenselect (its "
          "chunked-prefill variant: each chunk attends the tokens its mean query selects). Empty "
          "= what --attention sets, else dense. On a server: the default of requests that choose "
          "none.");
ABSL_FLAG(std::string, decode_attention, "",
          "Attention method of generated tokens: dense, sliding-window or tokenselect. Empty = "
          "what --attention sets, else dense. On a server: the default of requests that choose "
          "none.");
ABSL_FLAG(int, sliding_window, 4096,
          "sliding-window: each query sees the last N positions (itself included); >= 1. 4096 is "
          "Mistral-7B's window.");
ABSL_FLAG(int, sink_tokens, -1,
          "sliding-window: the first N positions stay visible too (attention sinks, at their "
          "true positions); -1 = the engine's default (4).");
ABSL_FLAG(int, sparse_prefill_threshold, 8192,
          "minference: prompts shorter than this many tokens are prefilled dense (MInference "
          "paper: about 8K).");
ABSL_FLAG(std::string, minference_config, "",
          "minference: per-head pattern JSON in the MInference layout; empty = vertical-slash "
          "(1000, 6096) on every head.");
ABSL_FLAG(std::string, minference_index, "estimated",
          "minference: estimated (each layer builds its index from the chunk's last 64 queries, "
          "the method) or planted (a seeded vertical-slash index of 1000 columns and 6096 "
          "diagonals per head: for speed runs on random weights, which have no attention "
          "structure to estimate; figures made with it must say so).");
ABSL_FLAG(int, tokenselect_k, 2048,
          "tokenselect: tokens selected per step and layer by the heads' summed softmax scores "
          "(the soft vote); >= 1. On a server also the largest k a request may ask for: the "
          "per-sequence selection state is sized for it (0 = TokenSelect refused).");
ABSL_FLAG(int, tokenselect_initial, 128, "tokenselect: leading tokens always attended; >= 0.");
ABSL_FLAG(int, tokenselect_local, 512, "tokenselect: most recent tokens always attended; >= 0.");
ABSL_FLAG(double, tokenselect_theta, 0.9,
          "tokenselect: the selection cache reuses a layer's last selection while the cosine "
          "between the current query and the one that selected is at least this (and the "
          "selection is at most --tokenselect-local tokens old); in [-1, 1], 1 = practically "
          "never.");
ABSL_FLAG(bool, tokenselect_per_kv_head, false,
          "tokenselect: each KV head selects its own tokens (the soft vote of its query heads; "
          "TokenSwift's per-KV-head partial KV) instead of one selection per layer. On a server "
          "also sizes the selection state for it (one list per KV head: --tokenselect-k x KV "
          "heads words per layer and sequence), so requests may ask for it.");
ABSL_FLAG(std::string, spec, "none",
          "Speculative decoding: none, prompt-lookup, lookahead, tokenswift, kangaroo or "
          "sparse-self. On a server: the default of requests that choose none.");
ABSL_FLAG(int, spec_max_draft, 0,
          "Speculation: draft tokens verified per step at most; 0 = the method's default.");
ABSL_FLAG(bool, spec_controller, true,
          "Speculation: let the controller pick each step's draft length from measured acceptance "
          "and step cost (down to plain decoding, so speculation is never slower); false = always "
          "draft --spec-max-draft tokens (measuring acceptance, testing exactness).");
ABSL_FLAG(int, lookahead_window, 0,
          "lookahead: window W (parallel Jacobi positions); 0 = scaled to the model (paper: 15).");
ABSL_FLAG(int, lookahead_ngram, 0, "lookahead: n-gram size N; 0 = default (paper: 5).");
ABSL_FLAG(int, lookahead_guesses, 0,
          "lookahead: n-gram guesses G verified per step; 0 = default (paper: 15).");
ABSL_FLAG(std::string, sparse_self_attention, "tokenselect",
          "sparse-self and tokenswift: the attention the model drafts with over its own KV cache "
          "(the --sparse-self-* flags set it for both), tokenselect or sliding-window "
          "(verification is dense, so the output is plain decoding's).");
ABSL_FLAG(int, sparse_self_sinks, 16,
          "sparse-self: leading cached tokens the draft always sees (TokenSwift: 16).");
ABSL_FLAG(int, sparse_self_window, 256,
          "sparse-self: most recent cached tokens the draft always sees (the sliding window).");
ABSL_FLAG(int, sparse_self_k, 768,
          "sparse-self with tokenselect: tokens selected per layer besides the sinks and the "
          "window; at most --tokenselect-k on a server.");
ABSL_FLAG(bool, sparse_self_per_kv_head, false,
          "sparse-self and tokenswift with tokenselect: the draft selects per KV head "
          "(TokenSwift's partial KV, chosen per layer and KV head) instead of per layer; needs "
          "--tokenselect-per-kv-head on a server.");
ABSL_FLAG(
    std::vector<std::string>, tokenswift_tree, {},
    "tokenswift: candidates per draft depth, comma-separated, the first 1 (the token the model "
    "drafts), then the top candidates of each draft head (--tokenswift-heads); empty = "
    "TokenSwift's 1,3,3,3 (27 paths, 40 nodes).");
ABSL_FLAG(int, tokenswift_ngram_k, -1,
          "tokenswift: the most frequent 4-grams of the sequence (prompt and output) starting with "
          "the drafted token that each step also verifies (token reutilization); -1 = 20 "
          "(TokenSwift's), 0 = off.");
ABSL_FLAG(bool, tokenswift_draft_pass, true,
          "tokenswift: run the paper's draft pass over the partial KV cache before each step; "
          "false = no draft pass: the draft heads read the row that sampled the root, in the "
          "step that verified it (one pass of the weights a step; the tree drops its first "
          "level, 1,3,3,3 becomes 3,3,3, and the 4-grams start with the root).");
ABSL_FLAG(int, tokenswift_ngram_chain, 1,
          "tokenswift: 4-grams chained into one candidate: each reused 4-gram, and the path "
          "through every draft head's best candidate, goes on by the most frequent 4-gram of its "
          "last token (3 tokens of depth each; not in the paper, for repetitive long outputs, "
          "where a step accepts nearly all of its 3-4 drafted tokens); 1 = the paper's, at most "
          "8.");
ABSL_FLAG(double, kangaroo_eta, 0.6,
          "kangaroo: a draft stops before the first token whose top probability is at most this "
          "(the second early exit; Kangaroo's 0.6). Needs the server's --kangaroo-adapter.");
ABSL_FLAG(int, tokenswift_ngram_lag, -1,
          "tokenswift: W, the 4-gram table counts the sequence up to this many tokens before its "
          "end; -1 = 1024 (TokenSwift's), or an eighth of the context of models with less.");

namespace sparseserve::tools {
namespace {

bool Changed(const char* name) {
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  return flag != nullptr && flag->CurrentValue() != flag->DefaultValue();
}

absl::StatusOr<engine::AttentionMethod> ParseNamed(absl::string_view flag, absl::string_view name) {
  absl::StatusOr<engine::AttentionMethod> method = engine::ParseAttentionMethod(name);
  if (!method.ok()) return AnnotateStatus(method.status(), flag);
  return method;
}

// Every flag's value, methods included, over the engine's defaults; not validated.
absl::StatusOr<engine::RequestOptions> OptionsOfFlags() {
  engine::RequestOptions options;
  SS_RETURN_IF_ERROR(engine::ApplyAttentionMethodNames(
      absl::GetFlag(FLAGS_attention), absl::GetFlag(FLAGS_prefill_attention),
      absl::GetFlag(FLAGS_decode_attention), &options));
  for (engine::AttentionChoice* c : {&options.prefill, &options.decode}) {
    c->window = absl::GetFlag(FLAGS_sliding_window);
    c->sink_tokens = absl::GetFlag(FLAGS_sink_tokens);
    c->sparse_prefill_threshold = absl::GetFlag(FLAGS_sparse_prefill_threshold);
    c->minference_config = absl::GetFlag(FLAGS_minference_config);
    c->tokenselect_k = absl::GetFlag(FLAGS_tokenselect_k);
    c->tokenselect_initial = absl::GetFlag(FLAGS_tokenselect_initial);
    c->tokenselect_local = absl::GetFlag(FLAGS_tokenselect_local);
    c->tokenselect_theta = static_cast<float>(absl::GetFlag(FLAGS_tokenselect_theta));
    c->tokenselect_per_kv_head = absl::GetFlag(FLAGS_tokenselect_per_kv_head);
  }
  absl::StatusOr<engine::SpecMethod> spec = engine::ParseSpecMethod(absl::GetFlag(FLAGS_spec));
  if (!spec.ok()) return AnnotateStatus(spec.status(), "--spec");
  options.spec.method = *spec;
  options.spec.max_draft = absl::GetFlag(FLAGS_spec_max_draft);
  options.spec.controller = absl::GetFlag(FLAGS_spec_controller);
  options.spec.lookahead_window = absl::GetFlag(FLAGS_lookahead_window);
  options.spec.lookahead_ngram = absl::GetFlag(FLAGS_lookahead_ngram);
  options.spec.lookahead_guesses = absl::GetFlag(FLAGS_lookahead_guesses);
  SS_ASSIGN_OR_RETURN(
      options.spec.sparse_self_attention,
      ParseNamed("--sparse-self-attention", absl::GetFlag(FLAGS_sparse_self_attention)));
  options.spec.sparse_self_sinks = absl::GetFlag(FLAGS_sparse_self_sinks);
  options.spec.sparse_self_window = absl::GetFlag(FLAGS_sparse_self_window);
  options.spec.sparse_self_k = absl::GetFlag(FLAGS_sparse_self_k);
  options.spec.sparse_self_per_kv_head = absl::GetFlag(FLAGS_sparse_self_per_kv_head);
  for (const std::string& b : absl::GetFlag(FLAGS_tokenswift_tree)) {
    int value = 0;
    if (!absl::SimpleAtoi(b, &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tokenswift-tree: '", b, "' is not a number (e.g. 1,3,3,3)"));
    }
    options.spec.tokenswift_tree.push_back(value);
  }
  options.spec.tokenswift_ngram_k = absl::GetFlag(FLAGS_tokenswift_ngram_k);
  options.spec.tokenswift_draft_pass = absl::GetFlag(FLAGS_tokenswift_draft_pass);
  options.spec.tokenswift_ngram_lag = absl::GetFlag(FLAGS_tokenswift_ngram_lag);
  options.spec.tokenswift_ngram_chain = absl::GetFlag(FLAGS_tokenswift_ngram_chain);
  options.spec.kangaroo_eta = static_cast<float>(absl::GetFlag(FLAGS_kangaroo_eta));
  return options;
}

}  // namespace

absl::StatusOr<engine::RequestOptions> RequestOptionsFromFlags() {
  SS_ASSIGN_OR_RETURN(engine::RequestOptions options, OptionsOfFlags());
  // Validate's messages name the phase and parameter ("decode attention sliding-window needs a
  // window >= 1"); the flags are named after those.
  SS_RETURN_IF_ERROR(AnnotateStatus(engine::Validate(options), "attention and speculation flags"));
  return options;
}

absl::Status SetRequestOptionsFromChangedFlags(v1::GenerateRequest* request) {
  SS_ASSIGN_OR_RETURN(const engine::RequestOptions options, OptionsOfFlags());
  // A phase's method is sent when a flag named it: its own flag, or the shorthand when the
  // shorthand covers that phase (ApplyAttentionMethodNames' rule; the name parsed above).
  const std::string shorthand = absl::GetFlag(FLAGS_attention);
  v1::PrefillAttention* p = request->mutable_prefill_attention();
  if (Changed("prefill_attention") || (!shorthand.empty() && shorthand != "tokenselect")) {
    p->set_method(std::string(engine::AttentionMethodName(options.prefill.method)));
  }
  v1::DecodeAttention* d = request->mutable_decode_attention();
  if (Changed("decode_attention") || (!shorthand.empty() && shorthand != "minference")) {
    d->set_method(std::string(engine::AttentionMethodName(options.decode.method)));
  }
  if (Changed("sliding_window")) {
    p->set_window(options.prefill.window);
    d->set_window(options.decode.window);
  }
  if (Changed("sink_tokens")) {
    p->set_sink_tokens(options.prefill.sink_tokens);
    d->set_sink_tokens(options.decode.sink_tokens);
  }
  if (Changed("sparse_prefill_threshold")) {
    p->set_sparse_prefill_threshold(options.prefill.sparse_prefill_threshold);
  }
  if (Changed("minference_config")) p->set_minference_config(options.prefill.minference_config);
  if (Changed("tokenselect_k")) {
    p->set_tokenselect_k(options.prefill.tokenselect_k);
    d->set_tokenselect_k(options.decode.tokenselect_k);
  }
  if (Changed("tokenselect_initial")) {
    p->set_tokenselect_initial(options.prefill.tokenselect_initial);
    d->set_tokenselect_initial(options.decode.tokenselect_initial);
  }
  if (Changed("tokenselect_local")) {
    p->set_tokenselect_local(options.prefill.tokenselect_local);
    d->set_tokenselect_local(options.decode.tokenselect_local);
  }
  if (Changed("tokenselect_theta")) {
    p->set_tokenselect_theta(options.prefill.tokenselect_theta);
    d->set_tokenselect_theta(options.decode.tokenselect_theta);
  }
  if (Changed("tokenselect_per_kv_head")) {
    p->set_tokenselect_per_kv_head(options.prefill.tokenselect_per_kv_head);
    d->set_tokenselect_per_kv_head(options.decode.tokenselect_per_kv_head);
  }
  v1::Speculation* s = request->mutable_speculation();
  if (Changed("spec")) s->set_method(std::string(engine::SpecMethodName(options.spec.method)));
  if (Changed("spec_max_draft")) s->set_max_draft(options.spec.max_draft);
  if (Changed("spec_controller")) s->set_controller(options.spec.controller);
  if (Changed("lookahead_window")) s->set_lookahead_window(options.spec.lookahead_window);
  if (Changed("lookahead_ngram")) s->set_lookahead_ngram(options.spec.lookahead_ngram);
  if (Changed("lookahead_guesses")) s->set_lookahead_guesses(options.spec.lookahead_guesses);
  if (Changed("sparse_self_attention")) {
    s->set_sparse_self_attention(
        std::string(engine::AttentionMethodName(options.spec.sparse_self_attention)));
  }
  if (Changed("sparse_self_sinks")) s->set_sparse_self_sinks(options.spec.sparse_self_sinks);
  if (Changed("sparse_self_window")) s->set_sparse_self_window(options.spec.sparse_self_window);
  if (Changed("sparse_self_k")) s->set_sparse_self_k(options.spec.sparse_self_k);
  if (Changed("sparse_self_per_kv_head")) {
    s->set_sparse_self_per_kv_head(options.spec.sparse_self_per_kv_head);
  }
  for (const int b : options.spec.tokenswift_tree) s->add_tokenswift_tree(b);
  if (Changed("tokenswift_ngram_k")) s->set_tokenswift_ngram_k(options.spec.tokenswift_ngram_k);
  if (Changed("tokenswift_ngram_lag")) {
    s->set_tokenswift_ngram_lag(options.spec.tokenswift_ngram_lag);
  }
  if (Changed("tokenswift_draft_pass")) {
    s->set_tokenswift_draft_pass(options.spec.tokenswift_draft_pass);
  }
  if (Changed("tokenswift_ngram_chain")) {
    s->set_tokenswift_ngram_chain(options.spec.tokenswift_ngram_chain);
  }
  if (Changed("kangaroo_eta")) s->set_kangaroo_eta(options.spec.kangaroo_eta);
  return absl::OkStatus();
}

const std::vector<const char*>& RequestOptionFlagNames() {
  static const std::vector<const char*> names = {"attention",
                                                 "prefill_attention",
                                                 "decode_attention",
                                                 "sliding_window",
                                                 "sink_tokens",
                                                 "sparse_prefill_threshold",
                                                 "minference_config",
                                                 "minference_index",
                                                 "tokenselect_k",
                                                 "tokenselect_initial",
                                                 "tokenselect_local",
                                                 "tokenselect_theta",
                                                 "tokenselect_per_kv_head",
                                                 "spec",
                                                 "spec_max_draft",
                                                 "spec_controller",
                                                 "lookahead_window",
                                                 "lookahead_ngram",
                                                 "lookahead_guesses",
                                                 "sparse_self_attention",
                                                 "sparse_self_sinks",
                                                 "sparse_self_window",
                                                 "sparse_self_k",
                                                 "sparse_self_per_kv_head",
                                                 "tokenswift_tree",
                                                 "tokenswift_ngram_k",
                                                 "tokenswift_ngram_lag",
                                                 "tokenswift_draft_pass",
                                                 "tokenswift_ngram_chain",
                                                 "kangaroo_eta"};
  return names;
}

}  // namespace sparseserve::tools
