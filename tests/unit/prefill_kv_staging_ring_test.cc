// KvStagingRing over real UCX in one process (tcp and shared memory): a layer's blocks are copied
// into the host ring and PUT from there; a prompt's KV larger than the ring wraps it with a flush
// per wrap and still lands block for block; several transfers in flight at once, each in its
// own lane with its own session, interleave layer by layer and each lands intact; no PUT starts
// past the deadline.
#include "prefill_svc/kv_staging_ring.h"

#include <memory>
#include <string>
#include <vector>

#include "common/core/thread_pool.h"
#include "common/engine/kv_block_copy.h"
#include "common/transfer/kv_transfer_source.h"
#include "common/transfer/kv_transfer_target.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

// UCX 1.13 leaks inside libuct on some shared-memory error paths (see transfer_ucx_test.cc).
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libuct.so\n";
}

namespace sparseserve::prefill {
namespace {

constexpr int kNumLayers = 3;
constexpr int kLocalBlocks = 10;
constexpr int kRemoteBlocks = 8;
constexpr absl::Duration kTimeout = absl::Seconds(30);

model::PagedKvCacheShape BlockShape() {
  model::PagedKvCacheShape shape;
  shape.num_layers = kNumLayers;
  shape.num_blocks = kLocalBlocks;
  shape.block_tokens = 16;
  shape.num_kv_heads = 1;
  shape.head_dim = 4;
  return shape;
}

Tensor LayerTensor(int num_blocks) {
  const model::PagedKvCacheShape s = BlockShape();
  return Tensor::Zeros(DType::kF32,
                       Shape{int64_t{2} * num_blocks, s.block_tokens, s.num_kv_heads, s.head_dim});
}

int64_t FloatsPerBlock() {
  const model::PagedKvCacheShape s = BlockShape();
  return int64_t{2} * s.block_tokens * s.num_kv_heads * s.head_dim;
}

class KvStagingRingTest : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    transfer::KvTransferOptions options;
    options.transports = GetParam();
    auto target = transfer::KvTransferTarget::Create(options);
    ASSERT_TRUE(target.ok()) << target.status();
    target_ = *std::move(target);
    auto source = transfer::KvTransferSource::Create(options);
    ASSERT_TRUE(source.ok()) << source.status();
    source_ = *std::move(source);
    for (int l = 0; l < kNumLayers; ++l) {
      local_.push_back(LayerTensor(kLocalBlocks));
      float* p = local_.back().data<float>();
      for (int64_t i = 0; i < local_.back().numel(); ++i) {
        p[i] = static_cast<float>(l * 100000 + i);  // distinct per layer, block and element
      }
      remote_.push_back(LayerTensor(kRemoteBlocks));
      ASSERT_TRUE(
          target_->RegisterRegion(l, remote_.back().raw_data(), remote_.back().nbytes()).ok());
    }
  }

  void TearDown() override {
    session_.reset();
    source_.reset();  // before the ring whose buffer it registered
    ring_.reset();
    target_.reset();
  }

  void MakeRing(int num_blocks) {
    auto ring = KvStagingRing::Create(*source_, BlockShape(), DType::kF32, num_blocks);
    ASSERT_TRUE(ring.ok()) << ring.status();
    ring_ = *std::move(ring);
    const auto block_bytes = static_cast<uint64_t>(FloatsPerBlock() * sizeof(float));
    auto pool = target_->ExportPool(kNumLayers, block_bytes);
    ASSERT_TRUE(pool.ok()) << pool.status();
    auto session = source_->Connect(*pool);
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = *std::move(session);
    ASSERT_TRUE(ring_->Reset(1).ok());
  }

  std::vector<float> LocalBlock(int layer, int block) const {
    const float* p = local_[layer].data<float>() + block * FloatsPerBlock();
    return std::vector<float>(p, p + FloatsPerBlock());
  }
  // Stages from layer `layer` of the "device" cache, as a one-backend prefill worker does.
  KvStagingRing::CopyToHost Copy(int layer) {
    return [this, layer](absl::Span<const int32_t> blocks, const Tensor& host,
                         absl::Span<const int32_t> slots) {
      return engine::CopyKvBlocksToHost(backend_, local_[layer], blocks, host, slots);
    };
  }
  std::vector<float> RemoteBlock(int layer, int block) const {
    const float* p = remote_[layer].data<float>() + block * FloatsPerBlock();
    return std::vector<float>(p, p + FloatsPerBlock());
  }

  core::ThreadPool pool_{1};
  kernels::CpuBackend backend_{&pool_};
  std::vector<Tensor> local_;   // the "device" KV cache layers
  std::vector<Tensor> remote_;  // the decode worker's layers
  std::unique_ptr<transfer::KvTransferTarget> target_;
  std::unique_ptr<KvStagingRing> ring_;
  std::unique_ptr<transfer::KvTransferSource> source_;
  std::unique_ptr<transfer::KvWriteSession> session_;
};

TEST_P(KvStagingRingTest, PromptLargerThanTheRingWrapsWithAFlushPerWrap) {
  MakeRing(3);  // 5 blocks x 3 layers = 15 blocks through 3 slots
  const std::vector<int32_t> local = {7, 2, 3, 4, 9};
  const std::vector<int32_t> remote = {0, 1, 2, 5, 6};
  const absl::Time deadline = absl::Now() + kTimeout;
  for (int l = 0; l < kNumLayers; ++l) {
    ASSERT_TRUE(ring_->StageAndPut(0, Copy(l), l, local, remote, *session_, deadline).ok());
  }
  ASSERT_TRUE(session_->Flush(kTimeout).ok());
  EXPECT_EQ(ring_->num_wrap_flushes(0), 4);  // 15 / 3 fills, the last one flushed by the caller
  EXPECT_EQ(ring_->num_used_blocks(0), 3);
  for (int l = 0; l < kNumLayers; ++l) {
    for (size_t i = 0; i < local.size(); ++i) {
      EXPECT_EQ(RemoteBlock(l, remote[i]), LocalBlock(l, local[i])) << "layer " << l << " " << i;
    }
    EXPECT_EQ(RemoteBlock(l, 3), std::vector<float>(FloatsPerBlock(), 0.0f));  // not written
  }
  EXPECT_EQ(session_->bytes_transferred(),
            static_cast<int64_t>(15 * FloatsPerBlock() * sizeof(float)));
}

TEST_P(KvStagingRingTest, RingLargerThanThePromptNeedsNoFlush) {
  MakeRing(16);
  const absl::Time deadline = absl::Now() + kTimeout;
  for (int l = 0; l < kNumLayers; ++l) {
    ASSERT_TRUE(
        ring_->StageAndPut(0, Copy(l), l, {0, 1, 2, 3}, {4, 5, 6, 7}, *session_, deadline).ok());
  }
  EXPECT_EQ(ring_->num_wrap_flushes(0), 0);
  EXPECT_EQ(ring_->num_used_blocks(0), 12);
  ASSERT_TRUE(session_->Flush(kTimeout).ok());
  for (int l = 0; l < kNumLayers; ++l) {
    for (int b = 0; b < 4; ++b) EXPECT_EQ(RemoteBlock(l, 4 + b), LocalBlock(l, b));
  }
}

TEST_P(KvStagingRingTest, TwoTransfersInFlightUseTheirOwnLanes) {
  MakeRing(5);  // lanes of 3 and 2 slots
  ASSERT_TRUE(ring_->Reset(2).ok());
  EXPECT_EQ(ring_->lane_blocks(0), 3);
  EXPECT_EQ(ring_->lane_blocks(1), 2);
  // A second connection to the same decode worker stands for a second request's session; the
  // two write disjoint remote blocks, as two reservations do.
  const auto block_bytes = static_cast<uint64_t>(FloatsPerBlock() * sizeof(float));
  auto pool = target_->ExportPool(kNumLayers, block_bytes);
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto other = source_->Connect(*pool);
  ASSERT_TRUE(other.ok()) << other.status();
  const std::vector<int32_t> local_a = {1, 2, 3}, remote_a = {0, 1, 2};
  const std::vector<int32_t> local_b = {7, 8, 9}, remote_b = {5, 6, 7};
  const absl::Time deadline = absl::Now() + kTimeout;
  for (int l = 0; l < kNumLayers; ++l) {  // interleaved, as in one step's per-layer hook
    ASSERT_TRUE(ring_->StageAndPut(0, Copy(l), l, local_a, remote_a, *session_, deadline).ok());
    ASSERT_TRUE(ring_->StageAndPut(1, Copy(l), l, local_b, remote_b, **other, deadline).ok());
  }
  ASSERT_TRUE(session_->Flush(kTimeout).ok());
  ASSERT_TRUE((*other)->Flush(kTimeout).ok());
  EXPECT_EQ(ring_->num_wrap_flushes(0), 2);  // 9 blocks through 3 slots
  EXPECT_EQ(ring_->num_wrap_flushes(1), 4);  // 9 blocks through 2 slots
  for (int l = 0; l < kNumLayers; ++l) {
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(RemoteBlock(l, remote_a[i]), LocalBlock(l, local_a[i])) << "layer " << l;
      EXPECT_EQ(RemoteBlock(l, remote_b[i]), LocalBlock(l, local_b[i])) << "layer " << l;
    }
  }
  EXPECT_EQ(session_->bytes_transferred(),
            static_cast<int64_t>(9 * FloatsPerBlock() * sizeof(float)));
  EXPECT_EQ((*other)->bytes_transferred(), session_->bytes_transferred());
  EXPECT_EQ(ring_->Reset(6).code(), absl::StatusCode::kInvalidArgument);  // more lanes than slots
  EXPECT_EQ(ring_->Reset(0).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(KvStagingRingTest, NoPutStartsPastTheDeadlineAndBadInputIsRefused) {
  MakeRing(2);
  EXPECT_EQ(
      ring_->StageAndPut(0, Copy(0), 0, {0}, {0}, *session_, absl::Now() - absl::Seconds(1)).code(),
      absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(session_->bytes_posted(), 0);
  EXPECT_EQ(
      ring_->StageAndPut(0, Copy(0), 0, {0, 1}, {0}, *session_, absl::InfiniteFuture()).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      ring_->StageAndPut(0, Copy(0), 0, {0}, {kRemoteBlocks}, *session_, absl::InfiniteFuture())
          .code(),
      absl::StatusCode::kInvalidArgument);  // remote id outside the decode worker's pool
  EXPECT_EQ(KvStagingRing::Create(*source_, BlockShape(), DType::kF32, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Transports, KvStagingRingTest, testing::Values("tcp,self", "sm,self"),
                         [](const testing::TestParamInfo<const char*>& param_info) {
                           return std::string(param_info.param[0] == 't' ? "Tcp" : "SharedMemory");
                         });

}  // namespace
}  // namespace sparseserve::prefill
