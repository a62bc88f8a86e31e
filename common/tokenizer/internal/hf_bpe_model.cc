#include "common/tokenizer/internal/hf_bpe_model.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/tokenizer/internal/vocab_names.h"

namespace sparseserve::tokenizer::internal {
namespace {

using Json = nlohmann::json;

constexpr int kMaxSequenceDepth = 8;

const Json* Field(const Json& node, absl::string_view key) {
  if (!node.is_object()) return nullptr;
  const auto it = node.find(static_cast<std::string>(key));
  return it == node.end() ? nullptr : &*it;
}

// An id field: an integer in [0, INT32_MAX).
absl::StatusOr<int32_t> IdValue(const Json& value, absl::string_view what) {
  if (!value.is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": id is not an integer"));
  }
  const bool negative = value.is_number_unsigned() ? false : value.get<int64_t>() < 0;
  const uint64_t id = negative ? 0 : value.get<uint64_t>();
  if (negative || id >= static_cast<uint64_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": id out of range"));
  }
  return static_cast<int32_t>(id);
}

absl::StatusOr<std::pair<std::string, std::string>> ParseMerge(const Json& merge, size_t rank) {
  if (merge.is_string()) {
    const std::string& text = merge.get_ref<const std::string&>();
    const size_t space = text.find(' ');
    if (space != std::string::npos && text.find(' ', space + 1) == std::string::npos && space > 0 &&
        space + 1 < text.size()) {
      return std::make_pair(text.substr(0, space), text.substr(space + 1));
    }
  } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
             merge[1].is_string()) {
    return std::make_pair(merge[0].get<std::string>(), merge[1].get<std::string>());
  }
  return absl::InvalidArgumentError(
      absl::StrCat("model.merges[", rank, "] is not \"a b\" or [\"a\", \"b\"]"));
}

// Reads the vocab and added tokens into `model->tokens` / `token_types`.
absl::Status ParseTokens(const Json& root, HfBpeModel* model) {
  const Json* json_model = Field(root, "model");
  const Json* vocab = json_model == nullptr ? nullptr : Field(*json_model, "vocab");
  if (vocab == nullptr || !vocab->is_object()) {
    return absl::InvalidArgumentError("model.vocab missing or not an object");
  }
  struct Entry {
    std::string text;
    int32_t id;
    int32_t type;
  };
  std::vector<Entry> entries;
  entries.reserve(vocab->size());
  for (const auto& [text, value] : vocab->items()) {
    SS_ASSIGN_OR_RETURN(int32_t id, IdValue(value, absl::StrCat("model.vocab['", text, "']")));
    entries.push_back({text, id, kTokenNormal});
  }
  const size_t num_vocab = entries.size();
  if (const Json* added = Field(root, "added_tokens"); added != nullptr && !added->is_null()) {
    if (!added->is_array()) return absl::InvalidArgumentError("added_tokens is not an array");
    for (size_t i = 0; i < added->size(); ++i) {
      const Json& token = (*added)[i];
      const Json* id_field = Field(token, "id");
      const Json* content = Field(token, "content");
      if (id_field == nullptr || content == nullptr || !content->is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("added_tokens[", i, "] lacks an id or a string content"));
      }
      SS_ASSIGN_OR_RETURN(int32_t id, IdValue(*id_field, absl::StrCat("added_tokens[", i, "]")));
      const int32_t type = BoolField(token, "special", false) ? kTokenControl : kTokenUserDefined;
      entries.push_back({content->get<std::string>(), id, type});
    }
  }
  if (entries.empty()) return absl::InvalidArgumentError("model.vocab is empty");
  int32_t max_id = 0;
  for (const Entry& e : entries) max_id = std::max(max_id, e.id);
  if (static_cast<size_t>(max_id) >= 2 * entries.size() + 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("token ids too sparse: max id ", max_id, " for ", entries.size(), " tokens"));
  }
  model->tokens.assign(static_cast<size_t>(max_id) + 1, "");
  model->token_types.assign(static_cast<size_t>(max_id) + 1, kTokenUnused);
  std::vector<bool> seen(model->tokens.size(), false);
  for (size_t i = 0; i < entries.size(); ++i) {
    Entry& e = entries[i];
    // Added tokens may restate (or override) a vocab entry; they then set its type.
    if (seen[e.id] && i < num_vocab) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", e.id, " is used twice"));
    }
    seen[e.id] = true;
    model->tokens[e.id] = std::move(e.text);
    model->token_types[e.id] = e.type;
  }
  return absl::OkStatus();
}

int32_t FindToken(const HfBpeModel& model, absl::string_view text) {
  const auto it = std::find(model.tokens.begin(), model.tokens.end(), text);
  return it == model.tokens.end() ? -1 : static_cast<int32_t>(it - model.tokens.begin());
}

// BOS from a TemplateProcessing post-processor: a special token placed before $A.
absl::Status ParseTemplateBos(const Json& root, HfBpeModel* model) {
  const Json* processor = Field(root, "post_processor");
  if (processor == nullptr) return absl::OkStatus();
  SS_ASSIGN_OR_RETURN(std::vector<const Json*> processors, FlattenSequence(*processor));
  for (const Json* p : processors) {
    if (StringField(*p, "type") != "TemplateProcessing") continue;
    const Json* single = Field(*p, "single");
    if (single == nullptr || !single->is_array()) continue;
    for (const Json& piece : *single) {
      if (Field(piece, "Sequence") != nullptr) break;
      const Json* special = Field(piece, "SpecialToken");
      if (special == nullptr) continue;
      const std::string name = StringField(*special, "id");
      int32_t id = FindToken(*model, name);
      const Json* specials = Field(*p, "special_tokens");
      const Json* ids = specials == nullptr ? nullptr : Field(*specials, name);
      if (const Json* list = ids == nullptr ? nullptr : Field(*ids, "ids");
          list != nullptr && list->is_array() && list->size() == 1) {
        SS_ASSIGN_OR_RETURN(id, IdValue((*list)[0], "post_processor special token"));
      }
      if (id < 0 || static_cast<size_t>(id) >= model->tokens.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("post_processor names unknown token '", name, "'"));
      }
      model->bos_id = id;
      model->template_bos = true;
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::Status Flatten(const Json& node, int depth, std::vector<const Json*>* out) {
  if (node.is_null()) return absl::OkStatus();
  if (depth > kMaxSequenceDepth) return absl::InvalidArgumentError("Sequence nested too deeply");
  out->push_back(&node);
  for (absl::string_view key : {"pretokenizers", "normalizers", "decoders", "processors"}) {
    const Json* children = Field(node, key);
    if (children == nullptr || !children->is_array()) continue;
    for (const Json& child : *children) SS_RETURN_IF_ERROR(Flatten(child, depth + 1, out));
  }
  return absl::OkStatus();
}

}  // namespace

std::string StringField(const Json& node, absl::string_view key, absl::string_view fallback) {
  const Json* field = Field(node, key);
  if (field == nullptr || !field->is_string()) return static_cast<std::string>(fallback);
  return field->get<std::string>();
}

bool BoolField(const Json& node, absl::string_view key, bool fallback) {
  const Json* field = Field(node, key);
  return field != nullptr && field->is_boolean() ? field->get<bool>() : fallback;
}

absl::StatusOr<std::vector<const Json*>> FlattenSequence(const Json& node) {
  std::vector<const Json*> out;
  SS_RETURN_IF_ERROR(Flatten(node, 0, &out));
  return out;
}

absl::StatusOr<HfBpeModel> ParseHfBpeModel(const Json& root) {
  HfBpeModel model;
  SS_RETURN_IF_ERROR(ParseTokens(root, &model));
  const Json& json_model = *Field(root, "model");
  if (const Json* merges = Field(json_model, "merges"); merges != nullptr) {
    if (!merges->is_array()) return absl::InvalidArgumentError("model.merges is not an array");
    model.merges.reserve(merges->size());
    for (size_t rank = 0; rank < merges->size(); ++rank) {
      SS_ASSIGN_OR_RETURN(auto merge, ParseMerge((*merges)[rank], rank));
      model.merges.push_back(std::move(merge));
    }
  }
  const std::string unk = StringField(json_model, "unk_token");
  if (!unk.empty()) model.unk_id = FindToken(model, unk);
  model.byte_fallback = BoolField(json_model, "byte_fallback", false);
  model.ignore_merges = BoolField(json_model, "ignore_merges", false);
  SS_RETURN_IF_ERROR(ParseTemplateBos(root, &model));
  return model;
}

}  // namespace sparseserve::tokenizer::internal
