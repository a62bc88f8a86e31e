#include "common/model/safetensors_file.h"

#include <filesystem>
#include <string>
#include <vector>

#include "common/model/sharded_safetensors.h"
#include "gtest/gtest.h"
#include "model_file_writers.h"

namespace sparseserve::model {
namespace {

using testing::BuildSafetensors;
using testing::RawBytes;
using testing::RawSafetensors;
using testing::SafetensorsTestTensor;
using testing::WriteWholeFile;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("safetensors");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    WriteWholeFile(path, bytes);
    return path;
  }
  // Writes `bytes` as bad.safetensors and expects Open to fail with `code` and `fragment`,
  // the message naming the file.
  void ExpectOpenError(const std::string& bytes, const std::string& fragment,
                       absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
    const std::string path = Write("bad.safetensors", bytes);
    auto file = SafetensorsFile::Open(path);
    ASSERT_FALSE(file.ok()) << fragment;
    EXPECT_EQ(file.status().code(), code) << file.status();
    EXPECT_NE(file.status().message().find(path), std::string::npos) << file.status();
    EXPECT_NE(file.status().message().find(fragment), std::string::npos) << file.status();
  }

  std::string dir_;
};

const std::vector<float> kF32 = {1.0f, -2.5f, 3.25f, 0.0f, 5.0f, 6.0f};

TEST_F(SafetensorsTest, ReadsF32Bf16F16AndMetadata) {
  const std::vector<uint16_t> bf16 = {F32ToBf16(0.5f), F32ToBf16(-4.0f)};
  const std::vector<uint16_t> f16 = {F32ToF16(0.125f), F32ToF16(7.0f), F32ToF16(-1.0f)};
  const std::string path =
      Write("m.safetensors", BuildSafetensors({{"w.f32", "F32", {2, 3}, RawBytes(kF32)},
                                               {"w.bf16", "BF16", {2}, RawBytes(bf16)},
                                               {"w.f16", "F16", {3, 1}, RawBytes(f16)},
                                               {"ids", "I64", {1}, std::string(8, '\0')}},
                                              R"({"format":"pt"})"));
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->TensorNames(), (std::vector<std::string>{"w.f32", "w.bf16", "w.f16", "ids"}));
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  auto a = (*file)->GetTensor("w.f32");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->shape(), (Shape{2, 3}));
  EXPECT_EQ(a->GetFloat({0, 1}), -2.5f);
  EXPECT_EQ(a->GetFloat({1, 2}), 6.0f);
  auto b = (*file)->GetTensor("w.bf16");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->dtype(), DType::kBf16);
  EXPECT_EQ(b->GetFloat({1}), -4.0f);
  auto c = (*file)->GetTensor("w.f16");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->dtype(), DType::kF16);
  EXPECT_EQ(c->GetFloat({1, 0}), 7.0f);
  auto ids = (*file)->GetTensor("ids");
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(ids.status().message().find("I64"), std::string::npos);
  EXPECT_EQ((*file)->GetTensor("nope").status().code(), absl::StatusCode::kNotFound);
  // The view keeps the mapping alive after the file object is gone.
  file->reset();
  EXPECT_EQ(a->GetFloat({1, 0}), 0.0f);
}

TEST_F(SafetensorsTest, UnalignedDataIsCopiedAndScalarsHaveShapeOne) {
  // Header of odd length, no padding: the f32 data starts misaligned in the mapping.
  const std::string header = R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                             R"("v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  const std::vector<float> data = {9.0f, 1.5f, 2.5f};
  ASSERT_NE((8 + header.size()) % 4, 0u);
  auto file = SafetensorsFile::Open(Write("u.safetensors", RawSafetensors(header, RawBytes(data))));
  ASSERT_TRUE(file.ok()) << file.status();
  auto s = (*file)->GetTensor("s");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->shape(), Shape{1});
  EXPECT_EQ(s->GetFloat({0}), 9.0f);
  auto v = (*file)->GetTensor("v");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v->raw_data()) % 4, 0u);
  EXPECT_EQ(v->GetFloat({1}), 2.5f);
}

TEST_F(SafetensorsTest, BadInputsGiveCleanErrorsNamingTheFile) {
  std::string huge;
  testing::Put<uint64_t>(&huge, uint64_t{1} << 40);
  ExpectOpenError(huge + "{}", "header length");
  std::string big;
  testing::Put<uint64_t>(&big, 200'000'000);
  ExpectOpenError(big + std::string(16, ' '), "header length");
  ExpectOpenError("abc", "too short");
  ExpectOpenError(RawSafetensors("{not json", ""), "not valid JSON");
  ExpectOpenError(RawSafetensors("[1,2]", ""), "not a JSON object");
  const std::string data = RawBytes(kF32);
  ExpectOpenError(
      RawSafetensors(R"({"w":{"dtype":"F32","shape":[6],"data_offsets":[0,48]}})", data),
      "outside the 24-byte data section");
  ExpectOpenError(RawSafetensors(R"({"w":{"dtype":"F32","shape":[6],"data_offsets":[8,4]}})", data),
                  "outside");
  ExpectOpenError(
      RawSafetensors(R"({"w":{"dtype":"F32","shape":[5],"data_offsets":[0,24]}})", data),
      "needs 5 x 4");
  ExpectOpenError(RawSafetensors(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],)"
                                 R"("data_offsets":[0,24]}})",
                                 data),
                  "overflows");
  // A zero dimension must not hide the overflow of the others (Shape::numel multiplies all).
  ExpectOpenError(RawSafetensors(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,0],)"
                                 R"("data_offsets":[0,0]}})",
                                 data),
                  "overflows");
  ExpectOpenError(RawSafetensors(R"({"w":{"dtype":"Q4","shape":[6],"data_offsets":[0,24]}})", data),
                  "unknown dtype 'Q4'");
  ExpectOpenError(RawSafetensors(R"({"w":{"dtype":7,"shape":[6],"data_offsets":[0,24]}})", data),
                  "dtype");
  ExpectOpenError(
      RawSafetensors(R"({"w":{"dtype":"F32","shape":[-6],"data_offsets":[0,24]}})", data), "shape");
  ExpectOpenError(RawSafetensors(R"({"w":{"dtype":"F32","shape":[6],"data_offsets":[0]}})", data),
                  "data_offsets");
  ExpectOpenError(RawSafetensors(R"({"w":[1]})", data), "not a JSON object");
  ExpectOpenError(RawSafetensors(R"({"__metadata__":{"a":1}})", data), "__metadata__");
  ExpectOpenError("", "too short");
}

TEST_F(SafetensorsTest, SingleFileDirectory) {
  Write("model.safetensors", BuildSafetensors({{"a", "F32", {6}, RawBytes(kF32)}}));
  auto files = OpenSafetensorsDir(dir_);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ((*files)->TensorNames(), std::vector<std::string>{"a"});
  EXPECT_EQ((*files)->GetTensor("a")->GetFloat({2}), 3.25f);
}

TEST_F(SafetensorsTest, ShardedIndexOpensEachShardOnce) {
  Write("model-00001-of-00002.safetensors",
        BuildSafetensors({{"embed", "F32", {2, 3}, RawBytes(kF32)},
                          {"layer0", "F32", {1}, RawBytes(std::vector<float>{4.0f})}}));
  Write("model-00002-of-00002.safetensors",
        BuildSafetensors({{"layer1", "BF16", {1}, RawBytes(std::vector<uint16_t>{0x4000})},
                          {"head", "F32", {2}, RawBytes(std::vector<float>{7.0f, 8.0f})}}));
  Write("model.safetensors.index.json", R"({"metadata":{"total_size":42},"weight_map":{
      "embed":"model-00001-of-00002.safetensors","layer0":"model-00001-of-00002.safetensors",
      "layer1":"model-00002-of-00002.safetensors","head":"model-00002-of-00002.safetensors"}})");
  auto files = ShardedSafetensors::Open(dir_);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ((*files)->shards().size(), 2u);
  EXPECT_EQ((*files)->TensorNames(),
            (std::vector<std::string>{"embed", "layer0", "layer1", "head"}));
  EXPECT_EQ((*files)->GetTensor("layer0")->GetFloat({0}), 4.0f);
  EXPECT_EQ((*files)->GetTensor("layer1")->GetFloat({0}), 2.0f);
  EXPECT_EQ((*files)->GetTensor("head")->GetFloat({1}), 8.0f);
  EXPECT_FALSE((*files)->HasTensor("other"));
  EXPECT_EQ((*files)->GetTensor("other").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SafetensorsTest, ShardedIndexErrors) {
  auto files = OpenSafetensorsDir(dir_);
  EXPECT_EQ(files.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(files.status().message().find(dir_), std::string::npos);

  Write("s1.safetensors", BuildSafetensors({{"a", "F32", {6}, RawBytes(kF32)}}));
  Write("model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors",
      "b":"missing.safetensors"}})");
  files = OpenSafetensorsDir(dir_);
  EXPECT_EQ(files.status().code(), absl::StatusCode::kNotFound) << files.status();
  EXPECT_NE(files.status().message().find("missing.safetensors"), std::string::npos);

  Write("model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors",
      "b":"s1.safetensors"}})");
  files = OpenSafetensorsDir(dir_);
  EXPECT_EQ(files.status().code(), absl::StatusCode::kInvalidArgument) << files.status();
  EXPECT_NE(files.status().message().find("'b'"), std::string::npos) << files.status();

  Write("model.safetensors.index.json", R"({"weight_map":{"a":"../s1.safetensors"}})");
  EXPECT_EQ(OpenSafetensorsDir(dir_).status().code(), absl::StatusCode::kInvalidArgument);
  Write("model.safetensors.index.json", R"({"weight_map":[]})");
  EXPECT_EQ(OpenSafetensorsDir(dir_).status().code(), absl::StatusCode::kInvalidArgument);
  Write("model.safetensors.index.json", "{");
  files = OpenSafetensorsDir(dir_);
  EXPECT_EQ(files.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(files.status().message().find("model.safetensors.index.json"), std::string::npos);

  // A bad shard's error names the shard.
  Write("s1.safetensors", "garbage!");
  Write("model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors"}})");
  files = OpenSafetensorsDir(dir_);
  EXPECT_EQ(files.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(files.status().message().find("s1.safetensors"), std::string::npos);
}

}  // namespace
}  // namespace sparseserve::model
