// RouterOptions: everything the router is configured with (the `sparseserve router` flags fill
// it). A plain value; immutable once the Router is created.
#ifndef SPARSESERVE_ROUTER_ROUTER_OPTIONS_H_
#define SPARSESERVE_ROUTER_ROUTER_OPTIONS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/engine/request_options.h"
#include "common/rpc/channel_cache.h"
#include "prometheus/registry.h"

namespace sparseserve::router {

struct RouterOptions {
  // Model path (GGUF file or HF directory) whose tokenizer and config the router uses to
  // tokenize prompts, detokenize output and validate requests (vocab, context). Required.
  std::string model_path;
  // Decode worker targets, "host:port" or "dns:///name:port" (WorkerRegistry). At least one.
  std::vector<std::string> decode_workers;
  // Prefill worker targets, as above. May be empty (every prefill is then local).
  std::vector<std::string> prefill_workers;

  // Health loop period (WorkerRegistry); default 500 ms.
  absl::Duration status_interval = absl::Milliseconds(500);
  // Deadline of one worker Status call; default 1 s.
  absl::Duration status_timeout = absl::Seconds(1);
  // Deadline of one Decode stream (the whole generation on one worker); default 10 min. The
  // client's own deadline applies when it is sooner.
  absl::Duration decode_timeout = absl::Minutes(10);
  // Deadline of the unary worker calls (ReserveKv, Prefill, Release, Abort); default 30 s.
  absl::Duration unary_timeout = absl::Seconds(30);

  // Routing cost weight of an uncached prompt block against an active KV block; default 1.0
  // (Dynamo KV router, see routing_policy.h).
  double uncached_block_weight = 1.0;
  // Uncached prompt tokens from which prefill runs on a prefill worker; default 1024.
  int disagg_threshold_tokens = 1024;
  // Attempts on other decode workers when a call fails with UNAVAILABLE before any token was
  // generated; default 2.
  int max_retries = 2;
  // Prefill workers tried for one request before falling back to local prefill; default 2.
  int max_prefill_attempts = 2;
  // Times a request may move to another decode worker after generating tokens (migration:
  // re-prefill prompt + tokens so far); default 3 (ARCHITECTURE.md failure rules).
  int migration_limit = 3;
  // max_tokens used when a request leaves it 0; default 256 (generation.proto).
  int default_max_tokens = 256;
  // Attention and speculation methods that fill what a request leaves unset when the router
  // checks it (the --attention / --spec flags). The request is forwarded as given: each worker
  // fills the unset choices from its own flags (docs/api.md).
  engine::RequestOptions request_defaults;

  // Accepted API keys of the public APIs (--api-key-file; router/api_keys.h); empty = no
  // authentication.
  std::vector<std::string> api_keys;

  // Channel settings of the worker connections (keepalive, message size).
  rpc::ChannelOptions channel;
  // Registry the router's ServingMetrics (role "router") are registered on, usually the
  // MetricsExporter's; co-owned with it. Null: a private registry (tests).
  std::shared_ptr<prometheus::Registry> metrics_registry;
};

}  // namespace sparseserve::router

#endif  // SPARSESERVE_ROUTER_ROUTER_OPTIONS_H_
