// KvTransportInfo: which UCX a KV transfer end runs on and which transports it opened, for the
// start-up log line and the sparseserve_kv_transport_info metric (issue 20: Debian's UCX 1.13 and
// PyPI's 1.22 behave differently when a peer dies, so an operator must be able to tell them
// apart). A plain value; thread-compatible.
#ifndef SPARSESERVE_COMMON_TRANSFER_KV_TRANSPORT_INFO_H_
#define SPARSESERVE_COMMON_TRANSFER_KV_TRANSPORT_INFO_H_

#include <string>

#include "absl/strings/string_view.h"

namespace sparseserve::transfer {

struct KvTransportInfo {
  // The UCX library loaded at run time ("1.22.0"), which may differ from the headers built with.
  std::string ucx_version;
  // Distinct transport names in UCX's order, comma-separated ("self,tcp,sysv,posix,cma").
  std::string transports;
  // Every resource, "tl/device" comma-separated ("self/memory,tcp/lo,..."); for the log.
  std::string resources;

  // Whether `name` ("cuda_ipc") is one of `transports`.
  bool HasTransport(absl::string_view name) const;
  // Whether KV in GPU memory can move GPU to GPU between processes on one node: UCX opened its
  // cuda_ipc transport (UCX 1.22 from PyPI's libucx-cu13 on a machine with a GPU; Debian's 1.13
  // has no CUDA transport).
  bool gpu_direct() const { return HasTransport("cuda_ipc"); }
};

}  // namespace sparseserve::transfer

#endif  // SPARSESERVE_COMMON_TRANSFER_KV_TRANSPORT_INFO_H_
