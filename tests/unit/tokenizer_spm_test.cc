#include "common/tokenizer/spm_tokenizer.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/streaming_decoder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_model.h"

namespace sparseserve::tokenizer {
namespace {

using ::testing::ElementsAre;

// Reads llama2.c's tokenizer.bin: int32 max_token_length, then per token float32 score,
// int32 length, bytes. Returns false when the file is missing or truncated.
bool ReadLlama2cTokenizer(const std::string& path, SpmVocab* vocab) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return false;
  std::stringstream buffer;
  buffer << file.rdbuf();
  const std::string data = buffer.str();
  size_t pos = 4;
  while (pos < data.size()) {
    float score;
    int32_t length;
    if (pos + 8 > data.size()) return false;
    std::memcpy(&score, data.data() + pos, 4);
    std::memcpy(&length, data.data() + pos + 4, 4);
    pos += 8;
    if (length < 0 || pos + length > data.size()) return false;
    vocab->pieces.push_back(data.substr(pos, length));
    vocab->scores.push_back(score);
    pos += length;
  }
  for (size_t id = 0; id < vocab->pieces.size(); ++id) {
    vocab->token_types.push_back(id == 0 ? 2 : id <= 2 ? 3 : id <= 258 ? 6 : 1);
  }
  vocab->unk_id = 0;
  vocab->bos_id = 1;
  vocab->eos_id = 2;
  vocab->add_bos = true;
  vocab->add_space_prefix = true;
  return true;
}

class Stories260KTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = sparseserve::testing::FindTestModelFile("tok512.bin");
    SpmVocab vocab;
    if (!ReadLlama2cTokenizer(path, &vocab)) {
      GTEST_SKIP() << "stories260K tokenizer not found at " << path
                   << " (set SPARSESERVE_MODEL_MIRROR)";
    }
    ASSERT_EQ(vocab.pieces.size(), 512u);
    auto tokenizer = SpmTokenizer::Create(std::move(vocab));
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(*tokenizer);
  }
  std::unique_ptr<SpmTokenizer> tokenizer_;
};

// llama2.c run.c reference (README of models/stories260K): BOS, 4 prompt ids, 60 generated.
const std::vector<int32_t> kReferenceIds = {
    1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338,
    401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328,
    432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426, 338, 391, 266, 267, 337, 335,
    312, 432, 398, 312, 286, 267, 414, 270, 333, 415, 426, 13,  438, 310};
constexpr absl::string_view kReferenceText =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.\n"
    "Lily";

TEST_F(Stories260KTokenizerTest, EncodesPromptLikeLlama2c) {
  auto ids = tokenizer_->Encode("Once upon a time", /*add_special=*/true);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ElementsAre(1, 403, 407, 261, 378));
  auto no_bos = tokenizer_->Encode("Once upon a time", /*add_special=*/false);
  ASSERT_TRUE(no_bos.ok());
  EXPECT_THAT(*no_bos, ElementsAre(403, 407, 261, 378));
  EXPECT_FALSE(tokenizer_->uses_metaspace());
  EXPECT_TRUE(tokenizer_->strips_leading_space());
}

TEST_F(Stories260KTokenizerTest, DecodesReferenceGeneration) {
  ASSERT_EQ(kReferenceIds.size(), 65u);
  EXPECT_EQ(tokenizer_->Decode(kReferenceIds), kReferenceText);
  StreamingDecoder decoder(*tokenizer_);
  std::string streamed;
  for (int32_t id : kReferenceIds) streamed += decoder.Push(id);
  streamed += decoder.Flush();
  EXPECT_EQ(streamed, kReferenceText);
}

TEST_F(Stories260KTokenizerTest, SpecialIdsAndTokenBytes) {
  EXPECT_EQ(tokenizer_->vocab_size(), 512);
  EXPECT_EQ(tokenizer_->bos_id(), 1);
  EXPECT_THAT(tokenizer_->eos_ids(), ElementsAre(2));
  EXPECT_TRUE(tokenizer_->IsEndOfGeneration(2));
  EXPECT_FALSE(tokenizer_->IsEndOfGeneration(1));
  EXPECT_EQ(tokenizer_->TokenBytes(1), "");
  EXPECT_EQ(tokenizer_->TokenBytes(1, /*with_special=*/true), "\n<s>\n");
  EXPECT_EQ(tokenizer_->TokenBytes(13), "\n");
  EXPECT_EQ(tokenizer_->TokenBytes(3 + 0xF0), "\xF0");
  EXPECT_EQ(tokenizer_->TokenBytes(403), " Once");
  EXPECT_EQ(tokenizer_->TokenBytes(-1), "");
  EXPECT_EQ(tokenizer_->TokenBytes(512), "");
}

TEST_F(Stories260KTokenizerTest, RoundTripsTextThroughByteFallback) {
  for (absl::string_view text :
       {"h\xC3\xA9llo w\xC3\xB6rld", "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
        "\xF0\x9F\x99\x82\xF0\x9F\x9A\x80", "\t\n  spaces  ", "12345",
        "Once upon a time, there was a little girl."}) {
    auto ids = tokenizer_->Encode(text, /*add_special=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(tokenizer_->Decode(*ids), text);
  }
}

TEST_F(Stories260KTokenizerTest, EmojiUsesByteTokens) {
  auto ids = tokenizer_->Encode("\xF0\x9F\x99\x82", /*add_special=*/false);
  ASSERT_TRUE(ids.ok());
  // The dummy-prefix space, then the four UTF-8 bytes of U+1F642 as <0xXX> tokens.
  ASSERT_EQ(ids->size(), 5u);
  EXPECT_THAT(std::vector<int32_t>(ids->begin() + 1, ids->end()),
              ElementsAre(3 + 0xF0, 3 + 0x9F, 3 + 0x99, 3 + 0x82));
}

TEST_F(Stories260KTokenizerTest, EmptyTextIsBosOnly) {
  auto ids = tokenizer_->Encode("", /*add_special=*/true);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(1));
}

TEST_F(Stories260KTokenizerTest, RejectsInvalidUtf8) {
  auto ids = tokenizer_->Encode("ab\xC3(", /*add_special=*/true);
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(Stories260KTokenizerTest, LongPromptRoundTrips) {
  std::string text;
  while (text.size() < 400000) text += "Once upon a time, there was a little girl named Lily. ";
  auto ids = tokenizer_->Encode(text, /*add_special=*/true);
  ASSERT_TRUE(ids.ok());
  EXPECT_GT(ids->size(), 50000u);
  EXPECT_EQ(tokenizer_->Decode(*ids), text);
}

// A metaspace vocabulary (pieces written with '▁') built by hand.
SpmVocab MetaspaceVocab() {
  SpmVocab vocab;
  auto add = [&](std::string piece, float score, int32_t type) {
    vocab.pieces.push_back(std::move(piece));
    vocab.scores.push_back(score);
    vocab.token_types.push_back(type);
  };
  add("<unk>", 0, 2);
  add("<s>", 0, 3);
  add("</s>", 0, 3);
  add("<|im_end|>", 0, 3);
  add("\xE2\x96\x81", -10, 1);                                          // 4 '▁'
  for (char c : std::string("abhelo")) add(std::string(1, c), -20, 1);  // 5..10
  add("\xE2\x96\x81h", -1, 1);                                          // 11
  add("he", -2, 1);                                                     // 12
  add("\xE2\x96\x81he", -3, 1);                                         // 13
  add("ll", -4, 1);                                                     // 14
  add("\xE2\x96\x81hell", -5, 1);                                       // 15
  add("\xE2\x96\x81hello", -6, 1);                                      // 16
  add("ab", -7, 1);                                                     // 17
  vocab.unk_id = 0;
  vocab.bos_id = 1;
  vocab.eos_id = 2;
  return vocab;
}

TEST(SpmTokenizerTest, MergesByScoreWithMetaspace) {
  auto tokenizer = SpmTokenizer::Create(MetaspaceVocab());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_TRUE((*tokenizer)->uses_metaspace());
  auto ids = (*tokenizer)->Encode("hello ab", /*add_special=*/true);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(1, 16, 4, 17));
  EXPECT_EQ((*tokenizer)->Decode(*ids), "hello ab");
}

TEST(SpmTokenizerTest, MatchesSpecialTokensLiterally) {
  auto tokenizer = SpmTokenizer::Create(MetaspaceVocab());
  ASSERT_TRUE(tokenizer.ok());
  // Each text fragment after a literal token gets the dummy prefix, as in llama.cpp / HF.
  auto ids = (*tokenizer)->Encode("hello<|im_end|>ab</s>", /*add_special=*/false);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(16, 3, 4, 17, 2));
  EXPECT_TRUE((*tokenizer)->IsEndOfGeneration(2));
  EXPECT_TRUE((*tokenizer)->IsEndOfGeneration(3));  // <|im_end|> by name
  EXPECT_EQ((*tokenizer)->TokenBytes(3), "");
  EXPECT_EQ((*tokenizer)->TokenBytes(3, /*with_special=*/true), "<|im_end|>");
}

TEST(SpmTokenizerTest, UnknownCodepointWithoutByteTokensIsUnk) {
  auto tokenizer = SpmTokenizer::Create(MetaspaceVocab());
  ASSERT_TRUE(tokenizer.ok());
  auto ids = (*tokenizer)->Encode("a\xC3\xA9", /*add_special=*/false);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(4, 5, 0));  // one <unk> for the whole codepoint
}

TEST(SpmTokenizerTest, NoByteTokensNoUnkIsAnError) {
  SpmVocab vocab = MetaspaceVocab();
  vocab.unk_id = -1;
  auto tokenizer = SpmTokenizer::Create(std::move(vocab));
  ASSERT_TRUE(tokenizer.ok());
  EXPECT_EQ((*tokenizer)->Encode("z", false).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SpmTokenizerTest, TieBreaksLeftmost) {
  SpmVocab vocab;
  vocab.pieces = {"a", "aa"};
  vocab.scores = {0, -1};
  vocab.add_space_prefix = false;
  auto tokenizer = SpmTokenizer::Create(std::move(vocab));
  ASSERT_TRUE(tokenizer.ok());
  auto ids = (*tokenizer)->Encode("aaa", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(1, 0));
  EXPECT_FALSE((*tokenizer)->strips_leading_space());
}

TEST(SpmTokenizerTest, WithoutTokenTypesSpecialIdsAreControl) {
  SpmVocab vocab;
  vocab.pieces = {"<unk>", "<s>", "</s>", "<0x41>", " ", "b", " b"};
  vocab.scores = {0, 0, 0, 0, 0, 0, -1};
  vocab.unk_id = 0;
  vocab.bos_id = 1;
  vocab.eos_id = 2;
  auto tokenizer = SpmTokenizer::Create(std::move(vocab));
  ASSERT_TRUE(tokenizer.ok());
  auto ids = (*tokenizer)->Encode("b<s>A", /*add_special=*/true);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(1, 6, 1, 4, 3));  // "A" has no piece: byte token <0x41>
  EXPECT_EQ((*tokenizer)->TokenBytes(1), "");
  EXPECT_EQ((*tokenizer)->TokenBytes(0), "");
  EXPECT_EQ((*tokenizer)->TokenBytes(3), "A");
  // llama2.c rule: the piece after every BOS loses its leading space, mid-sequence too.
  EXPECT_EQ((*tokenizer)->Decode(*ids), "bA");
}

TEST(SpmTokenizerTest, RejectsInconsistentVocab) {
  SpmVocab empty;
  EXPECT_EQ(SpmTokenizer::Create(empty).status().code(), absl::StatusCode::kInvalidArgument);
  SpmVocab bad_scores = MetaspaceVocab();
  bad_scores.scores.pop_back();
  EXPECT_EQ(SpmTokenizer::Create(bad_scores).status().code(), absl::StatusCode::kInvalidArgument);
  SpmVocab bad_bos = MetaspaceVocab();
  bad_bos.bos_id = 1000;
  EXPECT_EQ(SpmTokenizer::Create(bad_bos).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sparseserve::tokenizer
