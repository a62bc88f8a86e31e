// RAII owners of UCX memory handles: UcpMemoryRegion (ucp_mem_map of a caller-owned buffer, or
// of memory UCX allocates) and UcpRemoteKey (ucp_ep_rkey_unpack of a peer's packed key).
//
// A mapped region borrows its buffer, which must stay allocated until the region is destroyed;
// an allocated region owns its memory (freed with the region). Memory UCX allocates can live in
// a shared-memory segment that peers on the same host map directly, which is what lets the
// shared-memory transports PUT with one memcpy instead of emulating RMA with messages. Regions
// must be destroyed before their UcpContext. UcpRemoteKey must
// be destroyed before the endpoint it was unpacked for. Both are immutable after creation and
// may be used from any thread (UCX's worker lock serializes the calls that take them).
#ifndef SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_MEMORY_H_
#define SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_MEMORY_H_

#include <ucp/api/ucp.h>

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/transfer/internal/ucp_context.h"
#include "common/transfer/kv_transfer_options.h"

namespace sparseserve::transfer::internal {

class UcpMemoryRegion {
 public:
  // Registers [base, base + bytes) of `kind` memory with `context` (borrowed; must outlive the
  // region). Returns kInvalidArgument for a null base or zero bytes, or UCX's error (GPU memory
  // that UCX cannot resolve, e.g. with its memory-type cache on, is kInvalidArgument).
  static absl::StatusOr<std::unique_ptr<UcpMemoryRegion>> Map(const UcpContext& context,
                                                              const void* base, size_t bytes,
                                                              KvMemoryKind kind);
  // Lets UCX allocate `bytes` of host memory (zero-filled) and registers it.
  // Returns kInvalidArgument for zero bytes, or UCX's error (kResourceExhausted when out of
  // memory).
  static absl::StatusOr<std::unique_ptr<UcpMemoryRegion>> Allocate(const UcpContext& context,
                                                                   size_t bytes);
  ~UcpMemoryRegion();
  UcpMemoryRegion(const UcpMemoryRegion&) = delete;
  UcpMemoryRegion& operator=(const UcpMemoryRegion&) = delete;

  ucp_mem_h handle() const { return memh_; }
  char* base() const { return base_; }
  size_t bytes() const { return bytes_; }
  KvMemoryKind kind() const { return kind_; }

  // The raw UCX remote key a peer needs to PUT into this region.
  absl::StatusOr<std::string> PackRkey() const;

 private:
  UcpMemoryRegion(ucp_context_h context, ucp_mem_h memh, char* base, size_t bytes,
                  KvMemoryKind kind)
      : context_(context), memh_(memh), base_(base), bytes_(bytes), kind_(kind) {}

  ucp_context_h context_;  // borrowed from the UcpContext
  ucp_mem_h memh_;
  char* base_;  // writable only for allocated regions (mapped ones may be const buffers)
  size_t bytes_;
  KvMemoryKind kind_;
};

class UcpRemoteKey {
 public:
  // Unpacks raw UCX key bytes for `ep`. UCX does not bounds-check them: callers pass only bytes
  // whose envelope checksum verified (wire_envelope.h). Returns kInvalidArgument or UCX's error.
  static absl::StatusOr<std::unique_ptr<UcpRemoteKey>> Unpack(ucp_ep_h ep,
                                                              absl::string_view packed);
  ~UcpRemoteKey();
  UcpRemoteKey(const UcpRemoteKey&) = delete;
  UcpRemoteKey& operator=(const UcpRemoteKey&) = delete;

  ucp_rkey_h handle() const { return rkey_; }

 private:
  explicit UcpRemoteKey(ucp_rkey_h rkey) : rkey_(rkey) {}

  ucp_rkey_h rkey_;
};

}  // namespace sparseserve::transfer::internal

#endif  // SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_MEMORY_H_
