// common/rpc/request_conversion: sampling presence (temperature 0 set explicitly is greedy, also
// when it arrives as JSON the way grpcurl sends it through reflection) and the attention /
// speculation choices over the server's defaults.
#include <string>

#include "absl/status/status.h"
#include "common/rpc/request_conversion.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace sparseserve::rpc {
namespace {

using ::testing::HasSubstr;

TEST(SamplingFromProtoTest, MapsUnsetFieldsToTheirDefaults) {
  v1::SamplingParams proto;
  sampling::SamplingParams p = SamplingFromProto(proto);
  EXPECT_EQ(p.temperature, 1.0f);  // unset
  EXPECT_EQ(p.top_p, 1.0f);
  EXPECT_EQ(p.repetition_penalty, 1.0f);
  proto.set_temperature(0.0f);
  proto.set_top_p(0.5f);
  proto.set_repetition_penalty(1.2f);
  proto.set_seed(7);
  p = SamplingFromProto(proto);
  EXPECT_EQ(p.temperature, 0.0f);  // set to 0: greedy
  EXPECT_EQ(p.top_p, 0.5f);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.2f);
  EXPECT_EQ(p.seed, 7u);
}

TEST(SamplingFromProtoTest, JsonTemperatureZeroIsGreedy) {
  // What a client discovering the API through reflection sends (grpcurl -d '...').
  v1::GenerateRequest request;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  R"({"text": "Once upon a time", "sampling": {"temperature": 0}})", &request)
                  .ok());
  EXPECT_TRUE(request.sampling().has_temperature());
  EXPECT_EQ(SamplingFromProto(request.sampling()).temperature, 0.0f);
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(R"({"text": "Once upon a time"})", &request)
          .ok());
  EXPECT_EQ(SamplingFromProto(request.sampling()).temperature, 1.0f);
}

absl::StatusOr<engine::RequestOptions> Convert(const v1::GenerateRequest& r,
                                               const engine::RequestOptions& defaults = {}) {
  return RequestOptionsFromProto(r.prefill_attention(), r.decode_attention(), r.speculation(),
                                 defaults);
}

TEST(RequestOptionsFromProtoTest, UnsetChoicesTakeTheDefaults) {
  engine::RequestOptions defaults;
  defaults.decode.method = engine::AttentionMethod::kSlidingWindow;
  defaults.decode.window = 256;
  defaults.decode.sink_tokens = 4;
  defaults.prefill.sparse_prefill_threshold = 100;
  absl::StatusOr<engine::RequestOptions> o = Convert(v1::GenerateRequest(), defaults);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->prefill.method, engine::AttentionMethod::kDense);
  EXPECT_EQ(o->decode.method, engine::AttentionMethod::kSlidingWindow);
  EXPECT_EQ(o->decode.window, 256);
  EXPECT_EQ(o->prefill.sparse_prefill_threshold, 100);
  EXPECT_EQ(o->spec.method, engine::SpecMethod::kNone);
}

TEST(RequestOptionsFromProtoTest, SetChoicesReplaceTheDefaults) {
  engine::RequestOptions defaults;
  defaults.decode.window = 256;
  defaults.decode.sink_tokens = 4;
  v1::GenerateRequest r;
  r.mutable_prefill_attention()->set_method("sliding-window");
  r.mutable_prefill_attention()->set_window(32);
  r.mutable_decode_attention()->set_method("sliding-window");
  r.mutable_decode_attention()->set_sink_tokens(0);  // explicit 0: no sinks, not "unset"
  absl::StatusOr<engine::RequestOptions> o = Convert(r, defaults);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->prefill.method, engine::AttentionMethod::kSlidingWindow);
  EXPECT_EQ(o->prefill.window, 32);
  EXPECT_EQ(o->decode.method, engine::AttentionMethod::kSlidingWindow);
  EXPECT_EQ(o->decode.window, 256);  // unset: the default's
  EXPECT_EQ(o->decode.sink_tokens, 0);

  // A request choosing dense over a sliding-window default gets dense.
  defaults.decode.method = engine::AttentionMethod::kSlidingWindow;
  r.mutable_decode_attention()->set_method("dense");
  o = Convert(r, defaults);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->decode.method, engine::AttentionMethod::kDense);
}

TEST(RequestOptionsFromProtoTest, UnknownNamesAreInvalidArgumentNamingTheField) {
  v1::GenerateRequest r;
  r.mutable_prefill_attention()->set_method("flash");
  absl::Status s = Convert(r).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("prefill_attention.method"));
  EXPECT_THAT(s.message(), HasSubstr("'flash'"));
  r = v1::GenerateRequest();
  r.mutable_decode_attention()->set_method("Dense");  // names are exact
  EXPECT_EQ(Convert(r).status().code(), absl::StatusCode::kInvalidArgument);
  r = v1::GenerateRequest();
  r.mutable_speculation()->set_method("medusa");
  s = Convert(r).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("speculation.method"));
}

TEST(RequestOptionsFromProtoTest, ValidateErrorsAreInvalidArgument) {
  v1::GenerateRequest r;
  r.mutable_decode_attention()->set_method("sliding-window");
  r.mutable_decode_attention()->set_window(0);
  absl::Status s = Convert(r).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("window"));
  r = v1::GenerateRequest();
  r.mutable_prefill_attention()->set_method("tokenselect");  // its chunked-prefill variant
  r.mutable_prefill_attention()->set_tokenselect_k(0);
  EXPECT_EQ(Convert(r).status().code(), absl::StatusCode::kInvalidArgument);
  r.mutable_prefill_attention()->set_tokenselect_k(64);
  ASSERT_TRUE(Convert(r).ok());
  EXPECT_EQ(Convert(r)->prefill.tokenselect_k, 64);
  EXPECT_FALSE(Convert(r)->prefill.tokenselect_per_kv_head);
  r.mutable_prefill_attention()->set_tokenselect_per_kv_head(true);
  r.mutable_decode_attention()->set_tokenselect_per_kv_head(true);
  r.mutable_speculation()->set_sparse_self_per_kv_head(true);
  ASSERT_TRUE(Convert(r).ok());
  EXPECT_TRUE(Convert(r)->prefill.tokenselect_per_kv_head);
  EXPECT_TRUE(Convert(r)->decode.tokenselect_per_kv_head);
  EXPECT_TRUE(Convert(r)->spec.sparse_self_per_kv_head);
  EXPECT_TRUE(engine::AttentionPatternOf(engine::SparseSelfDraftAttention(Convert(r)->spec))
                  .tokenselect.per_kv_head);
  r = v1::GenerateRequest();
  r.mutable_decode_attention()->set_method("minference");  // a prefill method
  EXPECT_EQ(Convert(r).status().code(), absl::StatusCode::kInvalidArgument);
  r = v1::GenerateRequest();
  r.mutable_speculation()->set_max_draft(-1);
  EXPECT_EQ(Convert(r).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RequestOptionsFromProtoTest, EveryMethodIsBuilt) {
  // Explicit "none" and "dense" are fine, and so are minference (issue 12), tokenselect
  // (issue 13), prompt-lookup and lookahead (issue 14), sparse-self, tokenswift and kangaroo
  // (issue 15).
  v1::GenerateRequest r;
  r.mutable_prefill_attention()->set_method("minference");
  r.mutable_speculation()->set_method("none");
  r.mutable_decode_attention()->set_method("dense");
  EXPECT_TRUE(Convert(r).ok());
  r.mutable_decode_attention()->set_method("tokenselect");
  EXPECT_TRUE(Convert(r).ok());
  for (const std::string method : {"prompt-lookup", "lookahead"}) {
    r.mutable_speculation()->set_method(method);
    r.mutable_speculation()->set_controller(false);
    absl::StatusOr<engine::RequestOptions> o = Convert(r);
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_EQ(engine::SpecMethodName(o->spec.method), method);
    EXPECT_FALSE(o->spec.controller);
  }
  // sparse-self with its draft attention; it verifies dense, so a tokenselect decode is refused.
  r.mutable_speculation()->set_method("sparse-self");
  EXPECT_EQ(Convert(r).status().code(), absl::StatusCode::kInvalidArgument);
  r.mutable_decode_attention()->set_method("dense");
  r.mutable_speculation()->set_sparse_self_attention("sliding-window");
  r.mutable_speculation()->set_sparse_self_sinks(0);
  r.mutable_speculation()->set_sparse_self_window(64);
  r.mutable_speculation()->set_sparse_self_k(32);
  absl::StatusOr<engine::RequestOptions> o = Convert(r);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->spec.sparse_self_attention, engine::AttentionMethod::kSlidingWindow);
  EXPECT_EQ(o->spec.sparse_self_sinks, 0);
  EXPECT_EQ(o->spec.sparse_self_window, 64);
  EXPECT_EQ(o->spec.sparse_self_k, 32);
  r.mutable_speculation()->set_sparse_self_attention("flash");
  absl::Status s = Convert(r).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("speculation.sparse_self_attention"));
  // tokenswift: its tree and 4-gram table; a tree not starting with 1 is refused naming it.
  r.mutable_speculation()->set_sparse_self_attention("sliding-window");
  r.mutable_speculation()->set_method("tokenswift");
  for (const int b : {1, 2, 2}) r.mutable_speculation()->add_tokenswift_tree(b);
  r.mutable_speculation()->set_tokenswift_ngram_k(0);
  r.mutable_speculation()->set_tokenswift_ngram_lag(7);
  r.mutable_speculation()->set_tokenswift_draft_pass(false);
  r.mutable_speculation()->set_tokenswift_ngram_chain(3);
  o = Convert(r);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->spec.method, engine::SpecMethod::kTokenSwift);
  EXPECT_EQ(o->spec.tokenswift_tree, (std::vector<int>{1, 2, 2}));
  EXPECT_EQ(o->spec.tokenswift_ngram_k, 0);
  EXPECT_EQ(o->spec.tokenswift_ngram_lag, 7);
  EXPECT_FALSE(o->spec.tokenswift_draft_pass);
  EXPECT_EQ(o->spec.tokenswift_ngram_chain, 3);
  // An empty tree is the server's default tree, not TokenSwift's.
  engine::RequestOptions defaults;
  defaults.spec.tokenswift_tree = {1, 4};
  r.mutable_speculation()->clear_tokenswift_tree();
  o = Convert(r, defaults);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->spec.tokenswift_tree, (std::vector<int>{1, 4}));
  for (const int b : {1, 2, 2}) r.mutable_speculation()->add_tokenswift_tree(b);
  r.mutable_speculation()->set_tokenswift_tree(0, 2);
  s = Convert(r).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tokenswift tree"));
  // kangaroo: its η.
  r.mutable_speculation()->clear_tokenswift_tree();
  r.mutable_speculation()->set_method("kangaroo");
  r.mutable_speculation()->set_kangaroo_eta(0.25f);
  o = Convert(r);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->spec.method, engine::SpecMethod::kKangaroo);
  EXPECT_FLOAT_EQ(o->spec.kangaroo_eta, 0.25f);
  r.mutable_speculation()->set_kangaroo_eta(-0.1f);
  EXPECT_THAT(Convert(r).status().message(), HasSubstr("kangaroo eta"));
}

}  // namespace
}  // namespace sparseserve::rpc
