#include "common/model/sharded_safetensors.h"

#include <exception>
#include <map>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/core/mapped_file.h"
#include "common/core/status.h"
#include "nlohmann/json.hpp"

namespace sparseserve::model {
namespace {

constexpr absl::string_view kSingleFile = "model.safetensors";
constexpr absl::string_view kIndexFile = "model.safetensors.index.json";

std::string JoinPath(absl::string_view dir, absl::string_view name) {
  if (dir.empty() || absl::EndsWith(dir, "/")) return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

// Parses the index's weight_map into shard file name -> tensor names.
absl::StatusOr<std::map<std::string, absl::flat_hash_set<std::string>>> ParseIndex(
    const std::string& index_path, const std::string& text) {
  std::map<std::string, absl::flat_hash_set<std::string>> by_shard;
  // nlohmann-json throws from accessors (and bad_alloc); nothing may escape this function.
  try {
    const nlohmann::json index = nlohmann::json::parse(text, /*cb=*/nullptr,
                                                       /*allow_exceptions=*/false);
    if (index.is_discarded() || !index.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": not a JSON object"));
    }
    auto weight_map = index.find("weight_map");
    if (weight_map == index.end() || !weight_map->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": missing or non-object weight_map"));
    }
    for (const auto& [name, shard] : weight_map->items()) {
      if (!shard.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(index_path, ": shard of tensor '", name, "' is not a string"));
      }
      const std::string& file = shard.get_ref<const std::string&>();
      // Shards live next to the index; a path could point anywhere on the machine.
      if (file.empty() || file == "." || file == ".." || absl::StrContains(file, "/")) {
        return absl::InvalidArgumentError(absl::StrCat(
            index_path, ": shard '", file, "' of tensor '", name, "' is not a plain file name"));
      }
      by_shard[file].insert(name);
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": malformed index: ", e.what()));
  }
  return by_shard;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShardedSafetensors>> ShardedSafetensors::Open(
    const std::string& dir) {
  std::unique_ptr<ShardedSafetensors> files(new ShardedSafetensors(dir));
  const std::string index_path = JoinPath(dir, kIndexFile);
  absl::StatusOr<std::string> index_text = core::ReadFileToString(index_path);

  if (!index_text.ok() && absl::IsNotFound(index_text.status())) {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> single =
        SafetensorsFile::Open(JoinPath(dir, kSingleFile));
    if (absl::IsNotFound(single.status())) {
      return absl::NotFoundError(
          absl::StrCat(dir, ": neither ", kIndexFile, " nor ", kSingleFile, " found"));
    }
    if (!single.ok()) return single.status();
    files->names_ = (*single)->TensorNames();
    for (const std::string& name : files->names_) files->shard_of_.emplace(name, 0);
    files->shards_.push_back(std::move(*single));
    return files;
  }
  if (!index_text.ok()) return index_text.status();

  SS_ASSIGN_OR_RETURN(auto by_shard, ParseIndex(index_path, *index_text));
  for (const auto& [shard_name, names] : by_shard) {
    SS_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> shard,
                        SafetensorsFile::Open(JoinPath(dir, shard_name)));
    for (const std::string& name : names) {
      if (!shard->HasTensor(name)) {
        return absl::InvalidArgumentError(absl::StrCat(index_path, ": tensor '", name,
                                                       "' is mapped to ", shard_name,
                                                       " but that shard does not hold it"));
      }
    }
    const size_t shard_idx = files->shards_.size();
    for (const SafetensorsTensorInfo& info : shard->tensor_infos()) {
      if (!names.contains(info.name)) continue;
      files->names_.push_back(info.name);
      files->shard_of_.emplace(info.name, shard_idx);
    }
    files->shards_.push_back(std::move(shard));
  }
  return files;
}

absl::StatusOr<Tensor> ShardedSafetensors::GetTensor(absl::string_view name) const {
  auto it = shard_of_.find(name);
  if (it == shard_of_.end()) {
    return absl::NotFoundError(absl::StrCat("tensor '", name, "' not found in ", dir_));
  }
  return shards_[it->second]->GetTensor(name);
}

absl::StatusOr<std::unique_ptr<TensorFile>> OpenSafetensorsDir(const std::string& dir) {
  SS_ASSIGN_OR_RETURN(std::unique_ptr<ShardedSafetensors> files, ShardedSafetensors::Open(dir));
  return std::unique_ptr<TensorFile>(std::move(files));
}

}  // namespace sparseserve::model
