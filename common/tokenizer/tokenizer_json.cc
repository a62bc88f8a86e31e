#include "common/tokenizer/tokenizer_json.h"

#include <cctype>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/core/logging.h"
#include "common/core/mapped_file.h"
#include "common/core/status.h"
#include "common/tokenizer/byte_level_bpe_tokenizer.h"
#include "common/tokenizer/internal/hf_bpe_model.h"
#include "common/tokenizer/internal/vocab_names.h"
#include "common/tokenizer/pretokenizer.h"
#include "common/tokenizer/spm_tokenizer.h"
#include "common/tokenizer/utf8.h"
#include "nlohmann/json.hpp"

namespace sparseserve::tokenizer {
namespace {

using internal::BoolField;
using internal::HfBpeModel;
using internal::StringField;
using Json = nlohmann::json;
using Nodes = std::vector<const Json*>;

constexpr absl::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 '▁'

absl::StatusOr<Nodes> FlattenField(const Json& root, absl::string_view key) {
  const auto it = root.find(static_cast<std::string>(key));
  if (it == root.end()) return Nodes{};
  return internal::FlattenSequence(*it);
}

bool HasType(const Nodes& nodes, absl::string_view type) {
  for (const Json* node : nodes) {
    if (StringField(*node, "type") == type) return true;
  }
  return false;
}

// Llama-2 style: Prepend("▁") normalizer or Metaspace pre-tokenizer adding the dummy prefix.
bool AddsDummyPrefix(const Nodes& normalizers, const Nodes& pre_tokenizers) {
  for (const Json* n : normalizers) {
    if (StringField(*n, "type") == "Prepend" && StringField(*n, "prepend") == kMetaspace) {
      return true;
    }
  }
  for (const Json* p : pre_tokenizers) {
    if (StringField(*p, "type") == "Metaspace" && BoolField(*p, "add_prefix_space", true) &&
        StringField(*p, "prepend_scheme", "always") != "never") {
      return true;
    }
  }
  return false;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> BuildSpm(const Json& root, HfBpeModel model,
                                                    bool add_space_prefix) {
  const size_t n = model.tokens.size();
  absl::flat_hash_map<absl::string_view, int32_t> ids;
  for (size_t id = 0; id < n; ++id) {
    if (model.token_types[id] == internal::kTokenNormal) ids.emplace(model.tokens[id], id);
  }
  SpmVocab vocab;
  vocab.scores.assign(n, 0.0f);
  std::vector<bool> produced(n, false);
  for (size_t rank = 0; rank < model.merges.size(); ++rank) {
    const auto& [left, right] = model.merges[rank];
    const auto result = ids.find(absl::StrCat(left, right));
    if (!ids.contains(left) || !ids.contains(right) || result == ids.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.merges[", rank, "] '", left, " ", right, "' names an unknown token"));
    }
    if (produced[result->second]) continue;  // the lowest rank gives the priority
    produced[result->second] = true;
    vocab.scores[result->second] = -static_cast<float>(rank);
  }
  vocab.token_types = model.token_types;
  for (size_t id = 0; id < n; ++id) {
    int32_t& type = vocab.token_types[id];
    if (type != internal::kTokenNormal) continue;
    const std::string& piece = model.tokens[id];
    if (model.byte_fallback && internal::ParseBytePiece(piece).has_value()) {
      type = internal::kTokenByte;
    } else if (!produced[id] && !piece.empty() && NextUtf8Unit(piece, 0).length < piece.size()) {
      // A multi-character piece no merge produces: Hugging Face BPE never forms it.
      type = internal::kTokenUnused;
    }
  }
  if (model.unk_id >= 0) vocab.token_types[model.unk_id] = internal::kTokenUnknown;
  vocab.unk_id = model.unk_id;
  const auto find = [&](absl::string_view text) -> int32_t {
    for (size_t id = 0; id < n; ++id) {
      if (model.tokens[id] == text) return static_cast<int32_t>(id);
    }
    return -1;
  };
  const auto post_processor = root.find("post_processor");
  const bool has_post_processor = post_processor != root.end() && !post_processor->is_null();
  vocab.bos_id = model.template_bos ? model.bos_id : find("<s>");
  vocab.add_bos = model.template_bos || (!has_post_processor && vocab.bos_id >= 0);
  vocab.eos_id = find("</s>");
  vocab.add_space_prefix = add_space_prefix;
  vocab.pieces = std::move(model.tokens);
  return MakeSpmTokenizer(std::move(vocab));
}

// Regex stages from the pre_tokenizer; sets `add_prefix_space` from a ByteLevel stage.
absl::StatusOr<std::vector<std::string>> PrePatterns(const Nodes& pre_tokenizers,
                                                     bool* add_prefix_space) {
  std::vector<std::string> patterns;
  for (const Json* p : pre_tokenizers) {
    const std::string type = StringField(*p, "type");
    if (type == "Sequence") continue;
    if (type == "ByteLevel") {
      *add_prefix_space = BoolField(*p, "add_prefix_space", true);
      if (BoolField(*p, "use_regex", true)) patterns.emplace_back(kGpt2Pattern);
    } else if (type == "Digits") {
      patterns.emplace_back(BoolField(*p, "individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
    } else if (type == "Split") {
      if (StringField(*p, "behavior") != "Isolated" || BoolField(*p, "invert", false)) {
        return absl::UnimplementedError("pre_tokenizer Split supports only Isolated, not inverted");
      }
      const auto pattern = p->find("pattern");
      if (pattern == p->end() || !pattern->is_object()) {
        return absl::InvalidArgumentError("pre_tokenizer Split without a pattern object");
      }
      const std::string regex = StringField(*pattern, "Regex");
      const std::string literal = StringField(*pattern, "String");
      if (!regex.empty()) {
        patterns.push_back(regex);
      } else if (!literal.empty()) {
        std::string quoted;  // backslash before every ASCII punctuation makes it literal
        for (char c : literal) {
          if (static_cast<unsigned char>(c) < 0x80 &&
              !std::isalnum(static_cast<unsigned char>(c))) {
            quoted.push_back('\\');
          }
          quoted.push_back(c);
        }
        patterns.push_back(quoted);
      } else {
        return absl::InvalidArgumentError("pre_tokenizer Split pattern is empty");
      }
    } else {
      return absl::UnimplementedError(absl::StrCat("pre_tokenizer type '", type, "'"));
    }
  }
  if (patterns.empty()) patterns.emplace_back(R"((?s).+)");  // the whole text is one word
  return patterns;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> BuildByteLevel(HfBpeModel model,
                                                          const Nodes& normalizers,
                                                          const Nodes& pre_tokenizers) {
  for (const Json* n : normalizers) {
    const std::string type = StringField(*n, "type");
    if (type == "Sequence") continue;
    if (type == "NFC") {
      SS_LOG_WARNING("tokenizer.json NFC normalizer is not applied (input assumed NFC)");
      continue;
    }
    return absl::UnimplementedError(absl::StrCat("normalizer type '", type, "'"));
  }
  BpeVocab vocab;
  SS_ASSIGN_OR_RETURN(vocab.pre_patterns, PrePatterns(pre_tokenizers, &vocab.add_prefix_space));
  vocab.tokens = std::move(model.tokens);
  vocab.merges = std::move(model.merges);
  vocab.token_types = std::move(model.token_types);
  vocab.bos_id = model.bos_id;
  vocab.add_bos = model.template_bos;
  vocab.ignore_merges = model.ignore_merges;
  return MakeByteLevelBpeTokenizer(std::move(vocab));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(const Json& root) {
  if (!root.is_object()) return absl::InvalidArgumentError("top level is not an object");
  const auto model_it = root.find("model");
  if (model_it == root.end() || !model_it->is_object()) {
    return absl::InvalidArgumentError("no \"model\" object");
  }
  const std::string type = StringField(*model_it, "type", "BPE");
  if (type != "BPE") {
    return absl::UnimplementedError(absl::StrCat("model type '", type, "' is not supported"));
  }
  SS_ASSIGN_OR_RETURN(Nodes normalizers, FlattenField(root, "normalizer"));
  SS_ASSIGN_OR_RETURN(Nodes pre_tokenizers, FlattenField(root, "pre_tokenizer"));
  SS_ASSIGN_OR_RETURN(Nodes decoders, FlattenField(root, "decoder"));
  SS_ASSIGN_OR_RETURN(HfBpeModel model, internal::ParseHfBpeModel(root));
  const bool spm_style = model.byte_fallback || HasType(pre_tokenizers, "Metaspace") ||
                         AddsDummyPrefix(normalizers, pre_tokenizers);
  if (spm_style) {
    return BuildSpm(root, std::move(model), AddsDummyPrefix(normalizers, pre_tokenizers));
  }
  if (HasType(pre_tokenizers, "ByteLevel") || HasType(decoders, "ByteLevel")) {
    return BuildByteLevel(std::move(model), normalizers, pre_tokenizers);
  }
  return absl::UnimplementedError(
      "BPE model is neither byte-level nor SentencePiece-style (byte_fallback / Metaspace)");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerJson(const std::string& path) {
  SS_ASSIGN_OR_RETURN(std::string text, core::ReadFileToString(path));
  return TokenizerFromTokenizerJsonText(text, path);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromTokenizerJsonText(
    absl::string_view json, absl::string_view source) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> result;
  try {
    const Json root = Json::parse(json.begin(), json.end());
    result = FromJson(root);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": malformed JSON: ", e.what()));
  } catch (const std::exception& e) {  // e.g. std::bad_alloc on absurd sizes
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", e.what()));
  }
  if (!result.ok()) return AnnotateStatus(result.status(), source);
  return result;
}

}  // namespace sparseserve::tokenizer
