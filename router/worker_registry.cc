#include "router/worker_registry.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/core/check.h"
#include "common/core/host_port.h"
#include "common/core/logging.h"
#include "common/rpc/deadline.h"

namespace sparseserve::router {
namespace {

const char* RoleName(WorkerRole role) {
  return role == WorkerRole::kDecode ? "decode" : "prefill";
}

constexpr absl::string_view kDnsScheme = "dns:///";

// "ip:port", bracketing IPv6 addresses.
std::string JoinHostPort(const std::string& ip, absl::string_view port) {
  return ip.find(':') != std::string::npos ? absl::StrCat("[", ip, "]:", port)
                                           : absl::StrCat(ip, ":", port);
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

absl::StatusOr<std::vector<std::string>> ResolveHost(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (int err = getaddrinfo(host.c_str(), nullptr, &hints, &result); err != 0) {
    return absl::UnavailableError(absl::StrCat("resolving ", host, ": ", gai_strerror(err)));
  }
  std::vector<std::string> ips;
  for (addrinfo* a = result; a != nullptr; a = a->ai_next) {
    char buf[NI_MAXHOST];
    if (getnameinfo(a->ai_addr, a->ai_addrlen, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) == 0 &&
        std::find(ips.begin(), ips.end(), buf) == ips.end()) {
      ips.emplace_back(buf);
    }
  }
  freeaddrinfo(result);
  return ips;
}

std::unique_ptr<WorkerRegistry> WorkerRegistry::Start(WorkerRegistryOptions options,
                                                      rpc::ChannelCache* channels) {
  std::unique_ptr<WorkerRegistry> registry(new WorkerRegistry(std::move(options), channels));
  registry->PollOnce();
  registry->health_thread_ = std::thread([r = registry.get()] { r->HealthLoop(); });
  return registry;
}

WorkerRegistry::WorkerRegistry(WorkerRegistryOptions options, rpc::ChannelCache* channels)
    : options_(std::move(options)), channels_(channels) {
  // Plain "host:port" targets are workers from the start (in configuration order, so their
  // indices are their positions); "dns:///" targets fill in as they resolve.
  absl::MutexLock lock(&mu_);
  for (WorkerRole role : {WorkerRole::kDecode, WorkerRole::kPrefill}) {
    for (const std::string& target :
         role == WorkerRole::kDecode ? options_.decode_addresses : options_.prefill_addresses) {
      if (!absl::StartsWith(target, kDnsScheme)) MergeAddresses(role, target, {target});
    }
  }
}

void WorkerRegistry::MergeAddresses(WorkerRole role, const std::string& target,
                                    const std::vector<std::string>& addresses) {
  std::deque<Worker>& workers = WorkersLocked(role);
  for (Worker& w : workers) {
    if (w.target != target) continue;
    const bool listed = std::find(addresses.begin(), addresses.end(), w.address) != addresses.end();
    if (w.listed && !listed) {
      SS_LOG_INFO("{} worker {} left {}", RoleName(role), w.address, target);
      w.state.healthy = false;
    } else if (!w.listed && listed) {
      SS_LOG_INFO("{} worker {} is back in {}", RoleName(role), w.address, target);
    }
    w.listed = listed;
  }
  for (const std::string& address : addresses) {
    const bool known = std::any_of(workers.begin(), workers.end(), [&](const Worker& w) {
      return w.target == target && w.address == address;
    });
    if (known) continue;
    Worker& w = workers.emplace_back();
    w.address = address;
    w.target = target;
    // A pod found through dns:///NAME:PORT is dialled at its IP; its TLS certificate names NAME.
    const std::string tls_name =
        absl::StartsWith(target, kDnsScheme)
            ? core::SplitHostPort(absl::string_view(target).substr(kDnsScheme.size())).host
            : std::string();
    if (role == WorkerRole::kDecode) {
      w.decode_stub = v1::DecodeWorker::NewStub(channels_->Get(address, tls_name));
    } else {
      w.prefill_stub = v1::PrefillWorker::NewStub(channels_->Get(address, tls_name));
    }
    if (address != target)
      SS_LOG_INFO("{} worker {} joined from {}", RoleName(role), address, target);
  }
}

void WorkerRegistry::RefreshTargets() {
  for (WorkerRole role : {WorkerRole::kDecode, WorkerRole::kPrefill}) {
    for (const std::string& target :
         role == WorkerRole::kDecode ? options_.decode_addresses : options_.prefill_addresses) {
      if (!absl::StartsWith(target, kDnsScheme)) continue;
      const core::HostPort parts =
          core::SplitHostPort(absl::string_view(target).substr(kDnsScheme.size()));
      const std::string& host = parts.host;
      const std::string& port = parts.port;
      int port_number = 0;
      if (host.empty() || !absl::SimpleAtoi(port, &port_number)) {
        SS_LOG_WARNING("worker target {} is not dns:///NAME:PORT; ignored", target);
        continue;
      }
      absl::StatusOr<std::vector<std::string>> ips = options_.resolver(host);
      if (!ips.ok()) {  // keep the workers we had: a lookup hiccup must not empty the pool
        SS_LOG_WARNING("{} (keeping {}'s known workers)", ips.status().ToString(), target);
        continue;
      }
      std::vector<std::string> addresses;
      for (const std::string& ip : *ips) addresses.push_back(JoinHostPort(ip, port));
      absl::MutexLock lock(&mu_);
      MergeAddresses(role, target, addresses);
    }
  }
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
  RefreshTargets();
  // The listed workers of this round; their stubs stay valid (workers are never removed).
  struct Target {
    WorkerRole role;
    int idx;
    v1::DecodeWorker::Stub* decode;
    v1::PrefillWorker::Stub* prefill;
  };
  std::vector<Target> targets;
  {
    absl::MutexLock lock(&mu_);  // once per round; shared locking would gain nothing here
    for (WorkerRole role : {WorkerRole::kDecode, WorkerRole::kPrefill}) {
      const std::deque<Worker>& workers = WorkersLocked(role);
      for (size_t i = 0; i < workers.size(); ++i) {
        if (!workers[i].listed) continue;
        targets.push_back({role, static_cast<int>(i), workers[i].decode_stub.get(),
                           workers[i].prefill_stub.get()});
      }
    }
  }
  const int total = static_cast<int>(targets.size());
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
    if (targets[i].decode != nullptr) {
      targets[i].decode->async()->Status(&poll.context, &poll.request, &poll.response, done);
    } else {
      targets[i].prefill->async()->Status(&poll.context, &poll.request, &poll.response, done);
    }
  }
  pending.Wait();  // bounded by status_timeout: every call has that deadline

  absl::MutexLock lock(&mu_);
  for (int i = 0; i < total; ++i) {
    const WorkerRole role = targets[i].role;
    Worker& worker = WorkerLocked(role, targets[i].idx);
    WorkerState& state = worker.state;
    StatusPoll& poll = polls[i];
    if (!worker.listed) continue;  // left during this round
    if (!poll.status.ok()) {
      if (state.healthy) {
        SS_LOG_WARNING("{} worker {} unhealthy: Status failed: {}", RoleName(role), worker.address,
                       poll.status.error_message());
      }
      state.healthy = false;
      continue;
    }
    if (!state.healthy) {
      SS_LOG_INFO("{} worker {} healthy ({} free of {} KV blocks)", RoleName(role), worker.address,
                  poll.response.num_free_blocks(), poll.response.num_total_blocks());
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
  absl::ReaderMutexLock lock(&mu_);
  return static_cast<int>(WorkersLocked(role).size());
}

const std::string& WorkerRegistry::address(WorkerRole role, int idx) const {
  absl::ReaderMutexLock lock(&mu_);
  return WorkerLocked(role, idx).address;
}

v1::DecodeWorker::Stub& WorkerRegistry::decode_stub(int idx) const {
  absl::ReaderMutexLock lock(&mu_);
  return *WorkerLocked(WorkerRole::kDecode, idx).decode_stub;
}

v1::PrefillWorker::Stub& WorkerRegistry::prefill_stub(int idx) const {
  absl::ReaderMutexLock lock(&mu_);
  return *WorkerLocked(WorkerRole::kPrefill, idx).prefill_stub;
}

bool WorkerRegistry::listed(WorkerRole role, int idx) const {
  absl::ReaderMutexLock lock(&mu_);
  return WorkerLocked(role, idx).listed;
}

WorkerRegistry::Worker& WorkerRegistry::WorkerLocked(WorkerRole role, int idx) {
  std::deque<Worker>& workers = WorkersLocked(role);
  SS_CHECK(idx >= 0 && idx < static_cast<int>(workers.size()));
  return workers[idx];
}

const WorkerRegistry::Worker& WorkerRegistry::WorkerLocked(WorkerRole role, int idx) const {
  const std::deque<Worker>& workers = WorkersLocked(role);
  SS_CHECK(idx >= 0 && idx < static_cast<int>(workers.size()));
  return workers[idx];
}

bool WorkerRegistry::healthy(WorkerRole role, int idx) const {
  absl::ReaderMutexLock lock(&mu_);
  return WorkerLocked(role, idx).state.healthy;
}

int WorkerRegistry::NumHealthy(WorkerRole role) const {
  absl::ReaderMutexLock lock(&mu_);
  int n = 0;
  for (const Worker& w : WorkersLocked(role)) n += w.state.healthy;
  return n;
}

void WorkerRegistry::MarkUnhealthy(WorkerRole role, int idx, absl::string_view reason) {
  absl::MutexLock lock(&mu_);
  Worker& worker = WorkerLocked(role, idx);
  if (worker.state.healthy) {
    SS_LOG_WARNING("{} worker {} marked unhealthy: {}", RoleName(role), worker.address,
                   std::string(reason));
  }
  worker.state.healthy = false;
}

std::vector<DecodeCandidate> WorkerRegistry::DecodeCandidates(
    absl::Span<const int32_t> prompt) const {
  absl::ReaderMutexLock lock(&mu_);
  // Usually every worker has the same block size: hash the prompt once per distinct size.
  absl::flat_hash_map<int, std::vector<kv::BlockHash>> hashes_by_block_tokens;
  std::vector<DecodeCandidate> out(decode_.size());
  for (size_t i = 0; i < decode_.size(); ++i) {
    const WorkerState& state = decode_[i].state;
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
    const WorkerState& state = prefill_[i].state;
    out[i].healthy = state.healthy;
    out[i].num_running = state.status.num_running();
    out[i].num_waiting = state.status.num_waiting();
  }
  return out;
}

std::optional<WorkerModelInfo> WorkerRegistry::ModelInfo() const {
  absl::ReaderMutexLock lock(&mu_);
  for (const std::deque<Worker>* workers : {&decode_, &prefill_}) {
    for (const Worker& worker : *workers) {
      const WorkerState& state = worker.state;
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
