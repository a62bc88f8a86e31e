// libFuzzer target: ParseHfConfig on arbitrary text. Any crash, sanitizer report or escaped
// exception is a bug.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "common/model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = sparseserve::model::ParseHfConfig(text, "fuzz/config.json");
  if (config.ok()) (void)sparseserve::model::ValidateModelConfig(*config).ok();
  return 0;
}
