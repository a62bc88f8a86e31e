// core::MoveMatching: matching elements move in order and leave the source in order.
#include "common/core/move_matching.h"

#include <deque>
#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace sparseserve::core {
namespace {

TEST(MoveMatchingTest, MovesMatchesInOrderAndKeepsTheRest) {
  std::deque<std::unique_ptr<int>> from;
  for (int i = 0; i < 7; ++i) from.push_back(std::make_unique<int>(i));
  std::vector<std::unique_ptr<int>> to;
  to.push_back(std::make_unique<int>(-1));
  MoveMatching(from, to, [](const std::unique_ptr<int>& p) { return *p % 3 == 0; });
  std::vector<int> moved, kept;
  for (const auto& p : to) moved.push_back(*p);
  for (const auto& p : from) kept.push_back(*p);
  EXPECT_EQ(moved, (std::vector<int>{-1, 0, 3, 6}));
  EXPECT_EQ(kept, (std::vector<int>{1, 2, 4, 5}));
  MoveMatching(from, to, [](const std::unique_ptr<int>&) { return false; });
  EXPECT_EQ(from.size(), 4u);
  EXPECT_EQ(to.size(), 4u);
}

}  // namespace
}  // namespace sparseserve::core
