// DecodeScheduler: continuous batching of many sequences on one ModelRunner.
//
// Requests are queued (bounded); the scheduler's engine thread admits them while KV blocks allow
// (adopting KV a prefill worker wrote, or starting a local prefill that takes the prefix cache's
// blocks). Each engine step is built from a token budget (options.max_step_tokens): every
// decoding sequence's next row first, then chunks of the prompts being prefilled (at most
// prefill_chunk rows each), so a long local prompt never freezes the running streams — they get a
// token every step while it is prefilled. Every token, a prompt's first included, is sampled on
// the backend within the step and handed to the request's DecodeSink. When a step needs a block
// and the pool is full, the most recently admitted sequence is preempted (its KV released, the
// request requeued with its tokens so far, recomputed later) so the pool never over-commits and
// nothing crashes.
//
// Thread-safety: Submit/Abort/stats may be called from any thread. Sinks are called on the
// engine thread and must not block. The engine thread is the only one touching the runner
// (STYLE.md: one engine thread owns the model's device).
#ifndef SPARSESERVE_DECODE_SVC_DECODE_SCHEDULER_H_
#define SPARSESERVE_DECODE_SVC_DECODE_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/engine/generator.h"
#include "common/engine/model_runner.h"
#include "common/engine/request_options.h"
#include "common/engine/speculative_sequence.h"
#include "common/kv/kv_block_lease.h"
#include "common/metrics/serving_metrics.h"
#include "common/sampling/sampling_params.h"
#include "common/spec/draft_length_controller.h"
#include "decode_svc/kv_staging_area.h"

namespace sparseserve::decode {

// Receives one request's output. Called on the engine thread; must return quickly.
// The attention work of a request's generated tokens, reported when it finishes.
struct DecodeWork {
  double attention_density = 1.0;   // fraction of dense work its TokenSelect steps did
  double selection_cache_hits = 0;  // TokenSelect's, summed over steps and layers
  double selection_cache_queries = 0;
};

class DecodeSink {
 public:
  virtual ~DecodeSink() = default;
  // Once, before the first token: prompt tokens served from the prefix cache, queue time.
  // `prefill_attention_density`: of its local prefill's computed chunks (1 = dense or none).
  virtual void OnStart(int cached_prompt_tokens, double queue_seconds,
                       double prefill_attention_density) = 0;
  // `logprobs`: the token's log probabilities when the job asked for them (top_logprobs >= 0),
  // else null.
  virtual void OnToken(int32_t token, const model::TokenLogprobs* logprobs) = 0;
  // Last call. `status` is OK for a normal finish (see `reason`), else the error. `work`: what
  // its sparse decode attention did (all ones and zeros for dense).
  virtual void OnFinish(const absl::Status& status, engine::FinishReason reason,
                        const DecodeWork& work) = 0;
};

struct DecodeJob {
  std::string request_id;
  std::vector<int32_t> prompt;  // tokens to attend to before the first new one
  sampling::SamplingParams sampling;
  int max_tokens = 256;                 // new tokens at most
  std::vector<int32_t> stop_token_ids;  // in addition to the tokenizer's end-of-generation ids
  bool ignore_eos = false;
  // >= 0: every emitted token comes with its log probabilities and this many alternatives
  // (0 .. kernels::kMaxTopLogprobs); -1: none.
  int top_logprobs = -1;
  engine::RequestOptions options;  // attention methods and speculation (validated by Submit)
  // Disaggregated prefill: KV of `prompt` is already in these leased blocks (empty: a local
  // prefill) and `first_token` was sampled by the prefill worker and already delivered to the
  // client by the router: it is fed to the first decode step, not emitted again, and not
  // counted in max_tokens.
  kv::KvBlockLease prefilled_kv;
  int32_t first_token = -1;
  // With KV staging: the prefill worker wrote the KV of prefilled_kv.block_ids()[first_staged_block
  // + i] into staging block staged_kv.block_ids()[i] instead. Admission copies every layer of them
  // into those pool blocks (engine thread), then the lease returns them. Empty otherwise.
  KvStagingLease staged_kv;
  int first_staged_block = 0;
  std::shared_ptr<DecodeSink> sink;  // co-owned by the scheduler and the RPC that made it
};

struct DecodeSchedulerOptions {
  int max_running = 64;  // sequences in flight (decoding or prefilling) at most
  // Rows of one engine step at most (decode rows + prefill chunk rows). Running sequences are
  // capped at this too, so a step always has room for every decode row.
  int max_step_tokens = 2048;
  int prefill_chunk = 512;       // one prompt's rows per step at most
  int max_waiting = 1024;        // queued requests beyond which Submit fails RESOURCE_EXHAUSTED
  std::vector<int32_t> eos_ids;  // the tokenizer's end-of-generation ids
  // Borrowed, may be null; must outlive the scheduler. Receives the KV staging copy times, the
  // engine step counts and the runner's shadow-dense errors (the scheduler installs the runner's
  // shadow error observer).
  metrics::ServingMetrics* metrics = nullptr;
};

struct DecodeSchedulerStats {
  int num_running = 0;
  int num_waiting = 0;
};

class DecodeScheduler {
 public:
  // `runner` is borrowed and must outlive the scheduler; starts the engine thread.
  DecodeScheduler(engine::ModelRunner* runner, DecodeSchedulerOptions options);
  ~DecodeScheduler();  // stops the engine thread; unfinished requests finish with CANCELLED
  DecodeScheduler(const DecodeScheduler&) = delete;
  DecodeScheduler& operator=(const DecodeScheduler&) = delete;

  // Queues a request. kResourceExhausted when the queue is full, kInvalidArgument for a bad
  // request (empty prompt, prompt filling the context, invalid sampling), kAlreadyExists for a
  // request id that is in flight. On error the sink is not called and blocks are not taken.
  absl::Status Submit(DecodeJob job);

  // Stops a request: its sink gets OnFinish(OK, kAborted) and its blocks return to the pool.
  // Returns false when no such request is queued or running.
  bool Abort(const std::string& request_id);

  DecodeSchedulerStats stats() const;

 private:
  struct Running;  // one admitted sequence
  void EngineLoop();
  // Admits queued jobs while blocks allow. Runs on the engine thread.
  void AdmitWaiting();
  // Adopts `r`'s prefilled KV, or starts its local prefill. False when the pool is too full for
  // it right now (r is untouched).
  bool AdmitOne(std::unique_ptr<Running>& r);
  // Copies the job's staged KV blocks into `blocks` (its pool blocks) and returns the staging
  // blocks. Runs on the engine thread.
  absl::Status CopyStagedKv(DecodeJob& job, absl::Span<const int32_t> blocks);
  // One engine step: decode rows and prefill chunks under the token budget.
  void EngineStep();
  // Blocks the running sequences may still take: the rest of the prompts being prefilled, and
  // one per decoding sequence.
  int BlocksReserved() const;
  // The draft depth of each of `decoders` this step (0 for those that do not speculate, or
  // where the controller chose plain decoding), within the rows `budget` the roots and `chunks`
  // left, the context and the KV blocks not reserved.
  std::vector<int> DraftDepths(absl::Span<Running* const> decoders,
                               absl::Span<const std::pair<Running*, int>> chunks, int budget) const;
  // Adds a speculative step's drafts and acceptance to the spec_decode metrics.
  void CountSpeculation(const Running& r, const engine::SpecStepResult& step);
  // Emits `token` for `r` and applies the stop rules; false when `r` has finished. `logprobs`:
  // row `row` of the step's, when the step computed them (null otherwise).
  bool Emit(Running& r, int32_t token, const model::StepLogprobs* logprobs, int64_t row);
  void Finish(Running& r, const absl::Status& status, engine::FinishReason reason);
  void Preempt(Running& r);
  void ApplyAborts();

  engine::ModelRunner* runner_;
  // The runner's selection-cache counts already added to the metrics (engine thread only).
  engine::ModelRunner::SelectionCacheCounts counted_selection_;
  const DecodeSchedulerOptions options_;
  const absl::flat_hash_set<int32_t> eos_;

  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<Running>> waiting_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> in_flight_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> aborts_ ABSL_GUARDED_BY(mu_);
  int num_running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::vector<std::unique_ptr<Running>> running_;  // engine thread only, in admission order
  // Measured step times by rows, for the speculation controller (engine thread only).
  spec::StepCostModel step_cost_;
  std::thread engine_;  // the one thread that drives `runner_` (see header comment)
};

}  // namespace sparseserve::decode

#endif  // SPARSESERVE_DECODE_SVC_DECODE_SCHEDULER_H_
