// KvStagingMode: whether a worker moves KV over UCX straight from its KV cache or through a
// staging area in host memory. A KV cache in GPU memory moves GPU to GPU when UCX has its CUDA IPC
// transport (cuda_ipc: UCX 1.22 on a machine with a GPU, both workers on one node; issue 20
// item 2); otherwise it is staged: the prefill worker copies each layer's blocks device -> host
// into a registered ring before PUTting them, the decode worker receives them in a registered
// host area and copies them host -> device when it adopts them.
// A plain value; the functions are stateless and thread-safe.
#ifndef SPARSESERVE_COMMON_TRANSFER_KV_STAGING_MODE_H_
#define SPARSESERVE_COMMON_TRANSFER_KV_STAGING_MODE_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sparseserve::transfer {

enum class KvStagingMode {
  kAuto,  // stage exactly when the KV cache is not in host memory and UCX cannot move it GPU to
          // GPU (the default)
  kOn,    // always stage, also for a host KV cache (how CI, without a GPU, tests the path)
  kOff,   // never stage: the KV cache itself is registered (host memory, or GPU memory with UCX's
          // cuda_ipc transport)
};

// "auto" | "on" | "off". kInvalidArgument for anything else.
absl::StatusOr<KvStagingMode> ParseKvStagingMode(absl::string_view name);
absl::string_view KvStagingModeName(KvStagingMode mode);

// Whether KV goes through host staging memory under `mode` for a KV cache in host memory
// (`kv_in_host_memory`) or not, where UCX can (`gpu_direct`, KvTransportInfo::gpu_direct) or
// cannot move GPU memory between processes. kFailedPrecondition for kOff with a KV cache in GPU
// memory and no gpu_direct. A worker of `tensor_parallel` > 1 ranks always stages (its ranks'
// head slices are gathered into, or scattered from, the whole-heads layout there); kOff is
// kFailedPrecondition for it.
absl::StatusOr<bool> UsesKvStaging(KvStagingMode mode, bool kv_in_host_memory,
                                   int tensor_parallel = 1, bool gpu_direct = false);

}  // namespace sparseserve::transfer

#endif  // SPARSESERVE_COMMON_TRANSFER_KV_STAGING_MODE_H_
