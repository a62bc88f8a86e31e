// KvStagingArea: host staging blocks for KV that prefill workers write when the decode worker's
// KV pool is not in host memory. Blocks leave only inside a KvStagingLease, which returns them
// when destroyed, reset or overwritten, so no path leaks them.
#include "decode_svc/kv_staging_area.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace sparseserve::decode {
namespace {

// `num_layers` host layers of `num_blocks` blocks of 16 tokens x 2 heads x 4 dims.
std::vector<Tensor> Layers(int num_layers, int num_blocks) {
  std::vector<Tensor> layers;
  for (int l = 0; l < num_layers; ++l) {
    layers.push_back(Tensor::Zeros(DType::kF32, Shape{int64_t{2} * num_blocks, 16, 2, 4}));
  }
  return layers;
}

std::unique_ptr<KvStagingArea> Area(int num_blocks) {
  auto area = KvStagingArea::Create(Layers(3, num_blocks));
  EXPECT_TRUE(area.ok()) << area.status();
  return area.ok() ? *std::move(area) : nullptr;
}

TEST(KvStagingAreaTest, AllocateHandsOutDistinctBlocksAndLeasesReturnThem) {
  auto area = Area(8);
  ASSERT_NE(area, nullptr);
  EXPECT_EQ(area->num_layers(), 3);
  EXPECT_EQ(area->num_blocks(), 8);
  auto a = area->Allocate(3);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->block_ids(), (std::vector<int32_t>{0, 1, 2}));  // lowest ids first when fresh
  EXPECT_EQ(a->area(), area.get());
  {
    auto b = area->Allocate(5);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(area->num_free_blocks(), 0);
    for (int32_t id : b->block_ids()) {
      EXPECT_TRUE(id >= 3 && id < 8) << id;
    }
  }  // b destroyed: its five blocks come back
  EXPECT_EQ(area->num_free_blocks(), 5);
  a->Reset();
  EXPECT_TRUE(a->empty());
  EXPECT_EQ(area->num_free_blocks(), 8);
  a->Reset();  // a second Reset returns nothing twice
  EXPECT_EQ(area->num_free_blocks(), 8);
  auto none = area->Allocate(0);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(area->Allocate(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvStagingAreaTest, ExhaustionFailsWithoutTakingAnything) {
  auto area = Area(4);
  ASSERT_NE(area, nullptr);
  auto a = area->Allocate(3);
  ASSERT_TRUE(a.ok());
  auto full = area->Allocate(2);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("staging"), absl::string_view::npos) << full.status();
  EXPECT_EQ(area->num_free_blocks(), 1);
  auto last = area->Allocate(1);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(area->num_free_blocks(), 0);
}

TEST(KvStagingAreaTest, MovedLeasesReturnTheirBlocksExactlyOnce) {
  auto area = Area(6);
  ASSERT_NE(area, nullptr);
  auto a = area->Allocate(2);
  ASSERT_TRUE(a.ok());
  KvStagingLease moved = *std::move(a);
  EXPECT_EQ(moved.block_ids().size(), 2u);
  EXPECT_EQ(area->num_free_blocks(), 4);
  KvStagingLease target = std::move(*area->Allocate(3));
  EXPECT_EQ(area->num_free_blocks(), 1);
  target = std::move(moved);  // target's three blocks return, moved's two are now target's
  EXPECT_EQ(area->num_free_blocks(), 4);
  EXPECT_EQ(target.block_ids().size(), 2u);
  std::vector<KvStagingLease> leases;
  leases.push_back(std::move(target));
  leases.push_back(std::move(*area->Allocate(4)));
  EXPECT_EQ(area->num_free_blocks(), 0);
  leases.clear();
  EXPECT_EQ(area->num_free_blocks(), 6);
}

TEST(KvStagingAreaTest, CreateRejectsLayersOfTheWrongShape) {
  EXPECT_EQ(KvStagingArea::Create({}).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<Tensor> mixed = Layers(2, 4);
  mixed.push_back(Tensor::Zeros(DType::kF32, Shape{8, 16, 2, 8}));  // another head dim
  EXPECT_EQ(KvStagingArea::Create(std::move(mixed)).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<Tensor> odd = {Tensor::Zeros(DType::kF32, Shape{3, 16, 2, 4})};  // not K,V pairs
  EXPECT_EQ(KvStagingArea::Create(std::move(odd)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sparseserve::decode
