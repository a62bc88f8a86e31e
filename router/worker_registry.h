// WorkerRegistry: the router's view of its decode and prefill workers — their stubs (one channel
// per address, from the ChannelCache), health, load, cached prefix blocks and model/KV layout —
// refreshed by polling every worker's Status RPC.
//
// Workers come from targets: "host:port" is one worker; "dns:///name:port" is every address the
// name resolves to, re-resolved each health round — a Kubernetes headless Service lists its ready
// pods this way, so replicas that start join and pods that go away leave (their entries stay,
// marked unlisted and unhealthy, and are reused if the address returns). A failed lookup keeps
// the previous addresses.
//
// Threading: the registry owns ONE background thread, the health loop, which resolves the
// targets and polls all listed workers every `status_interval` (the polls of one round run
// concurrently through the callback API and the loop thread waits for them; it is not a gRPC
// thread). Every other method is thread-safe and may be called from gRPC reactions: they only
// take the registry's mutex briefly, never across an RPC. Workers are only ever appended, and
// their stubs and addresses never change, so references to them stay valid for the registry's
// lifetime; the ChannelCache is borrowed and must outlive the registry.
#ifndef SPARSESERVE_ROUTER_WORKER_REGISTRY_H_
#define SPARSESERVE_ROUTER_WORKER_REGISTRY_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/kv/block_hash.h"
#include "common/rpc/channel_cache.h"
#include "router/routing_policy.h"
#include "sparseserve/v1/worker.grpc.pb.h"

namespace sparseserve::router {

enum class WorkerRole { kDecode, kPrefill };

// Resolves a DNS name to IP addresses ("10.0.0.7", "fd00::7"); the default uses getaddrinfo.
using HostResolver = std::function<absl::StatusOr<std::vector<std::string>>(const std::string&)>;
absl::StatusOr<std::vector<std::string>> ResolveHost(const std::string& host);

struct WorkerRegistryOptions {
  // Decode / prefill worker targets: "host:port" or "dns:///name:port" (see the header comment).
  std::vector<std::string> decode_addresses;
  std::vector<std::string> prefill_addresses;
  // How "dns:///" names are looked up; tests inject their own.
  HostResolver resolver = ResolveHost;
  // Time between two health rounds; default 500 ms.
  absl::Duration status_interval = absl::Milliseconds(500);
  // Deadline of one Status call; a worker that misses it is unhealthy; default 1 s.
  absl::Duration status_timeout = absl::Seconds(1);
};

// Model facts as reported by a worker's Status.
struct WorkerModelInfo {
  std::string model;
  std::string architecture;
  int vocab_size = 0;
  int max_context = 0;
  int num_layers = 0;
};

class WorkerRegistry {
 public:
  // Creates the stubs, polls every worker once (so the first requests see real health), then
  // starts the health loop. A worker that does not answer is unhealthy until a poll succeeds.
  static std::unique_ptr<WorkerRegistry> Start(WorkerRegistryOptions options,
                                               rpc::ChannelCache* channels);

  WorkerRegistry(const WorkerRegistry&) = delete;
  WorkerRegistry& operator=(const WorkerRegistry&) = delete;
  ~WorkerRegistry();  // Stop()

  // Stops and joins the health loop (waits for at most one round's status_timeout). Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // One health round: resolves the targets, polls every listed worker and records the results.
  // Called by the loop; tests may call it to refresh the state deterministically.
  void PollOnce() ABSL_LOCKS_EXCLUDED(mu_);

  // Workers known so far (listed or not); indices are stable.
  int num_workers(WorkerRole role) const ABSL_LOCKS_EXCLUDED(mu_);
  const std::string& address(WorkerRole role, int idx) const ABSL_LOCKS_EXCLUDED(mu_);
  v1::DecodeWorker::Stub& decode_stub(int idx) const ABSL_LOCKS_EXCLUDED(mu_);
  v1::PrefillWorker::Stub& prefill_stub(int idx) const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the worker's address was in the last resolution of its target (always for a plain
  // "host:port").
  bool listed(WorkerRole role, int idx) const ABSL_LOCKS_EXCLUDED(mu_);

  bool healthy(WorkerRole role, int idx) const ABSL_LOCKS_EXCLUDED(mu_);
  int NumHealthy(WorkerRole role) const ABSL_LOCKS_EXCLUDED(mu_);

  // Marks a worker unhealthy at once (a call to it failed with UNAVAILABLE); the next successful
  // poll makes it healthy again.
  void MarkUnhealthy(WorkerRole role, int idx, absl::string_view reason) ABSL_LOCKS_EXCLUDED(mu_);

  // Routing snapshots, one entry per worker in address order. Decode candidates carry the number
  // of leading blocks of `prompt` each worker has cached (hashed with its own block size).
  std::vector<DecodeCandidate> DecodeCandidates(absl::Span<const int32_t> prompt) const
      ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<PrefillCandidate> PrefillCandidates() const ABSL_LOCKS_EXCLUDED(mu_);

  // The model as reported by the first healthy decode worker, else prefill worker; nullopt when
  // none is healthy.
  std::optional<WorkerModelInfo> ModelInfo() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct WorkerState {
    bool healthy = false;
    v1::WorkerStatusResponse status;  // last successful answer, cached_block_hashes moved out
    absl::flat_hash_set<kv::BlockHash> cached_blocks;
  };
  struct Worker {
    std::string address;  // "ip:port" (or the configured "host:port")
    std::string target;   // the configured target it came from
    bool listed = true;
    std::unique_ptr<v1::DecodeWorker::Stub> decode_stub;    // for decode workers
    std::unique_ptr<v1::PrefillWorker::Stub> prefill_stub;  // for prefill workers
    WorkerState state;
  };

  WorkerRegistry(WorkerRegistryOptions options, rpc::ChannelCache* channels);
  void HealthLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Resolves every target and adds, unlists or relists workers to match.
  void RefreshTargets() ABSL_LOCKS_EXCLUDED(mu_);
  void MergeAddresses(WorkerRole role, const std::string& target,
                      const std::vector<std::string>& addresses) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::deque<Worker>& WorkersLocked(WorkerRole role) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return role == WorkerRole::kDecode ? decode_ : prefill_;
  }
  const std::deque<Worker>& WorkersLocked(WorkerRole role) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return role == WorkerRole::kDecode ? decode_ : prefill_;
  }
  Worker& WorkerLocked(WorkerRole role, int idx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const Worker& WorkerLocked(WorkerRole role, int idx) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const WorkerRegistryOptions options_;
  rpc::ChannelCache* channels_;  // borrowed

  mutable absl::Mutex mu_;
  // std::deque: appending keeps references to existing workers (stubs, addresses) valid.
  std::deque<Worker> decode_ ABSL_GUARDED_BY(mu_);
  std::deque<Worker> prefill_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  // The health loop: the one thread this class owns (see the header comment).
  std::thread health_thread_;
};

}  // namespace sparseserve::router

#endif  // SPARSESERVE_ROUTER_WORKER_REGISTRY_H_
