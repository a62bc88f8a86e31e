#include "common/engine/chat_template_source.h"

#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/core/mapped_file.h"
#include "common/core/status.h"
#include "common/model/gguf_file.h"
#include "nlohmann/json.hpp"

namespace sparseserve::engine {
namespace {

using Json = nlohmann::json;

constexpr char kGgufTemplateKey[] = "tokenizer.chat_template";

// What a model path provides: its template source (if any) and its special tokens.
struct ModelTemplateInfo {
  std::optional<std::string> source;
  std::string origin;
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
};

// A special token of tokenizer_config.json: a string, or an AddedToken object's "content".
std::optional<std::string> SpecialToken(const Json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    const auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return std::nullopt;
}

// tokenizer_config.json's "chat_template": a string, or named templates of which "default".
absl::StatusOr<std::optional<std::string>> ConfigTemplate(const Json& config,
                                                          const std::string& origin) {
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (!it->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": \"chat_template\" is neither a string nor a list"));
  }
  std::vector<std::string> names;
  for (const Json& entry : *it) {
    const auto name = entry.is_object() ? entry.find("name") : entry.end();
    const auto text = entry.is_object() ? entry.find("template") : entry.end();
    if (name == entry.end() || text == entry.end() || !name->is_string() || !text->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": \"chat_template\" list entries must be {\"name\", \"template\"} strings"));
    }
    if (name->get<std::string>() == "default") {
      return std::optional<std::string>(text->get<std::string>());
    }
    names.push_back(name->get<std::string>());
  }
  return absl::NotFoundError(absl::StrCat(origin, ": no \"default\" among the chat templates (",
                                          absl::StrJoin(names, ", "), ")"));
}

absl::StatusOr<ModelTemplateInfo> ReadHfDirectory(const std::string& dir) {
  ModelTemplateInfo info;
  std::error_code ec;
  const std::string config_path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  if (std::filesystem::exists(config_path, ec)) {
    SS_ASSIGN_OR_RETURN(const std::string text, core::ReadFileToString(config_path));
    const Json config = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(config_path, ": not a JSON object"));
    }
    info.bos_token = SpecialToken(config, "bos_token");
    info.eos_token = SpecialToken(config, "eos_token");
    SS_ASSIGN_OR_RETURN(info.source, ConfigTemplate(config, config_path));
    info.origin = config_path;
  }
  const std::string jinja_path = (std::filesystem::path(dir) / "chat_template.jinja").string();
  if (!info.source && std::filesystem::exists(jinja_path, ec)) {
    SS_ASSIGN_OR_RETURN(info.source, core::ReadFileToString(jinja_path));
    info.origin = jinja_path;
  }
  return info;
}

// The text of vocabulary entry `id_key` (a token id) of a GGUF file, if both are there.
std::optional<std::string> GgufToken(const model::GgufMetadata& metadata, const char* id_key) {
  const absl::StatusOr<int64_t> id = metadata.GetInt(id_key);
  const model::GgufValue* tokens = metadata.Find("tokenizer.ggml.tokens");
  if (!id.ok() || tokens == nullptr || *id < 0 ||
      static_cast<uint64_t>(*id) >= tokens->str_elems.size()) {
    return std::nullopt;
  }
  return tokens->str_elems[static_cast<size_t>(*id)];
}

absl::StatusOr<ModelTemplateInfo> ReadGguf(const std::string& path) {
  SS_ASSIGN_OR_RETURN(const std::unique_ptr<model::GgufFile> gguf, model::GgufFile::Open(path));
  const model::GgufMetadata& metadata = gguf->metadata();
  ModelTemplateInfo info;
  info.bos_token = GgufToken(metadata, "tokenizer.ggml.bos_token_id");
  info.eos_token = GgufToken(metadata, "tokenizer.ggml.eos_token_id");
  info.origin = absl::StrCat(path, ": ", kGgufTemplateKey);
  if (metadata.Has(kGgufTemplateKey)) {
    SS_ASSIGN_OR_RETURN(info.source, metadata.GetString(kGgufTemplateKey));
  }
  return info;
}

absl::StatusOr<ModelTemplateInfo> ReadModel(const std::string& model_path) {
  std::error_code ec;
  if (std::filesystem::is_directory(model_path, ec)) return ReadHfDirectory(model_path);
  if (absl::EndsWith(model_path, ".gguf") && std::filesystem::is_regular_file(model_path, ec)) {
    return ReadGguf(model_path);
  }
  return ModelTemplateInfo{};
}

}  // namespace

absl::StatusOr<LoadedChatTemplate> LoadChatTemplate(const std::string& model_path,
                                                    const std::string& template_file) {
  SS_ASSIGN_OR_RETURN(ModelTemplateInfo info, ReadModel(model_path));
  if (!template_file.empty()) {
    SS_ASSIGN_OR_RETURN(info.source, core::ReadFileToString(template_file));
    info.origin = template_file;
  }
  if (!info.source) {
    return absl::NotFoundError(absl::StrCat(
        model_path,
        ": the model has no chat template (no tokenizer_config.json \"chat_template\", "
        "chat_template.jinja or GGUF tokenizer.chat_template); pass --chat-template FILE"));
  }
  absl::StatusOr<tokenizer::ChatTemplate> parsed = tokenizer::ChatTemplate::Parse(*info.source);
  if (!parsed.ok()) {
    return AnnotateStatus(parsed.status(), absl::StrCat("chat template ", info.origin));
  }
  return LoadedChatTemplate{*std::move(parsed), std::move(info.origin), std::move(info.bos_token),
                            std::move(info.eos_token)};
}

}  // namespace sparseserve::engine
