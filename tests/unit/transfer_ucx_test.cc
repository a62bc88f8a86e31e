// KvTransferTarget + KvTransferSource in one process: two UCX workers over loopback, run once
// over tcp and once over shared memory.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/transfer/kv_transfer_source.h"
#include "common/transfer/kv_transfer_target.h"
#include "common/transfer/kv_write_session.h"
#include "gtest/gtest.h"

// UCX 1.13 leaks ~100 bytes inside libuct when a shared-memory endpoint fails to attach to a
// vanished peer (PeerDestroyedBeforeConnectFailsWithoutHanging/SharedMemory). Not ours; keep
// LeakSanitizer quiet about it. (Used only when the binary is built with a sanitizer.)
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libuct.so\n";
}

namespace sparseserve::transfer {
namespace {

constexpr int kNumLayers = 3;
constexpr int kNumBlocks = 16;
constexpr size_t kBlockBytes = 4096;
constexpr size_t kLayerBytes = kNumBlocks * kBlockBytes;
constexpr unsigned char kUntouched = 0xEE;
constexpr absl::Duration kFlushTimeout = absl::Seconds(30);

// A byte pattern that differs per layer, block and offset (never kUntouched at offset 0).
unsigned char PatternByte(int layer, int block, size_t offset) {
  return static_cast<unsigned char>(layer * 67 + block * 13 + offset * 7 + (offset >> 8) + 1);
}

void FillPattern(std::vector<unsigned char>& layer_buffer, int layer, size_t block_bytes) {
  for (size_t i = 0; i < layer_buffer.size(); ++i) {
    layer_buffer[i] = PatternByte(layer, static_cast<int>(i / block_bytes), i % block_bytes);
  }
}

class TransferUcxTest : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    KvTransferOptions options;
    options.transports = GetParam();
    absl::StatusOr<std::unique_ptr<KvTransferTarget>> target = KvTransferTarget::Create(options);
    ASSERT_TRUE(target.ok()) << target.status();
    target_ = *std::move(target);
    absl::StatusOr<std::unique_ptr<KvTransferSource>> source = KvTransferSource::Create(options);
    ASSERT_TRUE(source.ok()) << source.status();
    source_ = *std::move(source);
    for (int layer = 0; layer < kNumLayers; ++layer) {
      remote_[layer].assign(kLayerBytes, kUntouched);
      local_[layer].resize(kLayerBytes);
      FillPattern(local_[layer], layer, kBlockBytes);
      ASSERT_TRUE(target_->RegisterRegion(layer, remote_[layer].data(), kLayerBytes).ok());
      ASSERT_TRUE(source_->RegisterLocal(layer, local_[layer].data(), kLayerBytes).ok());
    }
  }

  std::unique_ptr<KvWriteSession> Connect() {
    absl::StatusOr<RemoteKvPool> pool = target_->ExportPool(kNumLayers, kBlockBytes);
    EXPECT_TRUE(pool.ok()) << pool.status();
    if (!pool.ok()) return nullptr;
    EXPECT_EQ(pool->memory, KvMemoryKind::kHost);  // host regions: no GPU-direct PUTs
    absl::StatusOr<std::unique_ptr<KvWriteSession>> session = source_->Connect(*pool);
    EXPECT_TRUE(session.ok()) << session.status();
    return session.ok() ? *std::move(session) : nullptr;
  }

  // Buffers are declared before the UCX objects so that they outlive the registrations.
  std::vector<unsigned char> remote_[kNumLayers];
  std::vector<unsigned char> local_[kNumLayers];
  std::unique_ptr<KvTransferTarget> target_;
  std::unique_ptr<KvTransferSource> source_;
};

TEST_P(TransferUcxTest, ScatteredPutsLandExactlyAndLeaveOtherBlocksUntouched) {
  std::unique_ptr<KvWriteSession> session = Connect();
  ASSERT_NE(session, nullptr);
  // Includes a run of 4 consecutive blocks (one PUT) and non-monotonic singles.
  const std::vector<int32_t> local_ids = {0, 1, 2, 3, 7, 12, 5};
  const std::vector<int32_t> remote_ids = {4, 5, 6, 7, 0, 15, 9};
  for (int layer = 0; layer < kNumLayers; ++layer) {
    ASSERT_TRUE(session->PutBlocks(layer, local_[layer].data(), local_ids, remote_ids).ok());
  }
  const int64_t expected_bytes = kNumLayers * local_ids.size() * kBlockBytes;
  EXPECT_EQ(session->bytes_posted(), expected_bytes);
  absl::Status flushed = session->Flush(kFlushTimeout);
  ASSERT_TRUE(flushed.ok()) << flushed;
  EXPECT_EQ(session->bytes_transferred(), expected_bytes);

  for (int layer = 0; layer < kNumLayers; ++layer) {
    std::vector<int> source_of(kNumBlocks, -1);
    for (size_t i = 0; i < local_ids.size(); ++i) source_of[remote_ids[i]] = local_ids[i];
    for (int block = 0; block < kNumBlocks; ++block) {
      const unsigned char* got = remote_[layer].data() + block * kBlockBytes;
      if (source_of[block] >= 0) {
        EXPECT_EQ(
            std::memcmp(got, local_[layer].data() + source_of[block] * kBlockBytes, kBlockBytes), 0)
            << "layer " << layer << " remote block " << block;
      } else {
        EXPECT_TRUE(
            std::all_of(got, got + kBlockBytes, [](unsigned char c) { return c == kUntouched; }))
            << "layer " << layer << " block " << block << " was written";
      }
    }
  }
}

TEST_P(TransferUcxTest, BytesTransferredCountsOnlyFlushedPuts) {
  std::unique_ptr<KvWriteSession> session = Connect();
  ASSERT_NE(session, nullptr);
  const std::vector<int32_t> ids = {3};
  ASSERT_TRUE(session->PutBlocks(1, local_[1].data(), ids, ids).ok());
  EXPECT_EQ(session->bytes_posted(), static_cast<int64_t>(kBlockBytes));
  EXPECT_EQ(session->bytes_transferred(), 0);
  ASSERT_TRUE(session->Flush(kFlushTimeout).ok());
  EXPECT_EQ(session->bytes_transferred(), static_cast<int64_t>(kBlockBytes));
  ASSERT_TRUE(session->Flush(kFlushTimeout).ok());  // nothing new: count unchanged
  EXPECT_EQ(session->bytes_transferred(), static_cast<int64_t>(kBlockBytes));
}

TEST_P(TransferUcxTest, InvalidPutsAreRejectedAndPostNothing) {
  std::unique_ptr<KvWriteSession> session = Connect();
  ASSERT_NE(session, nullptr);
  const std::vector<int32_t> one = {1};
  const std::vector<int32_t> two = {1, 2};
  const std::vector<int32_t> past_end = {kNumBlocks};
  const std::vector<int32_t> negative = {-1};
  const void* base = local_[0].data();
  EXPECT_EQ(session->PutBlocks(0, base, one, two).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session->PutBlocks(kNumLayers, base, one, one).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session->PutBlocks(-1, base, one, one).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session->PutBlocks(0, base, one, past_end).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session->PutBlocks(0, base, past_end, one).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session->PutBlocks(0, base, negative, one).code(), absl::StatusCode::kInvalidArgument);
  // A local base that is not inside layer 0's registration.
  EXPECT_EQ(session->PutBlocks(0, local_[1].data(), one, one).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session->bytes_posted(), 0);
  // The session is still healthy after rejected calls.
  EXPECT_TRUE(session->PutBlocks(0, base, one, one).ok());
  EXPECT_TRUE(session->Flush(kFlushTimeout).ok());
}

TEST_P(TransferUcxTest, UnregisteredLocalLayerIsFailedPrecondition) {
  KvTransferOptions options;
  options.transports = GetParam();
  absl::StatusOr<std::unique_ptr<KvTransferSource>> bare = KvTransferSource::Create(options);
  ASSERT_TRUE(bare.ok()) << bare.status();
  absl::StatusOr<RemoteKvPool> pool = target_->ExportPool(kNumLayers, kBlockBytes);
  ASSERT_TRUE(pool.ok());
  absl::StatusOr<std::unique_ptr<KvWriteSession>> session = (*bare)->Connect(*pool);
  ASSERT_TRUE(session.ok()) << session.status();
  const std::vector<int32_t> ids = {0};
  EXPECT_EQ((*session)->PutBlocks(0, local_[0].data(), ids, ids).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(TransferUcxTest, RegistrationErrorsAreReported) {
  std::vector<unsigned char> extra(kBlockBytes);
  EXPECT_EQ(target_->RegisterRegion(0, extra.data(), extra.size()).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(target_->RegisterRegion(-1, extra.data(), extra.size()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(target_->RegisterRegion(7, nullptr, 4096).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(source_->RegisterLocal(7, extra.data(), 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(target_->PackedRkey(9).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(target_->BaseAddress(9).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(target_->ExportPool(kNumLayers + 1, kBlockBytes).status().code(),
            absl::StatusCode::kNotFound);
  absl::StatusOr<uint64_t> base = target_->BaseAddress(2);
  ASSERT_TRUE(base.ok());
  EXPECT_EQ(*base, reinterpret_cast<uint64_t>(remote_[2].data()));
}

TEST_P(TransferUcxTest, CorruptedAddressOrKeysAreInvalidArgument) {
  absl::StatusOr<RemoteKvPool> good = target_->ExportPool(kNumLayers, kBlockBytes);
  ASSERT_TRUE(good.ok());
  std::mt19937 rng(7);
  auto expect_invalid = [&](const RemoteKvPool& pool, const char* what) {
    absl::StatusOr<std::unique_ptr<KvWriteSession>> session = source_->Connect(pool);
    EXPECT_EQ(session.status().code(), absl::StatusCode::kInvalidArgument) << what;
  };
  RemoteKvPool pool = *good;
  pool.worker_address.assign(200, '\0');
  std::generate(pool.worker_address.begin(), pool.worker_address.end(),
                [&] { return static_cast<char>(rng()); });
  expect_invalid(pool, "random address");
  pool = *good;
  pool.worker_address.resize(pool.worker_address.size() / 2);
  expect_invalid(pool, "truncated address");
  pool = *good;
  pool.worker_address[pool.worker_address.size() / 2] ^= 0x5a;
  expect_invalid(pool, "flipped address byte");
  pool = *good;
  pool.layer_rkeys[1] = "not a key";
  expect_invalid(pool, "garbage key");
  pool = *good;
  pool.layer_rkeys[2][pool.layer_rkeys[2].size() - 12] ^= 1;
  expect_invalid(pool, "flipped key byte");
  pool = *good;
  pool.layer_base_addresses[0] += kBlockBytes;
  expect_invalid(pool, "base address mismatch");
  pool = *good;
  pool.layer_rkeys.pop_back();
  expect_invalid(pool, "fewer keys than bases");
  pool = *good;
  pool.block_bytes = 0;
  expect_invalid(pool, "zero block bytes");
  pool = *good;
  pool.block_bytes = kLayerBytes + 1;
  expect_invalid(pool, "block larger than the region");
}

TEST_P(TransferUcxTest, AllocatedRegionIsZeroedAndReceivesPuts) {
  constexpr int kLayer = 6;
  absl::StatusOr<void*> base = target_->AllocateRegion(kLayer, kLayerBytes);
  ASSERT_TRUE(base.ok()) << base.status();
  auto* pool = static_cast<unsigned char*>(*base);
  EXPECT_TRUE(std::all_of(pool, pool + kLayerBytes, [](unsigned char c) { return c == 0; }));
  EXPECT_EQ(*target_->BaseAddress(kLayer), reinterpret_cast<uint64_t>(pool));
  EXPECT_EQ(target_->AllocateRegion(kLayer, kLayerBytes).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(target_->AllocateRegion(kLayer + 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(source_->RegisterLocal(kLayer, local_[0].data(), kLayerBytes).ok());
  RemoteKvPool remote;
  remote.worker_address = target_->WorkerAddress();
  remote.block_bytes = kBlockBytes;
  for (int layer = 0; layer <= kLayer; ++layer) {
    const int from = layer < kNumLayers ? layer : kLayer;  // layers 3..5: any valid region
    remote.layer_rkeys.push_back(*target_->PackedRkey(from));
    remote.layer_base_addresses.push_back(*target_->BaseAddress(from));
  }
  absl::StatusOr<std::unique_ptr<KvWriteSession>> session = source_->Connect(remote);
  ASSERT_TRUE(session.ok()) << session.status();
  const std::vector<int32_t> local_ids = {2, 3, 9};
  const std::vector<int32_t> remote_ids = {10, 11, 0};
  ASSERT_TRUE((*session)->PutBlocks(kLayer, local_[0].data(), local_ids, remote_ids).ok());
  ASSERT_TRUE((*session)->Flush(kFlushTimeout).ok());
  for (size_t i = 0; i < local_ids.size(); ++i) {
    EXPECT_EQ(std::memcmp(pool + remote_ids[i] * kBlockBytes,
                          local_[0].data() + local_ids[i] * kBlockBytes, kBlockBytes),
              0)
        << "remote block " << remote_ids[i];
  }
  EXPECT_TRUE(std::all_of(pool + kBlockBytes, pool + 10 * kBlockBytes,
                          [](unsigned char c) { return c == 0; }));
}

TEST_P(TransferUcxTest, LargeScatteredTransferKeepsIntegrity) {
  constexpr size_t kBigBlockBytes = 256 * 1024;
  constexpr int kBigBlocks = 256;  // 64 MiB
  std::vector<unsigned char> local(kBigBlockBytes * kBigBlocks);
  std::vector<unsigned char> remote(local.size(), kUntouched);
  FillPattern(local, 5, kBigBlockBytes);
  constexpr int kLayer = 5;
  ASSERT_TRUE(target_->RegisterRegion(kLayer, remote.data(), remote.size()).ok());
  ASSERT_TRUE(source_->RegisterLocal(kLayer, local.data(), local.size()).ok());
  RemoteKvPool pool;
  pool.worker_address = target_->WorkerAddress();
  pool.block_bytes = kBigBlockBytes;
  // Layers 0..2 hold less than one big block: every pool layer names layer 5's region.
  for (int layer = 0; layer <= kLayer; ++layer) {
    pool.layer_rkeys.push_back(*target_->PackedRkey(kLayer));
    pool.layer_base_addresses.push_back(*target_->BaseAddress(kLayer));
  }
  absl::StatusOr<std::unique_ptr<KvWriteSession>> session = source_->Connect(pool);
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<int32_t> local_ids(kBigBlocks);
  std::iota(local_ids.begin(), local_ids.end(), 0);
  std::vector<int32_t> remote_ids = local_ids;
  std::shuffle(remote_ids.begin(), remote_ids.end(), std::mt19937(42));
  ASSERT_TRUE((*session)->PutBlocks(kLayer, local.data(), local_ids, remote_ids).ok());
  absl::Status flushed = (*session)->Flush(absl::Seconds(120));
  ASSERT_TRUE(flushed.ok()) << flushed;
  for (int i = 0; i < kBigBlocks; ++i) {
    ASSERT_EQ(std::memcmp(remote.data() + remote_ids[i] * kBigBlockBytes,
                          local.data() + local_ids[i] * kBigBlockBytes, kBigBlockBytes),
              0)
        << "block " << local_ids[i];
  }
  session->reset();  // before the registrations it uses go away with this scope's buffers
  source_.reset();
  target_.reset();
}

TEST_P(TransferUcxTest, ShortFlushTimeoutOnHugeTransferReturnsPromptly) {
  constexpr size_t kBigBlockBytes = 1 << 20;
  constexpr int kBigBlocks = 64;  // 64 MiB per PUT round, 8 rounds = 512 MiB in flight
  std::vector<unsigned char> local(kBigBlockBytes * kBigBlocks, 1);
  std::vector<unsigned char> remote(local.size(), 0);
  ASSERT_TRUE(target_->RegisterRegion(4, remote.data(), remote.size()).ok());
  ASSERT_TRUE(source_->RegisterLocal(4, local.data(), local.size()).ok());
  RemoteKvPool pool;
  pool.worker_address = target_->WorkerAddress();
  pool.block_bytes = kBigBlockBytes;
  for (int layer = 0; layer <= 4; ++layer) {
    pool.layer_rkeys.push_back(*target_->PackedRkey(4));
    pool.layer_base_addresses.push_back(*target_->BaseAddress(4));
  }
  absl::StatusOr<std::unique_ptr<KvWriteSession>> session = source_->Connect(pool);
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<int32_t> ids(kBigBlocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<int32_t> reversed(ids.rbegin(), ids.rend());  // defeats merging: 64 PUTs/round
  for (int round = 0; round < 8; ++round) {
    ASSERT_TRUE((*session)->PutBlocks(4, local.data(), ids, reversed).ok());
  }
  const auto start = std::chrono::steady_clock::now();
  absl::Status flushed = (*session)->Flush(absl::Milliseconds(1));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(flushed.ok() || flushed.code() == absl::StatusCode::kDeadlineExceeded) << flushed;
  EXPECT_LT(elapsed, std::chrono::milliseconds(500));
  // The PUTs stay in flight and a patient Flush completes them.
  absl::Status drained = (*session)->Flush(absl::Seconds(120));
  ASSERT_TRUE(drained.ok()) << drained;
  EXPECT_EQ((*session)->bytes_transferred(), static_cast<int64_t>(8 * local.size()));
  EXPECT_TRUE(std::all_of(remote.begin(), remote.end(), [](unsigned char c) { return c == 1; }));
  session->reset();
  source_.reset();
  target_.reset();
}

TEST_P(TransferUcxTest, PeerDestroyedBeforeConnectFailsWithoutHanging) {
  absl::StatusOr<RemoteKvPool> pool = target_->ExportPool(kNumLayers, kBlockBytes);
  ASSERT_TRUE(pool.ok());
  target_.reset();  // the address now names a worker that no longer exists
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<KvWriteSession>> session = source_->Connect(*pool);
  absl::Status result = session.status();
  if (session.ok()) {
    const std::vector<int32_t> ids = {0};
    result = (*session)->PutBlocks(0, local_[0].data(), ids, ids);
    if (result.ok()) result = (*session)->Flush(absl::Seconds(20));
  }
  EXPECT_FALSE(result.ok());
  EXPECT_NE(result.code(), absl::StatusCode::kDeadlineExceeded) << result;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

INSTANTIATE_TEST_SUITE_P(Transports, TransferUcxTest, testing::Values("tcp,self", "sm,self"),
                         [](const testing::TestParamInfo<const char*>& param_info) {
                           return std::string(param_info.param[0] == 't' ? "Tcp" : "SharedMemory");
                         });

}  // namespace
}  // namespace sparseserve::transfer
