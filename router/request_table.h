// RequestTable: the router's in-flight Generate calls — by request id (for Abort and duplicate
// detection) and as a count of live call objects (so that shutdown can wait for them).
//
// Thread-safe. Lock order: a GenerateCall may call Register/Unregister while holding its own
// mutex; the table never calls into a call while holding its mutex (it only takes a reference),
// so the order is always call -> table. Registered calls are borrowed: a call unregisters itself
// before it can be destroyed.
#ifndef SPARSESERVE_ROUTER_REQUEST_TABLE_H_
#define SPARSESERVE_ROUTER_REQUEST_TABLE_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sparseserve::router {

class GenerateCall;

class RequestTable {
 public:
  RequestTable() = default;
  RequestTable(const RequestTable&) = delete;
  RequestTable& operator=(const RequestTable&) = delete;

  // Registers `call` under `request_id`; false when the id is already in flight.
  bool Register(const std::string& request_id, GenerateCall* call) ABSL_LOCKS_EXCLUDED(mu_);
  void Unregister(const std::string& request_id) ABSL_LOCKS_EXCLUDED(mu_);

  // Aborts the call registered under `request_id` (GenerateCall::Abort); false when none is.
  bool Abort(const std::string& request_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Aborts every registered call (router shutdown).
  void AbortAll() ABSL_LOCKS_EXCLUDED(mu_);

  // Live GenerateCall objects (constructed, not yet destroyed), whether registered or not.
  void CallCreated() ABSL_LOCKS_EXCLUDED(mu_);
  void CallDestroyed() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until no call object is alive; false when `timeout` passes first.
  bool WaitForNoCalls(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, GenerateCall*> calls_ ABSL_GUARDED_BY(mu_);
  int num_live_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sparseserve::router

#endif  // SPARSESERVE_ROUTER_REQUEST_TABLE_H_
