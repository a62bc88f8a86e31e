// libFuzzer target: SafetensorsFile parsing and tensor views on arbitrary bytes.
// Any crash, sanitizer report, escaped exception or huge allocation is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/model/safetensors_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file =
      sparseserve::model::SafetensorsFile::FromBuffer("fuzz.safetensors", data, size, nullptr);
  if (!file.ok()) return 0;
  unsigned sink = 0;
  for (const std::string& name : (*file)->TensorNames()) {
    auto tensor = (*file)->GetTensor(name);
    if (!tensor.ok() || tensor->numel() == 0) continue;
    // Read the first and last bytes of the view so ASan checks the whole range.
    const auto* bytes = static_cast<const uint8_t*>(tensor->raw_data());
    sink += bytes[0] + bytes[tensor->nbytes() - 1];
  }
  volatile unsigned keep = sink;
  (void)keep;
  return 0;
}
