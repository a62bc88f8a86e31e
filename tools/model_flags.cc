#include "tools/model_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, model, "models/stories260K/stories260K.gguf",
          "Model to load: a .gguf file or a Hugging Face directory (config.json, *.safetensors, "
          "tokenizer.json).");
ABSL_FLAG(std::string, device, "cpu", "Backend: cpu (reference) or cuda.");
ABSL_FLAG(int, kv_cache_tokens, 0, "KV cache capacity in tokens (0 = 4 x the model context).");
ABSL_FLAG(int, block_tokens, 64, "KV block size in tokens (multiple of 16).");
ABSL_FLAG(int, prefill_chunk, 512, "Prompt tokens per prefill step.");

namespace sparseserve::tools {

std::string ModelPathFromFlags() {
  return absl::GetFlag(FLAGS_model);
}

absl::StatusOr<Device> DeviceFromFlags() {
  const std::string name = absl::GetFlag(FLAGS_device);
  if (name == "cpu") return Device::kHost;
  if (name == "cuda") return Device::kCuda;
  return absl::InvalidArgumentError("--device must be cpu or cuda, got '" + name + "'");
}

engine::ModelRunnerOptions RunnerOptionsFromFlags() {
  engine::ModelRunnerOptions options;
  options.kv_cache_tokens = absl::GetFlag(FLAGS_kv_cache_tokens);
  options.block_tokens = absl::GetFlag(FLAGS_block_tokens);
  options.prefill_chunk_tokens = absl::GetFlag(FLAGS_prefill_chunk);
  return options;
}

}  // namespace sparseserve::tools
