// TensorFile: read-only access to the named tensors of a weight file (GGUF, safetensors).
//
// Implementations memory-map the file and hand out host Tensor views over the mapping (no copy);
// each view keeps the mapping alive. Shapes are row-major with the slowest dimension first
// (an HF Linear weight is [out_features, in_features]; GGUF's ne[] order is reversed to match).
// Immutable after opening; safe to read from any thread.
#ifndef SPARSESERVE_COMMON_MODEL_TENSOR_FILE_H_
#define SPARSESERVE_COMMON_MODEL_TENSOR_FILE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor/tensor.h"

namespace sparseserve::model {

// How tensors are named in the checkpoint.
enum class WeightNaming { kHuggingFace, kGguf };

class TensorFile {
 public:
  virtual ~TensorFile() = default;
  // Names of all tensors, in file order.
  virtual std::vector<std::string> TensorNames() const = 0;
  virtual bool HasTensor(absl::string_view name) const = 0;
  // A host view (f32, bf16 or f16) of tensor `name`.
  // Returns kNotFound naming the tensor and the file when it is absent.
  virtual absl::StatusOr<Tensor> GetTensor(absl::string_view name) const = 0;
};

}  // namespace sparseserve::model

#endif  // SPARSESERVE_COMMON_MODEL_TENSOR_FILE_H_
