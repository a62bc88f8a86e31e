// rpc::KvLayoutFromProto, the layout a prefill worker reads from a decode worker's reservation:
// every field (the Kangaroo adapter's fingerprint included) arrives, an unset tensor-parallel
// degree is 1, and an unknown dtype is refused.
#include "common/rpc/worker_conversion.h"
#include "gtest/gtest.h"

namespace sparseserve::rpc {
namespace {

TEST(KvLayoutFromProtoTest, CarriesEveryFieldAndRefusesUnknownDtypes) {
  v1::KvLayout proto;
  proto.set_dtype("bf16");
  proto.set_block_tokens(64);
  proto.set_num_layers(33);
  proto.set_num_kv_heads(8);
  proto.set_head_dim(128);
  proto.set_adapter_fingerprint(0xfeedbeef12345678ULL);
  absl::StatusOr<kv::KvLayout> layout = KvLayoutFromProto(proto);
  ASSERT_TRUE(layout.ok()) << layout.status();
  kv::KvLayout expected;
  expected.dtype = DType::kBf16;
  expected.block_tokens = 64;
  expected.num_layers = 33;
  expected.num_kv_heads = 8;
  expected.head_dim = 128;
  expected.tensor_parallel = 1;  // unset
  expected.adapter_fingerprint = 0xfeedbeef12345678ULL;
  EXPECT_EQ(*layout, expected) << layout->ToString();
  proto.set_tensor_parallel(2);
  EXPECT_EQ(KvLayoutFromProto(proto)->tensor_parallel, 2);
  proto.set_dtype("i32");
  EXPECT_EQ(KvLayoutFromProto(proto).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sparseserve::rpc
