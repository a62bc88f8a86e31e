// Flags shared by every command that loads a model (generate, decode, prefill, up).
#ifndef SPARSESERVE_TOOLS_MODEL_FLAGS_H_
#define SPARSESERVE_TOOLS_MODEL_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/engine/model_runner.h"
#include "common/tensor/tensor.h"

namespace sparseserve::tools {

std::string ModelPathFromFlags();
// --device: kInvalidArgument for anything but cpu / cuda.
absl::StatusOr<Device> DeviceFromFlags();
engine::ModelRunnerOptions RunnerOptionsFromFlags();

}  // namespace sparseserve::tools

#endif  // SPARSESERVE_TOOLS_MODEL_FLAGS_H_
