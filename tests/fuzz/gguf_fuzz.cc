// libFuzzer target: GgufFile parsing, metadata accessors, tensor views and ModelConfigFromGguf
// on arbitrary bytes. Any crash, sanitizer report or huge allocation is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/model/gguf_file.h"
#include "common/model/model_config.h"

namespace {

using sparseserve::model::GgufFile;
using sparseserve::model::GgufMetadata;

void TouchMetadata(const GgufMetadata& md) {
  for (const std::string& key : md.Keys()) {
    // Every accessor on every key: the wrong-type paths must be as clean as the right ones.
    (void)md.GetString(key).ok();
    (void)md.GetUint(key).ok();
    (void)md.GetInt(key).ok();
    (void)md.GetFloat(key).ok();
    (void)md.GetBool(key).ok();
    (void)md.GetArrayLength(key).ok();
    (void)md.GetStringArray(key).ok();
    (void)md.GetFloatArray(key).ok();
    (void)md.GetIntArray(key).ok();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = GgufFile::FromBuffer("fuzz.gguf", data, size, nullptr);
  if (!file.ok()) return 0;
  TouchMetadata((*file)->metadata());
  float sink = 0;
  for (const std::string& name : (*file)->TensorNames()) {
    auto tensor = (*file)->GetTensor(name);
    if (!tensor.ok() || tensor->numel() == 0) continue;
    // Read the first and last bytes of the view so ASan checks the whole range.
    const auto* bytes = static_cast<const uint8_t*>(tensor->raw_data());
    sink += static_cast<float>(bytes[0] + bytes[tensor->nbytes() - 1]);
  }
  (void)sparseserve::model::ModelConfigFromGguf(**file).ok();
  volatile float keep = sink;
  (void)keep;
  return 0;
}
