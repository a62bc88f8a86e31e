// WorkerRegistry against fake workers on loopback: health transitions, load and prefix-cache
// overlap snapshots; and KV-aware routing seen through the router's Generate.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/kv/block_hash.h"
#include "common/rpc/channel_cache.h"
#include "common/rpc/deadline.h"
#include "common/rpc/server_runner.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "router/router.h"
#include "router/worker_registry.h"
#include "sparseserve/v1/generation.grpc.pb.h"
#include "tests/unit/router_fake_workers.h"

namespace sparseserve::router {
namespace {

using testing::FakeDecodeConfig;
using testing::FakeDecodeWorker;

std::vector<int32_t> Prompt(int n) {
  std::vector<int32_t> prompt(n);
  for (int i = 0; i < n; ++i) prompt[i] = 10 + i;
  return prompt;
}

std::unique_ptr<rpc::RpcServer> Serve(const std::string& address, grpc::Service* service) {
  absl::StatusOr<std::unique_ptr<rpc::RpcServer>> server =
      rpc::RpcServer::Start(address, {service});
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

TEST(WorkerRegistryTest, TracksHealthAcrossFailedAndSuccessfulPolls) {
  FakeDecodeWorker worker(FakeDecodeConfig{.num_free_blocks = 60, .num_total_blocks = 100});
  std::unique_ptr<rpc::RpcServer> server = Serve("127.0.0.1:0", &worker);
  ASSERT_NE(server, nullptr);
  const std::string address = absl::StrCat("127.0.0.1:", server->port());
  rpc::ChannelCache channels;
  // A long interval: only the explicit polls below change the state.
  std::unique_ptr<WorkerRegistry> registry = WorkerRegistry::Start(
      {.decode_addresses = {address}, .status_interval = absl::Hours(1)}, &channels);
  EXPECT_TRUE(registry->healthy(WorkerRole::kDecode, 0));
  std::vector<DecodeCandidate> c = registry->DecodeCandidates(Prompt(40));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_TRUE(c[0].healthy);
  EXPECT_EQ(c[0].num_free_blocks, 60);
  EXPECT_EQ(c[0].block_tokens, 16);

  server->Shutdown(absl::ZeroDuration());
  server.reset();
  registry->PollOnce();
  EXPECT_FALSE(registry->healthy(WorkerRole::kDecode, 0));
  EXPECT_EQ(registry->NumHealthy(WorkerRole::kDecode), 0);
  EXPECT_FALSE(registry->ModelInfo().has_value());

  server = Serve(address, &worker);  // the same port again
  ASSERT_NE(server, nullptr);
  // The channel reconnects with backoff; poll (bounded) until the worker is seen again.
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!registry->healthy(WorkerRole::kDecode, 0) && absl::Now() < deadline) {
    registry->PollOnce();
    if (!registry->healthy(WorkerRole::kDecode, 0)) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(registry->healthy(WorkerRole::kDecode, 0));
  registry->MarkUnhealthy(WorkerRole::kDecode, 0, "test");
  EXPECT_FALSE(registry->healthy(WorkerRole::kDecode, 0));
  registry->Stop();
  server->Shutdown(absl::ZeroDuration());
}

TEST(WorkerRegistryTest, ReportsLeadingPrefixOverlapPerWorker) {
  const std::vector<kv::BlockHash> hashes = kv::ComputeBlockHashes(Prompt(40), 16);
  ASSERT_EQ(hashes.size(), 2u);
  FakeDecodeWorker cold(FakeDecodeConfig{});
  FakeDecodeWorker warm(FakeDecodeConfig{.cached_block_hashes = {hashes[0], hashes[1]}});
  FakeDecodeWorker broken_chain(FakeDecodeConfig{.cached_block_hashes = {hashes[1]}});
  std::vector<std::unique_ptr<rpc::RpcServer>> servers;
  std::vector<std::string> addresses;
  for (FakeDecodeWorker* w : {&cold, &warm, &broken_chain}) {
    servers.push_back(Serve("127.0.0.1:0", w));
    ASSERT_NE(servers.back(), nullptr);
    addresses.push_back(absl::StrCat("127.0.0.1:", servers.back()->port()));
  }
  rpc::ChannelCache channels;
  std::unique_ptr<WorkerRegistry> registry = WorkerRegistry::Start(
      {.decode_addresses = addresses, .status_interval = absl::Hours(1)}, &channels);
  const std::vector<DecodeCandidate> c = registry->DecodeCandidates(Prompt(40));
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].overlap_blocks, 0);
  EXPECT_EQ(c[1].overlap_blocks, 2);
  EXPECT_EQ(c[2].overlap_blocks, 0);
  registry->Stop();
  for (auto& s : servers) s->Shutdown(absl::ZeroDuration());
}

TEST(WorkerRegistryTest, DnsTargetsAddAndRemoveReplicasAsTheNameResolves) {
  // Two replicas of one Service: the same port on two loopback addresses.
  FakeDecodeWorker a(FakeDecodeConfig{}), b(FakeDecodeConfig{});
  std::unique_ptr<rpc::RpcServer> server_a = Serve("127.0.0.1:0", &a);
  ASSERT_NE(server_a, nullptr);
  const int port = server_a->port();
  std::unique_ptr<rpc::RpcServer> server_b = Serve(absl::StrCat("127.0.0.2:", port), &b);
  ASSERT_NE(server_b, nullptr);
  absl::Mutex mu;
  absl::StatusOr<std::vector<std::string>> answer = std::vector<std::string>{"127.0.0.1"};
  std::vector<std::string> asked;
  WorkerRegistryOptions options;
  options.decode_addresses = {absl::StrCat("dns:///decode.test:", port)};
  options.status_interval = absl::Hours(1);
  options.resolver = [&](const std::string& host) {
    absl::MutexLock lock(&mu);
    asked.push_back(host);
    return answer;
  };
  rpc::ChannelCache channels;
  std::unique_ptr<WorkerRegistry> registry = WorkerRegistry::Start(options, &channels);
  ASSERT_EQ(registry->num_workers(WorkerRole::kDecode), 1);
  EXPECT_EQ(registry->address(WorkerRole::kDecode, 0), absl::StrCat("127.0.0.1:", port));
  EXPECT_EQ(registry->NumHealthy(WorkerRole::kDecode), 1);
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(asked, std::vector<std::string>{"decode.test"});
    answer = std::vector<std::string>{"127.0.0.1", "127.0.0.2"};  // a replica joins
  }
  registry->PollOnce();
  ASSERT_EQ(registry->num_workers(WorkerRole::kDecode), 2);
  EXPECT_EQ(registry->address(WorkerRole::kDecode, 1), absl::StrCat("127.0.0.2:", port));
  EXPECT_EQ(registry->NumHealthy(WorkerRole::kDecode), 2);
  EXPECT_EQ(registry->DecodeCandidates(Prompt(8)).size(), 2u);

  {
    absl::MutexLock lock(&mu);
    answer = std::vector<std::string>{"127.0.0.2"};  // the first pod goes away
  }
  registry->PollOnce();
  EXPECT_EQ(registry->num_workers(WorkerRole::kDecode), 2) << "indices stay stable";
  EXPECT_FALSE(registry->listed(WorkerRole::kDecode, 0));
  EXPECT_FALSE(registry->healthy(WorkerRole::kDecode, 0)) << "an unlisted worker takes no work";
  EXPECT_TRUE(registry->healthy(WorkerRole::kDecode, 1));

  {
    absl::MutexLock lock(&mu);
    answer = absl::UnavailableError("lookup timed out");  // a DNS hiccup keeps what we had
  }
  registry->PollOnce();
  EXPECT_TRUE(registry->healthy(WorkerRole::kDecode, 1));
  EXPECT_EQ(registry->NumHealthy(WorkerRole::kDecode), 1);

  {
    absl::MutexLock lock(&mu);
    answer = std::vector<std::string>{"127.0.0.1", "127.0.0.2"};  // and it comes back
  }
  registry->PollOnce();
  EXPECT_EQ(registry->num_workers(WorkerRole::kDecode), 2) << "the old entry is reused";
  EXPECT_TRUE(registry->listed(WorkerRole::kDecode, 0));
  EXPECT_EQ(registry->NumHealthy(WorkerRole::kDecode), 2);
}

TEST(WorkerRegistryTest, DnsTargetsUseTheSystemResolver) {
  FakeDecodeWorker worker(FakeDecodeConfig{});
  std::unique_ptr<rpc::RpcServer> server = Serve("127.0.0.1:0", &worker);
  ASSERT_NE(server, nullptr);
  rpc::ChannelCache channels;
  WorkerRegistryOptions options;
  options.decode_addresses = {absl::StrCat("dns:///localhost:", server->port())};
  options.status_interval = absl::Hours(1);
  std::unique_ptr<WorkerRegistry> registry = WorkerRegistry::Start(options, &channels);
  // localhost may also resolve to ::1, where nothing listens: that entry stays unhealthy.
  bool found = false;
  for (int i = 0; i < registry->num_workers(WorkerRole::kDecode); ++i) {
    if (registry->address(WorkerRole::kDecode, i) == absl::StrCat("127.0.0.1:", server->port())) {
      found = true;
      EXPECT_TRUE(registry->healthy(WorkerRole::kDecode, i));
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(registry->NumHealthy(WorkerRole::kDecode), 1);
}

TEST(WorkerRegistryTest, ResolveHostFailsClearlyForAnUnknownName) {
  absl::StatusOr<std::vector<std::string>> ips = ResolveHost("no-such-host.invalid");
  EXPECT_FALSE(ips.ok());
  EXPECT_NE(ips.status().message().find("no-such-host.invalid"), std::string::npos);
}

TEST(RouterRoutingTest, SendsARequestToTheWorkerHoldingItsPrefix) {
  const std::vector<int32_t> prompt = Prompt(40);
  const std::vector<kv::BlockHash> hashes = kv::ComputeBlockHashes(prompt, 16);
  const std::vector<int32_t> script = {5, 6, 7};
  FakeDecodeWorker cold(FakeDecodeConfig{.script = script});
  FakeDecodeWorker warm(FakeDecodeConfig{.script = script, .cached_block_hashes = hashes});
  std::vector<std::unique_ptr<rpc::RpcServer>> servers;
  RouterOptions options;
  options.model_path = SPARSESERVE_TEST_DATA_DIR "/tiny_llama";
  for (FakeDecodeWorker* w : {&cold, &warm}) {
    servers.push_back(Serve("127.0.0.1:0", w));
    ASSERT_NE(servers.back(), nullptr);
    options.decode_workers.push_back(absl::StrCat("127.0.0.1:", servers.back()->port()));
  }
  absl::StatusOr<std::unique_ptr<Router>> router = Router::Create(options);
  ASSERT_TRUE(router.ok()) << router.status();
  std::unique_ptr<rpc::RpcServer> front = Serve("127.0.0.1:0", (*router)->service());
  ASSERT_NE(front, nullptr);
  auto stub = v1::Generation::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", front->port()),
                                                          grpc::InsecureChannelCredentials()));

  v1::GenerateRequest request;
  request.mutable_token_ids()->mutable_ids()->Add(prompt.begin(), prompt.end());
  request.set_max_tokens(3);
  grpc::ClientContext context;
  rpc::SetDeadline(context, absl::Seconds(20));
  auto reader = stub->Generate(&context, request);
  std::vector<int32_t> ids;
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
    ids.insert(ids.end(), response.token_ids().begin(), response.token_ids().end());
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(ids, script);
  EXPECT_TRUE(cold.decode_requests().empty());
  EXPECT_EQ(warm.decode_requests().size(), 1u);
  // Routing's view of the prefix cache: 2 full blocks asked, 2 found on the chosen worker.
  EXPECT_EQ((*router)->metrics().prefix_cache_queries().Value(), 2);
  EXPECT_EQ((*router)->metrics().prefix_cache_hits().Value(), 2);

  front->Shutdown(absl::Seconds(1));
  (*router)->Shutdown();
  for (auto& s : servers) s->Shutdown(absl::ZeroDuration());
}

}  // namespace
}  // namespace sparseserve::router
