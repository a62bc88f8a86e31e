#include "common/kv/kv_layout.h"

#include <string>

#include "gtest/gtest.h"

namespace sparseserve::kv {
namespace {

KvLayout Llama3_8B() {
  KvLayout layout;
  layout.dtype = DType::kBf16;
  layout.block_tokens = 64;
  layout.num_layers = 32;
  layout.num_kv_heads = 8;
  layout.head_dim = 128;
  return layout;
}

TEST(KvLayoutTest, BytesPerBlockPerLayer) {
  EXPECT_EQ(Llama3_8B().bytes_per_block_per_layer(), 256 * 1024);
  KvLayout f32 = Llama3_8B();
  f32.dtype = DType::kF32;
  f32.block_tokens = 16;
  EXPECT_EQ(f32.bytes_per_block_per_layer(), int64_t{2} * 16 * 8 * 128 * 4);
}

TEST(KvLayoutTest, ToStringNamesEveryField) {
  EXPECT_EQ(Llama3_8B().ToString(), "bf16 block=64 layers=32 kv_heads=8 head_dim=128 k=post-rope");
}

TEST(KvLayoutTest, ValidateRejectsBadFields) {
  EXPECT_TRUE(Llama3_8B().Validate().ok());
  KvLayout bad = Llama3_8B();
  bad.block_tokens = 24;  // not a multiple of 16
  EXPECT_EQ(bad.Validate().code(), absl::StatusCode::kInvalidArgument);
  bad = Llama3_8B();
  bad.block_tokens = 0;
  EXPECT_EQ(bad.Validate().code(), absl::StatusCode::kInvalidArgument);
  bad = Llama3_8B();
  bad.num_layers = 0;
  EXPECT_EQ(bad.Validate().code(), absl::StatusCode::kInvalidArgument);
  bad = Llama3_8B();
  bad.num_kv_heads = -1;
  EXPECT_EQ(bad.Validate().code(), absl::StatusCode::kInvalidArgument);
  bad = Llama3_8B();
  bad.head_dim = 0;
  EXPECT_EQ(bad.Validate().code(), absl::StatusCode::kInvalidArgument);
  bad = Llama3_8B();
  bad.dtype = DType::kI32;
  EXPECT_EQ(bad.Validate().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvLayoutTest, CheckCompatibleAcceptsEqualLayouts) {
  EXPECT_TRUE(CheckCompatible(Llama3_8B(), Llama3_8B()).ok());
}

TEST(KvLayoutTest, DifferentAdapterFingerprintsDoNotMatch) {
  KvLayout ours = Llama3_8B(), theirs = Llama3_8B();
  ours.num_layers = theirs.num_layers = 33;  // the adapter's KV layer
  ours.adapter_fingerprint = 0x1234;
  theirs.adapter_fingerprint = 0x1234;
  EXPECT_TRUE(CheckCompatible(ours, theirs).ok());
  theirs.adapter_fingerprint = 0x5678;
  const absl::Status status = CheckCompatible(ours, theirs);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("adapter_fingerprint"), std::string::npos) << status;
  EXPECT_NE(status.message().find("different --kangaroo-adapter"), std::string::npos) << status;
  EXPECT_NE(status.message().find("adapter=0000000000001234"), std::string::npos) << status;
}

TEST(KvLayoutTest, MismatchNamesBothLayouts) {
  KvLayout theirs = Llama3_8B();
  theirs.dtype = DType::kF16;
  theirs.head_dim = 64;
  const absl::Status status = CheckCompatible(Llama3_8B(), theirs);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(status.message());
  EXPECT_NE(message.find("bf16 block=64 layers=32 kv_heads=8 head_dim=128"), std::string::npos)
      << message;
  EXPECT_NE(message.find("f16 block=64 layers=32 kv_heads=8 head_dim=64"), std::string::npos)
      << message;
  EXPECT_NE(message.find("dtype, head_dim"), std::string::npos) << message;
}

// Workers of different tensor-parallel degrees exchange whole-heads blocks (issue 19): the degree
// alone is no mismatch, any other field still is.
TEST(KvLayoutTest, TensorParallelDegreesMayDiffer) {
  KvLayout tp = Llama3_8B();
  tp.tensor_parallel = 2;
  for (const auto& [ours, theirs] : {std::pair{tp, tp}, {tp, Llama3_8B()}, {Llama3_8B(), tp}}) {
    EXPECT_TRUE(CheckCompatible(ours, theirs).ok());
  }
  KvLayout other = tp;
  other.head_dim = 64;
  EXPECT_EQ(CheckCompatible(Llama3_8B(), other).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(tp.ToString().find("tp=2"), std::string::npos) << tp.ToString();
}

}  // namespace
}  // namespace sparseserve::kv
