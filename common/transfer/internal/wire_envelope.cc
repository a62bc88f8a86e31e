#include "common/transfer/internal/wire_envelope.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace sparseserve::transfer::internal {
namespace {

constexpr char kMagic[4] = {'S', 'S', 'K', 'V'};
constexpr uint16_t kVersion = 1;
// magic(4) version(2) kind(2) region_base(8) region_bytes(8) payload_length(4)
constexpr size_t kHeaderBytes = 4 + 2 + 2 + 8 + 8 + 4;
constexpr size_t kChecksumBytes = 8;

// 64-bit FNV-1a: a few lines, stable across processes and builds (absl::Hash is seeded per
// process, so it cannot be used here). Detects corruption, not tampering.
uint64_t Fnv1a64(absl::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

template <typename T>
void Append(std::string& out, T value) {
  char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));
  out.append(raw, sizeof(T));
}

template <typename T>
T Read(absl::string_view bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

}  // namespace

std::string EncodeWireEnvelope(const WireEnvelope& envelope) {
  std::string out(kMagic, sizeof(kMagic));
  Append<uint16_t>(out, kVersion);
  Append<uint16_t>(out, static_cast<uint16_t>(envelope.kind));
  Append<uint64_t>(out, envelope.region_base);
  Append<uint64_t>(out, envelope.region_bytes);
  Append<uint32_t>(out, static_cast<uint32_t>(envelope.payload.size()));
  out.append(envelope.payload);
  Append<uint64_t>(out, Fnv1a64(out));
  return out;
}

absl::StatusOr<WireEnvelope> DecodeWireEnvelope(absl::string_view bytes, WireKind expected) {
  const char* what = expected == WireKind::kWorkerAddress ? "UCX worker address" : "UCX remote key";
  if (bytes.size() < kHeaderBytes + kChecksumBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", bytes.size(), " bytes is too short"));
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": bad magic"));
  }
  const uint16_t version = Read<uint16_t>(bytes, 4);
  if (version != kVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": format version ", version, ", expected ", kVersion));
  }
  const uint32_t payload_bytes = Read<uint32_t>(bytes, 24);
  if (payload_bytes == 0 || bytes.size() != kHeaderBytes + payload_bytes + kChecksumBytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": payload length ", payload_bytes,
                                                   " does not match ", bytes.size(), " bytes"));
  }
  const size_t checked = kHeaderBytes + payload_bytes;
  if (Read<uint64_t>(bytes, checked) != Fnv1a64(bytes.substr(0, checked))) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": checksum mismatch (corrupted)"));
  }
  const uint16_t kind = Read<uint16_t>(bytes, 6);
  if (kind != static_cast<uint16_t>(expected)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": wrong kind ", kind));
  }
  WireEnvelope envelope;
  envelope.kind = expected;
  envelope.region_base = Read<uint64_t>(bytes, 8);
  envelope.region_bytes = Read<uint64_t>(bytes, 16);
  envelope.payload = std::string(bytes.substr(kHeaderBytes, payload_bytes));
  return envelope;
}

}  // namespace sparseserve::transfer::internal
