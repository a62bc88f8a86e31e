#include "router/worker_registry.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/core/check.h"
#include "common/core/logging.h"
#include "common/rpc/deadline.h"

namespace sparseserve::router {
namespace {

const char* RoleName(WorkerRole role) {
  return role == WorkerRole::kDecode ? "decode" : "prefill";
}

// One Status call of a health round. Lives on the loop thread's stack frame until every call of
// the round has completed.
struct StatusPoll {
  grpc::ClientContext context;
  v1::WorkerStatusRequest request;
  v1::WorkerStatusResponse response;
  grpc::Status status;
};

}  // namespace

std::unique_ptr<WorkerRegistry> WorkerRegistry::Start(WorkerRegistryOptions options,
                                                      rpc::ChannelCache* channels) {
  std::unique_ptr<WorkerRegistry> registry(new WorkerRegistry(std::move(options), channels));
  registry->PollOnce();
  registry->health_thread_ = std::thread([r = registry.get()] { r->HealthLoop(); });
  return registry;
}

WorkerRegistry::WorkerRegistry(WorkerRegistryOptions options, rpc::ChannelCache* channels)
    : options_(std::move(options)) {
  for (const std::string& address : options_.decode_addresses) {
    decode_stubs_.push_back(v1::DecodeWorker::NewStub(channels->Get(address)));
  }
  for (const std::string& address : options_.prefill_addresses) {
    prefill_stubs_.push_back(v1::PrefillWorker::NewStub(channels->Get(address)));
  }
  absl::MutexLock lock(&mu_);
  decode_.resize(decode_stubs_.size());
  prefill_.resize(prefill_stubs_.size());
}

WorkerRegistry::~WorkerRegistry() {
  Stop();
}

void WorkerRegistry::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (health_thread_.joinable()) health_thread_.join();
}

void WorkerRegistry::HealthLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      // Sleeps for one interval unless Stop() wakes it.
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.status_interval);
      if (stopping_) return;
    }
    PollOnce();
  }
}

void WorkerRegistry::PollOnce() {
  const int num_decode = static_cast<int>(decode_stubs_.size());
  const int num_prefill = static_cast<int>(prefill_stubs_.size());
  const int total = num_decode + num_prefill;
  if (total == 0) return;
  std::vector<StatusPoll> polls(total);
  absl::BlockingCounter pending(total);
  for (int i = 0; i < total; ++i) {
    StatusPoll& poll = polls[i];
    rpc::SetDeadline(poll.context, options_.status_timeout);
    auto done = [&poll, &pending](grpc::Status status) {
      poll.status = std::move(status);
      pending.DecrementCount();
    };
    if (i < num_decode) {
      decode_stubs_[i]->async()->Status(&poll.context, &poll.request, &poll.response, done);
    } else {
      prefill_stubs_[i - num_decode]->async()->Status(&poll.context, &poll.request, &poll.response,
                                                      done);
    }
  }
  pending.Wait();  // bounded by status_timeout: every call has that deadline

  absl::MutexLock lock(&mu_);
  for (int i = 0; i < total; ++i) {
    const WorkerRole role = i < num_decode ? WorkerRole::kDecode : WorkerRole::kPrefill;
    const int idx = i < num_decode ? i : i - num_decode;
    WorkerState& state = StateLocked(role, idx);
    StatusPoll& poll = polls[i];
    if (!poll.status.ok()) {
      if (state.healthy) {
        SS_LOG_WARNING("{} worker {} unhealthy: Status failed: {}", RoleName(role),
                       address(role, idx), poll.status.error_message());
      }
      state.healthy = false;
      continue;
    }
    if (!state.healthy) {
      SS_LOG_INFO("{} worker {} healthy ({} free of {} KV blocks)", RoleName(role),
                  address(role, idx), poll.response.num_free_blocks(),
                  poll.response.num_total_blocks());
    }
    state.healthy = true;
    state.cached_blocks.clear();
    state.cached_blocks.insert(poll.response.cached_block_hashes().begin(),
                               poll.response.cached_block_hashes().end());
    poll.response.clear_cached_block_hashes();
    state.status = std::move(poll.response);
  }
}

int WorkerRegistry::num_workers(WorkerRole role) const {
  return static_cast<int>(role == WorkerRole::kDecode ? decode_stubs_.size()
                                                      : prefill_stubs_.size());
}

const std::string& WorkerRegistry::address(WorkerRole role, int idx) const {
  return role == WorkerRole::kDecode ? options_.decode_addresses[idx]
                                     : options_.prefill_addresses[idx];
}

WorkerRegistry::WorkerState& WorkerRegistry::StateLocked(WorkerRole role, int idx) {
  SS_CHECK(idx >= 0 && idx < num_workers(role));
  return role == WorkerRole::kDecode ? decode_[idx] : prefill_[idx];
}

const WorkerRegistry::WorkerState& WorkerRegistry::StateLocked(WorkerRole role, int idx) const {
  SS_CHECK(idx >= 0 && idx < num_workers(role));
  return role == WorkerRole::kDecode ? decode_[idx] : prefill_[idx];
}

bool WorkerRegistry::healthy(WorkerRole role, int idx) const {
  absl::ReaderMutexLock lock(&mu_);
  return StateLocked(role, idx).healthy;
}

int WorkerRegistry::NumHealthy(WorkerRole role) const {
  absl::ReaderMutexLock lock(&mu_);
  int n = 0;
  for (const WorkerState& s : role == WorkerRole::kDecode ? decode_ : prefill_) n += s.healthy;
  return n;
}

void WorkerRegistry::MarkUnhealthy(WorkerRole role, int idx, absl::string_view reason) {
  absl::MutexLock lock(&mu_);
  WorkerState& state = StateLocked(role, idx);
  if (state.healthy) {
    SS_LOG_WARNING("{} worker {} marked unhealthy: {}", RoleName(role), address(role, idx),
                   std::string(reason));
  }
  state.healthy = false;
}

std::vector<DecodeCandidate> WorkerRegistry::DecodeCandidates(
    absl::Span<const int32_t> prompt) const {
  absl::ReaderMutexLock lock(&mu_);
  // Usually every worker has the same block size: hash the prompt once per distinct size.
  absl::flat_hash_map<int, std::vector<kv::BlockHash>> hashes_by_block_tokens;
  std::vector<DecodeCandidate> out(decode_.size());
  for (size_t i = 0; i < decode_.size(); ++i) {
    const WorkerState& state = decode_[i];
    DecodeCandidate& c = out[i];
    c.block_tokens = state.status.layout().block_tokens();
    c.healthy = state.healthy && c.block_tokens > 0;
    c.num_running = state.status.num_running();
    c.num_free_blocks = state.status.num_free_blocks();
    c.num_total_blocks = state.status.num_total_blocks();
    if (!c.healthy) continue;
    auto [it, inserted] = hashes_by_block_tokens.try_emplace(c.block_tokens);
    if (inserted) it->second = kv::ComputeBlockHashes(prompt, c.block_tokens);
    c.overlap_blocks = CountCachedPrefixBlocks(it->second, state.cached_blocks);
  }
  return out;
}

std::vector<PrefillCandidate> WorkerRegistry::PrefillCandidates() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<PrefillCandidate> out(prefill_.size());
  for (size_t i = 0; i < prefill_.size(); ++i) {
    out[i].healthy = prefill_[i].healthy;
    out[i].num_running = prefill_[i].status.num_running();
    out[i].num_waiting = prefill_[i].status.num_waiting();
  }
  return out;
}

std::optional<WorkerModelInfo> WorkerRegistry::ModelInfo() const {
  absl::ReaderMutexLock lock(&mu_);
  for (const std::vector<WorkerState>* workers : {&decode_, &prefill_}) {
    for (const WorkerState& state : *workers) {
      if (!state.healthy) continue;
      WorkerModelInfo info;
      info.model = state.status.model();
      info.architecture = state.status.architecture();
      info.vocab_size = state.status.vocab_size();
      info.max_context = state.status.max_context();
      info.num_layers = state.status.num_layers();
      return info;
    }
  }
  return std::nullopt;
}

}  // namespace sparseserve::router
