#include "common/tokenizer/synthetic_tokenizer.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/internal/byte_unicode.h"
#include "nlohmann/json.hpp"

namespace sparseserve::tokenizer {
namespace {

// Keys sorted, not in insertion order: nlohmann's ordered_json finds keys linearly, which is
// quadratic over a 128K-entry vocabulary (and tokenizer.json readers do not care about order).
using Json = nlohmann::json;

constexpr const char* kBos = "<|begin_of_text|>";
constexpr const char* kEos = "<|end_of_text|>";

Json AddedToken(int id, const char* content) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

}  // namespace

absl::StatusOr<std::string> SyntheticTokenizerJson(int vocab_size) {
  if (vocab_size < 258 || vocab_size > (1 << 23)) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic tokenizer: vocab_size ", vocab_size, " outside [258, 2^23]"));
  }
  const int regular = vocab_size - 2;
  Json vocab = Json::object();
  Json merges = Json::array();
  for (int b = 0; b < 256; ++b) vocab[internal::ByteToUnicode(static_cast<uint8_t>(b))] = b;
  const std::string space = internal::ByteToUnicode(' ');
  int next = 256;
  auto add = [&](const std::string& left, const std::string& right) {
    vocab[left + right] = next++;
    merges.push_back(Json::array({left, right}));
  };
  // Words of length 1, 2, ... in alphabetical order; a word of length L is its prefix (made at
  // length L - 1, or a byte) plus its last letter.
  std::string word;
  for (int length = 1; next < regular; ++length) {
    word.assign(static_cast<size_t>(length), 'a');
    while (next < regular) {
      const std::string prefix = word.substr(0, word.size() - 1);
      const std::string last = word.substr(word.size() - 1);
      if (length >= 2) add(prefix, last);
      if (next < regular) add(length >= 2 ? space + prefix : space, last);
      // The next word of this length, "az" -> "ba"; done after "zz...z".
      int i = length - 1;
      while (i >= 0 && word[static_cast<size_t>(i)] == 'z') word[static_cast<size_t>(i--)] = 'a';
      if (i < 0) break;
      ++word[static_cast<size_t>(i)];
    }
  }
  const Json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", true}};
  Json bos_special = {
      {kBos, {{"id", kBos}, {"ids", Json::array({regular})}, {"tokens", Json::array({kBos})}}}};
  const Json root = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", Json::array({AddedToken(regular, kBos), AddedToken(regular + 1, kEos)})},
      {"normalizer", nullptr},
      {"pre_tokenizer", byte_level},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", Json::array({{{"SpecialToken", {{"id", kBos}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", Json::array({{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
        {"special_tokens", std::move(bos_special)}}},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", std::move(vocab)},
        {"merges", std::move(merges)}}}};
  return root.dump(1);
}

std::string SyntheticTokenizerConfigJson() {
  const Json config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                       {"bos_token", kBos},
                       {"eos_token", kEos},
                       {"model_max_length", 1 << 20},
                       {"clean_up_tokenization_spaces", false}};
  return config.dump(1);
}

}  // namespace sparseserve::tokenizer
