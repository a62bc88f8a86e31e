// Golden ids produced by Hugging Face `tokenizers` for the tiny trained tokenizers in
// tests/data (see tools/make_tiny_hf.py): GPT-2, Llama-3 and Qwen2 style byte-level BPE and a
// Llama-2 style SentencePiece BPE.
#include <fstream>
#include <sstream>

#include "common/tokenizer/tokenizer_json.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace sparseserve::tokenizer {
namespace {

using Json = nlohmann::json;

std::string DataPath(const std::string& relative) {
  return std::string(SPARSESERVE_TEST_DATA_DIR) + "/" + relative;
}

Json ReadJson(const std::string& path) {
  std::ifstream file(path);
  std::stringstream buffer;
  buffer << file.rdbuf();
  return Json::parse(buffer.str(), nullptr, /*allow_exceptions=*/false);
}

TEST(TokenizerHfGoldenTest, MatchesHuggingFaceIds) {
  const Json golden = ReadJson(DataPath("tokenizers/tokenizers_golden.json"));
  if (golden.is_discarded()) GTEST_SKIP() << "tests/data/tokenizers/tokenizers_golden.json missing";
  ASSERT_TRUE(golden.is_object());
  ASSERT_GE(golden.size(), 4u);
  for (const auto& [file, cases] : golden.items()) {
    SCOPED_TRACE(file);
    auto tokenizer = LoadTokenizerJson(DataPath("tokenizers/" + file));
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    for (const Json& c : cases) {
      const std::string text = c["text"].get<std::string>();
      SCOPED_TRACE(text);
      auto ids = (*tokenizer)->Encode(text, /*add_special=*/true);
      ASSERT_TRUE(ids.ok()) << ids.status();
      EXPECT_EQ(*ids, c["ids"].get<std::vector<int32_t>>());
      auto plain = (*tokenizer)->Encode(text, /*add_special=*/false);
      ASSERT_TRUE(plain.ok()) << plain.status();
      EXPECT_EQ(*plain, c["ids_no_special"].get<std::vector<int32_t>>());
      // Decoding drops special tokens, so only texts without them round-trip.
      if (text.find("</s>") == std::string::npos) {
        EXPECT_EQ((*tokenizer)->Decode(*ids), text);
      }
    }
  }
}

}  // namespace
}  // namespace sparseserve::tokenizer
