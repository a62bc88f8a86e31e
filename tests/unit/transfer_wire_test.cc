// Pure (no UCX connection) parts of common/transfer: the checksummed envelope, the
// RemoteKvPool codec and the merging of block runs.
#include <cstdint>
#include <string>
#include <vector>

#include "common/transfer/internal/wire_envelope.h"
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

}  // namespace
}  // namespace sparseserve::transfer
