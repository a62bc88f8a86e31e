// The byte format in which a UCX worker address or packed remote key travels between processes
// (in KvReservation.ucx_worker_address / layer_rkeys).
//
// UCX parses addresses and keys without a length and without validation, so garbage bytes would
// crash it. Every blob is therefore wrapped: magic "SSKV", format version, kind, the registered
// region's base address and size (remote keys; 0 for addresses), payload length, the UCX bytes,
// and a trailing 64-bit FNV-1a checksum over everything before it. Decode rejects anything that
// does not verify with kInvalidArgument before UCX sees it. All integers little-endian (x86_64
// and aarch64 both are). Stateless, thread-safe.
#ifndef SPARSESERVE_COMMON_TRANSFER_INTERNAL_WIRE_ENVELOPE_H_
#define SPARSESERVE_COMMON_TRANSFER_INTERNAL_WIRE_ENVELOPE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sparseserve::transfer::internal {

enum class WireKind : uint16_t { kWorkerAddress = 1, kRemoteKey = 2 };

struct WireEnvelope {
  WireKind kind = WireKind::kWorkerAddress;
  uint64_t region_base = 0;   // remote virtual address of the region; 0 for worker addresses
  uint64_t region_bytes = 0;  // size of the region in bytes; 0 for worker addresses
  std::string payload;        // the raw UCX bytes
};

std::string EncodeWireEnvelope(const WireEnvelope& envelope);

// Returns kInvalidArgument (saying what is wrong) if `bytes` is not an intact envelope of
// `expected` kind with a non-empty payload.
absl::StatusOr<WireEnvelope> DecodeWireEnvelope(absl::string_view bytes, WireKind expected);

}  // namespace sparseserve::transfer::internal

#endif  // SPARSESERVE_COMMON_TRANSFER_INTERNAL_WIRE_ENVELOPE_H_
