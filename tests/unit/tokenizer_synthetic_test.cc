// The synthetic tokenizer (tokenizer/synthetic_tokenizer.h): its layout (bytes, then words with
// and without a leading space, BOS and EOS last) seen through the byte-level BPE loader, ids that
// Hugging Face tokenizers gives for the same file (recorded from transformers'
// PreTrainedTokenizerFast on the tokenizer.json `sparseserve synthetic-tokenizer --preset
// llama3-8b` writes), and lossless round trips.
#include <string>
#include <vector>

#include "common/tokenizer/synthetic_tokenizer.h"
#include "common/tokenizer/tokenizer_json.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace sparseserve::tokenizer {
namespace {

std::unique_ptr<Tokenizer> Synthetic(int vocab_size) {
  absl::StatusOr<std::string> json = SyntheticTokenizerJson(vocab_size);
  EXPECT_TRUE(json.ok()) << json.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> t =
      TokenizerFromTokenizerJsonText(json.ok() ? *json : "", "synthetic");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

TEST(SyntheticTokenizerTest, LayoutAndSpecialTokens) {
  const std::unique_ptr<Tokenizer> t = Synthetic(128256);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), 128256);
  EXPECT_EQ(t->bos_id(), 128254);
  EXPECT_TRUE(t->add_bos());
  EXPECT_TRUE(t->IsEndOfGeneration(128255));
  // " a" .. " z" are 256 .. 281; then "aa" 282, " aa" 283, "ab" 284, " ab" 285.
  EXPECT_EQ(*t->Encode(" a", false), std::vector<int32_t>{256});
  EXPECT_EQ(*t->Encode("aa", false), std::vector<int32_t>{282});
  EXPECT_EQ(*t->Encode(" ab", false), std::vector<int32_t>{285});
  EXPECT_EQ(t->TokenBytes(285), " ab");
  // As transformers encodes "hello world, this is a test" with the written file.
  EXPECT_EQ(*t->Encode("hello world, this is a test", true),
            (std::vector<int32_t>{128254, 104, 512, 882, 278, 1044, 860, 44, 275, 11550, 735, 256,
                                  275, 8016}));
}

TEST(SyntheticTokenizerTest, RoundTripsAnyText) {
  const std::unique_ptr<Tokenizer> t = Synthetic(4096);
  ASSERT_NE(t, nullptr);
  for (const std::string text : {"Once upon a time", "  spaces\tand\nnewlines  ",
                                 "Zürich 東京 🙂", "x=1; y = [2, 3]"}) {
    absl::StatusOr<std::vector<int32_t>> ids = t->Encode(text, false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    for (int32_t id : *ids) EXPECT_LT(id, 4094);
    EXPECT_EQ(t->Decode(*ids), text);
  }
  EXPECT_EQ(SyntheticTokenizerJson(257).status().code(), absl::StatusCode::kInvalidArgument);
  const nlohmann::json config = nlohmann::json::parse(SyntheticTokenizerConfigJson());
  EXPECT_EQ(config["bos_token"], "<|begin_of_text|>");
}

}  // namespace
}  // namespace sparseserve::tokenizer
