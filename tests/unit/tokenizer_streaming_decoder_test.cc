#include "common/tokenizer/streaming_decoder.h"

#include "common/tokenizer/spm_tokenizer.h"
#include "common/tokenizer/utf8.h"
#include "gtest/gtest.h"

namespace sparseserve::tokenizer {
namespace {

// Plain-space SPM vocabulary: 0 <unk>, 1 <s>, 2 </s>, 3..258 bytes, then pieces.
std::unique_ptr<Tokenizer> SmallSpm() {
  SpmVocab vocab;
  vocab.pieces = {"<unk>", "<s>", "</s>"};
  vocab.token_types = {2, 3, 3};
  const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    vocab.pieces.push_back(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
    vocab.token_types.push_back(6);
  }
  for (const char* piece : {" ", "a", "b", " a", " b", "ab"}) {  // 259..264
    vocab.pieces.push_back(piece);
    vocab.token_types.push_back(1);
  }
  vocab.scores.assign(vocab.pieces.size(), 0.0f);
  vocab.unk_id = 0;
  vocab.bos_id = 1;
  vocab.eos_id = 2;
  auto tokenizer = MakeSpmTokenizer(std::move(vocab));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return std::move(*tokenizer);
}

TEST(StreamingDecoderTest, EmitsEmojiOnlyWhenComplete) {
  auto tokenizer = SmallSpm();
  StreamingDecoder decoder(*tokenizer);
  EXPECT_EQ(decoder.Push(1), "");
  EXPECT_EQ(decoder.Push(3 + 0xF0), "");
  EXPECT_EQ(decoder.Push(3 + 0x9F), "");
  EXPECT_EQ(decoder.Push(3 + 0x9A), "");
  EXPECT_EQ(decoder.Push(3 + 0x80), "\xF0\x9F\x9A\x80");
  EXPECT_EQ(decoder.Flush(), "");
}

TEST(StreamingDecoderTest, StripsLeadingSpaceAfterBosOnly) {
  auto tokenizer = SmallSpm();
  StreamingDecoder decoder(*tokenizer);
  EXPECT_EQ(decoder.Push(1), "");
  EXPECT_EQ(decoder.Push(262), "a");   // " a" right after BOS
  EXPECT_EQ(decoder.Push(263), " b");  // later pieces keep their space
  EXPECT_EQ(decoder.Push(1), "");      // a new BOS starts a new sequence
  EXPECT_EQ(decoder.Push(263), "b");
  StreamingDecoder continuation(*tokenizer, /*at_sequence_start=*/false);
  EXPECT_EQ(continuation.Push(262), " a");
}

TEST(StreamingDecoderTest, ConcatenatedPushesEqualDecode) {
  auto tokenizer = SmallSpm();
  auto ids = tokenizer->Encode("ab \xC3\xA9\xF0\x9F\x99\x82 b a", /*add_special=*/true);
  ASSERT_TRUE(ids.ok());
  StreamingDecoder decoder(*tokenizer);
  std::string streamed;
  for (int32_t id : *ids) streamed += decoder.Push(id);
  streamed += decoder.Flush();
  EXPECT_EQ(streamed, tokenizer->Decode(*ids));
  EXPECT_EQ(streamed, "ab \xC3\xA9\xF0\x9F\x99\x82 b a");
}

TEST(StreamingDecoderTest, InvalidBytesBecomeReplacementCharacters) {
  auto tokenizer = SmallSpm();
  StreamingDecoder decoder(*tokenizer);
  EXPECT_EQ(decoder.Push(3 + 0xFF), "\xEF\xBF\xBD");  // never valid: emitted at once
  EXPECT_EQ(decoder.Push(3 + 0xE6), "");              // start of a 3-byte character
  EXPECT_EQ(decoder.Push(260),
            "\xEF\xBF\xBD"
            "a");  // broken by 'a'
  EXPECT_EQ(decoder.Push(3 + 0xC3), "");
  EXPECT_EQ(decoder.Flush(), "\xEF\xBF\xBD");  // incomplete at the end
  EXPECT_EQ(tokenizer->Decode({3 + 0xE6, 3 + 0x97}), "\xEF\xBF\xBD");
  EXPECT_EQ(tokenizer->Decode({2, 999, -4}), "");  // control and out-of-range ids
}

TEST(Utf8Test, ValidatesStrictly) {
  EXPECT_TRUE(ValidateUtf8("h\xC3\xA9\xF0\x9F\x99\x82").ok());
  EXPECT_FALSE(ValidateUtf8("\xC0\xAF").ok());          // overlong '/'
  EXPECT_FALSE(ValidateUtf8("\xED\xA0\x80").ok());      // surrogate
  EXPECT_FALSE(ValidateUtf8("\xF4\x90\x80\x80").ok());  // > U+10FFFF
  EXPECT_FALSE(ValidateUtf8("\xE6\x97").ok());          // truncated
  std::string out;
  std::string tail;
  AppendRepairedUtf8("a\xE2\x82", &out, &tail);
  EXPECT_EQ(out, "a");
  EXPECT_EQ(tail, "\xE2\x82");
  out.clear();
  AppendRepairedUtf8(
      "\xE2\x82"
      "b\x80",
      &out, nullptr);
  EXPECT_EQ(out,
            "\xEF\xBF\xBD"
            "b\xEF\xBF\xBD");
}

}  // namespace
}  // namespace sparseserve::tokenizer
