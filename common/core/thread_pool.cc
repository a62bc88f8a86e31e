#include "common/core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <memory>

namespace sparseserve::core {
namespace {
std::atomic<int> g_default_threads{0};
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0)
    num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  workers_.reserve(num_threads - 1);
  for (int i = 0; i + 1 < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (auto& w : workers_) w.join();
}

void ThreadPool::WorkerLoop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadPool* p)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->stopping_ || !p->tasks_.empty(); },
          this));
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void ThreadPool::Schedule(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_chunk,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  const int64_t max_chunks = (n + min_chunk - 1) / min_chunk;
  const int64_t num_chunks = std::min<int64_t>(num_threads(), max_chunks);
  if (num_chunks <= 1) {
    fn(0, n);
    return;
  }
  const int64_t chunk = (n + num_chunks - 1) / num_chunks;
  // Shared between this frame and the scheduled chunks; the frame outlives them because it
  // waits for `remaining` to reach zero before returning.
  struct Join {
    absl::Mutex mu;
    int64_t remaining ABSL_GUARDED_BY(mu);
  } join;
  {
    absl::MutexLock lock(&join.mu);
    join.remaining = num_chunks - 1;
  }
  for (int64_t c = 1; c < num_chunks; ++c) {
    const int64_t begin = c * chunk;
    const int64_t end = std::min(n, begin + chunk);
    Schedule([&fn, &join, begin, end] {
      if (begin < end) fn(begin, end);
      absl::MutexLock lock(&join.mu);
      --join.remaining;
    });
  }
  fn(0, std::min(n, chunk));
  absl::MutexLock lock(&join.mu);
  join.mu.Await(absl::Condition(
      +[](Join* j) ABSL_EXCLUSIVE_LOCKS_REQUIRED(j->mu) { return j->remaining == 0; }, &join));
}

void ThreadPool::SetDefaultThreads(int num_threads) {
  // Relaxed: read once under the function-local static's initialisation, which synchronises.
  g_default_threads.store(num_threads, std::memory_order_relaxed);
}

ThreadPool& ThreadPool::Default() {
  static ThreadPool* pool = new ThreadPool(g_default_threads.load(std::memory_order_relaxed));
  return *pool;
}

}  // namespace sparseserve::core
