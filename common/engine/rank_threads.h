// RankThreads: one thread per tensor-parallel rank beyond the first (issue 19), so the ranks'
// halves of a step run at once. Rank r's work always runs on the same thread — its GPU stays that
// thread's current device — and rank 0's on the caller (the engine thread). These are not the
// process's core::ThreadPool: a rank's CPU ops call the pool's ParallelFor, which a pool task may
// not, and a pool task may land on any worker.
#ifndef SPARSESERVE_COMMON_ENGINE_RANK_THREADS_H_
#define SPARSESERVE_COMMON_ENGINE_RANK_THREADS_H_

#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace sparseserve::engine {

class RankThreads {
 public:
  // Starts `ranks` - 1 threads (none for one rank).
  explicit RankThreads(int ranks);
  ~RankThreads();  // joins the threads (no Run may be in flight)
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int ranks() const { return static_cast<int>(threads_.size()) + 1; }

  // Runs fn(r) for every rank r at once — rank 0 on the calling thread, rank r on its thread —
  // and returns when all have returned: the first error in rank order that is not kAborted (a
  // rank's note that another failed: kernels::Collective::Agree), else the first error, else OK.
  // One Run at a time.
  absl::Status Run(const std::function<absl::Status(int rank)>& fn);

 private:
  void Loop(int rank);

  absl::Mutex mu_;
  const std::function<absl::Status(int)>* task_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // counts Runs; a thread runs each once
  int pending_ ABSL_GUARDED_BY(mu_) = 0;         // threads still running this Run's task
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<absl::Status> results_;  // per rank; written by its thread before pending_ drops
  std::vector<std::thread> threads_;
};

}  // namespace sparseserve::engine

#endif  // SPARSESERVE_COMMON_ENGINE_RANK_THREADS_H_
