#include "common/tensor/tensor.h"

#include <cmath>

#include "gtest/gtest.h"

namespace sparseserve {
namespace {

TEST(DTypeTest, Bf16RoundTripAndRounding) {
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.5f)), 1.5f);
  EXPECT_EQ(Bf16ToF32(F32ToBf16(-3.25f)), -3.25f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: round to even (1.0).
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(NAN))));
}

TEST(DTypeTest, F16RoundTripNormalSubnormalAndOverflow) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.333251953125f}) {
    EXPECT_EQ(F16ToF32(F32ToF16(v)), v) << v;
  }
  EXPECT_TRUE(std::isinf(F16ToF32(F32ToF16(1e6f))));
  EXPECT_EQ(F16ToF32(F32ToF16(1e-9f)), 0.0f);
}

TEST(TensorTest, SliceAndReshapeShareStorage) {
  Tensor t = Tensor::Zeros(DType::kF32, {4, 3});
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j) t.SetFloat({i, j}, static_cast<float>(i * 10 + j));
  Tensor rows = t.Slice(0, 1, 3);
  EXPECT_EQ(rows.dim(0), 2);
  EXPECT_EQ(rows.GetFloat({1, 2}), 22.0f);
  EXPECT_TRUE(rows.is_contiguous());
  Tensor cols = t.Slice(1, 1, 2);
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_FALSE(cols.Reshape({4}).ok());
  auto flat = t.Reshape({12});
  ASSERT_TRUE(flat.ok());
  flat->SetFloat({5}, -1.0f);
  EXPECT_EQ(t.GetFloat({1, 2}), -1.0f);
  EXPECT_FALSE(t.Reshape({5}).ok());
}

TEST(TensorTest, ToF32ConvertsStridedBf16) {
  Tensor t = Tensor::Zeros(DType::kBf16, {2, 4});
  for (int64_t j = 0; j < 4; ++j) t.SetFloat({1, j}, 0.5f * static_cast<float>(j));
  auto f = t.Slice(1, 1, 3).ToF32();
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->dtype(), DType::kF32);
  EXPECT_EQ(f->GetFloat({1, 0}), 0.5f);
  EXPECT_EQ(f->GetFloat({1, 1}), 1.0f);
  EXPECT_EQ(f->GetFloat({0, 0}), 0.0f);
}

}  // namespace
}  // namespace sparseserve
