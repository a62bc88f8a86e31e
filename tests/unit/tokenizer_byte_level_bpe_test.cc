#include "common/tokenizer/byte_level_bpe_tokenizer.h"

#include "common/tokenizer/streaming_decoder.h"
#include "common/tokenizer/tokenizer_json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace sparseserve::tokenizer {
namespace {

using ::testing::ElementsAre;
using Json = nlohmann::json;

// GPT-2's byte -> unicode alphabet, written independently of the library's table.
std::string ByteSymbol(int byte) {
  const bool printable =
      (byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || (byte >= 174 && byte <= 255);
  int codepoint = byte;
  if (!printable) {
    int extra = 0;
    for (int b = 0; b < byte; ++b) {
      if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) ++extra;
    }
    codepoint = 256 + extra;
  }
  std::string out;
  if (codepoint < 0x80) {
    out.push_back(static_cast<char>(codepoint));
  } else {
    out.push_back(static_cast<char>(0xC0 | (codepoint >> 6)));
    out.push_back(static_cast<char>(0x80 | (codepoint & 0x3F)));
  }
  return out;
}

// ids 0..255: the byte symbols in byte order (so a lone byte's id is its value); then merges.
constexpr int32_t kT = 256, kHe = 257, kThe = 258, k12 = 259, k123 = 260, kIn = 261;
constexpr int32_t kEndOfText = 262, kImEnd = 263, kThink = 264, kBeginOfText = 265;

Json GptLikeTokenizerJson() {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteSymbol(b)] = b;
  vocab["\xC4\xA0t"] = kT;  // "Ġt"
  vocab["he"] = kHe;
  vocab["\xC4\xA0the"] = kThe;
  vocab["12"] = k12;
  vocab["123"] = k123;
  vocab["in"] = kIn;
  Json root;
  root["version"] = "1.0";
  root["added_tokens"] = Json::array({
      {{"id", kEndOfText}, {"content", "<|endoftext|>"}, {"special", true}},
      {{"id", kImEnd}, {"content", "<|im_end|>"}, {"special", true}},
      {{"id", kThink}, {"content", "<think>"}, {"special", false}},
  });
  root["normalizer"] = nullptr;
  root["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  root["post_processor"] = nullptr;
  root["decoder"] = {{"type", "ByteLevel"}};
  root["model"] = {{"type", "BPE"},
                   {"vocab", vocab},
                   // String and pair forms mixed.
                   {"merges", Json::array({"\xC4\xA0 t", "h e", Json::array({"\xC4\xA0t", "he"}),
                                           "1 2", "12 3", "i n"})}};
  return root;
}

// Llama-3 layout: Split(regex) + ByteLevel without regex, BOS from a TemplateProcessing.
Json Llama3LikeTokenizerJson() {
  Json root = GptLikeTokenizerJson();
  root["added_tokens"].push_back(
      {{"id", kBeginOfText}, {"content", "<|begin_of_text|>"}, {"special", true}});
  root["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       Json::array({{{"type", "Split"},
                     {"pattern", {{"Regex", static_cast<std::string>(kLlama3Pattern)}}},
                     {"behavior", "Isolated"},
                     {"invert", false}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  root["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       Json::array(
           {{{"type", "ByteLevel"}},
            {{"type", "TemplateProcessing"},
             {"single", Json::array({{{"SpecialToken", {{"id", "<|begin_of_text|>"}}}},
                                     {{"Sequence", {{"id", "A"}}}}})},
             {"special_tokens",
              {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {kBeginOfText}}}}}}}})}};
  return root;
}

std::unique_ptr<Tokenizer> Load(const Json& root) {
  auto tokenizer = TokenizerFromTokenizerJsonText(root.dump(), "test.json");
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

std::vector<int32_t> EncodeOrDie(const Tokenizer& tokenizer, absl::string_view text,
                                 bool add_special = false) {
  auto ids = tokenizer.Encode(text, add_special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

TEST(ByteLevelBpeTokenizerTest, MergesByRank) {
  auto tokenizer = Load(GptLikeTokenizerJson());
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->vocab_size(), 265);
  EXPECT_THAT(EncodeOrDie(*tokenizer, "the the"), ElementsAre('t', kHe, kThe));
  EXPECT_THAT(EncodeOrDie(*tokenizer, "in the"), ElementsAre(kIn, kThe));
  EXPECT_THAT(EncodeOrDie(*tokenizer, "1123"), ElementsAre('1', k123));
  EXPECT_THAT(EncodeOrDie(*tokenizer, "123123"), ElementsAre(k123, k123));
  EXPECT_EQ(tokenizer->Decode({kThe, kIn}), " thein");
  EXPECT_FALSE(tokenizer->strips_leading_space());
}

TEST(ByteLevelBpeTokenizerTest, WhitespaceDigitsAndApostrophes) {
  auto tokenizer = Load(GptLikeTokenizerJson());
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_THAT(EncodeOrDie(*tokenizer, "a  b"), ElementsAre('a', ' ', ' ', 'b'));
  EXPECT_THAT(EncodeOrDie(*tokenizer, "\n\n  x"), ElementsAre('\n', '\n', ' ', ' ', 'x'));
  EXPECT_THAT(EncodeOrDie(*tokenizer, "don't"), ElementsAre('d', 'o', 'n', '\'', 't'));
  EXPECT_THAT(EncodeOrDie(*tokenizer, " 12345"), ElementsAre(' ', k123, '4', '5'));
  const auto* bpe = dynamic_cast<const ByteLevelBpeTokenizer*>(tokenizer.get());
  ASSERT_NE(bpe, nullptr);
  EXPECT_THAT(*bpe->PreTokenize("I'LL don't  go 12345"),
              ElementsAre("I", "'", "LL", " don", "'t", " ", " go", " 12345"));
}

TEST(ByteLevelBpeTokenizerTest, NonAsciiAndEmojiRoundTrip) {
  auto tokenizer = Load(GptLikeTokenizerJson());
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_THAT(EncodeOrDie(*tokenizer, "h\xC3\xA9llo"), ElementsAre('h', 0xC3, 0xA9, 'l', 'l', 'o'));
  for (absl::string_view text :
       {"h\xC3\xA9llo w\xC3\xB6rld", "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
        "\xF0\x9F\x99\x82\xF0\x9F\x9A\x80", "\t\n  spaces  ", "12345", " the\r\n\r\nend "}) {
    EXPECT_EQ(tokenizer->Decode(EncodeOrDie(*tokenizer, text)), text);
  }
}

TEST(ByteLevelBpeTokenizerTest, AddedTokensMatchedLiterally) {
  auto tokenizer = Load(GptLikeTokenizerJson());
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<int32_t> ids = EncodeOrDie(*tokenizer, "hi<|im_end|><think>the<|endoftext|>");
  EXPECT_THAT(ids, ElementsAre('h', 'i', kImEnd, kThink, 't', kHe, kEndOfText));
  EXPECT_EQ(tokenizer->Decode(ids), "hi<think>the");
  EXPECT_EQ(tokenizer->TokenBytes(kImEnd, /*with_special=*/true), "<|im_end|>");
  EXPECT_TRUE(tokenizer->IsEndOfGeneration(kImEnd));
  EXPECT_TRUE(tokenizer->IsEndOfGeneration(kEndOfText));
  EXPECT_FALSE(tokenizer->IsEndOfGeneration(kThink));
  // No post-processor template (Qwen2 style): nothing is prepended.
  EXPECT_EQ(tokenizer->bos_id(), -1);
  EXPECT_THAT(EncodeOrDie(*tokenizer, "in", /*add_special=*/true), ElementsAre(kIn));
}

TEST(ByteLevelBpeTokenizerTest, Llama3TemplateAddsBeginOfText) {
  auto tokenizer = Load(Llama3LikeTokenizerJson());
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->bos_id(), kBeginOfText);
  EXPECT_THAT(EncodeOrDie(*tokenizer, "in the", /*add_special=*/true),
              ElementsAre(kBeginOfText, kIn, kThe));
  EXPECT_THAT(EncodeOrDie(*tokenizer, "in the", /*add_special=*/false), ElementsAre(kIn, kThe));
  // Llama-3 splits digits in groups of at most three: "112" "3".
  EXPECT_THAT(EncodeOrDie(*tokenizer, "1123"), ElementsAre('1', k12, '3'));
  EXPECT_EQ(tokenizer->Decode(EncodeOrDie(*tokenizer, "x 1123", true)), "x 1123");
}

TEST(ByteLevelBpeTokenizerTest, Llama3PatternSplitsDigitsInThrees) {
  auto tokenizer = Load(Llama3LikeTokenizerJson());
  ASSERT_NE(tokenizer, nullptr);
  const auto* bpe = dynamic_cast<const ByteLevelBpeTokenizer*>(tokenizer.get());
  ASSERT_NE(bpe, nullptr);
  EXPECT_THAT(*bpe->PreTokenize("1234567"), ElementsAre("123", "456", "7"));
  EXPECT_THAT(*bpe->PreTokenize("abc 12345 x"), ElementsAre("abc", " ", "123", "45", " x"));
  EXPECT_THAT(*bpe->PreTokenize("I'LL go\n\n"), ElementsAre("I", "'LL", " go", "\n\n"));
  EXPECT_EQ(bpe->PreTokenize("\xC3(").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PretokenizerTest, KnownPatterns) {
  auto qwen = Pretokenizer::Create({static_cast<std::string>(kQwen2Pattern)});
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_THAT(*(*qwen)->Split("x12"), ElementsAre("x", "1", "2"));
  auto gpt2 = Pretokenizer::Create({static_cast<std::string>(kGpt2Pattern)});
  ASSERT_TRUE(gpt2.ok());
  EXPECT_THAT(*(*gpt2)->Split("x12 \xE6\x97\xA5\xE6\x9C\xAC"),
              ElementsAre("x", "12", " \xE6\x97\xA5\xE6\x9C\xAC"));
  // Gaps between matches are kept as words (Split "Isolated").
  auto commas = Pretokenizer::Create({","});
  ASSERT_TRUE(commas.ok());
  EXPECT_THAT(*(*commas)->Split("a,,b"), ElementsAre("a", ",", ",", "b"));
  EXPECT_EQ(Pretokenizer::Create({"("}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*PatternForGgufPre("llama-bpe"), kLlama3Pattern);
  EXPECT_EQ(PatternForGgufPre("unknown-pre").status().code(), absl::StatusCode::kUnimplemented);
}

TEST(ByteLevelBpeTokenizerTest, StreamingDecoderHoldsBackSplitEmoji) {
  auto tokenizer = Load(GptLikeTokenizerJson());
  ASSERT_NE(tokenizer, nullptr);
  StreamingDecoder decoder(*tokenizer);
  EXPECT_EQ(decoder.Push(0xF0), "");
  EXPECT_EQ(decoder.Push(0x9F), "");
  EXPECT_EQ(decoder.Push(0x99), "");
  EXPECT_EQ(decoder.Push(0x82), "\xF0\x9F\x99\x82");
  EXPECT_EQ(decoder.Push(kThe), " the");
  EXPECT_EQ(decoder.Flush(), "");
}

TEST(ByteLevelBpeTokenizerTest, BpeVocabFactory) {
  BpeVocab vocab;
  for (int b = 0; b < 256; ++b) vocab.tokens.push_back(ByteSymbol(b));
  vocab.tokens.push_back("he");
  vocab.tokens.push_back("<|eot_id|>");
  vocab.token_types.assign(vocab.tokens.size(), 1);
  vocab.token_types.back() = 3;
  vocab.merges = {{"h", "e"}};
  vocab.pre_patterns = {static_cast<std::string>(kLlama3Pattern)};
  auto tokenizer = MakeByteLevelBpeTokenizer(vocab);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_THAT(EncodeOrDie(**tokenizer, "hehe<|eot_id|>"), ElementsAre(256, 256, 257));
  EXPECT_TRUE((*tokenizer)->IsEndOfGeneration(257));
  vocab.merges = {{"h", "x y"}};
  EXPECT_EQ(MakeByteLevelBpeTokenizer(vocab).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ByteLevelBpeTokenizerTest, MissingByteSymbolIsInvalidArgument) {
  Json root = GptLikeTokenizerJson();
  root["model"]["vocab"].erase("z");  // id 'z' becomes an unused gap
  auto tokenizer = Load(root);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->Encode("zoo", false).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(EncodeOrDie(*tokenizer, "he"), ElementsAre(kHe));
}

}  // namespace
}  // namespace sparseserve::tokenizer
