// Malformed GGUF input must give a clean kInvalidArgument naming the file (these run under
// ASan/UBSan in CI, which turns any out-of-bounds read into a failure).
#include <cstring>
#include <string>
#include <vector>

#include "common/model/gguf_file.h"
#include "gtest/gtest.h"
#include "model_file_writers.h"

namespace sparseserve::model {
namespace {

using testing::BuildGguf;
using testing::KvHeader;
using testing::KvScalar;
using testing::KvString;
using testing::Put;
using testing::PutGgufString;

// Parses an exact-size heap copy of `bytes` (so ASan sees any read past the end).
absl::Status ParseCopy(const std::string& bytes, size_t size) {
  std::vector<uint8_t> copy(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(size));
  auto file = GgufFile::FromBuffer("bad.gguf", copy.data(), copy.size(), nullptr);
  return file.status();
}
absl::Status Parse(const std::string& bytes) {
  return ParseCopy(bytes, bytes.size());
}

void ExpectInvalid(const absl::Status& status, const std::string& fragment) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("bad.gguf: "), std::string::npos) << status;
  EXPECT_NE(status.message().find(fragment), std::string::npos) << status;
}

// A small valid file whose every byte matters.
std::string SmallValidFile() {
  return BuildGguf({KvString("general.architecture", "llama"),
                    testing::KvStringArray("toks", {"a", "bc"}), KvScalar<float>("eps", 6, 1e-5f)},
                   {{"w", 0, {2, 2}, std::string(16, '\x3f')}, {"n", 0, {2}, std::string(8, 0)}});
}

TEST(GgufBadInputTest, SmallFileTruncatedAtEveryByteFails) {
  const std::string bytes = SmallValidFile();
  ASSERT_TRUE(Parse(bytes).ok());
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    SCOPED_TRACE(cut);
    ExpectInvalid(ParseCopy(bytes, cut), "");
  }
}

TEST(GgufBadInputTest, StoriesTruncatedAcrossHeaderAndDataFails) {
  std::string bytes;
  if (!testing::ReadWholeFile(testing::StoriesPath("stories260K.gguf"), &bytes)) {
    GTEST_SKIP() << "stories260K.gguf not found (run scripts/fetch_model.sh)";
  }
  ASSERT_TRUE(Parse(bytes).ok());
  // Every cut through the header region (metadata + tensor directory + padding) ...
  constexpr size_t kHeaderRegion = 14176 + 64;
  for (size_t cut = 0; cut < kHeaderRegion; ++cut) {
    const absl::Status status = ParseCopy(bytes, cut);
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << cut << ": " << status;
  }
  // ... and a sample across the data: the last tensor ends at the end of the file.
  for (size_t cut = kHeaderRegion; cut < bytes.size(); cut += 4093) {
    const absl::Status status = ParseCopy(bytes, cut);
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << cut << ": " << status;
    EXPECT_NE(status.message().find("runs past the end"), std::string::npos) << status;
  }
  ExpectInvalid(ParseCopy(bytes, bytes.size() - 1), "blk.4.ffn_norm.weight");
}

TEST(GgufBadInputTest, BadMagicAndVersion) {
  std::string bytes = SmallValidFile();
  bytes[0] = 'X';
  ExpectInvalid(Parse(bytes), "bad magic");
  for (uint32_t version : {0u, 1u, 4u, 0x03000000u}) {
    bytes = SmallValidFile();
    std::memcpy(&bytes[4], &version, 4);
    ExpectInvalid(Parse(bytes), "unsupported GGUF version");
  }
  bytes = SmallValidFile();
  const uint32_t v2 = 2;
  std::memcpy(&bytes[4], &v2, 4);
  EXPECT_TRUE(Parse(bytes).ok());  // v2 has the same layout
}

TEST(GgufBadInputTest, AbsurdCounts) {
  for (uint64_t n : {uint64_t{1} << 40, ~uint64_t{0}, uint64_t{1000}}) {
    std::string bytes = SmallValidFile();
    std::memcpy(&bytes[8], &n, 8);  // tensor count
    ExpectInvalid(Parse(bytes), "tensor count");
    bytes = SmallValidFile();
    std::memcpy(&bytes[16], &n, 8);  // metadata count
    ExpectInvalid(Parse(bytes), "metadata count");
  }
}

TEST(GgufBadInputTest, AbsurdStringLength) {
  for (uint64_t len : {~uint64_t{0}, uint64_t{1} << 62, uint64_t{100000}}) {
    std::string bytes = SmallValidFile();
    std::memcpy(&bytes[24], &len, 8);  // the first key's length
    ExpectInvalid(Parse(bytes), "length");
  }
  // A string value whose length runs past the end.
  std::string kv = KvHeader("k", 8);
  Put<uint64_t>(&kv, ~uint64_t{0} - 3);
  ExpectInvalid(Parse(BuildGguf({kv}, {})), "'k' string length");
}

TEST(GgufBadInputTest, AbsurdArrayCountsAndNesting) {
  for (uint32_t elem_type : {0u, 8u, 9u, 12u}) {
    std::string kv = KvHeader("arr", 9);
    Put<uint32_t>(&kv, elem_type);
    Put<uint64_t>(&kv, uint64_t{1} << 61);
    ExpectInvalid(Parse(BuildGguf({kv}, {})), "'arr' array length");
  }
  std::string kv = KvHeader("deep", 9);
  for (int i = 0; i < 20; ++i) {
    Put<uint32_t>(&kv, 9);
    Put<uint64_t>(&kv, 1);
  }
  ExpectInvalid(Parse(BuildGguf({kv}, {})), "nested deeper");
  std::string bad_type = KvHeader("t", 13);
  Put<uint32_t>(&bad_type, 0);
  ExpectInvalid(Parse(BuildGguf({bad_type}, {})), "unknown 't' value type 13");
  ExpectInvalid(Parse(BuildGguf({KvString("a", "x"), KvString("a", "y")}, {})), "duplicate");
}

TEST(GgufBadInputTest, BadTensorDirectory) {
  const std::string f32x4(16, '\0');
  ExpectInvalid(Parse(BuildGguf({}, {{"t", 0, {1, 1, 1, 1, 1}, f32x4}})), "5 dimensions");
  ExpectInvalid(Parse(BuildGguf({}, {{"t", 0, {}, f32x4}})), "0 dimensions");
  ExpectInvalid(Parse(BuildGguf({}, {{"t", 0, {uint64_t{1} << 32, uint64_t{1} << 32}, f32x4}})),
                "element count overflows");
  ExpectInvalid(Parse(BuildGguf({}, {{"t", 0, {~uint64_t{0}}, f32x4}})), "overflows");
  // Found by gguf_fuzz: a zero ne[0] hid the overflow of the other dims from the check, and
  // Shape::numel (slowest dimension first) overflowed.
  ExpectInvalid(Parse(BuildGguf({}, {{"t", 12, {0, uint64_t{1} << 42, uint64_t{1} << 48}, ""}})),
                "overflows");
  ExpectInvalid(Parse(BuildGguf({}, {{"t", 0, {uint64_t{1} << 62}, f32x4}})), "overflows");
  ExpectInvalid(Parse(BuildGguf({}, {{"t", 0, {8}, f32x4}})), "runs past the end");
  ExpectInvalid(Parse(BuildGguf({}, {{"t", 0, {4}, f32x4}, {"t", 0, {4}, f32x4}})),
                "duplicate tensor");
  ExpectInvalid(Parse(BuildGguf({KvScalar<uint32_t>("general.alignment", 4, 24)}, {})),
                "general.alignment");
  ExpectInvalid(Parse(BuildGguf({KvScalar<uint32_t>("general.alignment", 4, 0)}, {})),
                "general.alignment");
  ExpectInvalid(Parse(BuildGguf({KvString("general.alignment", "32")}, {})), "general.alignment");
}

TEST(GgufBadInputTest, TensorOffsetsPastEndOrMisaligned) {
  // Hand-written directory: one f32[4] tensor at the given offset, 16 data bytes.
  auto file_with_offset = [](uint64_t offset) {
    std::string out = "GGUF";
    Put<uint32_t>(&out, 3);
    Put<uint64_t>(&out, 1);
    Put<uint64_t>(&out, 0);
    PutGgufString(&out, "t");
    Put<uint32_t>(&out, 1);
    Put<uint64_t>(&out, 4);
    Put<uint32_t>(&out, 0);
    Put<uint64_t>(&out, offset);
    while (out.size() % 32 != 0) out.push_back('\0');
    return out + std::string(16, '\0');
  };
  EXPECT_TRUE(Parse(file_with_offset(0)).ok());
  ExpectInvalid(Parse(file_with_offset(32)), "runs past the end");
  ExpectInvalid(Parse(file_with_offset(~uint64_t{0} - 31)), "runs past the end");
  ExpectInvalid(Parse(file_with_offset(4)), "not a multiple of the alignment");
  // An unsupported type is not size-checked, but its offset still must be inside the data.
  std::string q = BuildGguf({}, {{"q", 12, {256}, std::string(144, '\0')}});
  EXPECT_TRUE(Parse(q).ok());
  const uint64_t far = uint64_t{1} << 40;
  const size_t offset_pos = 24 + 8 + 1 + 4 + 8 + 4;  // header, name, n_dims, ne, type
  std::memcpy(&q[offset_pos], &far, 8);
  ExpectInvalid(Parse(q), "runs past the end");
}

TEST(GgufBadInputTest, EmptyAndMissingFiles) {
  ExpectInvalid(Parse(""), "truncated magic");
  auto missing = GgufFile::Open("/nonexistent/dir/x.gguf");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/dir/x.gguf"), std::string::npos);
}

}  // namespace
}  // namespace sparseserve::model
