#include "common/tokenizer/tokenizer_json.h"

#include <fstream>

#include "common/tokenizer/spm_tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace sparseserve::tokenizer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

const std::string kMeta = "\xE2\x96\x81";  // '▁'

// Llama-2 style: BPE with byte_fallback, Prepend/Replace normalizer, <s> from the template.
Json Llama2LikeTokenizerJson() {
  Json vocab = Json::object();
  vocab["<unk>"] = 0;
  vocab["<s>"] = 1;
  vocab["</s>"] = 2;
  const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    vocab[std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">"] = 3 + b;
  }
  int32_t next = 259;
  for (const std::string& piece :
       {kMeta, std::string("h"), std::string("e"), std::string("l"), std::string("o"),
        std::string("w"), std::string("r"), std::string("d"), kMeta + "h", std::string("ll"),
        kMeta + "he", kMeta + "hell", kMeta + "hello", kMeta + "w", kMeta + "wor",
        std::string("or"), std::string("xyz")}) {
    vocab[piece] = next++;
  }
  Json root;
  root["added_tokens"] = Json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                      {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                      {{"id", 2}, {"content", "</s>"}, {"special", true}}});
  root["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       Json::array({{{"type", "Prepend"}, {"prepend", kMeta}},
                    {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}}})}};
  root["pre_tokenizer"] = nullptr;
  root["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", Json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  root["model"] = {
      {"type", "BPE"},
      {"unk_token", "<unk>"},
      {"byte_fallback", true},
      {"vocab", vocab},
      {"merges", Json::array({kMeta + " h", "l l", kMeta + "h e", kMeta + "he ll", kMeta + "hell o",
                              kMeta + " w", "o r", kMeta + "w or"})}};
  return root;
}

TEST(TokenizerJsonTest, LoadsLlama2StyleAsSpm) {
  auto tokenizer = TokenizerFromTokenizerJsonText(Llama2LikeTokenizerJson().dump(), "l2.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const auto* spm = dynamic_cast<const SpmTokenizer*>(tokenizer->get());
  ASSERT_NE(spm, nullptr);
  EXPECT_TRUE(spm->uses_metaspace());
  EXPECT_TRUE(spm->strips_leading_space());
  EXPECT_EQ(spm->bos_id(), 1);
  EXPECT_THAT(spm->eos_ids(), ElementsAre(2));
  // ids: ▁=259 h=260 e=261 l=262 o=263 w=264 r=265 d=266 ▁h=267 ll=268 ▁he=269 ▁hell=270
  //      ▁hello=271 ▁w=272 ▁wor=273 or=274 xyz=275
  auto ids = spm->Encode("hello world", /*add_special=*/true);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ElementsAre(1, 271, 273, 262, 266));
  EXPECT_EQ(spm->Decode(*ids), "hello world");
  // "xyz" is a piece no merge produces, so BPE never forms it: x and z fall back to bytes.
  auto xyz = spm->Encode("xyz", /*add_special=*/false);
  ASSERT_TRUE(xyz.ok());
  EXPECT_THAT(*xyz, ElementsAre(259, 3 + 'x', 3 + 'y', 3 + 'z'));
  EXPECT_EQ(spm->Decode(*xyz), "xyz");
  auto text = spm->Encode("h\xC3\xA9 </s>", /*add_special=*/false);
  ASSERT_TRUE(text.ok());
  EXPECT_THAT(*text, ElementsAre(267, 3 + 0xC3, 3 + 0xA9, 259, 2));
}

absl::StatusCode LoadCode(absl::string_view json) {
  return TokenizerFromTokenizerJsonText(json, "bad.json").status().code();
}

TEST(TokenizerJsonTest, RejectsMalformedInput) {
  const std::string good = Llama2LikeTokenizerJson().dump();
  EXPECT_EQ(LoadCode(""), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadCode(good.substr(0, good.size() / 2)), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadCode("[1, 2]"), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadCode(R"({"model": 3})"), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      LoadCode(R"({"model": {"type": "BPE", "vocab": []}, "decoder": {"type": "ByteLevel"}})"),
      absl::StatusCode::kInvalidArgument);
  auto status = TokenizerFromTokenizerJsonText("{\"model\": ", "truncated.json").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("truncated.json"));
}

TEST(TokenizerJsonTest, RejectsBadVocabAndMerges) {
  Json unknown_merge = Llama2LikeTokenizerJson();
  unknown_merge["model"]["merges"].push_back("q z");
  auto status = TokenizerFromTokenizerJsonText(unknown_merge.dump(), "merges.json").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("merges.json"));
  EXPECT_THAT(status.message(), HasSubstr("merges[8]"));

  Json malformed_merge = Llama2LikeTokenizerJson();
  malformed_merge["model"]["merges"].push_back("abc");
  EXPECT_EQ(LoadCode(malformed_merge.dump()), absl::StatusCode::kInvalidArgument);

  Json negative_id = Llama2LikeTokenizerJson();
  negative_id["model"]["vocab"]["neg"] = -5;
  EXPECT_EQ(LoadCode(negative_id.dump()), absl::StatusCode::kInvalidArgument);

  Json sparse_id = Llama2LikeTokenizerJson();
  sparse_id["model"]["vocab"]["far"] = 2000000000;
  EXPECT_EQ(LoadCode(sparse_id.dump()), absl::StatusCode::kInvalidArgument);

  Json duplicate_id = Llama2LikeTokenizerJson();
  duplicate_id["model"]["vocab"]["dup"] = 5;
  EXPECT_EQ(LoadCode(duplicate_id.dump()), absl::StatusCode::kInvalidArgument);

  Json string_id = Llama2LikeTokenizerJson();
  string_id["model"]["vocab"]["str"] = "7";
  EXPECT_EQ(LoadCode(string_id.dump()), absl::StatusCode::kInvalidArgument);
}

TEST(TokenizerJsonTest, UnsupportedKindsAreUnimplemented) {
  EXPECT_EQ(LoadCode(R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})"),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(LoadCode(R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})"),
            absl::StatusCode::kUnimplemented);
  // A plain BPE with neither byte-level nor SentencePiece conventions.
  EXPECT_EQ(LoadCode(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})"),
            absl::StatusCode::kUnimplemented);
  Json removed_split = Json::parse(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
      "decoder": {"type": "ByteLevel"},
      "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Removed"}})");
  EXPECT_EQ(LoadCode(removed_split.dump()), absl::StatusCode::kUnimplemented);
  Json bad_regex = removed_split;
  bad_regex["pre_tokenizer"]["behavior"] = "Isolated";
  bad_regex["pre_tokenizer"]["pattern"]["Regex"] = "(a";
  EXPECT_EQ(LoadCode(bad_regex.dump()), absl::StatusCode::kInvalidArgument);
}

TEST(TokenizerJsonTest, LoadsFromFile) {
  const std::string path = ::testing::TempDir() + "/tokenizer_json_test.json";
  {
    std::ofstream out(path);
    out << Llama2LikeTokenizerJson().dump(2);
  }
  auto tokenizer = LoadTokenizerJson(path);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->vocab_size(), 276);
  EXPECT_EQ(LoadTokenizerJson(path + ".missing").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace sparseserve::tokenizer
