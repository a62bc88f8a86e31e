#include "common/transfer/remote_kv_pool.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace sparseserve::transfer {
namespace {

// Format: u64 block_bytes, u32 num_layers, u32-length-prefixed worker address, then per layer
// u64 base address and a u32-length-prefixed key, then u8 memory (1 = GPU). Host byte order
// (same-host exchange only).
// Stops reading at the first error; a cursor past the end means malformed input.
class Reader {
 public:
  explicit Reader(absl::string_view bytes) : bytes_(bytes) {}

  template <typename T>
  bool Read(T* value) {
    if (bytes_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool ReadString(std::string* value) {
    uint32_t size = 0;
    if (!Read(&size) || bytes_.size() - pos_ < size) return false;
    value->assign(bytes_.data() + pos_, size);
    pos_ += size;
    return true;
  }
  bool AtEnd() const { return pos_ == bytes_.size(); }

 private:
  absl::string_view bytes_;
  size_t pos_ = 0;
};

template <typename T>
void Append(std::string& out, T value) {
  char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));
  out.append(raw, sizeof(T));
}

void AppendString(std::string& out, absl::string_view value) {
  Append<uint32_t>(out, static_cast<uint32_t>(value.size()));
  out.append(value.data(), value.size());
}

}  // namespace

std::string SerializeRemoteKvPool(const RemoteKvPool& pool) {
  std::string out;
  Append<uint64_t>(out, pool.block_bytes);
  Append<uint32_t>(out, static_cast<uint32_t>(pool.layer_rkeys.size()));
  AppendString(out, pool.worker_address);
  for (size_t layer = 0; layer < pool.layer_rkeys.size(); ++layer) {
    Append<uint64_t>(
        out, layer < pool.layer_base_addresses.size() ? pool.layer_base_addresses[layer] : 0);
    AppendString(out, pool.layer_rkeys[layer]);
  }
  Append<uint8_t>(out, pool.memory == KvMemoryKind::kCuda ? 1 : 0);
  return out;
}

absl::StatusOr<RemoteKvPool> ParseRemoteKvPool(absl::string_view bytes) {
  Reader reader(bytes);
  RemoteKvPool pool;
  uint32_t num_layers = 0;
  bool ok = reader.Read(&pool.block_bytes) && reader.Read(&num_layers) &&
            reader.ReadString(&pool.worker_address);
  for (uint32_t layer = 0; ok && layer < num_layers; ++layer) {
    uint64_t base = 0;
    std::string rkey;
    ok = reader.Read(&base) && reader.ReadString(&rkey);
    pool.layer_base_addresses.push_back(base);
    pool.layer_rkeys.push_back(std::move(rkey));
  }
  uint8_t memory = 0;
  ok = ok && reader.Read(&memory) && memory <= 1;
  pool.memory = memory == 1 ? KvMemoryKind::kCuda : KvMemoryKind::kHost;
  if (!ok || !reader.AtEnd()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed serialized RemoteKvPool (", bytes.size(), " bytes)"));
  }
  return pool;
}

}  // namespace sparseserve::transfer
