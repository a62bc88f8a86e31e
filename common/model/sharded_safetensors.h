// ShardedSafetensors: the weights of a Hugging Face checkpoint directory, either one
// `model.safetensors` or the shards listed by `model.safetensors.index.json`
// ({"weight_map": {tensor name: shard file name}}), behind one TensorFile.
//
// Each shard is mapped once (see SafetensorsFile). Immutable after opening; safe to read from
// any thread.
#ifndef SPARSESERVE_COMMON_MODEL_SHARDED_SAFETENSORS_H_
#define SPARSESERVE_COMMON_MODEL_SHARDED_SAFETENSORS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model/safetensors_file.h"
#include "common/model/tensor_file.h"

namespace sparseserve::model {

class ShardedSafetensors : public TensorFile {
 public:
  // Opens `dir`. With an index, opens every shard it names once and checks that each mapped
  // tensor is in its shard. Returns kNotFound when the directory has neither file or a mapped
  // shard is missing, kInvalidArgument for a malformed index (not JSON, no weight_map object,
  // a non-string or path-like shard name) or a tensor absent from its shard, and
  // SafetensorsFile::Open's errors for a bad shard.
  static absl::StatusOr<std::unique_ptr<ShardedSafetensors>> Open(const std::string& dir);

  ShardedSafetensors(const ShardedSafetensors&) = delete;
  ShardedSafetensors& operator=(const ShardedSafetensors&) = delete;

  // The opened shards, ordered by file name.
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }

  // TensorFile. Names are ordered by shard, then by position in the shard; with an index only
  // tensors named in its weight_map are listed. GetTensor has SafetensorsFile's errors.
  std::vector<std::string> TensorNames() const override { return names_; }
  bool HasTensor(absl::string_view name) const override { return shard_of_.contains(name); }
  absl::StatusOr<Tensor> GetTensor(absl::string_view name) const override;

 private:
  explicit ShardedSafetensors(std::string dir) : dir_(std::move(dir)) {}

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::vector<std::string> names_;
  absl::flat_hash_map<std::string, size_t> shard_of_;  // tensor name -> shards_ index
};

// Opens the safetensors weights of a checkpoint directory (see ShardedSafetensors::Open).
absl::StatusOr<std::unique_ptr<TensorFile>> OpenSafetensorsDir(const std::string& dir);

}  // namespace sparseserve::model

#endif  // SPARSESERVE_COMMON_MODEL_SHARDED_SAFETENSORS_H_
