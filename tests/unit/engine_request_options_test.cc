// engine::RequestOptions: method names, phase and parameter checks, and the command line's
// shorthand rule (--attention) against the per-phase names.
#include "common/engine/request_options.h"

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
  o.prefill.method = AttentionMethod::kTokenSelect;
  EXPECT_EQ(Validate(o).code(), absl::StatusCode::kInvalidArgument);
  o.prefill.method = AttentionMethod::kMInference;
  EXPECT_TRUE(Validate(o).ok());
  o.decode.method = AttentionMethod::kTokenSelect;
  o.decode.tokenselect_theta = 1.5f;
  EXPECT_EQ(Validate(o).code(), absl::StatusCode::kInvalidArgument);
  o.decode.tokenselect_theta = 0.9f;
  EXPECT_TRUE(Validate(o).ok());
  EXPECT_EQ(CheckImplemented(o).code(), absl::StatusCode::kUnimplemented);
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
  ASSERT_TRUE(ApplyAttentionMethodNames("", "tokenselect", "", &o).ok());
  EXPECT_EQ(Validate(o).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sparseserve::engine
