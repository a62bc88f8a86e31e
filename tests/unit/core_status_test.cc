#include "common/core/status.h"

#include "common/core/mapped_file.h"
#include "gtest/gtest.h"

namespace sparseserve {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  SS_ASSIGN_OR_RETURN(int h, Half(x));
  SS_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

absl::Status CheckEven(int x) {
  SS_RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST(StatusTest, AssignOrReturnPropagatesErrors) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_FALSE(CheckEven(5).ok());
}

TEST(StatusTest, AnnotateAddsContext) {
  absl::Status s = AnnotateStatus(absl::NotFoundError("gone"), "loading x");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "loading x: gone");
  EXPECT_TRUE(AnnotateStatus(absl::OkStatus(), "ctx").ok());
}

TEST(MappedFileTest, MissingFileIsNotFound) {
  auto f = core::MappedFile::Open("/nonexistent/sparseserve/file");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("/nonexistent/sparseserve/file"), std::string::npos);
}

}  // namespace
}  // namespace sparseserve
