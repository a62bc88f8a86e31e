// RankThreads (issue 19): rank 0 runs on the caller and every other rank on its own thread, the
// same thread run after run; Run returns once all are done, with the first error in rank order
// that is not a rank's kAborted note about another.
#include <set>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "common/engine/rank_threads.h"
#include "gtest/gtest.h"

namespace sparseserve::engine {
namespace {

TEST(RankThreadsTest, EachRankKeepsItsThread) {
  RankThreads threads(4);
  EXPECT_EQ(threads.ranks(), 4);
  std::vector<std::thread::id> first(4), again(4);
  ASSERT_TRUE(threads
                  .Run([&](int r) {
                    first[r] = std::this_thread::get_id();
                    return absl::OkStatus();
                  })
                  .ok());
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(threads
                    .Run([&](int r) {
                      again[r] = std::this_thread::get_id();
                      return absl::OkStatus();
                    })
                    .ok());
    EXPECT_EQ(again, first);
  }
  EXPECT_EQ(first[0], std::this_thread::get_id());  // rank 0 on the caller
  EXPECT_EQ(std::set<std::thread::id>(first.begin(), first.end()).size(), 4u);
}

TEST(RankThreadsTest, ReturnsTheFirstErrorThatIsNotAnAbortNote) {
  RankThreads threads(3);
  const absl::Status s = threads.Run([](int r) {
    if (r == 0) return absl::AbortedError("another rank failed");
    if (r == 2) return absl::ResourceExhaustedError("rank 2 out of memory");
    return absl::OkStatus();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(
      threads
          .Run([](int r) { return r == 1 ? absl::AbortedError("only aborts") : absl::OkStatus(); })
          .code(),
      absl::StatusCode::kAborted);
  EXPECT_TRUE(threads.Run([](int) { return absl::OkStatus(); }).ok()) << "a later run is clean";
}

TEST(RankThreadsTest, OneRankRunsOnTheCaller) {
  RankThreads threads(1);
  std::thread::id id;
  ASSERT_TRUE(threads
                  .Run([&](int r) {
                    EXPECT_EQ(r, 0);
                    id = std::this_thread::get_id();
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_EQ(id, std::this_thread::get_id());
}

}  // namespace
}  // namespace sparseserve::engine
