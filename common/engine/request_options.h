// RequestOptions: the attention and speculation methods one request asks for, as the engine sees
// them (the public API, the worker protos and the command-line flags all convert into this).
//
// A request chooses a *prefill* attention method (dense | sliding-window | minference |
// tokenselect, its chunked-prefill variant) and a *decode* attention method (dense |
// sliding-window | tokenselect), each with its parameters, and a speculation method. The product's
// main path is MInference for the prompt and TokenSelect for the decode of the same request
// (ARCHITECTURE.md). Names are the ones users type (flags, API strings); parsing an unknown name is
// kInvalidArgument, and an attention method a backend lacks is kUnimplemented naming it
// (Backend::SupportsAttention) — never a silent fallback. Value types; thread-safe when not
// mutated.
#ifndef SPARSESERVE_COMMON_ENGINE_REQUEST_OPTIONS_H_
#define SPARSESERVE_COMMON_ENGINE_REQUEST_OPTIONS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/attention_plan.h"

namespace sparseserve::engine {

enum class AttentionMethod { kDense, kSlidingWindow, kMInference, kTokenSelect };

// One phase's attention method and its parameters. Fields of other methods are ignored.
struct AttentionChoice {
  AttentionMethod method = AttentionMethod::kDense;
  // sliding-window: each query sees the last `window` positions (itself included); >= 1.
  int window = 0;
  // sliding-window: the first `sink_tokens` positions stay visible too (StreamingLLM's attention
  // sinks, kept at their true RoPE positions). -1 = the default: 4 when chosen per request.
  int sink_tokens = -1;
  // minference (papers/minference.md): prompts shorter than this run dense (default 8192).
  int sparse_prefill_threshold = 8192;
  std::string minference_config;  // per-head pattern JSON; empty = VS(1000, 6096) everywhere
  // tokenselect (papers/tokenselect.md §3): initial + k selected + local tokens per query,
  // and the selection cache's cosine threshold θ.
  int tokenselect_k = 2048;
  int tokenselect_initial = 128;
  int tokenselect_local = 512;
  float tokenselect_theta = 0.9f;
  // tokenselect: one selection per KV head (TokenSwift's partial KV) instead of one per layer
  // (kernels/tokenselect_index.h); needs a server sized for it (--tokenselect-per-kv-head).
  bool tokenselect_per_kv_head = false;
};

enum class SpecMethod { kNone, kPromptLookup, kLookahead, kTokenSwift, kKangaroo, kSparseSelf };

struct SpeculationChoice {
  SpecMethod method = SpecMethod::kNone;
  int max_draft = 0;          // draft tokens per step at most; 0 = the method's default
  int lookahead_window = 0;   // Lookahead W; 0 = scaled to the model (papers/lookahead.md)
  int lookahead_ngram = 0;    // Lookahead N; 0 = default
  int lookahead_guesses = 0;  // Lookahead G; 0 = default
  // The controller (spec/draft_length_controller.h) picks each step's draft length from measured
  // acceptance and step cost, down to plain decoding; false = always draft max_draft (or the
  // method's default) tokens, for measuring acceptance and testing exactness (--spec-controller).
  bool controller = true;
  // sparse-self (papers/tokenswift.md §3.2, MagicDec): the target model drafts with this sparse
  // attention over its own KV cache and verifies with the request's dense decode attention.
  // tokenselect or sliding-window; the first `sparse_self_sinks` and the last
  // `sparse_self_window` cached tokens are always seen, tokenselect adds `sparse_self_k` tokens
  // selected per layer. Defaults: TokenSwift's 16 sinks; a budget of about 1K tokens, MagicDec's
  // StreamingLLM draft budget at 32K-128K contexts (TokenSwift's 4096 fits 100K outputs).
  AttentionMethod sparse_self_attention = AttentionMethod::kTokenSelect;
  int sparse_self_sinks = 16;
  int sparse_self_window = 256;
  int sparse_self_k = 768;
  // ... selected per KV head rather than per layer (TokenSwift's "per layer and KV head").
  bool sparse_self_per_kv_head = false;
  // tokenswift (papers/tokenswift.md): drafts in one pass with the sparse-self attention above
  // (its partial KV cache), the model's draft heads (--tokenswift-heads) and a 4-gram table, and
  // verifies a tree of candidates. `tokenswift_tree`: candidates per depth, the first 1 (empty =
  // TokenSwift's [1, 3, 3, 3]); `tokenswift_ngram_k`: 4-grams reused per step (-1 = 20, 0 = off);
  // `tokenswift_ngram_lag`: W, how far behind the end the 4-gram table is counted (-1 = 1024,
  // or an eighth of the context on models with shorter ones).
  std::vector<int> tokenswift_tree;
  int tokenswift_ngram_k = -1;
  int tokenswift_ngram_lag = -1;
  // false: no draft pass — the heads read the row that sampled the root, in the step that
  // verified it (spec/tokenswift.h): one pass of the weights a step; the tree drops its first
  // level. Needs the draft heads for a tree (without them only 4-grams draft).
  bool tokenswift_draft_pass = true;
  // 4-grams chained into one candidate, also after the heads' best path (spec/tokenswift.h;
  // not in the paper): each adds 3 tokens of depth. 1 = the paper's single 4-gram; in [1, 8].
  int tokenswift_ngram_chain = 1;
  // kangaroo (papers/lookahead.md §2): drafts with the model's first layers and the server's
  // early-exit adapter (--kangaroo-adapter) and stops a draft at the first token whose top
  // probability is at most `kangaroo_eta` (the second early exit; Kangaroo's η = 0.6).
  float kangaroo_eta = 0.6f;
};

struct RequestOptions {
  AttentionChoice prefill;  // dense | sliding-window | minference | tokenselect
  AttentionChoice decode;   // dense | sliding-window | tokenselect
  SpeculationChoice spec;
};

// "dense", "sliding-window", "minference", "tokenselect". kInvalidArgument otherwise.
absl::StatusOr<AttentionMethod> ParseAttentionMethod(absl::string_view name);
absl::string_view AttentionMethodName(AttentionMethod method);
// The same names for a kernel pattern's method (the `method` label of per-method metrics).
absl::string_view AttentionMethodKindName(kernels::AttentionMethodKind kind);
// "none", "prompt-lookup", "lookahead", "tokenswift", "kangaroo", "sparse-self".
absl::StatusOr<SpecMethod> ParseSpecMethod(absl::string_view name);
absl::string_view SpecMethodName(SpecMethod method);

// Applies the attention method names of the command line over `options`: the shorthand
// `attention` (--attention) sets the phase(s) its method belongs to — dense and sliding-window
// both, minference the prefill, tokenselect the decode — and the per-phase names `prefill`
// (--prefill-attention) and `decode` (--decode-attention) win over it. "" = not given (the
// phase keeps its method). kInvalidArgument naming the flag for an unknown name; a method in the
// wrong phase is left to Validate.
absl::Status ApplyAttentionMethodNames(absl::string_view attention, absl::string_view prefill,
                                       absl::string_view decode, RequestOptions* options);

// kInvalidArgument when a method is used in the wrong phase (minference for decode) or its
// parameters are out of range (a sliding window < 1, ...).
absl::Status Validate(const RequestOptions& options);

// The attention sparse-self and TokenSwift draft with (SpeculationChoice::sparse_self_*), as a
// decode-phase choice.
AttentionChoice SparseSelfDraftAttention(const SpeculationChoice& spec);

// The kernel-level pattern of one phase's choice (a per-request sliding window gets 4 sinks unless
// it names its own). REQUIRES: Validate passed.
kernels::AttentionPattern AttentionPatternOf(const AttentionChoice& choice);

// The fraction of causal (query, key) pairs that a request's attention computes when its prompt of
// `prompt_tokens` is prefilled with the prefill choice and `generated_tokens` more rows are decoded
// with the decode choice: 1 for dense, less for a window shorter than the context. The
// evaluation prints it beside every accuracy. Methods that pick keys from the data cannot be
// known ahead: MInference's (and TokenSelect's chunked) prefill uses `measured_prefill_density`
// and TokenSelect's decode `measured_decode_density` (what the engine reported,
// GenerationResult::*_attention_density), kUnimplemented without them.
absl::StatusOr<double> AttentionDensity(const RequestOptions& options, int64_t prompt_tokens,
                                        int64_t generated_tokens,
                                        std::optional<double> measured_prefill_density = {},
                                        std::optional<double> measured_decode_density = {});

// Most nodes a TokenSwift tree may have (its default [1, 3, 3, 3] has 40).
inline constexpr int kMaxTokenSwiftTreeNodes = 128;

// Sinks a sliding window chosen per request keeps when it does not say (StreamingLLM §3: four
// initial tokens hold most of the attention mass that a pure window would lose).
inline constexpr int kDefaultRequestSinkTokens = 4;

}  // namespace sparseserve::engine

#endif  // SPARSESERVE_COMMON_ENGINE_REQUEST_OPTIONS_H_
