// ThreadPool: the one pool of worker threads in a process, used for data-parallel CPU work.
//
// `ParallelFor` splits a range over the workers and the calling thread and returns when every
// chunk is done. `Schedule` runs a task asynchronously. Thread-safe: any thread may call either,
// but ParallelFor must not be called from inside a pool task (it would wait on itself).
#ifndef SPARSESERVE_COMMON_CORE_THREAD_POOL_H_
#define SPARSESERVE_COMMON_CORE_THREAD_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace sparseserve::core {

class ThreadPool {
 public:
  // `num_threads` workers in total including the caller of ParallelFor; 0 means one per core.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Total parallelism (background workers + the calling thread).
  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over disjoint chunks covering [0, n), each at least `min_chunk` long
  // (except the last), and returns once all calls have returned.
  void ParallelFor(int64_t n, int64_t min_chunk,
                   const std::function<void(int64_t begin, int64_t end)>& fn);

  // Runs `task` on a worker thread at some later point.
  void Schedule(std::function<void()> task);

  // The process-wide pool (created on first use with `SetDefaultThreads` or one per core).
  static ThreadPool& Default();
  // Sets the size of the default pool. Only effective before the first `Default()` call.
  static void SetDefaultThreads(int num_threads);

 private:
  void WorkerLoop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace sparseserve::core

#endif  // SPARSESERVE_COMMON_CORE_THREAD_POOL_H_
