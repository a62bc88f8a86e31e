#include "common/engine/request_options.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/core/status.h"

namespace sparseserve::engine {
namespace {

absl::Status ValidatePhase(const AttentionChoice& c, absl::string_view phase) {
  switch (c.method) {
    case AttentionMethod::kDense: return absl::OkStatus();
    case AttentionMethod::kSlidingWindow:
      if (c.window < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(phase, " attention sliding-window needs a window >= 1, got ", c.window));
      }
      if (c.sink_tokens < -1) {
        return absl::InvalidArgumentError(absl::StrCat(
            phase, " attention sliding-window sink tokens must be >= 0, got ", c.sink_tokens));
      }
      return absl::OkStatus();
    case AttentionMethod::kMInference:
      if (phase != "prefill") {
        return absl::InvalidArgumentError(
            absl::StrCat("minference is a prefill attention method, not a ", phase, " one"));
      }
      if (c.sparse_prefill_threshold < 0) {
        return absl::InvalidArgumentError("sparse prefill threshold must be >= 0");
      }
      return absl::OkStatus();
    case AttentionMethod::kTokenSelect:  // decode, or the chunked-prefill variant (§3.3)
      if (c.tokenselect_k < 1 || c.tokenselect_initial < 0 || c.tokenselect_local < 0 ||
          !(c.tokenselect_theta >= -1.0f && c.tokenselect_theta <= 1.0f)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tokenselect needs k >= 1, initial >= 0, local >= 0 and theta in [-1, 1]; got k ",
            c.tokenselect_k, ", initial ", c.tokenselect_initial, ", local ", c.tokenselect_local,
            ", theta ", c.tokenselect_theta));
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError("unknown attention method");
}

// ParseAttentionMethod with the flag that gave the name in front of an error.
absl::StatusOr<AttentionMethod> ParseNamedBy(absl::string_view flag, absl::string_view name) {
  absl::StatusOr<AttentionMethod> method = ParseAttentionMethod(name);
  if (!method.ok()) return AnnotateStatus(method.status(), flag);
  return method;
}

}  // namespace

absl::StatusOr<AttentionMethod> ParseAttentionMethod(absl::string_view name) {
  for (AttentionMethod m : {AttentionMethod::kDense, AttentionMethod::kSlidingWindow,
                            AttentionMethod::kMInference, AttentionMethod::kTokenSelect}) {
    if (name == AttentionMethodName(m)) return m;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown attention method '", name, "' (dense, sliding-window, minference, tokenselect)"));
}

absl::string_view AttentionMethodName(AttentionMethod method) {
  switch (method) {
    case AttentionMethod::kDense: return "dense";
    case AttentionMethod::kSlidingWindow: return "sliding-window";
    case AttentionMethod::kMInference: return "minference";
    case AttentionMethod::kTokenSelect: return "tokenselect";
  }
  return "?";
}

absl::string_view AttentionMethodKindName(kernels::AttentionMethodKind kind) {
  switch (kind) {
    case kernels::AttentionMethodKind::kDense: return AttentionMethodName(AttentionMethod::kDense);
    case kernels::AttentionMethodKind::kSlidingWindow:
      return AttentionMethodName(AttentionMethod::kSlidingWindow);
    case kernels::AttentionMethodKind::kMInference:
      return AttentionMethodName(AttentionMethod::kMInference);
    case kernels::AttentionMethodKind::kTokenSelect:
      return AttentionMethodName(AttentionMethod::kTokenSelect);
  }
  return "?";
}

absl::StatusOr<SpecMethod> ParseSpecMethod(absl::string_view name) {
  for (SpecMethod m : {SpecMethod::kNone, SpecMethod::kPromptLookup, SpecMethod::kLookahead,
                       SpecMethod::kTokenSwift, SpecMethod::kKangaroo, SpecMethod::kSparseSelf}) {
    if (name == SpecMethodName(m)) return m;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown speculation method '", name,
                   "' (none, prompt-lookup, lookahead, tokenswift, kangaroo, sparse-self)"));
}

absl::string_view SpecMethodName(SpecMethod method) {
  switch (method) {
    case SpecMethod::kNone: return "none";
    case SpecMethod::kPromptLookup: return "prompt-lookup";
    case SpecMethod::kLookahead: return "lookahead";
    case SpecMethod::kTokenSwift: return "tokenswift";
    case SpecMethod::kKangaroo: return "kangaroo";
    case SpecMethod::kSparseSelf: return "sparse-self";
  }
  return "?";
}

absl::Status ApplyAttentionMethodNames(absl::string_view attention, absl::string_view prefill,
                                       absl::string_view decode, RequestOptions* options) {
  if (!attention.empty()) {
    SS_ASSIGN_OR_RETURN(const AttentionMethod m, ParseNamedBy("--attention", attention));
    if (m != AttentionMethod::kTokenSelect) options->prefill.method = m;
    if (m != AttentionMethod::kMInference) options->decode.method = m;
  }
  if (!prefill.empty()) {
    SS_ASSIGN_OR_RETURN(options->prefill.method, ParseNamedBy("--prefill-attention", prefill));
  }
  if (!decode.empty()) {
    SS_ASSIGN_OR_RETURN(options->decode.method, ParseNamedBy("--decode-attention", decode));
  }
  return absl::OkStatus();
}

absl::Status Validate(const RequestOptions& options) {
  if (absl::Status s = ValidatePhase(options.prefill, "prefill"); !s.ok()) return s;
  if (absl::Status s = ValidatePhase(options.decode, "decode"); !s.ok()) return s;
  const SpeculationChoice& spec = options.spec;
  if (spec.max_draft < 0 || spec.lookahead_window < 0 || spec.lookahead_ngram < 0 ||
      spec.lookahead_guesses < 0) {
    return absl::InvalidArgumentError("speculation parameters must be >= 0");
  }
  if (spec.lookahead_window == 1 || spec.lookahead_ngram == 1) {
    return absl::InvalidArgumentError(
        "lookahead: the window (--lookahead-window) and n-gram size (--lookahead-ngram) must be "
        ">= 2 (0 = default)");
  }
  // Bounds that keep one sequence's step within reason (the paper's largest setting is W = 15,
  // N = 5, G = 15: 120 rows).
  if (spec.max_draft > 64 || spec.lookahead_window > 64 || spec.lookahead_ngram > 16 ||
      spec.lookahead_guesses > 64) {
    return absl::InvalidArgumentError(
        "speculation parameters too large: max_draft, lookahead window and guesses <= 64, "
        "n-gram <= 16");
  }
  const bool model_drafts = spec.method == SpecMethod::kSparseSelf ||
                            spec.method == SpecMethod::kTokenSwift ||
                            spec.method == SpecMethod::kKangaroo;
  if (model_drafts && options.decode.method != AttentionMethod::kDense) {
    // The drafts are checked against the request's own decode attention; a sparse one would
    // share the draft's selection state (TokenSelect) or make the draft pointless.
    return absl::InvalidArgumentError(
        absl::StrCat(SpecMethodName(spec.method),
                     " speculation verifies with dense attention: the decode attention must be "
                     "dense, not ",
                     AttentionMethodName(options.decode.method)));
  }
  if (!(spec.kangaroo_eta >= 0 && spec.kangaroo_eta <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("kangaroo eta must be in [0, 1], got ", spec.kangaroo_eta));
  }
  if (spec.method == SpecMethod::kSparseSelf || spec.method == SpecMethod::kTokenSwift) {
    const absl::string_view name = SpecMethodName(spec.method);
    if (spec.sparse_self_attention != AttentionMethod::kTokenSelect &&
        spec.sparse_self_attention != AttentionMethod::kSlidingWindow) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " drafts with tokenselect or sliding-window attention, not ",
                       AttentionMethodName(spec.sparse_self_attention)));
    }
    if (spec.sparse_self_sinks < 0 || spec.sparse_self_window < 1 || spec.sparse_self_k < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " needs sinks >= 0, window >= 1 and k >= 1; got sinks ", spec.sparse_self_sinks,
          ", window ", spec.sparse_self_window, ", k ", spec.sparse_self_k));
    }
  }
  if (!spec.tokenswift_tree.empty()) {
    int nodes = 0, level = 1;
    bool ok = spec.tokenswift_tree[0] == 1 && spec.tokenswift_tree.size() <= 8;
    for (const int b : spec.tokenswift_tree) {
      ok = ok && b >= 1 && b <= 16;
      if (!ok) break;
      level *= b;
      nodes += level;
      ok = nodes <= kMaxTokenSwiftTreeNodes;
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenswift tree: candidates per depth, the first 1, each in [1, 16], at most 8 depths "
          "and ",
          kMaxTokenSwiftTreeNodes, " nodes (TokenSwift's is 1,3,3,3); got ",
          absl::StrJoin(spec.tokenswift_tree, ",")));
    }
  }
  if (spec.tokenswift_ngram_chain < 1 || spec.tokenswift_ngram_chain > 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenswift: 4-grams chained per candidate in [1, 8]; got ", spec.tokenswift_ngram_chain));
  }
  if (spec.tokenswift_ngram_k < -1 || spec.tokenswift_ngram_k > 64 ||
      spec.tokenswift_ngram_lag < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenswift: n-gram k in [0, 64] and lag >= 0 (-1 = default); got k ",
                     spec.tokenswift_ngram_k, ", lag ", spec.tokenswift_ngram_lag));
  }
  return absl::OkStatus();
}

AttentionChoice SparseSelfDraftAttention(const SpeculationChoice& spec) {
  AttentionChoice c;
  c.method = spec.sparse_self_attention;
  c.window = spec.sparse_self_window;
  c.sink_tokens = spec.sparse_self_sinks;
  c.tokenselect_k = spec.sparse_self_k;
  c.tokenselect_initial = spec.sparse_self_sinks;
  c.tokenselect_local = spec.sparse_self_window;
  c.tokenselect_per_kv_head = spec.sparse_self_per_kv_head;
  return c;
}

kernels::AttentionPattern AttentionPatternOf(const AttentionChoice& choice) {
  kernels::AttentionPattern p;
  switch (choice.method) {
    case AttentionMethod::kDense: break;
    case AttentionMethod::kSlidingWindow:
      p.kind = kernels::AttentionMethodKind::kSlidingWindow;
      p.window = choice.window;
      p.sink_tokens = choice.sink_tokens < 0 ? kDefaultRequestSinkTokens : choice.sink_tokens;
      break;
    case AttentionMethod::kMInference: p.kind = kernels::AttentionMethodKind::kMInference; break;
    case AttentionMethod::kTokenSelect:
      p.kind = kernels::AttentionMethodKind::kTokenSelect;
      p.tokenselect = {choice.tokenselect_k, choice.tokenselect_initial, choice.tokenselect_local,
                       choice.tokenselect_theta, choice.tokenselect_per_kv_head};
      break;
  }
  return p;
}

namespace {

// Keys that the causal rows at positions [begin, end) see under `pattern` (no query mask).
absl::StatusOr<int64_t> VisiblePairs(const kernels::AttentionPattern& pattern, int64_t begin,
                                     int64_t end) {
  switch (pattern.kind) {
    case kernels::AttentionMethodKind::kDense: return (end * (end + 1) - begin * (begin + 1)) / 2;
    case kernels::AttentionMethodKind::kSlidingWindow: {
      int64_t pairs = 0;
      for (int64_t pos = begin; pos < end; ++pos) {
        const int64_t window = std::min<int64_t>(pos + 1, pattern.window);
        pairs += window + std::min<int64_t>(pattern.sink_tokens, pos + 1 - window);
      }
      return pairs;
    }
    case kernels::AttentionMethodKind::kMInference:
    case kernels::AttentionMethodKind::kTokenSelect: break;
  }
  return absl::UnimplementedError(
      "the attention density of a data-dependent method is measured by the method, not known "
      "ahead");
}

}  // namespace

absl::StatusOr<double> AttentionDensity(const RequestOptions& options, int64_t prompt_tokens,
                                        int64_t generated_tokens,
                                        std::optional<double> measured_prefill_density,
                                        std::optional<double> measured_decode_density) {
  const int64_t end = prompt_tokens + generated_tokens;
  if (prompt_tokens < 0 || generated_tokens < 0 || end == 0) {
    return absl::InvalidArgumentError("attention density needs at least one token");
  }
  // Causal pairs of the rows [0, n): exact, one of n, n + 1 is even.
  auto causal = [](int64_t n) {
    const int64_t pairs = n * (n + 1) / 2;
    return static_cast<double>(pairs);
  };
  double prefill = 0, decode = 0;
  if ((options.prefill.method == AttentionMethod::kMInference ||
       options.prefill.method == AttentionMethod::kTokenSelect) &&
      measured_prefill_density.has_value()) {
    prefill = *measured_prefill_density * causal(prompt_tokens);
  } else {
    SS_ASSIGN_OR_RETURN(const int64_t pairs,
                        VisiblePairs(AttentionPatternOf(options.prefill), 0, prompt_tokens));
    prefill = static_cast<double>(pairs);
  }
  if (options.decode.method == AttentionMethod::kTokenSelect &&
      measured_decode_density.has_value()) {
    decode = *measured_decode_density * (causal(end) - causal(prompt_tokens));
  } else {
    SS_ASSIGN_OR_RETURN(const int64_t pairs,
                        VisiblePairs(AttentionPatternOf(options.decode), prompt_tokens, end));
    decode = static_cast<double>(pairs);
  }
  return (prefill + decode) / causal(end);
}

}  // namespace sparseserve::engine
