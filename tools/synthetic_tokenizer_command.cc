// `sparseserve synthetic-tokenizer`: writes the tokenizer of a synthetic model (--model
// synthetic:PRESET) as a Hugging Face tokenizer directory, for load generators that count tokens
// with it (bench/serve: aiperf --tokenizer DIR).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_join.h"
#include "common/model/model_presets.h"
#include "common/tokenizer/synthetic_tokenizer.h"
#include "tools/command.h"

ABSL_FLAG(std::string, preset, "", "Synthetic model preset whose vocabulary to write (required).");
ABSL_FLAG(std::string, tokenizer_dir, "",
          "Directory to write tokenizer.json and tokenizer_config.json into (required; created).");

namespace sparseserve::tools {

int RunSyntheticTokenizerCommand(const std::vector<char*>& positional) {
  if (positional.size() > 1) {
    std::fprintf(stderr, "error: unexpected argument '%s'\n", positional[1]);
    return 2;
  }
  const std::string preset = absl::GetFlag(FLAGS_preset);
  const std::string dir = absl::GetFlag(FLAGS_tokenizer_dir);
  if (preset.empty() || dir.empty()) {
    std::fprintf(stderr, "error: --preset and --tokenizer-dir are required (presets: %s)\n",
                 absl::StrJoin(model::SyntheticModelNames(), ", ").c_str());
    return 2;
  }
  absl::StatusOr<model::ModelConfig> config = model::SyntheticModelConfig(preset);
  if (!config.ok()) {
    std::fprintf(stderr, "error: %s\n", config.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<std::string> json = tokenizer::SyntheticTokenizerJson(config->vocab_size);
  if (!json.ok()) {
    std::fprintf(stderr, "error: %s\n", json.status().ToString().c_str());
    return 1;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  for (const auto& [name, text] :
       {std::pair<std::string, std::string>{"tokenizer.json", *json},
        {"tokenizer_config.json", tokenizer::SyntheticTokenizerConfigJson()}}) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    std::ofstream out(path, std::ios::binary);
    out << text << "\n";
    if (!out) {
      std::fprintf(stderr, "error: cannot write %s\n", path.c_str());
      return 1;
    }
  }
  std::printf("wrote %s/tokenizer.json (%d tokens) and tokenizer_config.json\n", dir.c_str(),
              config->vocab_size);
  return 0;
}

}  // namespace sparseserve::tools
