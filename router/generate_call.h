// GenerateCall: one public Generate call, end to end — a self-owned gRPC ServerWriteReactor that
// prepares the request, routes it, drives the downstream worker calls (ReserveKv → Prefill →
// Decode, or a local Decode), relays tokens and text to the client, and handles retries,
// prefill fallback, migration, stop strings, client cancel and Abort.
//
// Event-driven, never blocking: every reaction (server writes, the DecodeStream, unary callbacks)
// takes the call's mutex only to update state and collect "actions" (gRPC operations: StartWrite,
// Finish, starting or cancelling downstream calls), which run after the mutex is released, so no
// lock is held across a gRPC call. Only one client write is in flight; tokens arriving meanwhile
// are coalesced into the next message.
//
// Lifetime: reference-counted (atomic counter). The server side holds one reference until
// OnDone; every downstream call in flight holds one; RequestTable::Abort holds one while it
// calls Abort. The last Unref deletes the object (gRPC's reactor idiom, extended to the
// downstream calls). CallResources are borrowed from the Router and outlive every call (the
// Router waits for all calls to be destroyed before it tears them down).
#ifndef SPARSESERVE_ROUTER_GENERATE_CALL_H_
#define SPARSESERVE_ROUTER_GENERATE_CALL_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics/serving_metrics.h"
#include "common/tokenizer/tokenizer.h"
#include "grpcpp/support/server_callback.h"
#include "router/decode_stream.h"
#include "router/output_text.h"
#include "router/request_prep.h"
#include "router/request_table.h"
#include "router/router_options.h"
#include "router/worker_registry.h"
#include "sparseserve/v1/generation.pb.h"

namespace sparseserve::router {

// What every call borrows from the Router.
struct CallResources {
  const RouterOptions* options = nullptr;
  WorkerRegistry* registry = nullptr;
  metrics::ServingMetrics* metrics = nullptr;
  const tokenizer::Tokenizer* tokenizer = nullptr;
  RequestTable* requests = nullptr;
  PrepareLimits limits;
};

class GenerateCall final : public grpc::ServerWriteReactor<v1::GenerateResponse>,
                           public DecodeStream::Listener {
 public:
  // Creates the reactor for one Generate call and starts it (validation errors finish it at
  // once). `context` and `request` are gRPC's, valid until OnDone.
  static GenerateCall* Start(CallResources* resources, grpc::CallbackServerContext* context,
                             const v1::GenerateRequest& request);

  GenerateCall(const GenerateCall&) = delete;
  GenerateCall& operator=(const GenerateCall&) = delete;

  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }  // a holder already has one
  void Unref();

  // Ends the request with FINISH_REASON_ABORTED (the client gets a final message), cancels the
  // downstream calls and aborts the request on the workers holding it. No-op once finished.
  void Abort() ABSL_LOCKS_EXCLUDED(mu_);

  // ServerWriteReactor.
  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnCancel() override ABSL_LOCKS_EXCLUDED(mu_);
  void OnDone() override;

  // DecodeStream::Listener.
  void OnDecodeResponse(DecodeStream* stream, const v1::DecodeResponse& response) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void OnDecodeDone(DecodeStream* stream, const grpc::Status& status) override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // gRPC operations collected under mu_ and run after it is released.
  using Actions = std::vector<std::function<void()>>;
  // A finished request: a finish reason (status OK, final message sent) or an error status.
  struct Outcome {
    absl::Status status;
    v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
    bool cancel_downstream = true;  // false when the worker finished the stream itself
  };

  GenerateCall(CallResources* resources, grpc::CallbackServerContext* context);
  ~GenerateCall() override;
  void Begin(const v1::GenerateRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  static void Run(Actions& actions);

  // Routing and downstream calls (generate_call_flow.cc).
  void RouteLocked(Actions& actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartReserveLocked(int decode_idx, int prefill_idx, Actions& actions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnReserveDone(int decode_idx, int prefill_idx, const grpc::Status& status,
                     const v1::ReserveKvResponse& response) ABSL_LOCKS_EXCLUDED(mu_);
  void OnPrefillDone(int decode_idx, int prefill_idx, const grpc::Status& status,
                     const v1::PrefillResponse& response) ABSL_LOCKS_EXCLUDED(mu_);
  void PrefillFailedLocked(int decode_idx, int prefill_idx, const grpc::Status& status,
                           Actions& actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartDecodeLocked(int decode_idx, v1::DecodeRequest request, Actions& actions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DecodeFailedLocked(int decode_idx, const grpc::Status& status, Actions& actions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::DecodeRequest LocalDecodeRequestLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseReservationLocked(Actions& actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AbortOnWorkerLocked(WorkerRole role, int idx, Actions& actions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  template <typename Request, typename Response, typename StartFn, typename DoneFn>
  void StartUnaryLocked(Request request, absl::Duration timeout, StartFn start, DoneFn done,
                        Actions& actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Duration CallTimeout(absl::Duration limit) const;

  // Output and completion (generate_call.cc).
  // `logprobs`: n entries (the tokens' log probabilities), or null when the request asked none.
  void RelayTokensLocked(const int32_t* ids, int n, const v1::TokenLogprobs* const* logprobs,
                         Actions& actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool EndsGenerationLocked(int32_t id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ConcludeLocked(const Outcome& outcome, Actions& actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CancelDownstreamLocked(Actions& actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeWriteLocked(Actions& actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  CallResources* const resources_;
  grpc::CallbackServerContext* const context_;
  const absl::Time start_time_;
  // Counter only: acq_rel on the decrement so the deleting thread sees every holder's writes.
  std::atomic<int> refs_{1};

  absl::Mutex mu_;
  PreparedRequest request_ ABSL_GUARDED_BY(mu_);
  bool registered_ ABSL_GUARDED_BY(mu_) = false;  // in the RequestTable, counted as running
  std::optional<OutputText> output_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> generated_ ABSL_GUARDED_BY(mu_);  // every token relayed so far
  bool concluded_ ABSL_GUARDED_BY(mu_) = false;

  // Client side: the message being accumulated and the one being written.
  v1::GenerateResponse pending_ ABSL_GUARDED_BY(mu_);
  bool pending_final_ ABSL_GUARDED_BY(mu_) = false;
  v1::GenerateResponse writing_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_status_ ABSL_GUARDED_BY(mu_);
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;

  // Downstream calls, kept until the call is destroyed (their contexts must outlive them).
  struct UnaryCallBase {
    virtual ~UnaryCallBase() = default;
    grpc::ClientContext context;
    bool cancel_on_conclude = true;  // false for the Abort/Release calls sent while concluding
  };
  std::vector<std::unique_ptr<UnaryCallBase>> unary_calls_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<DecodeStream>> streams_ ABSL_GUARDED_BY(mu_);
  DecodeStream* active_stream_ ABSL_GUARDED_BY(mu_) = nullptr;
  int prefill_idx_ ABSL_GUARDED_BY(mu_) = -1;  // Prefill in flight there
  // Held; also while a Decode stream carries it until its first response proves the decode
  // worker took it (a stream cancelled or failed before that may never have reached the worker:
  // the reservation is released then, and a Release after the worker took it is a no-op).
  std::string reservation_id_ ABSL_GUARDED_BY(mu_);
  int reservation_decode_idx_ ABSL_GUARDED_BY(mu_) = -1;
  absl::flat_hash_set<int> excluded_decode_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<int> excluded_prefill_ ABSL_GUARDED_BY(mu_);
  int num_retries_ ABSL_GUARDED_BY(mu_) = 0;
  int num_prefill_attempts_ ABSL_GUARDED_BY(mu_) = 0;
  int num_migrations_ ABSL_GUARDED_BY(mu_) = 0;
  bool routed_ ABSL_GUARDED_BY(mu_) = false;  // prefix-cache metrics recorded

  // Reported in the final message.
  bool disaggregated_ ABSL_GUARDED_BY(mu_) = false;
  bool have_worker_stats_ ABSL_GUARDED_BY(mu_) = false;  // first Decode message seen
  int cached_prompt_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  double prefill_density_ ABSL_GUARDED_BY(mu_) = 1.0;  // of the prompt's prefill, wherever it ran
  // The decode worker's last message: its decode attention work (of the worker that finished the
  // request; a migrated request's earlier workers are not counted).
  double decode_density_ ABSL_GUARDED_BY(mu_) = 1.0;
  int64_t selection_cache_hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t selection_cache_queries_ ABSL_GUARDED_BY(mu_) = 0;
  double queue_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<absl::Time> first_token_time_ ABSL_GUARDED_BY(mu_);
  absl::Time last_token_time_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sparseserve::router

#endif  // SPARSESERVE_ROUTER_GENERATE_CALL_H_
