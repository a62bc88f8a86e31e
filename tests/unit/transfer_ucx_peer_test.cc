// KV transfer between two processes: the decode side is transfer_ucx_peer (a real
// KvTransferTarget in a child process); this process PUTs into it, checks the bytes landed, then
// kills the child and checks that the next transfer fails cleanly (an error, bounded in time).
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/transfer/kv_transfer_source.h"
#include "common/transfer/kv_write_session.h"
#include "common/transfer/remote_kv_pool.h"
#include "gtest/gtest.h"

namespace sparseserve::transfer {
namespace {

constexpr int kNumBlocks = 64;
constexpr size_t kBlockBytes = 64 * 1024;
constexpr int kIoTimeoutMs = 20000;

// The child process and the pipes to its stdin/stdout; kills and reaps it when destroyed.
class PeerProcess {
 public:
  bool Start(const char* transports) {
    int to_child[2];
    int from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) return false;
    const std::string blocks = std::to_string(kNumBlocks);
    const std::string bytes = std::to_string(kBlockBytes);
    pid_ = fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {
      dup2(to_child[0], STDIN_FILENO);
      dup2(from_child[1], STDOUT_FILENO);
      close(to_child[1]);
      close(from_child[0]);
      execl(TRANSFER_UCX_PEER_PATH, "transfer_ucx_peer", transports, blocks.c_str(), bytes.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    to_child_ = to_child[1];
    from_child_ = from_child[0];
    return true;
  }

  ~PeerProcess() {
    if (pid_ > 0) Kill();
    if (to_child_ >= 0) close(to_child_);
    if (from_child_ >= 0) close(from_child_);
  }

  // Reads exactly `size` bytes, each wait bounded by kIoTimeoutMs.
  bool Read(void* data, size_t size) {
    char* p = static_cast<char*>(data);
    while (size > 0) {
      pollfd fd{from_child_, POLLIN, 0};
      if (poll(&fd, 1, kIoTimeoutMs) != 1) return false;
      ssize_t n = read(from_child_, p, size);
      if (n <= 0) return false;
      p += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  }

  bool Send(char command) { return write(to_child_, &command, 1) == 1; }

  void Kill() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
};

uint64_t Fnv1a64(const std::vector<unsigned char>& bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

class TransferUcxPeerTest : public testing::TestWithParam<const char*> {};

TEST_P(TransferUcxPeerTest, PutsLandInOtherProcessAndKilledPeerFailsFlush) {
  PeerProcess peer;
  ASSERT_TRUE(peer.Start(GetParam()));
  uint32_t size = 0;
  ASSERT_TRUE(peer.Read(&size, sizeof(size))) << "peer did not publish its pool";
  std::string bytes(size, '\0');
  ASSERT_TRUE(peer.Read(bytes.data(), size));
  absl::StatusOr<RemoteKvPool> pool = ParseRemoteKvPool(bytes);
  ASSERT_TRUE(pool.ok()) << pool.status();

  std::vector<unsigned char> local(kNumBlocks * kBlockBytes);
  for (size_t i = 0; i < local.size(); ++i) local[i] = static_cast<unsigned char>(i * 7 + i / 4099);
  KvTransferOptions options;
  options.transports = GetParam();
  options.close_timeout = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<KvTransferSource>> source = KvTransferSource::Create(options);
  ASSERT_TRUE(source.ok()) << source.status();
  ASSERT_TRUE((*source)->RegisterLocal(0, local.data(), local.size()).ok());
  absl::StatusOr<std::unique_ptr<KvWriteSession>> session = (*source)->Connect(*pool);
  ASSERT_TRUE(session.ok()) << session.status();

  const std::vector<int32_t> local_ids = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 40};
  const std::vector<int32_t> remote_ids = {20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 3};
  ASSERT_TRUE((*session)->PutBlocks(0, local.data(), local_ids, remote_ids).ok());
  absl::Status flushed = (*session)->Flush(absl::Seconds(20));
  ASSERT_TRUE(flushed.ok()) << flushed;

  std::vector<unsigned char> expected(local.size(), 0);
  for (size_t i = 0; i < local_ids.size(); ++i) {
    std::memcpy(expected.data() + remote_ids[i] * kBlockBytes,
                local.data() + local_ids[i] * kBlockBytes, kBlockBytes);
  }
  uint64_t checksum = 0;
  ASSERT_TRUE(peer.Send('C'));
  ASSERT_TRUE(peer.Read(&checksum, sizeof(checksum)));
  EXPECT_EQ(checksum, Fnv1a64(expected)) << "remote buffer differs from the expected image";

  const bool detects = (*session)->detects_peer_failure();
  // tcp reports a dead peer; UCX 1.13's shared memory cannot, so a flush there times out.
  EXPECT_EQ(detects, GetParam()[0] == 't');
  const absl::Duration flush_timeout = detects ? absl::Seconds(10) : absl::Seconds(2);
  peer.Kill();
  std::vector<int32_t> all(kNumBlocks);
  std::iota(all.begin(), all.end(), 0);
  std::vector<int32_t> reversed(all.rbegin(), all.rend());
  const auto start = std::chrono::steady_clock::now();
  absl::Status result;
  // A transport may accept the first PUTs into socket buffers; a few rounds must hit the error.
  for (int round = 0; round < 5 && result.ok(); ++round) {
    result = (*session)->PutBlocks(0, local.data(), all, reversed);
    if (result.ok()) result = (*session)->Flush(flush_timeout);
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_LT(elapsed, std::chrono::seconds(30));
  if (detects) {
    EXPECT_EQ(result.code(), absl::StatusCode::kUnavailable) << result;
    // The failure is sticky: the session refuses further work at once.
    EXPECT_EQ((*session)->Flush(absl::Seconds(1)).code(), absl::StatusCode::kUnavailable);
  } else {
    EXPECT_TRUE(result.code() == absl::StatusCode::kUnavailable ||
                result.code() == absl::StatusCode::kDeadlineExceeded)
        << result;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, TransferUcxPeerTest, testing::Values("tcp,self", "sm,self"),
                         [](const testing::TestParamInfo<const char*>& param_info) {
                           return std::string(param_info.param[0] == 't' ? "Tcp" : "SharedMemory");
                         });

}  // namespace
}  // namespace sparseserve::transfer
