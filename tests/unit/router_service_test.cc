// The router end to end in one process: fake decode/prefill workers (router_fake_workers.h) on
// loopback, the real Router behind a real gRPC server, and a real gRPC client.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/engine/model_source.h"
#include "common/rpc/deadline.h"
#include "common/rpc/server_runner.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "router/router.h"
#include "sparseserve/v1/generation.grpc.pb.h"
#include "tests/unit/router_fake_workers.h"

namespace sparseserve::router {
namespace {

using testing::FakeDecodeConfig;
using testing::FakeDecodeWorker;
using testing::FakePrefillWorker;

constexpr char kOutput[] = "Hello world, the café is open";
constexpr char kPrompt[] = "Once upon a time";

struct StreamResult {
  std::vector<v1::GenerateResponse> messages;
  grpc::Status status;
  std::vector<int32_t> ids;
  std::string text;
  const v1::GenerateResponse& last() const { return messages.back(); }
};

// Polls `condition` every 5 ms for up to 10 s (for effects of fire-and-forget RPCs).
template <typename Condition>
bool Eventually(Condition condition) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return condition();
}

class RouterServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<engine::ModelSource> source = engine::OpenModelSource(kModelDir);
    ASSERT_TRUE(source.ok()) << source.status();
    tokenizer_ = std::move(source->tokenizer);
    script_ = *tokenizer_->Encode(kOutput, /*add_special=*/false);
    prompt_ids_ = *tokenizer_->Encode(kPrompt, /*add_special=*/true);
    ASSERT_GE(script_.size(), 6u);
  }

  void TearDown() override {
    if (router_server_ != nullptr) router_server_->Shutdown(absl::Seconds(1));
    if (router_ != nullptr) router_->Shutdown();
    for (auto& server : worker_servers_) server->Shutdown(absl::Seconds(1));
  }

  std::string StartWorker(grpc::Service* service) {
    absl::StatusOr<std::unique_ptr<rpc::RpcServer>> server =
        rpc::RpcServer::Start("127.0.0.1:0", {service});
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return "";
    worker_servers_.push_back(*std::move(server));
    return absl::StrCat("127.0.0.1:", worker_servers_.back()->port());
  }

  FakeDecodeWorker* AddDecodeWorker(FakeDecodeConfig config) {
    config.script = script_;
    decode_workers_.push_back(std::make_unique<FakeDecodeWorker>(std::move(config)));
    options_.decode_workers.push_back(StartWorker(decode_workers_.back().get()));
    return decode_workers_.back().get();
  }

  FakePrefillWorker* AddPrefillWorker(grpc::StatusCode fail_code) {
    prefill_workers_.push_back(std::make_unique<FakePrefillWorker>(script_[0], fail_code));
    options_.prefill_workers.push_back(StartWorker(prefill_workers_.back().get()));
    return prefill_workers_.back().get();
  }

  void StartRouter() {
    options_.model_path = kModelDir;
    absl::StatusOr<std::unique_ptr<Router>> router = Router::Create(options_);
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = *std::move(router);
    absl::StatusOr<std::unique_ptr<rpc::RpcServer>> server =
        rpc::RpcServer::Start("127.0.0.1:0", {router_->service()});
    ASSERT_TRUE(server.ok()) << server.status();
    router_server_ = *std::move(server);
    stub_ = v1::Generation::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", router_server_->port()), grpc::InsecureChannelCredentials()));
  }

  v1::GenerateRequest TextRequest(const std::string& id = "") {
    v1::GenerateRequest request;
    request.set_request_id(id);
    request.set_text(kPrompt);
    request.set_max_tokens(static_cast<int>(script_.size()));
    return request;
  }

  StreamResult Generate(const v1::GenerateRequest& request) {
    grpc::ClientContext context;
    rpc::SetDeadline(context, absl::Seconds(20));
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
        stub_->Generate(&context, request);
    StreamResult result;
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      result.ids.insert(result.ids.end(), response.token_ids().begin(), response.token_ids().end());
      result.text += response.text();
      result.messages.push_back(response);
    }
    result.status = reader->Finish();
    return result;
  }

  grpc::Status Abort(const std::string& id) {
    grpc::ClientContext context;
    rpc::SetDeadline(context, absl::Seconds(10));
    v1::AbortRequest request;
    request.set_request_id(id);
    v1::AbortResponse response;
    return stub_->Abort(&context, request, &response);
  }

  static constexpr char kModelDir[] = SPARSESERVE_TEST_DATA_DIR "/tiny_llama";
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::vector<int32_t> script_;
  std::vector<int32_t> prompt_ids_;
  RouterOptions options_;
  std::vector<std::unique_ptr<FakeDecodeWorker>> decode_workers_;
  std::vector<std::unique_ptr<FakePrefillWorker>> prefill_workers_;
  std::vector<std::unique_ptr<rpc::RpcServer>> worker_servers_;
  std::unique_ptr<Router> router_;
  std::unique_ptr<rpc::RpcServer> router_server_;
  std::unique_ptr<v1::Generation::Stub> stub_;
};

TEST_F(RouterServiceTest, RelaysTokensInOrderWithIncrementalText) {
  FakeDecodeWorker* worker = AddDecodeWorker({});
  StartRouter();
  const StreamResult r = Generate(TextRequest("r1"));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.ids, script_);
  EXPECT_EQ(r.text, absl::StrCat(" ", kOutput));  // continues the prompt: leading space kept
  EXPECT_GE(r.messages.size(), 2u);
  for (const v1::GenerateResponse& m : r.messages) EXPECT_EQ(m.request_id(), "r1");
  EXPECT_EQ(r.last().finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(r.last().usage().prompt_tokens(), static_cast<int>(prompt_ids_.size()));
  EXPECT_EQ(r.last().usage().cached_prompt_tokens(), 7);
  EXPECT_EQ(r.last().usage().completion_tokens(), static_cast<int>(script_.size()));
  EXPECT_DOUBLE_EQ(r.last().timings().queue_seconds(), 0.25);
  EXPECT_FALSE(r.last().timings().disaggregated());
  EXPECT_EQ(r.last().timings().migrations(), 0);
  EXPECT_GT(r.last().timings().time_to_first_token_seconds(), 0);
  EXPECT_GE(r.last().timings().e2e_seconds(), r.last().timings().time_to_first_token_seconds());

  const std::vector<v1::DecodeRequest> sent = worker->decode_requests();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(std::vector<int32_t>(sent[0].prompt_ids().begin(), sent[0].prompt_ids().end()),
            prompt_ids_);
  EXPECT_EQ(sent[0].max_tokens(), static_cast<int>(script_.size()));
  EXPECT_TRUE(sent[0].reservation_id().empty());
  EXPECT_EQ(router_->metrics().requests_finished("length").Value(), 1);
}

TEST_F(RouterServiceTest, RejectsInvalidRequests) {
  FakeDecodeWorker* worker = AddDecodeWorker({});
  StartRouter();
  v1::GenerateRequest empty;
  EXPECT_EQ(Generate(empty).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::GenerateRequest bad_id;
  bad_id.mutable_token_ids()->add_ids(511);
  EXPECT_EQ(Generate(bad_id).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::GenerateRequest negative = TextRequest();
  negative.set_max_tokens(-1);
  EXPECT_EQ(Generate(negative).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::GenerateRequest sampling = TextRequest();
  sampling.mutable_sampling()->set_top_k(-2);
  EXPECT_EQ(Generate(sampling).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::GenerateRequest too_long;
  for (int i = 0; i < 512; ++i) too_long.mutable_token_ids()->add_ids(5);
  EXPECT_EQ(Generate(too_long).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(worker->decode_requests().empty());
}

TEST_F(RouterServiceTest, AbortOfUnknownRequestIsNotFound) {
  AddDecodeWorker({});
  StartRouter();
  EXPECT_EQ(Abort("nobody").error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(RouterServiceTest, AbortEndsAnInFlightRequestAndReachesTheWorker) {
  FakeDecodeWorker* worker = AddDecodeWorker({.fail_after = 2, .hang_instead_of_failing = true});
  StartRouter();
  grpc::ClientContext context;
  rpc::SetDeadline(context, absl::Seconds(20));
  auto reader = stub_->Generate(&context, TextRequest("hang"));
  std::vector<int32_t> ids;
  v1::GenerateResponse response;
  while (ids.size() < 2 && reader->Read(&response)) {
    ids.insert(ids.end(), response.token_ids().begin(), response.token_ids().end());
  }
  ASSERT_EQ(ids.size(), 2u);
  // The id is in flight: a second request with it is refused.
  EXPECT_EQ(Generate(TextRequest("hang")).status.error_code(), grpc::StatusCode::ALREADY_EXISTS);

  ASSERT_TRUE(Abort("hang").ok());
  v1::GenerateResponse last;
  while (reader->Read(&response)) last = response;
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_ABORTED);
  EXPECT_EQ(last.usage().completion_tokens(), 2);
  EXPECT_TRUE(
      Eventually([&] { return worker->aborted_ids() == std::vector<std::string>{"hang"}; }));
  EXPECT_TRUE(Eventually([&] { return worker->num_cancelled_decodes() == 1; }));
  EXPECT_EQ(Abort("hang").error_code(), grpc::StatusCode::NOT_FOUND);  // no longer in flight
}

TEST_F(RouterServiceTest, MigratesToAnotherWorkerWhenTheFirstDiesMidStream) {
  FakeDecodeWorker* first = AddDecodeWorker({.fail_after = 3});
  FakeDecodeWorker* second = AddDecodeWorker({});
  StartRouter();
  const StreamResult r = Generate(TextRequest("m1"));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.ids, script_);
  EXPECT_EQ(r.text, absl::StrCat(" ", kOutput));
  EXPECT_EQ(r.last().finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(r.last().timings().migrations(), 1);
  EXPECT_EQ(r.last().usage().completion_tokens(), static_cast<int>(script_.size()));
  EXPECT_EQ(router_->metrics().request_migrations().Value(), 1);

  ASSERT_EQ(first->decode_requests().size(), 1u);
  const std::vector<v1::DecodeRequest> moved = second->decode_requests();
  ASSERT_EQ(moved.size(), 1u);
  std::vector<int32_t> expected_prompt = prompt_ids_;
  expected_prompt.insert(expected_prompt.end(), script_.begin(), script_.begin() + 3);
  EXPECT_EQ(std::vector<int32_t>(moved[0].prompt_ids().begin(), moved[0].prompt_ids().end()),
            expected_prompt);
  EXPECT_EQ(moved[0].num_generated_before(), 3);
  EXPECT_EQ(moved[0].max_tokens(), static_cast<int>(script_.size()) - 3);
}

TEST_F(RouterServiceTest, FailsWithUnavailableWhenNoOtherWorkerCanTakeOver) {
  AddDecodeWorker({.fail_after = 3});
  StartRouter();
  const StreamResult r = Generate(TextRequest());
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(r.status.error_message().find("no other healthy decode worker"), std::string::npos)
      << r.status.error_message();
  EXPECT_EQ(r.ids, std::vector<int32_t>(script_.begin(), script_.begin() + 3));
  EXPECT_EQ(router_->metrics().requests_finished("error").Value(), 1);
}

TEST_F(RouterServiceTest, RetriesOnAnotherWorkerWhenTheFirstFailsBeforeAnyToken) {
  FakeDecodeWorker* first = AddDecodeWorker({.fail_after = 0});
  FakeDecodeWorker* second = AddDecodeWorker({});
  StartRouter();
  const StreamResult r = Generate(TextRequest());
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.ids, script_);
  EXPECT_EQ(r.last().timings().migrations(), 0);
  EXPECT_EQ(first->decode_requests().size(), 1u);
  ASSERT_EQ(second->decode_requests().size(), 1u);
  EXPECT_EQ(second->decode_requests()[0].num_generated_before(), 0);
}

TEST_F(RouterServiceTest, StopStringTruncatesTextAndStopsTheWorker) {
  FakeDecodeWorker* worker = AddDecodeWorker({.fail_after = 100, .hang_instead_of_failing = true});
  StartRouter();
  v1::GenerateRequest request = TextRequest("s1");
  request.set_max_tokens(100);  // more than the script: the worker then hangs until cancelled
  request.add_stop("café");
  const StreamResult r = Generate(request);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, " Hello world, the ");
  EXPECT_EQ(r.last().finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_LT(r.ids.size(), script_.size());
  EXPECT_TRUE(Eventually([&] { return worker->aborted_ids() == std::vector<std::string>{"s1"}; }));
}

TEST_F(RouterServiceTest, DisaggregatesLongPromptsThroughAPrefillWorker) {
  options_.disagg_threshold_tokens = 1;
  FakeDecodeWorker* decode = AddDecodeWorker({});
  FakePrefillWorker* prefill = AddPrefillWorker(grpc::StatusCode::OK);
  StartRouter();
  const StreamResult r = Generate(TextRequest("d1"));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.ids, script_);  // the prefill worker's first token, then Decode's
  EXPECT_EQ(r.text, absl::StrCat(" ", kOutput));
  EXPECT_TRUE(r.last().timings().disaggregated());
  EXPECT_EQ(r.last().usage().cached_prompt_tokens(), 3);  // from ReserveKv
  ASSERT_EQ(prefill->prefill_requests().size(), 1u);
  EXPECT_EQ(prefill->prefill_requests()[0].reservation().reservation_id(), "resv-d1");
  const std::vector<v1::DecodeRequest> sent = decode->decode_requests();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].reservation_id(), "resv-d1");
  EXPECT_EQ(sent[0].first_token(), script_[0]);
  EXPECT_EQ(sent[0].max_tokens(), static_cast<int>(script_.size()) - 1);
  EXPECT_TRUE(decode->released_ids().empty());
}

TEST_F(RouterServiceTest, FallsBackToLocalPrefillWhenPrefillFails) {
  options_.disagg_threshold_tokens = 1;
  FakeDecodeWorker* decode = AddDecodeWorker({});
  FakePrefillWorker* prefill = AddPrefillWorker(grpc::StatusCode::UNAVAILABLE);
  StartRouter();
  const StreamResult r = Generate(TextRequest("f1"));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.ids, script_);
  EXPECT_FALSE(r.last().timings().disaggregated());
  EXPECT_EQ(prefill->prefill_requests().size(), 1u);
  EXPECT_TRUE(
      Eventually([&] { return decode->released_ids() == std::vector<std::string>{"resv-f1"}; }));
  const std::vector<v1::DecodeRequest> sent = decode->decode_requests();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(sent[0].reservation_id().empty());
  EXPECT_EQ(sent[0].max_tokens(), static_cast<int>(script_.size()));
}

TEST_F(RouterServiceTest, UnavailableWithoutAHealthyDecodeWorker) {
  options_.decode_workers.push_back("127.0.0.1:1");  // nothing listens there
  StartRouter();
  EXPECT_EQ(Generate(TextRequest()).status.error_code(), grpc::StatusCode::UNAVAILABLE);
  grpc::ClientContext context;
  rpc::SetDeadline(context, absl::Seconds(10));
  v1::GetModelInfoResponse info;
  EXPECT_EQ(stub_->GetModelInfo(&context, {}, &info).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(RouterServiceTest, GetModelInfoReportsTheWorkersModel) {
  AddDecodeWorker({});
  AddDecodeWorker({});
  StartRouter();
  grpc::ClientContext context;
  rpc::SetDeadline(context, absl::Seconds(10));
  v1::GetModelInfoResponse info;
  ASSERT_TRUE(stub_->GetModelInfo(&context, {}, &info).ok());
  EXPECT_EQ(info.model(), "tiny_llama");
  EXPECT_EQ(info.architecture(), "llama");
  EXPECT_EQ(info.vocab_size(), 511);
  EXPECT_EQ(info.max_context(), 512);
  EXPECT_EQ(info.num_layers(), 2);
  EXPECT_EQ(info.num_decode_workers(), 2);
  EXPECT_EQ(info.num_prefill_workers(), 0);
}

}  // namespace
}  // namespace sparseserve::router
