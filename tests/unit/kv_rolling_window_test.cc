// Rolling KV arithmetic: the blocks a windowed sequence can no longer read, and its bound.
#include "common/kv/rolling_window.h"

#include "gtest/gtest.h"

namespace sparseserve::kv {
namespace {

TEST(RollingWindowTest, BlocksBeforeWindowAreThoseTheNextQueryCannotSee) {
  // Window 64, blocks of 16: the query at KV index n sees keys n-63 .. n.
  EXPECT_EQ(BlocksBeforeWindow(0, 64, 16), 0);
  EXPECT_EQ(BlocksBeforeWindow(79, 64, 16), 1);   // sees 16..79: block 0 (keys 0..15) is out
  EXPECT_EQ(BlocksBeforeWindow(78, 64, 16), 0);   // sees 15..78: key 15 is still in block 0
  EXPECT_EQ(BlocksBeforeWindow(100, 32, 16), 4);  // sees 69..100: blocks 0..3 are out
  for (int n = 0; n < 500; ++n) {
    const int dead = BlocksBeforeWindow(n, 64, 16);
    EXPECT_LE(dead * 16, n - 64 + 1 > 0 ? n - 64 + 1 : 0) << n;  // every released key is unseen
    EXPECT_GT((dead + 1) * 16 - 1, n - 64) << n;                 // the next block has a seen key
  }
}

TEST(RollingWindowTest, MaxBlocksInWindowBoundsWhatIsHeld) {
  EXPECT_EQ(MaxBlocksInWindow(64, 1, 16), 5);  // 63 keys + 1 row over a boundary
  EXPECT_EQ(MaxBlocksInWindow(4096, 1, 64), 65);
  for (int step = 1; step <= 48; ++step) {
    for (int n = 0; n < 400; ++n) {  // a step of `step` rows at KV index n
      const int held = (n + step + 15) / 16 - BlocksBeforeWindow(n, 64, 16);
      EXPECT_LE(held, MaxBlocksInWindow(64, step, 16)) << n << " " << step;
    }
  }
}

}  // namespace
}  // namespace sparseserve::kv
