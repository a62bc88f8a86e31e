// Flags shared by every command that loads a model (generate, decode, prefill, up), and by
// `bench model` (--device, --block-tokens, --prefill-chunk, --cuda-graph-batch only); --model
// itself is in model_path_flag.h.
#ifndef SPARSESERVE_TOOLS_MODEL_FLAGS_H_
#define SPARSESERVE_TOOLS_MODEL_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/engine/model_runner.h"
#include "common/tensor/tensor.h"
#include "tools/model_path_flag.h"

namespace sparseserve::tools {

// --device: kInvalidArgument for anything but cpu / cuda.
absl::StatusOr<Device> DeviceFromFlags();
absl::StatusOr<engine::ModelRunnerOptions> RunnerOptionsFromFlags();
// --cuda-graph-batch as given (checked by ModelRunner / LlamaModel).
int CudaGraphBatchFromFlags();
// --block-tokens as given (checked by whoever sizes the KV cache).
int BlockTokensFromFlags();
// --prefill-chunk, or `command_default` when it is 0 (its default): `bench model` prefills in
// larger chunks than the serving commands' 512.
int PrefillChunkFromFlags(int command_default);

}  // namespace sparseserve::tools

#endif  // SPARSESERVE_TOOLS_MODEL_FLAGS_H_
