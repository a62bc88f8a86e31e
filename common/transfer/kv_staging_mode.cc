#include "common/transfer/kv_staging_mode.h"

#include "absl/strings/str_cat.h"

namespace sparseserve::transfer {

absl::StatusOr<KvStagingMode> ParseKvStagingMode(absl::string_view name) {
  if (name == "auto") return KvStagingMode::kAuto;
  if (name == "on") return KvStagingMode::kOn;
  if (name == "off") return KvStagingMode::kOff;
  return absl::InvalidArgumentError(
      absl::StrCat("KV staging mode '", name, "' is not one of auto, on, off"));
}

absl::string_view KvStagingModeName(KvStagingMode mode) {
  switch (mode) {
    case KvStagingMode::kAuto: return "auto";
    case KvStagingMode::kOn: return "on";
    case KvStagingMode::kOff: return "off";
  }
  return "unknown";
}

absl::StatusOr<bool> UsesKvStaging(KvStagingMode mode, bool kv_in_host_memory, int tensor_parallel,
                                   bool gpu_direct) {
  if (tensor_parallel > 1) {
    if (mode == KvStagingMode::kOff) {
      return absl::FailedPreconditionError(
          "--tensor-parallel > 1 moves KV through host staging (each device holds a slice of the "
          "KV heads, gathered or scattered there): use KV staging auto or on");
    }
    return true;
  }
  switch (mode) {
    case KvStagingMode::kAuto: return !kv_in_host_memory && !gpu_direct;
    case KvStagingMode::kOn: return true;
    case KvStagingMode::kOff:
      if (kv_in_host_memory || gpu_direct) return false;
      return absl::FailedPreconditionError(
          "KV staging is off but the KV cache is in GPU memory and this UCX has no cuda_ipc "
          "transport to move it GPU to GPU (Debian's UCX 1.13 has none; PyPI's libucx-cu13 on a "
          "machine with a GPU does): use KV staging auto or on, or turn KV transfer off");
  }
  return absl::InvalidArgumentError("unknown KV staging mode");
}

}  // namespace sparseserve::transfer
