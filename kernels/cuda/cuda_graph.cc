// CudaBackend step graphs: stream capture of a forward step into a CUDA graph, and its replay.
//
// A decode step launches ~15 kernels per layer, each a few microseconds long at batch 1; launched
// one by one from the host they leave the GPU idle in between. Captured once and replayed, the
// whole step is one launch. The capture mode is thread-local, so other threads' CUDA calls (the
// KV transfer's, a second worker's) neither break the capture nor get recorded.
#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_status.h"

namespace sparseserve::kernels {
namespace {

class CudaStepGraph final : public StepGraph {
 public:
  CudaStepGraph(cudaGraphExec_t exec, const CudaBackend* owner) : exec_(exec), owner_(owner) {}
  ~CudaStepGraph() override { cudaGraphExecDestroy(exec_); }
  CudaStepGraph(const CudaStepGraph&) = delete;
  CudaStepGraph& operator=(const CudaStepGraph&) = delete;

  cudaGraphExec_t exec() const { return exec_; }
  const CudaBackend* owner() const { return owner_; }

 private:
  cudaGraphExec_t exec_;
  const CudaBackend* owner_;
};

}  // namespace

absl::Status CudaBackend::CheckNotCapturing(const char* op) const {
  if (!capturing_) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(op, ": not allowed while a step graph is being captured"));
}

absl::StatusOr<std::unique_ptr<StepGraph>> CudaBackend::CaptureGraph(
    const std::function<absl::Status()>& record) {
  if (stream_->stream == nullptr) {
    return absl::UnimplementedError("CaptureGraph: the legacy default stream cannot be captured");
  }
  SS_RETURN_IF_ERROR(CheckNotCapturing("CaptureGraph"));
  SS_RETURN_IF_ERROR(CudaStatus(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal),
                                "cudaStreamBeginCapture"));
  capturing_ = true;
  const absl::Status recorded = record();
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream(), &graph);
  if (!recorded.ok() || ended != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // an invalidated capture leaves a sticky-free error behind; clear it
    if (!recorded.ok()) return recorded;
    return CudaStatus(ended, "cudaStreamEndCapture");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  SS_RETURN_IF_ERROR(CudaStatus(instantiated, "cudaGraphInstantiate"));
  return std::unique_ptr<StepGraph>(new CudaStepGraph(exec, this));
}

absl::Status CudaBackend::LaunchGraph(const StepGraph& graph) {
  SS_RETURN_IF_ERROR(CheckNotCapturing("LaunchGraph"));
  const auto* cuda_graph = dynamic_cast<const CudaStepGraph*>(&graph);
  if (cuda_graph == nullptr || cuda_graph->owner() != this) {
    return absl::InvalidArgumentError("LaunchGraph: the graph was captured by another backend");
  }
  return CudaStatus(cudaGraphLaunch(cuda_graph->exec(), stream()), "cudaGraphLaunch");
}

}  // namespace sparseserve::kernels
