// UcpProgressThread: the dedicated thread that drives one UcpWorker (the one std::thread this
// module owns; STYLE.md allows it for a progress engine owned by a class).
//
// UCX makes progress only inside ucp_worker_progress. The target of a PUT needs it because the
// tcp and shared-memory transports emulate RMA with active messages handled by the target; the
// source needs it so queued PUT fragments keep moving while the caller computes the next layer
// and so flush/close requests complete. The thread spins while there is work and otherwise
// sleeps on the worker's event fd (bounded poll, so stop is always noticed).
//
// Thread-safe: Wake() may be called from any thread. Borrows the worker, which must outlive it;
// the destructor stops and joins the thread.
#ifndef SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_PROGRESS_THREAD_H_
#define SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_PROGRESS_THREAD_H_

#include <atomic>
#include <memory>
#include <thread>

#include "common/transfer/internal/ucp_worker.h"

namespace sparseserve::transfer::internal {

class UcpProgressThread {
 public:
  // Starts progressing `worker` (borrowed) at once.
  explicit UcpProgressThread(UcpWorker* worker);
  ~UcpProgressThread();
  UcpProgressThread(const UcpProgressThread&) = delete;
  UcpProgressThread& operator=(const UcpProgressThread&) = delete;

  // Wakes the thread if it sleeps; call after posting work from another thread.
  void Wake();

  // Brackets a burst of operations posted by one caller, who progresses the worker itself
  // meanwhile (ucp_worker_progress between posts): the thread stays off the worker's lock, which
  // it would otherwise take between every two posts of the caller. Bursts of several threads may
  // overlap. EndBurst wakes the thread.
  void BeginBurst() { bursts_.fetch_add(1, std::memory_order_relaxed); }
  void EndBurst() {
    bursts_.fetch_sub(1, std::memory_order_relaxed);
    Wake();
  }

 private:
  void Run();

  UcpWorker* const worker_;
  // Set once by the destructor, read by the loop; release/acquire so the loop sees it promptly
  // and in order with Wake()'s signal (no data is published through it).
  std::atomic<bool> stop_{false};
  // Callers inside a burst. A hint only (the worker lock orders UCX's state): relaxed suffices.
  std::atomic<int> bursts_{0};
  std::thread thread_;
};

}  // namespace sparseserve::transfer::internal

#endif  // SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_PROGRESS_THREAD_H_
