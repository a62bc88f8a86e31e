// TokenizerFromGguf: a byte-level ("gpt2") vocabulary stored in GGUF metadata encodes exactly as
// the same vocabulary loaded from tokenizer.json (and as Hugging Face `tokenizers` did).
#include <fstream>

#include "common/engine/model_source.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/unit/model_file_writers.h"

namespace sparseserve::engine {
namespace {

using namespace sparseserve::model::testing;  // NOLINT(google-build-using-namespace): test writers

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(GgufTokenizerTest, Gpt2VocabularyMatchesTokenizerJsonGolden) {
  const std::string dir = std::string(SPARSESERVE_TEST_DATA_DIR) + "/tokenizers";
  const nlohmann::json tj = ReadJson(dir + "/gpt2_style.json");
  std::vector<std::string> tokens(tj["model"]["vocab"].size());
  for (const auto& [piece, id] : tj["model"]["vocab"].items()) tokens[id.get<size_t>()] = piece;
  std::vector<int32_t> types(tokens.size(), 1);
  for (const auto& added : tj["added_tokens"]) types[added["id"].get<size_t>()] = 3;  // control
  std::vector<std::string> merges;
  for (const auto& m : tj["model"]["merges"])
    merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  const std::string bytes = BuildGguf(
      {KvString("general.architecture", "llama"), KvString("tokenizer.ggml.model", "gpt2"),
       KvString("tokenizer.ggml.pre", "gpt-2"), KvStringArray("tokenizer.ggml.tokens", tokens),
       KvStringArray("tokenizer.ggml.merges", merges),
       KvArray<int32_t>("tokenizer.ggml.token_type", 5, types),
       KvScalar<uint32_t>("tokenizer.ggml.eos_token_id", 4, 0)},
      {});
  const std::string tmp = MakeTempDir("gguf_tok");
  WriteWholeFile(tmp + "/tok.gguf", bytes);
  auto gguf = model::GgufFile::Open(tmp + "/tok.gguf");
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto tok = TokenizerFromGguf(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const nlohmann::json golden = ReadJson(dir + "/tokenizers_golden.json")["gpt2_style.json"];
  for (const auto& c : golden) {
    auto ids = (*tok)->Encode(c["text"].get<std::string>(), false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c["ids_no_special"].get<std::vector<int32_t>>()) << c["text"];
    // Decode drops control tokens such as <|endoftext|>; everything else round-trips.
    std::string text = c["text"];
    for (size_t at; (at = text.find("<|endoftext|>")) != std::string::npos;) text.erase(at, 13);
    EXPECT_EQ((*tok)->Decode(*ids), text);
  }
  EXPECT_TRUE((*tok)->IsEndOfGeneration(0));
}

TEST(GgufTokenizerTest, UnknownTokenizerModelIsUnimplemented) {
  const std::string tmp = MakeTempDir("gguf_tok_bad");
  WriteWholeFile(tmp + "/t.gguf", BuildGguf({KvString("tokenizer.ggml.model", "rwkv")}, {}));
  auto gguf = model::GgufFile::Open(tmp + "/t.gguf");
  ASSERT_TRUE(gguf.ok());
  auto tok = TokenizerFromGguf(**gguf);
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(tok.status().message().find("rwkv"), std::string::npos);
}

}  // namespace
}  // namespace sparseserve::engine
