#include "common/engine/rank_threads.h"

#include <algorithm>

namespace sparseserve::engine {

RankThreads::RankThreads(int ranks) : results_(std::max(ranks, 1)) {
  for (int r = 1; r < ranks; ++r) threads_.emplace_back([this, r] { Loop(r); });
}

RankThreads::~RankThreads() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void RankThreads::Loop(int rank) {
  int64_t seen = 0;
  while (true) {
    const std::function<absl::Status(int)>* task = nullptr;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this, seen]()
                       ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || generation_ != seen; };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      seen = generation_;
      task = task_;
    }
    absl::Status result = (*task)(rank);
    absl::MutexLock lock(&mu_);
    results_[rank] = std::move(result);
    --pending_;
  }
}

absl::Status RankThreads::Run(const std::function<absl::Status(int rank)>& fn) {
  {
    absl::MutexLock lock(&mu_);
    task_ = &fn;
    pending_ = static_cast<int>(threads_.size());
    ++generation_;
  }
  results_[0] = fn(0);
  {
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return pending_ == 0; };
    mu_.Await(absl::Condition(&done));
    task_ = nullptr;
  }
  for (const absl::Status& s : results_) {
    if (!s.ok() && s.code() != absl::StatusCode::kAborted) return s;
  }
  for (const absl::Status& s : results_) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace sparseserve::engine
