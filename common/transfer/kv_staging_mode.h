// KvStagingMode: whether a worker moves KV over UCX straight from its KV cache or through a
// staging area in host memory. The UCX this project links (Debian's 1.13) has no CUDA transport,
// so a KV cache in GPU memory can only be transferred staged: the prefill worker copies each
// layer's blocks device -> host into a registered ring before PUTting them, the decode worker
// receives them in a registered host area and copies them host -> device when it adopts them.
// A plain value; the functions are stateless and thread-safe.
#ifndef SPARSESERVE_COMMON_TRANSFER_KV_STAGING_MODE_H_
#define SPARSESERVE_COMMON_TRANSFER_KV_STAGING_MODE_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sparseserve::transfer {

enum class KvStagingMode {
  kAuto,  // stage exactly when the KV cache is not in host memory (the default)
  kOn,    // always stage, also for a host KV cache (how CI, without a GPU, tests the path)
  kOff,   // never stage: the KV cache itself is registered (it must be in host memory)
};

// "auto" | "on" | "off". kInvalidArgument for anything else.
absl::StatusOr<KvStagingMode> ParseKvStagingMode(absl::string_view name);
absl::string_view KvStagingModeName(KvStagingMode mode);

// Whether KV goes through host staging memory under `mode` for a KV cache in host memory
// (`kv_in_host_memory`) or not. kFailedPrecondition for kOff with a KV cache outside host memory,
// which UCX here cannot move. A worker of `tensor_parallel` > 1 ranks always stages (its ranks'
// head slices are gathered into, or scattered from, the whole-heads layout there); kOff is
// kFailedPrecondition for it.
absl::StatusOr<bool> UsesKvStaging(KvStagingMode mode, bool kv_in_host_memory,
                                   int tensor_parallel = 1);

}  // namespace sparseserve::transfer

#endif  // SPARSESERVE_COMMON_TRANSFER_KV_STAGING_MODE_H_
