// The in-process collective (kernels/collective.h): ranks as threads — sums equal on every rank
// and in rank order, gathered columns with the padding of the last rank dropped, and Agree giving
// every rank the first error.
#include <chrono>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/collective.h"

namespace sparseserve::kernels {
namespace {

// Runs fn(rank) on `n` threads and joins them.
void OnRanks(int n, const std::function<void(int rank)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(fn, r);
  for (std::thread& t : threads) t.join();
}

TEST(InProcessCollectiveTest, AllReduceSumGivesEveryRankTheSum) {
  for (int n : {1, 2, 3, 4}) {
    std::vector<std::unique_ptr<Collective>> group = CreateInProcessCollectives(n);
    std::vector<Tensor> xs;
    for (int r = 0; r < n; ++r) {
      xs.push_back(Tensor::Zeros(DType::kF32, {3, 5}));
      for (int i = 0; i < 15; ++i) xs[r].data<float>()[i] = static_cast<float>(r * 100 + i);
    }
    std::vector<absl::Status> results(n);
    OnRanks(n, [&](int r) {
      for (int round = 0; round < 3 && results[r].ok(); ++round) {  // reusable round after round
        results[r] = group[r]->AllReduceSum(xs[r]);
      }
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(results[r].ok()) << results[r];
      EXPECT_EQ(group[r]->rank(), r);
      EXPECT_EQ(group[r]->size(), n);
      for (int i = 0; i < 15; ++i) {
        // Three rounds: each multiplies the sum over ranks by n again.
        float want = 0;
        for (int s = 0; s < n; ++s) want += static_cast<float>(s * 100 + i);
        want *= static_cast<float>(n * n);
        EXPECT_FLOAT_EQ(xs[r].data<float>()[i], want) << "n " << n << " rank " << r;
      }
    }
  }
}

TEST(InProcessCollectiveTest, AllGatherColumnsDropsThePaddingOfTheLastRank) {
  const int n = 3;
  std::vector<std::unique_ptr<Collective>> group = CreateInProcessCollectives(n);
  // A vocabulary of 7 over 3 ranks: 3 columns each, the last rank's third one padding.
  std::vector<Tensor> locals, outs;
  for (int r = 0; r < n; ++r) {
    locals.push_back(Tensor::Zeros(DType::kF32, {2, 3}));
    for (int i = 0; i < 2; ++i) {
      for (int c = 0; c < 3; ++c) locals[r].data<float>()[i * 3 + c] = 10.0f * i + 3 * r + c;
    }
    outs.push_back(Tensor::Zeros(DType::kF32, {2, 7}));
  }
  std::vector<absl::Status> results(n);
  OnRanks(n, [&](int r) { results[r] = group[r]->AllGatherColumns(locals[r], Tensor(), outs[r]); });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r];
    for (int i = 0; i < 2; ++i) {
      for (int c = 0; c < 7; ++c) EXPECT_EQ(outs[r].data<float>()[i * 7 + c], 10.0f * i + c);
    }
  }
}

TEST(InProcessCollectiveTest, AllGatherColumnsRefusesAnOutputWiderThanTheRanks) {
  std::vector<std::unique_ptr<Collective>> group = CreateInProcessCollectives(1);
  const Tensor local = Tensor::Zeros(DType::kF32, {2, 3});
  const Tensor out = Tensor::Zeros(DType::kF32, {2, 4});
  EXPECT_EQ(group[0]->AllGatherColumns(local, Tensor(), out).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(InProcessCollectiveTest, AgreeGivesEveryRankTheFirstError) {
  const int n = 4;
  std::vector<std::unique_ptr<Collective>> group = CreateInProcessCollectives(n);
  std::vector<absl::Status> ok(n), failed(n);
  OnRanks(n, [&](int r) {
    ok[r] = group[r]->Agree(absl::OkStatus());
    failed[r] = group[r]->Agree(r >= 2 ? absl::ResourceExhaustedError(absl::StrCat("rank ", r))
                                       : absl::OkStatus());
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(ok[r].ok());
    EXPECT_EQ(failed[r].code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(failed[r].message(), "rank 2");
  }
}

// A rank that fails in the middle of a step aborts the group: the ranks already waiting in a
// collective for it return kAborted instead of waiting for ever, and so do later calls.
TEST(InProcessCollectiveTest, AbortWakesTheRanksWaitingForAFailedOne) {
  const int n = 3;
  std::vector<std::unique_ptr<Collective>> group = CreateInProcessCollectives(n);
  std::vector<Tensor> xs;
  for (int r = 0; r < n; ++r) xs.push_back(Tensor::Zeros(DType::kF32, {4}));
  std::vector<absl::Status> results(n);
  OnRanks(n, [&](int r) {
    if (r == 2) {  // fails instead of reaching the all-reduce
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      group[r]->Abort();
      return;
    }
    results[r] = group[r]->AllReduceSum(xs[r]);
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(results[r].code(), absl::StatusCode::kAborted) << r;
  EXPECT_EQ(group[0]->AllReduceSum(xs[0]).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(group[1]->Agree(absl::OkStatus()).code(), absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace sparseserve::kernels
