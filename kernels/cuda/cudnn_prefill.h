// Dense causal prefill attention over the paged KV cache through cuDNN's fused SDPA
// (cudnn-frontend's graph API): the dense path issue 16 prescribes while the project's own
// prefill kernel is slower than cuDNN. Host code only; cuDNN is loaded at run time (dlopen of
// libcudnn.so.9), so a build without cudnn-frontend's headers or a machine without cuDNN keeps
// running the project's kernel, and says why once.
//
// Plan/run split: Prepare builds (or finds) the execution plan for a shape at PlanAttention time;
// Run launches it on a stream with the step's device arrays. Shapes are bucketed (query rows and
// keys up to powers of two; cuDNN's padding mask takes the true lengths from the device), so a
// serving process builds a handful of graphs, each once.
#ifndef SPARSESERVE_KERNELS_CUDA_CUDNN_PREFILL_H_
#define SPARSESERVE_KERNELS_CUDA_CUDNN_PREFILL_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sparseserve::kernels::cuda {

// One graph's shape. The KV layer is kv_layer [2 * num_blocks, block_tokens, kv_heads, head_dim]
// (block b's keys at 2b, its values at 2b + 1); queries and outputs are packed rows
// [rows, heads, head_dim].
struct CudnnPrefillShape {
  int batch = 0;   // sequences
  int max_q = 0;   // query rows of the longest sequence, bucketed
  int max_kv = 0;  // keys of the longest sequence, bucketed (a multiple of block_tokens)
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;  // 64 or 128
  int block_tokens = 0;
  int64_t num_blocks = 0;
  float scale = 0;  // softmax scale
  int table_size() const { return max_kv / block_tokens; }
  bool operator==(const CudnnPrefillShape&) const = default;
};

// The device arrays of one launch (int32, on the device, 16-byte aligned).
struct CudnnPrefillArgs {
  const void* q = nullptr;          // bf16 [rows, heads, head_dim]
  const void* kv_layer = nullptr;   // bf16, as above
  void* out = nullptr;              // bf16 [rows, heads, head_dim]
  const int32_t* seq_q = nullptr;   // [batch] query rows of each sequence
  const int32_t* seq_kv = nullptr;  // [batch] keys (cached + new); row i sees keys <= kv - q + i
  const int32_t* row_offsets = nullptr;  // [batch + 1] first element (row * heads * head_dim)
  const int32_t* tables = nullptr;       // [batch, table_size] block ids, padded with 0
};

// Rounds a length up to the bucket its graph is built for (a power of two, >= 64).
int CudnnPrefillBucket(int length);

class CudnnPrefill {
 public:
  // kUnavailable with the reason when cuDNN cannot run here (not built in, libcudnn.so.9 not
  // found, a version without paged SDPA); loaded once per process.
  static absl::Status Available();
  // A runner on the current device; kUnavailable as above.
  static absl::StatusOr<std::unique_ptr<CudnnPrefill>> Create();
  ~CudnnPrefill();
  CudnnPrefill(const CudnnPrefill&) = delete;
  CudnnPrefill& operator=(const CudnnPrefill&) = delete;

  // Builds the graph for `shape` unless it is cached; returns the workspace bytes Run needs.
  // kUnimplemented when cuDNN has no engine for it (the caller runs its own kernel).
  absl::StatusOr<int64_t> Prepare(const CudnnPrefillShape& shape);
  // Launches the prepared graph for `shape` on `stream`; `workspace` holds Prepare's bytes.
  absl::Status Run(const CudnnPrefillShape& shape, const CudnnPrefillArgs& args, void* workspace,
                   cudaStream_t stream);

 private:
  struct State;
  explicit CudnnPrefill(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// Whether dense prefill chunks go to cuDNN (the default where it loads) or to the project's
// kernel ($SPARSESERVE_PREFILL_ATTENTION=kernel, read once: an A/B switch).
bool PrefillOnCudnnRequested();

}  // namespace sparseserve::kernels::cuda

#endif  // SPARSESERVE_KERNELS_CUDA_CUDNN_PREFILL_H_
