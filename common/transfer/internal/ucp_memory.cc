#include "common/transfer/internal/ucp_memory.h"

#include <cstring>

#include "common/core/logging.h"
#include "common/core/status.h"
#include "common/transfer/internal/ucp_status.h"

namespace sparseserve::transfer::internal {

absl::StatusOr<std::unique_ptr<UcpMemoryRegion>> UcpMemoryRegion::Map(const UcpContext& context,
                                                                      const void* base,
                                                                      size_t bytes,
                                                                      KvMemoryKind kind) {
  if (base == nullptr || bytes == 0) {
    return absl::InvalidArgumentError("ucp_mem_map: null base or zero length");
  }
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  params.memory_type = kind == KvMemoryKind::kCuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
  // UCX takes a non-const pointer but only registers the range; it does not write through it.
  params.address = const_cast<void*>(base);
  params.length = bytes;
  ucp_mem_h memh = nullptr;
  SS_RETURN_IF_ERROR(
      UcsToStatus(ucp_mem_map(context.handle(), &params, &memh),
                  absl::StrCat("ucp_mem_map of ", bytes, " bytes of ",
                               kind == KvMemoryKind::kCuda ? "GPU" : "host", " memory")));
  return std::unique_ptr<UcpMemoryRegion>(new UcpMemoryRegion(
      context.handle(), memh, static_cast<char*>(const_cast<void*>(base)), bytes, kind));
}

absl::StatusOr<std::unique_ptr<UcpMemoryRegion>> UcpMemoryRegion::Allocate(
    const UcpContext& context, size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("ucp_mem_map allocate: zero length");
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  params.address = nullptr;
  params.length = bytes;
  params.flags = UCP_MEM_MAP_ALLOCATE;
  ucp_mem_h memh = nullptr;
  SS_RETURN_IF_ERROR(UcsToStatus(ucp_mem_map(context.handle(), &params, &memh),
                                 absl::StrCat("ucp_mem_map allocating ", bytes, " bytes")));
  // Owned from here: early returns unmap (and free) it.
  std::unique_ptr<UcpMemoryRegion> region(
      new UcpMemoryRegion(context.handle(), memh, nullptr, bytes, KvMemoryKind::kHost));
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  SS_RETURN_IF_ERROR(UcsToStatus(ucp_mem_query(memh, &attr), "ucp_mem_query"));
  if (attr.length < bytes) {
    return absl::InternalError(
        absl::StrCat("ucp_mem_map allocated ", attr.length, " bytes, asked ", bytes));
  }
  region->base_ = static_cast<char*>(attr.address);
  // UCX does not promise zeroed memory; a fresh KV pool should not expose stale bytes.
  std::memset(region->base_, 0, bytes);
  return region;
}

UcpMemoryRegion::~UcpMemoryRegion() {
  ucs_status_t status = ucp_mem_unmap(context_, memh_);
  if (status != UCS_OK) SS_LOG_WARNING("ucp_mem_unmap: {}", ucs_status_string(status));
}

absl::StatusOr<std::string> UcpMemoryRegion::PackRkey() const {
  void* buffer = nullptr;
  size_t size = 0;
  SS_RETURN_IF_ERROR(UcsToStatus(ucp_rkey_pack(context_, memh_, &buffer, &size), "ucp_rkey_pack"));
  std::string packed(static_cast<const char*>(buffer), size);
  ucp_rkey_buffer_release(buffer);
  return packed;
}

absl::StatusOr<std::unique_ptr<UcpRemoteKey>> UcpRemoteKey::Unpack(ucp_ep_h ep,
                                                                   absl::string_view packed) {
  if (packed.empty()) return absl::InvalidArgumentError("ucp_ep_rkey_unpack: empty remote key");
  ucp_rkey_h rkey = nullptr;
  SS_RETURN_IF_ERROR(
      UcsToStatus(ucp_ep_rkey_unpack(ep, packed.data(), &rkey), "ucp_ep_rkey_unpack"));
  return std::unique_ptr<UcpRemoteKey>(new UcpRemoteKey(rkey));
}

UcpRemoteKey::~UcpRemoteKey() {
  ucp_rkey_destroy(rkey_);
}

}  // namespace sparseserve::transfer::internal
