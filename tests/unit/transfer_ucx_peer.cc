// transfer_ucx_peer: the decode-side process of transfer_ucx_peer_test. It creates a
// KvTransferTarget over the transports in argv[1] with one layer of argv[2] blocks of argv[3]
// bytes (zero-filled), writes its serialized RemoteKvPool to stdout (u32 length + bytes), then
// answers each 'C' read from stdin with the 64-bit FNV-1a checksum of its buffer (8 bytes).
// It exits on EOF and in any case after 60 s (alarm), so a failed test never leaves it behind.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/transfer/kv_transfer_target.h"

namespace {

bool WriteAll(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = write(STDOUT_FILENO, p, size);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

uint64_t Fnv1a64(const std::vector<unsigned char>& bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

}  // namespace

int main(int argc, char** argv) {
  using sparseserve::transfer::KvTransferTarget;
  alarm(60);
  if (argc != 4) return 2;
  const int num_blocks = std::atoi(argv[2]);
  const size_t block_bytes = std::strtoull(argv[3], nullptr, 10);
  sparseserve::transfer::KvTransferOptions options;
  options.transports = argv[1];
  absl::StatusOr<std::unique_ptr<KvTransferTarget>> target = KvTransferTarget::Create(options);
  if (!target.ok()) return 3;
  std::vector<unsigned char> buffer(num_blocks * block_bytes, 0);
  if (!(*target)->RegisterRegion(0, buffer.data(), buffer.size()).ok()) return 4;
  absl::StatusOr<sparseserve::transfer::RemoteKvPool> pool = (*target)->ExportPool(1, block_bytes);
  if (!pool.ok()) return 5;
  const std::string bytes = sparseserve::transfer::SerializeRemoteKvPool(*pool);
  const auto size = static_cast<uint32_t>(bytes.size());
  if (!WriteAll(&size, sizeof(size)) || !WriteAll(bytes.data(), bytes.size())) return 6;
  char command = 0;
  while (read(STDIN_FILENO, &command, 1) == 1) {
    if (command != 'C') continue;
    const uint64_t checksum = Fnv1a64(buffer);
    if (!WriteAll(&checksum, sizeof(checksum))) return 7;
  }
  return 0;
}
