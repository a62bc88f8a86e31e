#include "tools/kv_staging_flags.h"

#include <cmath>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, kv_staging, "auto",
          "How KV moves between prefill and decode workers: 'auto' registers the KV cache itself "
          "when it is in host memory or when UCX has its cuda_ipc transport (GPU to GPU between "
          "workers on one node), and otherwise stages it through registered host memory; 'on' "
          "always stages (also for a CPU KV cache; use it for GPU workers on different nodes "
          "without GPUDirect RDMA); 'off' never does (fails at start where the KV cache cannot "
          "be registered). Set the same on decode and prefill workers.");
ABSL_FLAG(double, kv_staging_mb, 2048,
          "Decode worker: MiB of host memory (all layers) for the staging area prefill workers "
          "write into. Bounds the KV of reserved prompts not yet adopted: a prompt that does not "
          "fit is prefilled on the decode worker instead. Capped at the KV pool's size.");
ABSL_FLAG(double, prefill_kv_staging_mb, 256,
          "Prefill worker: MiB of host memory for the staging ring KV is copied into and PUT "
          "from. Bounds the KV in flight between flushes; a prompt's KV larger than the ring "
          "costs one flush per wrap. At least one block; capped at the KV pool's size.");

namespace sparseserve::tools {
namespace {

absl::StatusOr<size_t> MebibytesToBytes(double mib, const char* flag) {
  if (!(mib > 0) || !std::isfinite(mib)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be > 0, got ", mib));
  }
  return static_cast<size_t>(mib * 1024 * 1024);
}

}  // namespace

absl::StatusOr<transfer::KvStagingMode> KvStagingModeFromFlags() {
  return transfer::ParseKvStagingMode(absl::GetFlag(FLAGS_kv_staging));
}

absl::StatusOr<size_t> DecodeKvStagingBytesFromFlags() {
  return MebibytesToBytes(absl::GetFlag(FLAGS_kv_staging_mb), "kv-staging-mb");
}

absl::StatusOr<size_t> PrefillKvStagingBytesFromFlags() {
  return MebibytesToBytes(absl::GetFlag(FLAGS_prefill_kv_staging_mb), "prefill-kv-staging-mb");
}

}  // namespace sparseserve::tools
