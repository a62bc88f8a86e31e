#include "common/core/thread_pool.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace sparseserve::core {
namespace {

TEST(ThreadPoolTest, ParallelForCoversRangeExactlyOnce) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(1003);
  pool.ParallelFor(1003, 7, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPoolTest, ParallelForSmallRangeRunsInline) {
  ThreadPool pool(4);
  int calls = 0;  // not atomic: a single chunk must run on this thread
  pool.ParallelFor(3, 16, [&](int64_t b, int64_t e) {
    ++calls;
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 3);
  });
  EXPECT_EQ(calls, 1);
}

TEST(ThreadPoolTest, ScheduledTasksRunBeforeDestruction) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(3);
    for (int i = 0; i < 50; ++i) pool.Schedule([&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 50);
}

}  // namespace
}  // namespace sparseserve::core
