// kv_transfer_bench: KV block transfer throughput between two processes on this host.
//
// A forked child plays the decode worker (KvTransferTarget with one registered pool per layer,
// pages pre-touched); the parent plays the prefill worker (KvTransferSource) and PUTs every
// layer's blocks layer by layer, as prefill would, then Flushes once. The remote block order is
// a fixed random permutation, so PUTs are one block each (the merge of consecutive runs does not
// help) unless --contiguous. Default layout: Llama-3-8B, 32 layers x 16K tokens / 64-token
// blocks = 256 blocks of 256 KiB per layer = 2 GiB. After the runs the child checks that every
// remote block holds the local block the permutation sent there.
//
// --source_memory=cuda / --target_memory=cuda put that end's KV in GPU memory (the KV cache's
// AllocateShareable, registered as CUDA memory); with both, the PUTs go GPU to GPU through UCX's
// CUDA transports (cuda_ipc between two processes on one node; issue 20 item 2). One of them
// alone is the mixed case of a staged worker facing a GPU-direct one. --staged is the path GPU KV
// takes with --kv-staging=on: both ends' KV in GPU memory, each layer copied device -> host into a
// registered host buffer and PUT from there into the decode side's host staging area, which is
// copied host -> device into its GPU pool after the flush (that copy is timed into the run).
//
// Prints one line per run and a summary line `RESULT kv_transfer_gbps=<best GB/s>` (GB = 1e9 B)
// that bench/kv_transfer_vs_perftest.sh parses. Both processes fork before touching UCX or CUDA.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/time.h"
#include "common/core/status.h"
#include "common/tensor/tensor.h"
#include "common/transfer/kv_transfer_source.h"
#include "common/transfer/kv_transfer_target.h"
#include "common/transfer/kv_write_session.h"
#include "common/transfer/remote_kv_pool.h"
#include "kernels/backend.h"

ABSL_FLAG(std::string, transports, "", "UCX transports (UCX_TLS syntax); empty = UCX's choice.");
ABSL_FLAG(int64_t, total_mib, 2048, "Total KV bytes moved per run, in MiB (all layers).");
ABSL_FLAG(int, layers, 32, "Number of layers (one PutBlocks call each).");
ABSL_FLAG(int64_t, block_kib, 256, "Bytes of one (layer, block) transfer unit, in KiB.");
ABSL_FLAG(int, runs, 3, "Timed runs (the best is reported).");
ABSL_FLAG(bool, contiguous, false, "Send blocks in order, so whole layers merge into one PUT.");
ABSL_FLAG(bool, ucx_alloc, true,
          "Target pools allocated by UCX (AllocateRegion; direct PUT over shared memory) "
          "instead of plain heap memory registered with RegisterRegion.");
ABSL_FLAG(std::string, source_memory, "host",
          "Where the prefill side's KV lives: host, or cuda (GPU 0).");
ABSL_FLAG(std::string, target_memory, "host",
          "Where the decode side's KV pool lives: host, or cuda (GPU 0; --ucx_alloc does not "
          "apply).");
ABSL_FLAG(bool, staged, false,
          "Both ends in GPU memory, moved through host staging memory (as --kv-staging=on); "
          "overrides --source_memory/--target_memory.");
ABSL_FLAG(int, timeout_s, 120, "Flush timeout and child lifetime bound, in seconds.");

namespace {

using sparseserve::Device;
using sparseserve::DType;
using sparseserve::Shape;
using sparseserve::Tensor;
using sparseserve::transfer::KvMemoryKind;
using sparseserve::transfer::KvTransferOptions;
using sparseserve::transfer::KvTransferSource;
using sparseserve::transfer::KvTransferTarget;
using sparseserve::transfer::KvWriteSession;
using sparseserve::transfer::RemoteKvPool;

struct Layout {
  int layers = 0;
  int blocks_per_layer = 0;
  size_t block_bytes = 0;
  size_t layer_bytes() const { return block_bytes * blocks_per_layer; }
};

bool OnGpu(const absl::Flag<std::string>& flag) {
  return absl::GetFlag(flag) == "cuda" || absl::GetFlag(FLAGS_staged);
}

// The source's request, after a staged run's flush, that the target copy its staging area into
// its GPU pool (answered with the copy's seconds); distinct from the final "done" byte (0 or 1).
constexpr char kCopyCommand = 'c';

// A GPU buffer of `bytes` (a multiple of 4) in the KV cache's kind of memory, or an error line.
absl::StatusOr<Tensor> AllocateGpu(sparseserve::kernels::Backend& backend, size_t bytes) {
  return backend.AllocateShareable(DType::kI32, Shape{static_cast<int64_t>(bytes / 4)});
}

// A host view of `data` as the i32 tensor the backend copies to and from.
Tensor HostView(void* data, size_t bytes) {
  return Tensor::Wrap(data, DType::kI32, Shape{static_cast<int64_t>(bytes / 4)}, Device::kHost,
                      /*holder=*/nullptr);
}

bool WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = read(fd, p, size);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// remote_ids[i] is where local block i goes; the same on both sides (fixed seed).
std::vector<int32_t> RemoteOrder(const Layout& layout, bool contiguous) {
  std::vector<int32_t> ids(layout.blocks_per_layer);
  std::iota(ids.begin(), ids.end(), 0);
  if (!contiguous) std::shuffle(ids.begin(), ids.end(), std::mt19937(1234));
  return ids;
}

// Registers layer `layer`'s pool with `target` and appends its base to `pools`: the GPU tensor
// gpu_pools.back() itself (GPU to GPU), else host memory (UCX-allocated for --ucx_alloc and
// --staged, else heap memory kept in `heap_pools`).
absl::Status AddTargetLayer(KvTransferTarget& target, int layer, const Layout& layout,
                            std::vector<Tensor>& gpu_pools, std::vector<char*>& pools,
                            std::vector<std::unique_ptr<char[]>>& heap_pools) {
  const bool staged = absl::GetFlag(FLAGS_staged);
  if (!gpu_pools.empty() && !staged) {
    pools.push_back(static_cast<char*>(gpu_pools.back().raw_data()));
    return target.RegisterRegion(layer, pools.back(), layout.layer_bytes(), KvMemoryKind::kCuda);
  }
  if (absl::GetFlag(FLAGS_ucx_alloc) || staged) {
    SS_ASSIGN_OR_RETURN(void* base, target.AllocateRegion(layer, layout.layer_bytes()));
    pools.push_back(static_cast<char*>(base));  // zero-filled by UCX path
    return absl::OkStatus();
  }
  heap_pools.push_back(std::make_unique<char[]>(layout.layer_bytes()));
  pools.push_back(heap_pools.back().get());
  std::memset(pools.back(), 0, layout.layer_bytes());  // fault the pages in now
  return target.RegisterRegion(layer, pools.back(), layout.layer_bytes());
}

// The decode side: registers the pools, publishes them, waits for "done", verifies.
int RunTarget(const Layout& layout, const KvTransferOptions& options, int to_parent,
              int from_parent) {
  absl::StatusOr<std::unique_ptr<KvTransferTarget>> target = KvTransferTarget::Create(options);
  if (!target.ok()) {
    std::fprintf(stderr, "target: %s\n", target.status().ToString().c_str());
    return 1;
  }
  std::vector<std::unique_ptr<char[]>> heap_pools;
  std::vector<char*> pools;  // [layers] base of each layer's pool
  std::unique_ptr<sparseserve::kernels::Backend> gpu;
  std::vector<Tensor> gpu_pools;  // [layers] with --target_memory=cuda or --staged
  if (OnGpu(FLAGS_target_memory)) {
    absl::StatusOr<std::unique_ptr<sparseserve::kernels::Backend>> backend =
        sparseserve::kernels::CreateBackend(Device::kCuda);
    if (!backend.ok()) {
      std::fprintf(stderr, "target: %s\n", backend.status().ToString().c_str());
      return 1;
    }
    gpu = *std::move(backend);
  }
  for (int layer = 0; layer < layout.layers; ++layer) {
    // The layer's pool: GPU memory registered for GPU-to-GPU PUTs, or a registered host region
    // (UCX-allocated like a staging area, or heap memory), which --staged copies into GPU memory.
    absl::Status status;
    if (gpu != nullptr) {
      absl::StatusOr<Tensor> t = AllocateGpu(*gpu, layout.layer_bytes());
      status = t.status();
      if (t.ok()) gpu_pools.push_back(*std::move(t));
      if (status.ok()) status = gpu->Synchronize();  // zero-filled before any PUT may land
    }
    if (status.ok()) status = AddTargetLayer(**target, layer, layout, gpu_pools, pools, heap_pools);
    if (!status.ok()) {
      std::fprintf(stderr, "target: %s\n", status.ToString().c_str());
      return 1;
    }
  }
  absl::StatusOr<RemoteKvPool> pool = (*target)->ExportPool(layout.layers, layout.block_bytes);
  if (!pool.ok()) return 1;
  const std::string bytes = sparseserve::transfer::SerializeRemoteKvPool(*pool);
  const auto size = static_cast<uint64_t>(bytes.size());
  if (!WriteAll(to_parent, &size, sizeof(size)) ||
      !WriteAll(to_parent, bytes.data(), bytes.size())) {
    return 1;
  }
  char contiguous = 0;
  for (;;) {  // copy requests of staged runs, then the parent is done PUTting
    if (!ReadAll(from_parent, &contiguous, 1)) return 1;
    if (contiguous != kCopyCommand) break;
    const auto start = std::chrono::steady_clock::now();
    absl::Status status;
    for (int layer = 0; status.ok() && layer < layout.layers; ++layer) {
      status = gpu->CopyFromHost(HostView(pools[layer], layout.layer_bytes()), gpu_pools[layer]);
    }
    if (status.ok()) status = gpu->Synchronize();
    if (!status.ok()) {
      std::fprintf(stderr, "target: %s\n", status.ToString().c_str());
      return 1;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!WriteAll(to_parent, &seconds, sizeof(seconds))) return 1;
  }
  const std::vector<int32_t> remote_ids = RemoteOrder(layout, contiguous != 0);
  uint64_t mismatches = 0;
  std::vector<char> host_copy(gpu != nullptr ? layout.layer_bytes() : 0);
  for (int layer = 0; layer < layout.layers; ++layer) {
    const char* blocks = pools[layer];
    if (gpu != nullptr) {
      if (!gpu->CopyToHost(gpu_pools[layer], HostView(host_copy.data(), host_copy.size())).ok()) {
        return 1;
      }
      blocks = host_copy.data();
    }
    for (int local = 0; local < layout.blocks_per_layer; ++local) {
      uint64_t tag = 0;
      std::memcpy(&tag, blocks + remote_ids[local] * layout.block_bytes, sizeof(tag));
      if (tag != static_cast<uint64_t>(local) + 1) ++mismatches;
    }
  }
  return WriteAll(to_parent, &mismatches, sizeof(mismatches)) ? 0 : 1;
}

// The prefill side: PUTs all layers, flushes, reports GB/s per run.
int RunSource(const Layout& layout, const KvTransferOptions& options, int to_child,
              int from_child) {
  uint64_t size = 0;
  if (!ReadAll(from_child, &size, sizeof(size))) {
    std::fprintf(stderr, "source: the target process did not publish its pools\n");
    return 1;
  }
  std::string bytes(size, '\0');
  if (!ReadAll(from_child, bytes.data(), size)) return 1;
  absl::StatusOr<RemoteKvPool> pool = sparseserve::transfer::ParseRemoteKvPool(bytes);
  if (!pool.ok()) return 1;

  absl::StatusOr<std::unique_ptr<KvTransferSource>> source = KvTransferSource::Create(options);
  if (!source.ok()) {
    std::fprintf(stderr, "source: %s\n", source.status().ToString().c_str());
    return 1;
  }
  // One local buffer stands for every layer (the bytes moved do not depend on its contents);
  // each block starts with its id + 1 so the target can check placement.
  std::vector<char> local(layout.layer_bytes(), 'k');
  for (int block = 0; block < layout.blocks_per_layer; ++block) {
    const uint64_t tag = static_cast<uint64_t>(block) + 1;
    std::memcpy(local.data() + block * layout.block_bytes, &tag, sizeof(tag));
  }
  // With --source_memory=cuda the blocks are PUT from a GPU copy of `local`.
  const char* local_base = local.data();
  KvMemoryKind kind = KvMemoryKind::kHost;
  std::unique_ptr<sparseserve::kernels::Backend> gpu;
  Tensor gpu_local;
  if (OnGpu(FLAGS_source_memory)) {
    absl::StatusOr<std::unique_ptr<sparseserve::kernels::Backend>> backend =
        sparseserve::kernels::CreateBackend(Device::kCuda);
    absl::StatusOr<Tensor> t = backend.ok() ? AllocateGpu(**backend, local.size())
                                            : absl::StatusOr<Tensor>(backend.status());
    absl::Status status = t.status();
    if (status.ok()) status = (*backend)->CopyFromHost(HostView(local.data(), local.size()), *t);
    if (status.ok()) status = (*backend)->Synchronize();
    if (!status.ok()) {
      std::fprintf(stderr, "source: %s\n", status.ToString().c_str());
      return 1;
    }
    gpu = *std::move(backend);
    gpu_local = *std::move(t);
    local_base = static_cast<const char*>(gpu_local.raw_data());
    kind = KvMemoryKind::kCuda;
  }
  // --staged: every layer's blocks are copied device -> host into their slot of `ring` (the
  // prefill worker's staging ring, registered once for all layers) and PUT from there.
  const bool staged = absl::GetFlag(FLAGS_staged);
  std::vector<char> ring(staged ? local.size() * layout.layers : 0);
  if (staged) {
    std::memset(ring.data(), 0, ring.size());  // fault the pages in now
    absl::Status status = (*source)->RegisterSharedLocal(ring.data(), ring.size());
    if (!status.ok()) {
      std::fprintf(stderr, "source: %s\n", status.ToString().c_str());
      return 1;
    }
  }
  for (int layer = 0; !staged && layer < layout.layers; ++layer) {
    absl::Status status = (*source)->RegisterLocal(layer, local_base, local.size(), kind);
    if (!status.ok()) {
      std::fprintf(stderr, "source: %s\n", status.ToString().c_str());
      return 1;
    }
  }
  // Where layer `layer` is PUT from; for --staged, copies it there first.
  const auto layer_source = [&](int layer) -> absl::StatusOr<const char*> {
    if (!staged) return local_base;
    char* slot = ring.data() + static_cast<size_t>(layer) * local.size();
    SS_RETURN_IF_ERROR(gpu->CopyToHost(gpu_local, HostView(slot, local.size())));
    return slot;
  };
  absl::StatusOr<std::unique_ptr<KvWriteSession>> session = (*source)->Connect(*pool);
  if (!session.ok()) {
    std::fprintf(stderr, "source: %s\n", session.status().ToString().c_str());
    return 1;
  }
  const bool contiguous = absl::GetFlag(FLAGS_contiguous);
  std::vector<int32_t> local_ids(layout.blocks_per_layer);
  std::iota(local_ids.begin(), local_ids.end(), 0);
  const std::vector<int32_t> remote_ids = RemoteOrder(layout, contiguous);
  const double total_bytes = static_cast<double>(layout.layer_bytes()) * layout.layers;
  // A warm-up layer connects the endpoint and settles the transport before timing.
  absl::StatusOr<const char*> first = layer_source(0);
  absl::Status status = first.status();
  if (status.ok()) status = (*session)->PutBlocks(0, *first, local_ids, remote_ids);
  if (status.ok()) status = (*session)->Flush(absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
  double best_gbps = 0;
  for (int run = 0; status.ok() && run < absl::GetFlag(FLAGS_runs); ++run) {
    const auto start = std::chrono::steady_clock::now();
    for (int layer = 0; status.ok() && layer < layout.layers; ++layer) {
      absl::StatusOr<const char*> from = layer_source(layer);
      status = from.status();
      if (status.ok()) status = (*session)->PutBlocks(layer, *from, local_ids, remote_ids);
    }
    if (status.ok()) status = (*session)->Flush(absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
    double copy_seconds = 0;  // the decode side's host -> device copy of a staged run
    if (status.ok() && staged &&
        (!WriteAll(to_child, &kCopyCommand, 1) ||
         !ReadAll(from_child, &copy_seconds, sizeof(copy_seconds)))) {
      status = absl::InternalError("the target process did not copy its staging area");
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!status.ok()) break;
    const double gbps = total_bytes / seconds / 1e9;
    best_gbps = std::max(best_gbps, gbps);
    std::printf("run %d: %.1f MiB in %.3f s = %.2f GB/s", run, total_bytes / (1 << 20), seconds,
                gbps);
    if (staged) std::printf(" (decode side's host -> device copy %.3f s)", copy_seconds);
    std::printf("\n");
  }
  if (!status.ok()) {
    std::fprintf(stderr, "source: %s\n", status.ToString().c_str());
    return 1;
  }
  session->reset();
  const char done = contiguous ? 1 : 0;
  uint64_t mismatches = 0;
  if (!WriteAll(to_child, &done, 1) || !ReadAll(from_child, &mismatches, sizeof(mismatches))) {
    std::fprintf(stderr, "source: the target process did not report its check\n");
    return 1;
  }
  if (mismatches != 0) {
    std::fprintf(stderr, "source: %llu remote blocks hold the wrong data\n",
                 static_cast<unsigned long long>(mismatches));
    return 1;
  }
  std::printf(
      "transports=%s memory=%s->%s layers=%d blocks/layer=%d block=%zu KiB puts/run=%d "
      "verified\n",
      options.transports.empty() ? "(UCX default)" : options.transports.c_str(),
      staged ? "cuda-staged" : absl::GetFlag(FLAGS_source_memory).c_str(),
      staged ? "staged-cuda"
             : (OnGpu(FLAGS_target_memory) ? "cuda"
                                           : (absl::GetFlag(FLAGS_ucx_alloc) ? "ucx" : "heap")),
      layout.layers, layout.blocks_per_layer, layout.block_bytes / 1024,
      contiguous ? layout.layers : layout.layers * layout.blocks_per_layer);
  std::printf("RESULT kv_transfer_gbps=%.3f\n", best_gbps);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  Layout layout;
  layout.layers = absl::GetFlag(FLAGS_layers);
  layout.block_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_block_kib)) * 1024;
  const int64_t total_bytes = absl::GetFlag(FLAGS_total_mib) << 20;
  if (layout.layers < 1 || layout.block_bytes == 0) return 2;
  layout.blocks_per_layer =
      static_cast<int>(total_bytes / layout.layers / static_cast<int64_t>(layout.block_bytes));
  if (layout.blocks_per_layer < 1) {
    std::fprintf(stderr, "--total_mib too small for %d layers of %zu-byte blocks\n", layout.layers,
                 layout.block_bytes);
    return 2;
  }
  for (const std::string& memory :
       {absl::GetFlag(FLAGS_source_memory), absl::GetFlag(FLAGS_target_memory)}) {
    if (memory != "host" && memory != "cuda") {
      std::fprintf(stderr, "--source_memory and --target_memory are host or cuda\n");
      return 2;
    }
  }
  KvTransferOptions options;
  options.transports = absl::GetFlag(FLAGS_transports);

  int to_child[2];
  int from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) return 1;
  const pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the parent
    alarm(static_cast<unsigned>(absl::GetFlag(FLAGS_timeout_s)) * 4);
    close(to_child[1]);
    close(from_child[0]);
    _exit(RunTarget(layout, options, from_child[1], to_child[0]));
  }
  close(to_child[0]);
  close(from_child[1]);
  const int rc = RunSource(layout, options, to_child[1], from_child[0]);
  close(to_child[1]);
  if (rc != 0) kill(child, SIGKILL);
  int child_status = 0;
  waitpid(child, &child_status, 0);
  return rc != 0 ? rc : (WIFEXITED(child_status) ? WEXITSTATUS(child_status) : 1);
}
