// PrefillEngine: runs prefill requests one at a time on a dedicated engine thread — chunked
// prefill on the local ModelRunner (with its own prefix cache), each layer's KV PUT over UCX
// into the decode worker's reserved blocks as soon as that layer is computed (straight from the
// KV cache, or copied into a host KvStagingRing first when the KV is staged), one flush, and
// the first token sampled from the last prompt position.
//
// Thread-safety: Submit/Abort from any thread; the completion callback runs on the engine
// thread and must not block. The engine thread is the only one touching the runner.
#ifndef SPARSESERVE_PREFILL_SVC_PREFILL_ENGINE_H_
#define SPARSESERVE_PREFILL_SVC_PREFILL_ENGINE_H_

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/engine/model_runner.h"
#include "common/engine/request_options.h"
#include "common/kv/kv_layout.h"
#include "common/sampling/sampling_params.h"
#include "common/transfer/kv_transfer_source.h"
#include "common/transfer/remote_kv_pool.h"
#include "prefill_svc/kv_staging_ring.h"

namespace sparseserve::prefill {

struct PrefillTarget {
  transfer::RemoteKvPool pool;         // the decode worker's KV pools
  kv::KvLayout layout;                 // the decode worker's KV layout (checked)
  std::vector<int32_t> remote_blocks;  // reserved blocks for the whole prompt, in order
  int first_block = 0;                 // blocks before this are cached there: not written
};

struct PrefillTask {
  std::string request_id;
  std::vector<int32_t> prompt;
  sampling::SamplingParams sampling;
  engine::RequestOptions options;                // the prefill attention method is used here
  std::optional<PrefillTarget> target;           // none: compute only
  absl::Time deadline = absl::InfiniteFuture();  // the transfer is abandoned by then
};

struct PrefillResult {
  int32_t first_token = -1;
  int computed_tokens = 0;
  int cached_tokens = 0;
  int64_t transferred_bytes = 0;
  double prefill_seconds = 0;
  double transfer_seconds = 0;      // from the first PUT to the end of the flush
  bool staged = false;              // the KV went through the host staging ring
  double staging_copy_seconds = 0;  // device -> host copies into the ring (staged only)
};

using PrefillDone = std::function<void(absl::StatusOr<PrefillResult>)>;

class PrefillEngine {
 public:
  // All borrowed; must outlive the engine. `source` is null when UCX is disabled; `ring` is
  // null unless KV is staged in host memory (then it is registered with `source`).
  // `put_delay` > 0 is fault injection for tests: the engine sleeps that long after each layer's
  // PUT, so a transfer lasts long enough to kill the worker, or outlive its lease, mid-way.
  PrefillEngine(engine::ModelRunner* runner, transfer::KvTransferSource* source,
                KvStagingRing* ring, int max_queued,
                absl::Duration put_delay = absl::ZeroDuration());
  ~PrefillEngine();  // queued tasks finish with CANCELLED
  PrefillEngine(const PrefillEngine&) = delete;
  PrefillEngine& operator=(const PrefillEngine&) = delete;

  // kResourceExhausted when the queue is full (done is not called then).
  absl::Status Submit(PrefillTask task, PrefillDone done);
  // Drops a queued task (its callback gets CANCELLED). False when not queued.
  bool Abort(const std::string& request_id);
  int num_queued() const;
  kv::KvLayout layout() const;

 private:
  struct Item {
    PrefillTask task;
    PrefillDone done;
  };
  void EngineLoop();
  absl::StatusOr<PrefillResult> Run(const PrefillTask& task);

  engine::ModelRunner* runner_;
  transfer::KvTransferSource* source_;
  KvStagingRing* ring_;  // engine thread only
  const int max_queued_;
  const absl::Duration put_delay_;
  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread engine_;  // the one thread that drives `runner_`
};

}  // namespace sparseserve::prefill

#endif  // SPARSESERVE_PREFILL_SVC_PREFILL_ENGINE_H_
