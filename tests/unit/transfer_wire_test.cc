// Pure (no UCX connection) parts of common/transfer: the checksummed envelope, the
// RemoteKvPool codec, the merging of block runs and the choice between staged and direct KV.
#include <cstdint>
#include <string>
#include <vector>

#include "common/transfer/internal/wire_envelope.h"
#include "common/transfer/kv_staging_mode.h"
#include "common/transfer/kv_transport_info.h"
#include "common/transfer/remote_kv_pool.h"
#include "gtest/gtest.h"

namespace sparseserve::transfer {
namespace {

using internal::DecodeWireEnvelope;
using internal::EncodeWireEnvelope;
using internal::WireEnvelope;
using internal::WireKind;

WireEnvelope SampleKey() {
  WireEnvelope envelope;
  envelope.kind = WireKind::kRemoteKey;
  envelope.region_base = 0x7f0012345000ull;
  envelope.region_bytes = 16 * 4096;
  envelope.payload = std::string("\x01\x02\x00\x7f rkey bytes", 15);
  return envelope;
}

TEST(WireEnvelopeTest, RoundTripsEveryField) {
  const WireEnvelope key = SampleKey();
  absl::StatusOr<WireEnvelope> decoded =
      DecodeWireEnvelope(EncodeWireEnvelope(key), WireKind::kRemoteKey);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->region_base, key.region_base);
  EXPECT_EQ(decoded->region_bytes, key.region_bytes);
  EXPECT_EQ(decoded->payload, key.payload);
}

TEST(WireEnvelopeTest, RejectsEverySingleByteFlipAndTruncation) {
  const std::string good = EncodeWireEnvelope(SampleKey());
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    EXPECT_EQ(DecodeWireEnvelope(bad, WireKind::kRemoteKey).status().code(),
              absl::StatusCode::kInvalidArgument)
        << "flip at byte " << i;
  }
  for (size_t size = 0; size < good.size(); ++size) {
    EXPECT_EQ(DecodeWireEnvelope(good.substr(0, size), WireKind::kRemoteKey).status().code(),
              absl::StatusCode::kInvalidArgument)
        << "truncated to " << size;
  }
  EXPECT_EQ(DecodeWireEnvelope(good + "x", WireKind::kRemoteKey).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WireEnvelopeTest, RejectsTheWrongKind) {
  const std::string key = EncodeWireEnvelope(SampleKey());
  EXPECT_EQ(DecodeWireEnvelope(key, WireKind::kWorkerAddress).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RemoteKvPoolTest, SerializeParseRoundTrips) {
  RemoteKvPool pool;
  pool.worker_address = std::string("addr\0ess", 8);
  pool.layer_rkeys = {"k0", std::string("k\0one", 5), ""};
  pool.layer_base_addresses = {1, 0xffffffffffffull, 3};
  pool.block_bytes = 262144;
  absl::StatusOr<RemoteKvPool> parsed = ParseRemoteKvPool(SerializeRemoteKvPool(pool));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->worker_address, pool.worker_address);
  EXPECT_EQ(parsed->layer_rkeys, pool.layer_rkeys);
  EXPECT_EQ(parsed->layer_base_addresses, pool.layer_base_addresses);
  EXPECT_EQ(parsed->block_bytes, pool.block_bytes);
  EXPECT_EQ(parsed->memory, KvMemoryKind::kHost);
  pool.memory = KvMemoryKind::kCuda;
  parsed = ParseRemoteKvPool(SerializeRemoteKvPool(pool));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->memory, KvMemoryKind::kCuda);
  // A memory byte other than 0 or 1 is malformed.
  std::string bytes = SerializeRemoteKvPool(pool);
  bytes.back() = 7;
  EXPECT_FALSE(ParseRemoteKvPool(bytes).ok());
}

TEST(RemoteKvPoolTest, ParseRejectsTruncatedAndTrailingBytes) {
  RemoteKvPool pool;
  pool.worker_address = "address";
  pool.layer_rkeys = {"key"};
  pool.layer_base_addresses = {42};
  pool.block_bytes = 4096;
  const std::string bytes = SerializeRemoteKvPool(pool);
  for (size_t size = 0; size < bytes.size(); ++size) {
    EXPECT_FALSE(ParseRemoteKvPool(bytes.substr(0, size)).ok()) << "truncated to " << size;
  }
  EXPECT_FALSE(ParseRemoteKvPool(bytes + "x").ok());
}

TEST(KvTransportInfoTest, GpuDirectNeedsCudaIpc) {
  KvTransportInfo info;
  info.transports = "self,tcp,sysv,posix,cuda_copy,cuda_ipc,cma";
  EXPECT_TRUE(info.HasTransport("tcp"));
  EXPECT_TRUE(info.gpu_direct());
  info.transports = "self,tcp,sysv,posix,cuda_copy,cma";  // cuda_copy alone moves within a process
  EXPECT_FALSE(info.gpu_direct());
  info.transports = "self,tcp,cuda_ipcx";  // whole names only
  EXPECT_FALSE(info.gpu_direct());
  EXPECT_FALSE(info.HasTransport("cuda"));
}

TEST(KvStagingModeTest, AutoStagesGpuKvOnlyWithoutGpuDirect) {
  // Host KV cache: registered directly unless staging is forced.
  EXPECT_EQ(*UsesKvStaging(KvStagingMode::kAuto, /*kv_in_host_memory=*/true), false);
  EXPECT_EQ(*UsesKvStaging(KvStagingMode::kOn, true), true);
  EXPECT_EQ(*UsesKvStaging(KvStagingMode::kOff, true), false);
  // GPU KV cache: GPU to GPU with cuda_ipc, else staged; off without cuda_ipc is an error.
  EXPECT_EQ(*UsesKvStaging(KvStagingMode::kAuto, false, 1, /*gpu_direct=*/true), false);
  EXPECT_EQ(*UsesKvStaging(KvStagingMode::kAuto, false, 1, /*gpu_direct=*/false), true);
  EXPECT_EQ(*UsesKvStaging(KvStagingMode::kOn, false, 1, true), true);
  EXPECT_EQ(*UsesKvStaging(KvStagingMode::kOff, false, 1, true), false);
  absl::StatusOr<bool> off = UsesKvStaging(KvStagingMode::kOff, false, 1, false);
  EXPECT_EQ(off.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(off.status().message().find("cuda_ipc"), std::string::npos);
  // Tensor parallelism gathers the ranks' heads in host memory: always staged.
  EXPECT_EQ(*UsesKvStaging(KvStagingMode::kAuto, false, 2, true), true);
  EXPECT_EQ(UsesKvStaging(KvStagingMode::kOff, false, 2, true).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(KvStagingModeTest, ParsesItsNames) {
  for (KvStagingMode mode : {KvStagingMode::kAuto, KvStagingMode::kOn, KvStagingMode::kOff}) {
    EXPECT_EQ(*ParseKvStagingMode(KvStagingModeName(mode)), mode);
  }
  EXPECT_EQ(ParseKvStagingMode("gpu").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sparseserve::transfer
