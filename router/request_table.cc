#include "router/request_table.h"

#include <vector>

#include "router/generate_call.h"

namespace sparseserve::router {

bool RequestTable::Register(const std::string& request_id, GenerateCall* call) {
  absl::MutexLock lock(&mu_);
  return calls_.try_emplace(request_id, call).second;
}

void RequestTable::Unregister(const std::string& request_id) {
  absl::MutexLock lock(&mu_);
  calls_.erase(request_id);
}

bool RequestTable::Abort(const std::string& request_id) {
  GenerateCall* call = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(request_id);
    if (it == calls_.end()) return false;
    call = it->second;
    call->Ref();  // keeps the call alive after the table lock is released
  }
  call->Abort();
  call->Unref();
  return true;
}

void RequestTable::AbortAll() {
  std::vector<GenerateCall*> calls;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, call] : calls_) {
      call->Ref();
      calls.push_back(call);
    }
  }
  for (GenerateCall* call : calls) {
    call->Abort();
    call->Unref();
  }
}

void RequestTable::CallCreated() {
  absl::MutexLock lock(&mu_);
  ++num_live_calls_;
}

void RequestTable::CallDestroyed() {
  absl::MutexLock lock(&mu_);
  --num_live_calls_;
}

bool RequestTable::WaitForNoCalls(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto none = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return num_live_calls_ == 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&none), timeout);
}

}  // namespace sparseserve::router
