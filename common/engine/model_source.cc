#include "common/engine/model_source.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/core/mapped_file.h"
#include "common/core/status.h"
#include "common/model/sharded_safetensors.h"
#include "common/tokenizer/spm_tokenizer.h"
#include "common/tokenizer/tokenizer_json.h"

namespace sparseserve::engine {
namespace {

absl::StatusOr<ModelSource> OpenGguf(const std::string& path) {
  ModelSource src;
  src.path = path;
  src.naming = model::WeightNaming::kGguf;
  SS_ASSIGN_OR_RETURN(std::unique_ptr<model::GgufFile> gguf, model::GgufFile::Open(path));
  SS_ASSIGN_OR_RETURN(src.config, model::ModelConfigFromGguf(*gguf));
  SS_ASSIGN_OR_RETURN(src.tokenizer, TokenizerFromGguf(*gguf));
  src.weights = std::move(gguf);
  return src;
}

absl::StatusOr<ModelSource> OpenHfDirectory(const std::string& dir) {
  ModelSource src;
  src.path = dir;
  src.naming = model::WeightNaming::kHuggingFace;
  const std::string config_path = dir + "/config.json";
  SS_ASSIGN_OR_RETURN(std::string config_text, core::ReadFileToString(config_path));
  SS_ASSIGN_OR_RETURN(src.config, model::ParseHfConfig(config_text, config_path));
  SS_ASSIGN_OR_RETURN(src.weights, model::OpenSafetensorsDir(dir));
  SS_ASSIGN_OR_RETURN(src.tokenizer, tokenizer::LoadTokenizerJson(dir + "/tokenizer.json"));
  return src;
}

}  // namespace

absl::StatusOr<ModelSource> OpenModelSource(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return OpenHfDirectory(path);
  if (!std::filesystem::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such model file or directory"));
  }
  if (absl::EndsWith(path, ".gguf")) return OpenGguf(path);
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": unknown model format (expected a .gguf file or a Hugging Face directory with "
            "config.json, *.safetensors and tokenizer.json)"));
}

absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> TokenizerFromGguf(
    const model::GgufFile& gguf) {
  const model::GgufMetadata& md = gguf.metadata();
  auto ctx = [&](const absl::Status& s) { return AnnotateStatus(s, gguf.source()); };
  absl::StatusOr<std::string> kind = md.GetString("tokenizer.ggml.model");
  if (!kind.ok()) return ctx(kind.status());
  if (*kind != "llama") {
    return absl::UnimplementedError(absl::StrCat(gguf.source(), ": GGUF tokenizer model '", *kind,
                                                 "' is not supported yet (only 'llama')"));
  }
  tokenizer::SpmVocab vocab;
  absl::StatusOr<std::vector<std::string>> pieces = md.GetStringArray("tokenizer.ggml.tokens");
  if (!pieces.ok()) return ctx(pieces.status());
  vocab.pieces = std::move(*pieces);
  if (md.Has("tokenizer.ggml.scores")) {
    absl::StatusOr<std::vector<float>> scores = md.GetFloatArray("tokenizer.ggml.scores");
    if (!scores.ok()) return ctx(scores.status());
    vocab.scores = std::move(*scores);
  }
  if (md.Has("tokenizer.ggml.token_type")) {
    absl::StatusOr<std::vector<int64_t>> types = md.GetIntArray("tokenizer.ggml.token_type");
    if (!types.ok()) return ctx(types.status());
    vocab.token_types.assign(types->begin(), types->end());
  }
  auto id_or = [&](const char* key, int32_t fallback) -> absl::StatusOr<int32_t> {
    if (!md.Has(key)) return fallback;
    absl::StatusOr<int64_t> v = md.GetInt(key);
    if (!v.ok()) return ctx(v.status());
    return static_cast<int32_t>(*v);
  };
  SS_ASSIGN_OR_RETURN(vocab.bos_id, id_or("tokenizer.ggml.bos_token_id", -1));
  SS_ASSIGN_OR_RETURN(vocab.eos_id, id_or("tokenizer.ggml.eos_token_id", -1));
  SS_ASSIGN_OR_RETURN(vocab.unk_id, id_or("tokenizer.ggml.unknown_token_id", -1));
  if (md.Has("tokenizer.ggml.add_bos_token")) {
    absl::StatusOr<bool> b = md.GetBool("tokenizer.ggml.add_bos_token");
    if (!b.ok()) return ctx(b.status());
    vocab.add_bos = *b;
  }
  if (md.Has("tokenizer.ggml.add_space_prefix")) {
    absl::StatusOr<bool> b = md.GetBool("tokenizer.ggml.add_space_prefix");
    if (!b.ok()) return ctx(b.status());
    vocab.add_space_prefix = *b;
  }
  auto tok = tokenizer::SpmTokenizer::Create(std::move(vocab));
  if (!tok.ok()) return ctx(tok.status());
  return std::unique_ptr<tokenizer::Tokenizer>(std::move(*tok));
}

}  // namespace sparseserve::engine
