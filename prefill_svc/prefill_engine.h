// PrefillEngine: runs prefill requests on a dedicated engine thread, several prompts per engine
// step. Each step is built from a token budget (max_step_tokens): chunks of the running prompts
// in admission order, at most prefill_chunk rows each, on the local ModelRunner (with its own
// prefix cache). In the step that holds a prompt's last chunk, each layer's KV of that prompt is
// PUT over UCX into its decode worker's reserved blocks as soon as the layer is computed
// (straight from the KV cache, or copied into its own lane of the host KvStagingRing first when
// the KV is staged), the prompt's first token is sampled on the backend from its last position,
// and after the step its session is flushed and closed before the next step writes anything.
// Prompts are admitted while the KV pool can hold them beside what the running prompts still
// need, so several transfers may be in flight in one step, each through its own write session.
// A transfer failure (dead peer, deadline) fails only its own request.
//
// Thread-safety: Submit/Abort/stats from any thread; the completion callback runs on the engine
// thread and must not block. The engine thread is the only one touching the runner and the ring.
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
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/engine/model_runner.h"
#include "common/engine/request_options.h"
#include "common/kv/kv_layout.h"
#include "common/metrics/serving_metrics.h"
#include "common/model/token_logprobs.h"
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
  engine::RequestOptions options;  // the prefill attention method is used here
  // >= 0: the first token's log probabilities with this many alternatives
  // (0 .. kernels::kMaxTopLogprobs); -1: none.
  int top_logprobs = -1;
  std::optional<PrefillTarget> target;           // none: compute only
  absl::Time deadline = absl::InfiniteFuture();  // the transfer is abandoned by then
};

struct PrefillResult {
  int32_t first_token = -1;
  std::optional<model::TokenLogprobs> first_token_logprobs;  // when the task asked for them
  int computed_tokens = 0;
  int cached_tokens = 0;
  double attention_density = 1.0;  // of the computed chunks: 1 dense, less under MInference
  int64_t transferred_bytes = 0;
  double prefill_seconds = 0;
  double transfer_seconds = 0;      // from the first PUT to the end of the flush
  bool staged = false;              // the KV went through the host staging ring
  double staging_copy_seconds = 0;  // device -> host copies into the ring (staged only)
};

using PrefillDone = std::function<void(absl::StatusOr<PrefillResult>)>;

struct PrefillEngineOptions {
  int max_queued = 256;  // waiting prefills beyond this: Submit fails RESOURCE_EXHAUSTED
  int max_running = 64;  // prompts being prefilled at once at most
  // Rows of one engine step at most, all prompts together (--max-step-tokens, default 2048).
  int max_step_tokens = 2048;
  int prefill_chunk = 512;  // one prompt's rows per step at most (--prefill-chunk, default 512)
  // Fault injection for tests, 0 = off: the engine sleeps this long after each layer's PUTs, so
  // a transfer lasts long enough to kill the worker, or outlive its lease, mid-way.
  absl::Duration put_delay = absl::ZeroDuration();
  // Borrowed, may be null; must outlive the engine. Receives engine_steps_total{kind="prefill"}
  // and engine_step_sequences.
  metrics::ServingMetrics* metrics = nullptr;
};

// Counters since the engine started, for tests and the Status RPC.
struct PrefillEngineStats {
  int num_waiting = 0;
  int num_running = 0;
  int64_t num_steps = 0;         // forward steps run
  int64_t num_shared_steps = 0;  // of those, steps that held chunks of two prompts or more
  int max_step_prompts = 0;      // most prompts one step held
};

class PrefillEngine {
 public:
  // All borrowed; must outlive the engine. `source` is null when UCX is disabled; `ring` is
  // null unless KV is staged in host memory (then it is registered with `source`).
  PrefillEngine(engine::ModelRunner* runner, transfer::KvTransferSource* source,
                KvStagingRing* ring, PrefillEngineOptions options);
  ~PrefillEngine();  // queued and running tasks finish with CANCELLED
  PrefillEngine(const PrefillEngine&) = delete;
  PrefillEngine& operator=(const PrefillEngine&) = delete;

  // kResourceExhausted when the queue is full (done is not called then).
  absl::Status Submit(PrefillTask task, PrefillDone done);
  // Stops a queued or running task: its callback gets CANCELLED (a running one at the end of the
  // current step, its session closed and its blocks released). False when not in flight.
  bool Abort(const std::string& request_id);
  int num_queued() const;
  PrefillEngineStats stats() const;
  kv::KvLayout layout() const;

 private:
  struct Running;  // one task, waiting or admitted
  void EngineLoop();
  void ApplyAborts();
  // Admits waiting tasks while the pool allows (see the header comment).
  void AdmitWaiting();
  // Checks the task, connects its session and takes its cached prefix. False when the pool is
  // too full for it beside the running prompts (r is untouched then); on error finishes it.
  bool AdmitOne(std::unique_ptr<Running>& r);
  // Blocks the running prompts may still allocate.
  int BlocksReserved() const;
  // One engine step over chunks of the running prompts; finishes the prompts it completes.
  void EngineStep();
  // PUTs layer `layer` of a prompt whose last chunk is in the current step.
  absl::Status PutLayer(Running& r, int layer);
  // Flushes and closes `r`'s session, releases its blocks and calls its callback.
  void Finish(Running& r, absl::Status status);

  engine::ModelRunner* runner_;
  transfer::KvTransferSource* source_;
  KvStagingRing* ring_;  // engine thread only
  const PrefillEngineOptions options_;
  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<Running>> waiting_ ABSL_GUARDED_BY(mu_);
  // Tasks queued or running per request id (a router may retry an id here after a timeout).
  absl::flat_hash_map<std::string, int> in_flight_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> aborts_ ABSL_GUARDED_BY(mu_);
  PrefillEngineStats stats_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<Running>> running_;  // engine thread only, in admission order
  std::thread engine_;                             // the one thread that drives `runner_`
};

}  // namespace sparseserve::prefill

#endif  // SPARSESERVE_PREFILL_SVC_PREFILL_ENGINE_H_
