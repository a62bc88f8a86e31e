// KV block copies between a backend's KV layer and host memory of the same block layout: runs
// consecutive on both sides merge into one copy, every block lands where its id pair says, and
// bad ids or layouts copy nothing.
#include "common/engine/kv_block_copy.h"

#include <vector>

#include "common/core/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace sparseserve::engine {
namespace {

// [num_blocks * 2, 4 tokens, 2 heads, 3 dims]; element value = block * 1000 + offset + salt.
Tensor Layer(int num_blocks, float salt) {
  Tensor t = Tensor::Zeros(DType::kF32, Shape{int64_t{2} * num_blocks, 4, 2, 3});
  const int64_t per_block = t.numel() / num_blocks;
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.data<float>()[i] =
        static_cast<float>(i / per_block) * 1000 + static_cast<float>(i % per_block) + salt;
  }
  return t;
}

// Block `b` of `t` as values.
std::vector<float> Block(const Tensor& t, int b) {
  const int64_t per_block = t.numel() / (t.dim(0) / 2);
  const float* p = t.data<float>() + b * per_block;
  return std::vector<float>(p, p + per_block);
}

class KvBlockCopyBackendTest : public ::testing::Test {
 protected:
  core::ThreadPool pool_{1};
  kernels::CpuBackend backend_{&pool_};
};

TEST_F(KvBlockCopyBackendTest, RoundTripPutsEveryBlockWhereItsIdPairSays) {
  const Tensor device = Layer(8, 0.5f);
  const Tensor host = Layer(5, -7.0f);
  const Tensor original_host = Layer(5, -7.0f);
  const std::vector<int32_t> device_ids = {6, 7, 1, 3};
  const std::vector<int32_t> host_ids = {0, 1, 4, 2};
  ASSERT_TRUE(CopyKvBlocksToHost(backend_, device, device_ids, host, host_ids).ok());
  for (size_t i = 0; i < device_ids.size(); ++i) {
    EXPECT_EQ(Block(host, host_ids[i]), Block(device, device_ids[i])) << i;
  }
  EXPECT_EQ(Block(host, 3), Block(original_host, 3));  // untouched

  const Tensor back = Layer(8, 99.0f);
  const std::vector<int32_t> back_ids = {2, 3, 0, 7};
  ASSERT_TRUE(CopyKvBlocksFromHost(backend_, host, host_ids, back, back_ids).ok());
  for (size_t i = 0; i < back_ids.size(); ++i) {
    EXPECT_EQ(Block(back, back_ids[i]), Block(device, device_ids[i])) << i;
  }
  EXPECT_EQ(Block(back, 5), Block(Layer(8, 99.0f), 5));  // untouched
}

TEST_F(KvBlockCopyBackendTest, BadIdsAndLayoutsCopyNothing) {
  const Tensor device = Layer(4, 1.0f);
  const Tensor host = Layer(2, 2.0f);
  const Tensor before = Layer(2, 2.0f);
  EXPECT_EQ(CopyKvBlocksToHost(backend_, device, {0, 4}, host, {0, 1}).code(),
            absl::StatusCode::kInvalidArgument);  // device id out of range
  EXPECT_EQ(CopyKvBlocksToHost(backend_, device, {0, 1}, host, {1, 2}).code(),
            absl::StatusCode::kInvalidArgument);  // host id out of range
  EXPECT_EQ(CopyKvBlocksToHost(backend_, device, {0}, host, {0, 1}).code(),
            absl::StatusCode::kInvalidArgument);  // unequal lengths
  const Tensor other = Tensor::Zeros(DType::kF32, Shape{4, 4, 2, 6});
  EXPECT_EQ(CopyKvBlocksFromHost(backend_, other, {0}, device, {0}).code(),
            absl::StatusCode::kInvalidArgument);  // another head dim
  EXPECT_EQ(Block(host, 0), Block(before, 0));
  EXPECT_EQ(Block(host, 1), Block(before, 1));
}

}  // namespace
}  // namespace sparseserve::engine
