// engine::RequestOptions: method names, phase and parameter checks, and the command line's
// shorthand rule (--attention) against the per-phase names.
#include "common/engine/request_options.h"

#include <cstdint>
#include <utility>

#include "kernels/attention_visibility.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sparseserve::engine {
namespace {

using ::testing::HasSubstr;

TEST(RequestOptionsTest, NamesRoundTrip) {
  for (AttentionMethod m : {AttentionMethod::kDense, AttentionMethod::kSlidingWindow,
                            AttentionMethod::kMInference, AttentionMethod::kTokenSelect}) {
    EXPECT_EQ(*ParseAttentionMethod(AttentionMethodName(m)), m);
  }
  for (SpecMethod m : {SpecMethod::kNone, SpecMethod::kPromptLookup, SpecMethod::kLookahead,
                       SpecMethod::kTokenSwift, SpecMethod::kKangaroo, SpecMethod::kSparseSelf}) {
    EXPECT_EQ(*ParseSpecMethod(SpecMethodName(m)), m);
  }
  EXPECT_EQ(ParseAttentionMethod("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseAttentionMethod("sliding_window").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSpecMethod("eagle").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RequestOptionsTest, ValidateChecksPhasesAndParameters) {
  RequestOptions o;
  EXPECT_TRUE(Validate(o).ok());
  o.decode.method = AttentionMethod::kSlidingWindow;
  EXPECT_EQ(Validate(o).code(), absl::StatusCode::kInvalidArgument);  // window 0
  o.decode.window = 1;
  EXPECT_TRUE(Validate(o).ok());
  o.decode.sink_tokens = -2;
  EXPECT_EQ(Validate(o).code(), absl::StatusCode::kInvalidArgument);
  o.decode.sink_tokens = 0;
  o.prefill.method = AttentionMethod::kTokenSelect;  // the chunked-prefill variant
  EXPECT_TRUE(Validate(o).ok());
  o.decode.method = AttentionMethod::kMInference;  // a prefill method only
  EXPECT_EQ(Validate(o).code(), absl::StatusCode::kInvalidArgument);
  o.decode.method = AttentionMethod::kSlidingWindow;
  o.prefill.method = AttentionMethod::kMInference;
  EXPECT_TRUE(Validate(o).ok());
  o.decode.method = AttentionMethod::kTokenSelect;
  o.decode.tokenselect_theta = 1.5f;
  EXPECT_EQ(Validate(o).code(), absl::StatusCode::kInvalidArgument);
  o.decode.tokenselect_theta = 0.9f;
  EXPECT_TRUE(Validate(o).ok());  // the backend decides (Backend::SupportsAttention)
  o.spec.method = SpecMethod::kLookahead;
  EXPECT_TRUE(Validate(o).ok());
  o.spec.method = SpecMethod::kPromptLookup;
  EXPECT_TRUE(Validate(o).ok());
  o.spec.method = SpecMethod::kKangaroo;  // issue 15: a model drafter verifies dense
  o.decode.method = AttentionMethod::kDense;
  EXPECT_TRUE(Validate(o).ok());
  o.spec.method = SpecMethod::kLookahead;
  o.spec.lookahead_ngram = 1;
  EXPECT_EQ(Validate(o).code(), absl::StatusCode::kInvalidArgument);
  o.spec.lookahead_ngram = 0;
  o.spec.max_draft = 1000;
  EXPECT_EQ(Validate(o).code(), absl::StatusCode::kInvalidArgument);
}

TEST(RequestOptionsTest, SparseSelfDraftsSparseAndVerifiesDense) {
  RequestOptions o;
  o.spec.method = SpecMethod::kSparseSelf;
  EXPECT_TRUE(Validate(o).ok());
  EXPECT_TRUE(Validate(o).ok());
  // The defaults: TokenSelect with 16 sinks, a window of 256 and 768 selected tokens.
  AttentionChoice draft = SparseSelfDraftAttention(o.spec);
  EXPECT_EQ(draft.method, AttentionMethod::kTokenSelect);
  EXPECT_EQ(draft.tokenselect_initial, 16);
  EXPECT_EQ(draft.tokenselect_local, 256);
  EXPECT_EQ(draft.tokenselect_k, 768);
  o.spec.sparse_self_attention = AttentionMethod::kSlidingWindow;
  draft = SparseSelfDraftAttention(o.spec);
  const kernels::AttentionPattern p = AttentionPatternOf(draft);
  EXPECT_EQ(p.kind, kernels::AttentionMethodKind::kSlidingWindow);
  EXPECT_EQ(p.window, 256);
  EXPECT_EQ(p.sink_tokens, 16);
  o.spec.sparse_self_sinks = 0;  // no sinks is a valid (StreamingLLM-less) draft
  EXPECT_TRUE(Validate(o).ok());
  EXPECT_EQ(AttentionPatternOf(SparseSelfDraftAttention(o.spec)).sink_tokens, 0);
  for (const AttentionMethod m : {AttentionMethod::kDense, AttentionMethod::kMInference}) {
    o.spec.sparse_self_attention = m;
    EXPECT_EQ(Validate(o).code(), absl::StatusCode::kInvalidArgument) << AttentionMethodName(m);
  }
  o.spec.sparse_self_attention = AttentionMethod::kTokenSelect;
  o.spec.sparse_self_window = 0;
  EXPECT_EQ(Validate(o).code(), absl::StatusCode::kInvalidArgument);
  o.spec.sparse_self_window = 8;
  o.spec.sparse_self_k = 0;
  EXPECT_EQ(Validate(o).code(), absl::StatusCode::kInvalidArgument);
  o.spec.sparse_self_k = 8;
  o.spec.sparse_self_sinks = -1;
  EXPECT_EQ(Validate(o).code(), absl::StatusCode::kInvalidArgument);
  o.spec.sparse_self_sinks = 4;
  // Verification is dense: a sparse decode attention is refused, naming it.
  o.decode.method = AttentionMethod::kTokenSelect;
  const absl::Status s = Validate(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("dense"));
  EXPECT_THAT(s.message(), HasSubstr("tokenselect"));
  // Other methods ignore the sparse-self fields.
  o.spec.method = SpecMethod::kPromptLookup;
  o.spec.sparse_self_k = 0;
  EXPECT_TRUE(Validate(o).ok());
}

TEST(RequestOptionsTest, TokenSwiftChecksItsTreeAndTable) {
  RequestOptions o;
  o.spec.method = SpecMethod::kTokenSwift;
  EXPECT_TRUE(Validate(o).ok());
  EXPECT_TRUE(Validate(o).ok());
  o.spec.tokenswift_tree = {1, 3, 3, 3};
  EXPECT_TRUE(Validate(o).ok());
  // The first level is the one token the model drafts; each level 1..16; at most 128 nodes.
  for (const std::vector<int>& bad : std::vector<std::vector<int>>{
           {3, 3}, {1, 0}, {1, 17}, {1, 8, 8, 8}, {1, 1, 1, 1, 1, 1, 1, 1, 1}}) {
    o.spec.tokenswift_tree = bad;
    const absl::Status s = Validate(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("tokenswift tree"));
  }
  o.spec.tokenswift_tree = {1, 4, 4};
  for (const auto& [k, lag] : {std::pair{-2, 0}, {65, 0}, {20, -2}}) {
    o.spec.tokenswift_ngram_k = k;
    o.spec.tokenswift_ngram_lag = lag;
    EXPECT_EQ(Validate(o).code(), absl::StatusCode::kInvalidArgument) << k << " " << lag;
  }
  o.spec.tokenswift_ngram_k = 0;
  o.spec.tokenswift_ngram_lag = 0;
  EXPECT_TRUE(Validate(o).ok());
  // 4-grams chained per candidate: 1 (the paper's) to 8.
  for (const int chain : {0, 9}) {
    o.spec.tokenswift_ngram_chain = chain;
    EXPECT_THAT(Validate(o).message(), HasSubstr("4-grams chained")) << chain;
  }
  o.spec.tokenswift_ngram_chain = 8;
  EXPECT_TRUE(Validate(o).ok());
  // It drafts with the sparse-self attention and verifies dense, as sparse-self does.
  o.decode.method = AttentionMethod::kTokenSelect;
  EXPECT_THAT(Validate(o).message(), HasSubstr("tokenswift speculation verifies with dense"));
  // Kangaroo drafts with the model too: dense verification, and η in [0, 1].
  o = RequestOptions();
  o.spec.method = SpecMethod::kKangaroo;
  EXPECT_TRUE(Validate(o).ok());
  for (const float eta : {-0.01f, 1.01f, std::nanf("")}) {
    o.spec.kangaroo_eta = eta;
    EXPECT_THAT(Validate(o).message(), HasSubstr("kangaroo eta")) << eta;
  }
  o.spec.kangaroo_eta = 0;
  o.decode.method = AttentionMethod::kTokenSelect;
  EXPECT_THAT(Validate(o).message(), HasSubstr("kangaroo speculation verifies with dense"));
}

RequestOptions Apply(absl::string_view attention, absl::string_view prefill,
                     absl::string_view decode) {
  RequestOptions o;
  EXPECT_TRUE(ApplyAttentionMethodNames(attention, prefill, decode, &o).ok());
  return o;
}

TEST(RequestOptionsTest, ShorthandSetsThePhasesItsMethodBelongsTo) {
  RequestOptions o = Apply("sliding-window", "", "");
  EXPECT_EQ(o.prefill.method, AttentionMethod::kSlidingWindow);
  EXPECT_EQ(o.decode.method, AttentionMethod::kSlidingWindow);
  o = Apply("minference", "", "");
  EXPECT_EQ(o.prefill.method, AttentionMethod::kMInference);
  EXPECT_EQ(o.decode.method, AttentionMethod::kDense);
  o = Apply("tokenselect", "", "");
  EXPECT_EQ(o.prefill.method, AttentionMethod::kDense);
  EXPECT_EQ(o.decode.method, AttentionMethod::kTokenSelect);
  o = Apply("", "", "");
  EXPECT_EQ(o.prefill.method, AttentionMethod::kDense);
  EXPECT_EQ(o.decode.method, AttentionMethod::kDense);
}

TEST(RequestOptionsTest, ExplicitPhaseNamesWinOverTheShorthand) {
  RequestOptions o = Apply("sliding-window", "dense", "");
  EXPECT_EQ(o.prefill.method, AttentionMethod::kDense);
  EXPECT_EQ(o.decode.method, AttentionMethod::kSlidingWindow);
  o = Apply("sliding-window", "", "dense");
  EXPECT_EQ(o.prefill.method, AttentionMethod::kSlidingWindow);
  EXPECT_EQ(o.decode.method, AttentionMethod::kDense);
  o = Apply("minference", "sliding-window", "tokenselect");
  EXPECT_EQ(o.prefill.method, AttentionMethod::kSlidingWindow);
  EXPECT_EQ(o.decode.method, AttentionMethod::kTokenSelect);
}

TEST(RequestOptionsTest, UnknownNamesNameTheFlag) {
  RequestOptions o;
  absl::Status s = ApplyAttentionMethodNames("sparse", "", "", &o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("--attention"));
  s = ApplyAttentionMethodNames("", "flash", "", &o);
  EXPECT_THAT(s.message(), HasSubstr("--prefill-attention"));
  s = ApplyAttentionMethodNames("", "", "flash", &o);
  EXPECT_THAT(s.message(), HasSubstr("--decode-attention"));
  // The wrong phase is Validate's to refuse, not the parser's.
  ASSERT_TRUE(ApplyAttentionMethodNames("", "", "minference", &o).ok());
  EXPECT_EQ(Validate(o).code(), absl::StatusCode::kInvalidArgument);
}

// Density against a brute-force count over kernels::KeyVisible, the rule the kernels use.
double BruteForceDensity(const RequestOptions& o, int prompt, int generated) {
  int64_t seen = 0, causal = 0;
  const int end = prompt + generated;
  for (int pos = 0; pos < end; ++pos) {
    const kernels::AttentionPattern p = AttentionPatternOf(pos < prompt ? o.prefill : o.decode);
    kernels::KeyVisibility v;
    v.q_len = 1;
    v.kv_len = pos + 1;
    v.window = p.window;
    v.sink_tokens = p.sink_tokens;
    for (int key = 0; key <= pos; ++key) seen += kernels::KeyVisible(v, 0, key) ? 1 : 0;
    causal += pos + 1;
  }
  return static_cast<double>(seen) / static_cast<double>(causal);
}

TEST(RequestOptionsTest, AttentionDensityCountsTheVisiblePairs) {
  RequestOptions dense;
  EXPECT_EQ(*AttentionDensity(dense, 100, 20), 1.0);
  RequestOptions window;
  window.prefill.method = window.decode.method = AttentionMethod::kSlidingWindow;
  window.prefill.window = 16;
  window.decode.window = 8;
  window.decode.sink_tokens = 0;
  for (const auto& [prompt, generated] : {std::pair{1, 0}, {10, 5}, {64, 40}, {300, 1}}) {
    SCOPED_TRACE(prompt);
    EXPECT_DOUBLE_EQ(*AttentionDensity(window, prompt, generated),
                     BruteForceDensity(window, prompt, generated));
  }
  EXPECT_LT(*AttentionDensity(window, 300, 1), 0.2);
  window.prefill.window = window.decode.window = 400;  // covers everything: dense
  EXPECT_DOUBLE_EQ(*AttentionDensity(window, 300, 50), 1.0);
  EXPECT_EQ(AttentionDensity(dense, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  RequestOptions sparse;
  sparse.prefill.method = AttentionMethod::kMInference;
  EXPECT_EQ(AttentionDensity(sparse, 10, 1).status().code(), absl::StatusCode::kUnimplemented);
  // TokenSelect's measured decode density weighs the generated rows' causal pairs.
  RequestOptions ts;
  ts.decode.method = AttentionMethod::kTokenSelect;
  EXPECT_EQ(AttentionDensity(ts, 10, 1).status().code(), absl::StatusCode::kUnimplemented);
  // Prompt 3 (6 pairs dense) + 2 generated rows (4 + 5 pairs, half of them computed).
  EXPECT_DOUBLE_EQ(*AttentionDensity(ts, 3, 2, std::nullopt, 0.5), (6 + 4.5) / 15);
  const kernels::AttentionPattern p = AttentionPatternOf(ts.decode);
  EXPECT_EQ(p.kind, kernels::AttentionMethodKind::kTokenSelect);
  EXPECT_EQ(p.tokenselect, (kernels::TokenSelectParams{2048, 128, 512, 0.9f}));
}

}  // namespace
}  // namespace sparseserve::engine
