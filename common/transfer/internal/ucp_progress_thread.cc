#include "common/transfer/internal/ucp_progress_thread.h"

#include <poll.h>

#include <chrono>

#include "common/core/logging.h"

namespace sparseserve::transfer::internal {
namespace {

// Idle ucp_worker_progress rounds before the thread arms the event fd and sleeps: a short
// spin keeps back-to-back PUT fragments flowing without a syscall per fragment.
constexpr int kIdleSpinRounds = 64;
// Upper bound of one sleep; only bounds how long a missed wakeup could delay progress.
constexpr int kPollTimeoutMs = 20;

}  // namespace

UcpProgressThread::UcpProgressThread(UcpWorker* worker)
    : worker_(worker), thread_([this] { Run(); }) {}

UcpProgressThread::~UcpProgressThread() {
  stop_.store(true, std::memory_order_release);
  Wake();
  thread_.join();
}

void UcpProgressThread::Wake() {
  ucs_status_t status = ucp_worker_signal(worker_->handle());
  if (status != UCS_OK) {
    SS_LOG_WARNING("ucp_worker_signal: {}", ucs_status_string(status));
  }
}

void UcpProgressThread::Run() {
  ucp_worker_h worker = worker_->handle();
  int idle_rounds = 0;
  while (!stop_.load(std::memory_order_acquire)) {
    if (bursts_.load(std::memory_order_relaxed) > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));  // the poster progresses
      continue;
    }
    if (ucp_worker_progress(worker) != 0) {
      idle_rounds = 0;
      continue;
    }
    if (++idle_rounds < kIdleSpinRounds) continue;
    idle_rounds = 0;
    ucs_status_t status = ucp_worker_arm(worker);
    if (status == UCS_ERR_BUSY) continue;  // events arrived meanwhile: progress them first
    if (status != UCS_OK) {
      SS_LOG_WARNING("ucp_worker_arm: {}", ucs_status_string(status));
    }
    pollfd fd{};
    fd.fd = worker_->event_fd();
    fd.events = POLLIN;
    poll(&fd, 1, kPollTimeoutMs);  // timeout and EINTR both just lead to another round
  }
}

}  // namespace sparseserve::transfer::internal
