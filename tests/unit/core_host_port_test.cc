// "host:port" parsing (core/host_port.h): IPv6 brackets, bare ports, and bad listen addresses.
#include "common/core/host_port.h"

#include "gtest/gtest.h"

namespace sparseserve::core {
namespace {

TEST(HostPortTest, SplitsAtTheLastColon) {
  EXPECT_EQ(SplitHostPort("sparseserve-decode:50051").host, "sparseserve-decode");
  EXPECT_EQ(SplitHostPort("sparseserve-decode:50051").port, "50051");
  EXPECT_EQ(SplitHostPort("[::1]:8000").host, "::1");
  EXPECT_EQ(SplitHostPort("[::1]:8000").port, "8000");
  EXPECT_EQ(SplitHostPort("8000").host, "");
  EXPECT_EQ(SplitHostPort("8000").port, "8000");
}

TEST(HostPortTest, ListenAddresses) {
  absl::StatusOr<ListenAddress> a = ParseListenAddress(":9400");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "0.0.0.0");
  EXPECT_EQ(a->port, 9400);
  a = ParseListenAddress("[::]:0");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "::");
  EXPECT_EQ(a->port, 0);
  for (const char* bad : {"", "host:", "host:x", "host:65536", "host:-1"}) {
    EXPECT_EQ(ParseListenAddress(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace sparseserve::core
