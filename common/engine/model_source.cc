#include "common/engine/model_source.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/core/mapped_file.h"
#include "common/core/status.h"
#include "common/model/model_presets.h"
#include "common/model/sharded_safetensors.h"
#include "common/tokenizer/byte_level_bpe_tokenizer.h"
#include "common/tokenizer/pretokenizer.h"
#include "common/tokenizer/spm_tokenizer.h"
#include "common/tokenizer/synthetic_tokenizer.h"
#include "common/tokenizer/tokenizer_json.h"

namespace sparseserve::engine {
namespace {

absl::StatusOr<ModelSource> OpenGguf(const std::string& path, bool open_weights) {
  ModelSource src;
  src.path = path;
  src.naming = model::WeightNaming::kGguf;
  SS_ASSIGN_OR_RETURN(std::unique_ptr<model::GgufFile> gguf, model::GgufFile::Open(path));
  SS_ASSIGN_OR_RETURN(src.config, model::ModelConfigFromGguf(*gguf));
  SS_ASSIGN_OR_RETURN(src.tokenizer, TokenizerFromGguf(*gguf));
  if (open_weights) src.weights = std::move(gguf);
  return src;
}

absl::StatusOr<ModelSource> OpenHfDirectory(const std::string& dir, bool open_weights) {
  ModelSource src;
  src.path = dir;
  src.naming = model::WeightNaming::kHuggingFace;
  const std::string config_path = dir + "/config.json";
  SS_ASSIGN_OR_RETURN(std::string config_text, core::ReadFileToString(config_path));
  SS_ASSIGN_OR_RETURN(src.config, model::ParseHfConfig(config_text, config_path));
  if (open_weights) {
    SS_ASSIGN_OR_RETURN(src.weights, model::OpenSafetensorsDir(dir));
  }
  SS_ASSIGN_OR_RETURN(src.tokenizer, tokenizer::LoadTokenizerJson(dir + "/tokenizer.json"));
  return src;
}

}  // namespace

absl::StatusOr<ModelSource> OpenModelSource(const std::string& path, bool open_weights) {
  if (absl::StartsWith(path, kSyntheticModelPrefix)) {
    ModelSource source;
    source.path = path;
    source.synthetic = true;
    SS_ASSIGN_OR_RETURN(source.config, model::SyntheticModelConfig(absl::string_view(path).substr(
                                           sizeof(kSyntheticModelPrefix) - 1)));
    SS_ASSIGN_OR_RETURN(const std::string json,
                        tokenizer::SyntheticTokenizerJson(source.config.vocab_size));
    SS_ASSIGN_OR_RETURN(source.tokenizer,
                        tokenizer::TokenizerFromTokenizerJsonText(json, "synthetic tokenizer"));
    return source;
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return OpenHfDirectory(path, open_weights);
  if (!std::filesystem::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such model file or directory"));
  }
  if (absl::EndsWith(path, ".gguf")) return OpenGguf(path, open_weights);
  return absl::InvalidArgumentError(
      absl::StrCat(path,
                   ": unknown model format (expected a .gguf file or a Hugging Face directory with "
                   "config.json, *.safetensors and tokenizer.json)"));
}

namespace {

// Typed reads of optional GGUF tokenizer keys, with the file named in errors.
class GgufTokenizerKeys {
 public:
  explicit GgufTokenizerKeys(const model::GgufFile& gguf) : gguf_(gguf), md_(gguf.metadata()) {}

  absl::Status Annotate(const absl::Status& s) const { return AnnotateStatus(s, gguf_.source()); }
  bool Has(const char* key) const { return md_.Has(key); }

  absl::StatusOr<int32_t> Id(const char* key) const {
    if (!md_.Has(key)) return -1;
    absl::StatusOr<int64_t> v = md_.GetInt(key);
    if (!v.ok()) return Annotate(v.status());
    return static_cast<int32_t>(*v);
  }
  absl::StatusOr<bool> Bool(const char* key, bool fallback) const {
    if (!md_.Has(key)) return fallback;
    absl::StatusOr<bool> v = md_.GetBool(key);
    if (!v.ok()) return Annotate(v.status());
    return *v;
  }
  absl::StatusOr<std::vector<std::string>> Strings(const char* key) const {
    absl::StatusOr<std::vector<std::string>> v = md_.GetStringArray(key);
    if (!v.ok()) return Annotate(v.status());
    return v;
  }
  absl::StatusOr<std::vector<int32_t>> Ints(const char* key) const {
    if (!md_.Has(key)) return std::vector<int32_t>();
    absl::StatusOr<std::vector<int64_t>> v = md_.GetIntArray(key);
    if (!v.ok()) return Annotate(v.status());
    return std::vector<int32_t>(v->begin(), v->end());
  }
  absl::StatusOr<std::vector<float>> Floats(const char* key) const {
    if (!md_.Has(key)) return std::vector<float>();
    absl::StatusOr<std::vector<float>> v = md_.GetFloatArray(key);
    if (!v.ok()) return Annotate(v.status());
    return v;
  }
  absl::StatusOr<std::string> String(const char* key, const char* fallback) const {
    if (!md_.Has(key)) return std::string(fallback);
    absl::StatusOr<std::string> v = md_.GetString(key);
    if (!v.ok()) return Annotate(v.status());
    return v;
  }

 private:
  const model::GgufFile& gguf_;
  const model::GgufMetadata& md_;
};

absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> SpmFromGguf(const GgufTokenizerKeys& keys) {
  tokenizer::SpmVocab vocab;
  SS_ASSIGN_OR_RETURN(vocab.pieces, keys.Strings("tokenizer.ggml.tokens"));
  SS_ASSIGN_OR_RETURN(vocab.scores, keys.Floats("tokenizer.ggml.scores"));
  SS_ASSIGN_OR_RETURN(vocab.token_types, keys.Ints("tokenizer.ggml.token_type"));
  SS_ASSIGN_OR_RETURN(vocab.bos_id, keys.Id("tokenizer.ggml.bos_token_id"));
  SS_ASSIGN_OR_RETURN(vocab.eos_id, keys.Id("tokenizer.ggml.eos_token_id"));
  SS_ASSIGN_OR_RETURN(vocab.unk_id, keys.Id("tokenizer.ggml.unknown_token_id"));
  SS_ASSIGN_OR_RETURN(vocab.add_bos, keys.Bool("tokenizer.ggml.add_bos_token", true));
  SS_ASSIGN_OR_RETURN(vocab.add_space_prefix, keys.Bool("tokenizer.ggml.add_space_prefix", true));
  auto tok = tokenizer::SpmTokenizer::Create(std::move(vocab));
  if (!tok.ok()) return keys.Annotate(tok.status());
  return std::unique_ptr<tokenizer::Tokenizer>(std::move(*tok));
}

absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> ByteLevelFromGguf(
    const GgufTokenizerKeys& keys) {
  tokenizer::BpeVocab vocab;
  SS_ASSIGN_OR_RETURN(vocab.tokens, keys.Strings("tokenizer.ggml.tokens"));
  SS_ASSIGN_OR_RETURN(std::vector<std::string> merges, keys.Strings("tokenizer.ggml.merges"));
  for (const std::string& m : merges) {  // GGUF stores each merge as "left right"
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos) {
      return keys.Annotate(absl::InvalidArgumentError(
          absl::StrCat("tokenizer.ggml.merges entry '", m, "' has no space")));
    }
    vocab.merges.emplace_back(m.substr(0, space), m.substr(space + 1));
  }
  SS_ASSIGN_OR_RETURN(vocab.token_types, keys.Ints("tokenizer.ggml.token_type"));
  SS_ASSIGN_OR_RETURN(vocab.bos_id, keys.Id("tokenizer.ggml.bos_token_id"));
  SS_ASSIGN_OR_RETURN(vocab.eos_id, keys.Id("tokenizer.ggml.eos_token_id"));
  SS_ASSIGN_OR_RETURN(vocab.add_bos, keys.Bool("tokenizer.ggml.add_bos_token", false));
  SS_ASSIGN_OR_RETURN(std::string pre, keys.String("tokenizer.ggml.pre", "default"));
  absl::StatusOr<std::string> pattern = tokenizer::PatternForGgufPre(pre);
  if (!pattern.ok()) return keys.Annotate(pattern.status());
  vocab.pre_patterns.push_back(*pattern);
  auto tok = tokenizer::ByteLevelBpeTokenizer::Create(std::move(vocab));
  if (!tok.ok()) return keys.Annotate(tok.status());
  return std::unique_ptr<tokenizer::Tokenizer>(std::move(*tok));
}

}  // namespace

absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> TokenizerFromGguf(
    const model::GgufFile& gguf) {
  GgufTokenizerKeys keys(gguf);
  SS_ASSIGN_OR_RETURN(std::string kind, keys.String("tokenizer.ggml.model", ""));
  if (kind == "llama") return SpmFromGguf(keys);
  if (kind == "gpt2") return ByteLevelFromGguf(keys);
  return absl::UnimplementedError(absl::StrCat(gguf.source(), ": GGUF tokenizer model '", kind,
                                               "' is not supported (llama or gpt2)"));
}

}  // namespace sparseserve::engine
