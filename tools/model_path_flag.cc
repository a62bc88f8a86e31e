#include "tools/model_path_flag.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, model, "models/stories260K/stories260K.gguf",
          "Model to load: a .gguf file or a Hugging Face directory (config.json, *.safetensors, "
          "tokenizer.json).");

namespace sparseserve::tools {

std::string ModelPathFromFlags() {
  return absl::GetFlag(FLAGS_model);
}

}  // namespace sparseserve::tools
