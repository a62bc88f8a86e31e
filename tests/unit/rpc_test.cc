// Tests for common/rpc: status conversion, RpcServer (health, reflection, bind errors, drain),
// ChannelCache and deadline helpers, over real loopback gRPC connections.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/rpc/channel_cache.h"
#include "common/rpc/deadline.h"
#include "common/rpc/server_runner.h"
#include "common/rpc/status_conversion.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "sparseserve/v1/worker.grpc.pb.h"

namespace sparseserve::rpc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(10);  // bound on every wait in this file
constexpr int kServing = 1;                          // grpc.health.v1 ServingStatus values
constexpr int kNotServing = 2;

grpc::ByteBuffer ToByteBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string FromByteBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (!buffer.Dump(&slices).ok()) return bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes;
}

// HealthCheckRequest{service = 1}: empty for "", else tag 0x0a, length, bytes (names < 128 B).
std::string HealthRequest(const std::string& service) {
  if (service.empty()) return "";
  return absl::StrCat("\x0a", std::string(1, static_cast<char>(service.size())), service);
}

// HealthCheckResponse{status = 1}: proto3 omits 0 (UNKNOWN), else tag 0x08 and a 1-byte varint.
int DecodeHealthStatus(const std::string& bytes) {
  if (bytes.size() == 2 && bytes[0] == 0x08) return bytes[1];
  return bytes.empty() ? 0 : -1;
}

// One unary call through the generic stub; returns the response bytes or the call's status.
absl::StatusOr<std::string> GenericUnary(grpc::GenericStub& stub, const std::string& method,
                                         const std::string& request) {
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(5));
  const grpc::ByteBuffer request_buffer = ToByteBuffer(request);
  grpc::ByteBuffer response_buffer;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request_buffer, &response_buffer,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  if (!done.WaitForNotificationWithTimeout(kWait)) {
    context.TryCancel();
    done.WaitForNotification();  // cancellation completes the call promptly
    return absl::DeadlineExceededError("test wait expired");
  }
  if (!status.ok()) return FromGrpcStatus(status);
  return FromByteBuffer(response_buffer);
}

absl::StatusOr<int> CheckHealth(grpc::GenericStub& stub, const std::string& service) {
  auto response = GenericUnary(stub, "/grpc.health.v1.Health/Check", HealthRequest(service));
  if (!response.ok()) return response.status();
  return DecodeHealthStatus(*response);
}

// DecodeWorker whose Status RPC records the caller's remaining budget and fails with
// kResourceExhausted, to see an absl::Status cross the wire. Other methods: UNIMPLEMENTED.
class FakeDecodeWorker final : public v1::DecodeWorker::CallbackService {
 public:
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const v1::WorkerStatusRequest* /*request*/,
                                   v1::WorkerStatusResponse* /*response*/) override {
    {
      absl::MutexLock lock(&mu_);
      remaining_ = RemainingTime(*context);
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpcStatus(absl::ResourceExhaustedError("decode queue full")));
    return reactor;
  }
  absl::Duration remaining() {
    absl::MutexLock lock(&mu_);
    return remaining_;
  }

 private:
  absl::Mutex mu_;
  absl::Duration remaining_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
};

// Client side of Health.Watch: records every status pushed by the server until the call ends.
class HealthWatcher final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit HealthWatcher(grpc::GenericStub& stub) : request_(ToByteBuffer(HealthRequest(""))) {
    SetDeadline(context_, absl::Seconds(30));
    stub.PrepareBidiStreamingCall(&context_, "/grpc.health.v1.Health/Watch", grpc::StubOptions(),
                                  this);
    StartWriteLast(&request_, grpc::WriteOptions());
    StartRead(&response_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    {
      absl::MutexLock lock(&mu_);
      statuses_.push_back(DecodeHealthStatus(FromByteBuffer(response_)));
      if (statuses_.size() == 1) first_update_.Notify();
    }
    StartRead(&response_);
  }
  void OnDone(const grpc::Status& status) override {
    absl::MutexLock lock(&mu_);
    final_status_ = status;
    done_.Notify();
  }
  bool WaitFirstUpdate() { return first_update_.WaitForNotificationWithTimeout(kWait); }
  bool WaitDone() { return done_.WaitForNotificationWithTimeout(kWait); }
  std::vector<int> statuses() {
    absl::MutexLock lock(&mu_);
    return statuses_;
  }

 private:
  grpc::ClientContext context_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  absl::Notification first_update_;
  absl::Notification done_;
  absl::Mutex mu_;
  std::vector<int> statuses_ ABSL_GUARDED_BY(mu_);
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
};

std::string Target(const RpcServer& server) {
  return absl::StrCat("127.0.0.1:", server.port());
}

TEST(StatusConversionTest, EveryCodeRoundTripsWithItsMessage) {
  for (int code = 1; code <= 16; ++code) {
    const absl::Status status(static_cast<absl::StatusCode>(code), absl::StrCat("msg ", code));
    const grpc::Status wire = ToGrpcStatus(status);
    EXPECT_EQ(static_cast<int>(wire.error_code()), code);
    EXPECT_EQ(wire.error_message(), absl::StrCat("msg ", code));
    EXPECT_EQ(FromGrpcStatus(wire), status);
  }
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  EXPECT_EQ(ToGrpcStatus(absl::UnavailableError("x")).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(StatusConversionTest, NonCanonicalAbslCodeBecomesUnknown) {
  const absl::Status odd(static_cast<absl::StatusCode>(42), "odd");
  EXPECT_EQ(ToGrpcStatus(odd).error_code(), grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(ToGrpcStatus(odd).error_message(), "odd");
  // (grpc::StatusCode has no fixed underlying type, so a grpc::Status with code 42 cannot be
  // built without undefined behaviour; the reverse direction is not testable.)
}

TEST(RpcServerTest, HealthFollowsSetServing) {
  FakeDecodeWorker worker;
  auto server = RpcServer::Start("127.0.0.1:0", {&worker});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_GT((*server)->port(), 0);
  EXPECT_THAT((*server)->service_names(), ElementsAre("sparseserve.v1.DecodeWorker"));

  ChannelCache channels;
  grpc::GenericStub stub(channels.Get(Target(**server)));
  EXPECT_EQ(CheckHealth(stub, "").value_or(-1), kServing);
  EXPECT_EQ(CheckHealth(stub, "sparseserve.v1.DecodeWorker").value_or(-1), kServing);
  EXPECT_EQ(CheckHealth(stub, "no.such.Service").status().code(), absl::StatusCode::kNotFound);

  (*server)->SetServing(false);
  EXPECT_EQ(CheckHealth(stub, "").value_or(-1), kNotServing);
  EXPECT_EQ(CheckHealth(stub, "sparseserve.v1.DecodeWorker").value_or(-1), kNotServing);
  (*server)->SetServing(true);
  EXPECT_EQ(CheckHealth(stub, "").value_or(-1), kServing);
}

TEST(RpcServerTest, ReflectionListsServices) {
  FakeDecodeWorker worker;
  auto server = RpcServer::Start("127.0.0.1:0", {&worker});
  ASSERT_TRUE(server.ok()) << server.status();
  ChannelCache channels;
  grpc::GenericStub stub(channels.Get(Target(**server)));
  // ServerReflectionInfo is a bidi stream; one request (list_services = "", field 7) then
  // half-close gives exactly one response, so a unary call suffices.
  auto response =
      GenericUnary(stub, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                   std::string("\x3a\x00", 2));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_THAT(*response, HasSubstr("sparseserve.v1.DecodeWorker"));
  EXPECT_THAT(*response, HasSubstr("grpc.health.v1.Health"));
}

TEST(RpcServerTest, StatusAndDeadlineCrossTheWire) {
  FakeDecodeWorker worker;
  auto server = RpcServer::Start("127.0.0.1:0", {&worker});
  ASSERT_TRUE(server.ok()) << server.status();
  ChannelCache channels;
  auto stub = v1::DecodeWorker::NewStub(channels.Get(Target(**server)));
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(5));
  v1::WorkerStatusRequest request;
  v1::WorkerStatusResponse response;
  grpc::Status status;
  absl::Notification done;
  stub->async()->Status(&context, &request, &response, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kWait));
  EXPECT_EQ(FromGrpcStatus(status), absl::ResourceExhaustedError("decode queue full"));
  // The handler saw (almost) the client's 5 s budget; grpc-timeout on the wire rounds up a
  // little, so allow some slack above.
  EXPECT_GT(worker.remaining(), absl::Seconds(4));
  EXPECT_LE(worker.remaining(), absl::Seconds(5) + absl::Milliseconds(100));
}

TEST(RpcServerTest, BindingAPortInUseFails) {
  auto first = RpcServer::Start("127.0.0.1:0", {});
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string address = Target(**first);
  auto second = RpcServer::Start(address, {});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(address));
}

TEST(RpcServerTest, NullServiceIsInvalidArgument) {
  EXPECT_EQ(RpcServer::Start("127.0.0.1:0", {nullptr}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RpcServerTest, ShutdownDrainsThenCancelsWithinDeadline) {
  auto server = RpcServer::Start("127.0.0.1:0", {});
  ASSERT_TRUE(server.ok()) << server.status();
  ChannelCache channels;
  grpc::GenericStub stub(channels.Get(Target(**server)));
  HealthWatcher watcher(stub);  // a call that never ends by itself
  ASSERT_TRUE(watcher.WaitFirstUpdate());

  const absl::Duration drain = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  (*server)->Shutdown(drain);
  const absl::Duration elapsed = absl::Now() - start;
  // The never-ending call got the whole drain period, then was cancelled.
  EXPECT_GE(elapsed, drain - absl::Milliseconds(50));
  EXPECT_LT(elapsed, drain + absl::Seconds(3));
  (*server)->Wait();            // returns at once after Shutdown
  (*server)->Shutdown(drain);   // second call is a no-op
  (*server)->SetServing(true);  // ignored after Shutdown

  ASSERT_TRUE(watcher.WaitDone());
  const std::vector<int> statuses = watcher.statuses();
  ASSERT_FALSE(statuses.empty());
  EXPECT_EQ(statuses.front(), kServing);
  EXPECT_EQ(statuses.back(), kNotServing);  // drain was announced before the cancel
}

TEST(ChannelCacheTest, OneChannelPerAddress) {
  ChannelCache channels;
  auto a = channels.Get("127.0.0.1:1");
  auto b = channels.Get("127.0.0.1:2");
  EXPECT_EQ(channels.Get("127.0.0.1:1"), a);
  EXPECT_NE(a, b);
  EXPECT_EQ(channels.size(), 2u);
}

TEST(DeadlineTest, SetDeadlineIsRelativeToNow) {
  grpc::ClientContext context;
  const absl::Time before = absl::Now();
  SetDeadline(context, absl::Seconds(2));
  const absl::Time deadline = absl::FromChrono(context.deadline());
  EXPECT_GE(deadline, before + absl::Seconds(2));
  EXPECT_LE(deadline, absl::Now() + absl::Seconds(2));
}

}  // namespace
}  // namespace sparseserve::rpc
