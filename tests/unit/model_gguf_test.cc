#include "common/model/gguf_file.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model_file_writers.h"

namespace sparseserve::model {
namespace {

using testing::BuildGguf;
using testing::GgufTestTensor;
using testing::KvArray;
using testing::KvScalar;
using testing::KvString;
using testing::KvStringArray;
using testing::RawBytes;

// Float offsets of the llama2.c checkpoint's arrays (after its 7-int32 header), for
// dim 64, hidden 172, 5 layers, 8 heads, 4 KV heads, vocab 512.
struct Llama2cLayout {
  static constexpr int64_t kDim = 64, kHidden = 172, kLayers = 5, kKvDim = 32, kVocab = 512;
  static constexpr int64_t kTok = 0;
  static constexpr int64_t kRmsAtt = kTok + kVocab * kDim;
  static constexpr int64_t kWq = kRmsAtt + kLayers * kDim;
  static constexpr int64_t kWk = kWq + kLayers * kDim * kDim;
  static constexpr int64_t kWv = kWk + kLayers * kKvDim * kDim;
  static constexpr int64_t kWo = kWv + kLayers * kKvDim * kDim;
  static constexpr int64_t kRmsFfn = kWo + kLayers * kDim * kDim;
  static constexpr int64_t kW1 = kRmsFfn + kLayers * kDim;
};

class StoriesGgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::ReadWholeFile(testing::StoriesPath("stories260K.bin"), &bin_)) {
      GTEST_SKIP() << "stories260K not found (run scripts/fetch_model.sh)";
    }
    auto gguf = GgufFile::Open(testing::StoriesPath("stories260K.gguf"));
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    gguf_ = std::move(*gguf);
  }

  // `n` floats of the llama2.c checkpoint starting at float index `at`.
  std::vector<float> BinFloats(int64_t at, int64_t n) const {
    std::vector<float> v(static_cast<size_t>(n));
    std::memcpy(v.data(), bin_.data() + 28 + at * 4, v.size() * 4);
    return v;
  }

  // The bytes of tensor `name` as floats (f32 only).
  std::vector<float> GgufFloats(const std::string& name) const {
    auto t = gguf_->GetTensor(name);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return {};
    EXPECT_EQ(t->dtype(), DType::kF32);
    const float* p = t->data<float>();
    return std::vector<float>(p, p + t->numel());
  }

  static bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  }

  std::string bin_;
  std::unique_ptr<GgufFile> gguf_;
};

TEST_F(StoriesGgufTest, HeaderAndMetadata) {
  EXPECT_EQ(gguf_->version(), 3u);
  EXPECT_EQ(gguf_->alignment(), 32u);
  EXPECT_EQ(gguf_->data_offset() % 32, 0u);
  const GgufMetadata& md = gguf_->metadata();
  EXPECT_EQ(md.GetString("general.architecture").value(), "llama");
  EXPECT_EQ(md.GetUint("llama.embedding_length").value(), 64u);
  EXPECT_EQ(md.GetInt("llama.block_count").value(), 5);
  EXPECT_NEAR(md.GetFloat("llama.attention.layer_norm_rms_epsilon").value(), 1e-5, 1e-9);
  auto tokens = md.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 512u);
  EXPECT_EQ((*tokens)[0], "<unk>");
  EXPECT_EQ((*tokens)[3], "<0x00>");
  EXPECT_EQ(md.GetFloatArray("tokenizer.ggml.scores").value().size(), 512u);
  auto types = md.GetIntArray("tokenizer.ggml.token_type");
  ASSERT_TRUE(types.ok()) << types.status();
  EXPECT_EQ((*types)[0], 2);  // unknown
  EXPECT_EQ((*types)[3], 6);  // byte
  EXPECT_EQ(md.GetArrayLength("tokenizer.ggml.tokens").value(), 512u);
  EXPECT_EQ(md.Keys().front(), "tokenizer.ggml.tokens");
  EXPECT_EQ(md.Keys().size(), md.size());
}

TEST_F(StoriesGgufTest, TensorDirectoryShapesAreReversedNe) {
  EXPECT_EQ(gguf_->TensorNames().size(), 48u);
  EXPECT_EQ(gguf_->TensorNames().front(), "token_embd.weight");
  const std::vector<std::pair<std::string, Shape>> expected = {
      {"token_embd.weight", Shape{512, 64}},     {"blk.0.attn_q.weight", Shape{64, 64}},
      {"blk.0.attn_k.weight", Shape{32, 64}},    {"blk.0.ffn_gate.weight", Shape{172, 64}},
      {"blk.0.ffn_down.weight", Shape{64, 172}}, {"output_norm.weight", Shape{64}},
  };
  for (const auto& [name, shape] : expected) {
    auto t = gguf_->GetTensor(name);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->shape(), shape) << name << " " << t->shape().ToString();
    EXPECT_EQ(t->dtype(), DType::kF32);
    EXPECT_TRUE(t->is_contiguous());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->raw_data()) % 4, 0u);
  }
  EXPECT_TRUE(gguf_->HasTensor("blk.4.ffn_norm.weight"));
  EXPECT_FALSE(gguf_->HasTensor("blk.5.ffn_norm.weight"));
  auto missing = gguf_->GetTensor("blk.5.ffn_norm.weight");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("stories260K.gguf"), std::string::npos);
}

TEST_F(StoriesGgufTest, EmbeddingAndFfnGateMatchLlama2cCheckpointBitForBit) {
  using L = Llama2cLayout;
  EXPECT_TRUE(BitEqual(GgufFloats("token_embd.weight"), BinFloats(L::kTok, L::kVocab * L::kDim)));
  EXPECT_TRUE(
      BitEqual(GgufFloats("blk.0.ffn_gate.weight"), BinFloats(L::kW1, L::kHidden * L::kDim)));
  EXPECT_TRUE(BitEqual(GgufFloats("blk.0.attn_norm.weight"), BinFloats(L::kRmsAtt, L::kDim)));
  // The llama2.c classifier shares the embedding; the GGUF stores it again as output.weight.
  EXPECT_TRUE(BitEqual(GgufFloats("output.weight"), BinFloats(L::kTok, L::kVocab * L::kDim)));
  // A view reads the right element through Tensor's indexing too.
  auto emb = gguf_->GetTensor("token_embd.weight");
  ASSERT_TRUE(emb.ok());
  EXPECT_EQ(emb->GetFloat({7, 3}), BinFloats(L::kTok + 7 * 64 + 3, 1)[0]);
}

// Rows of a [num_heads * head_dim, in] matrix permuted from adjacent-pair to halves order
// within each head (row 2i -> i, row 2i+1 -> i + head_dim/2).
std::vector<float> AdjacentToHalves(const std::vector<float>& w, int num_heads, int head_dim,
                                    int in) {
  std::vector<float> out(w.size());
  for (int h = 0; h < num_heads; ++h) {
    for (int r = 0; r < head_dim; ++r) {
      const int dst = r % 2 == 0 ? r / 2 : r / 2 + head_dim / 2;
      std::memcpy(&out[(h * head_dim + dst) * in], &w[(h * head_dim + r) * in], in * 4);
    }
  }
  return out;
}

// README: "GGUF stores Q and K weights in the layout llama.cpp expects for its RoPE". For a
// llama2.c conversion that is the checkpoint's own adjacent-pair layout: the rows are equal, not
// permuted, so ModelConfigFromGguf reports RopePairLayout::kAdjacent.
TEST_F(StoriesGgufTest, AttentionQkRowsEqualLlama2cAdjacentPairLayout) {
  using L = Llama2cLayout;
  const std::vector<float> wq = BinFloats(L::kWq, L::kDim * L::kDim);
  const std::vector<float> q = GgufFloats("blk.0.attn_q.weight");
  const bool equal = BitEqual(q, wq);
  const bool permuted = BitEqual(q, AdjacentToHalves(wq, 8, 8, 64));
  EXPECT_TRUE(equal) << "attn_q is " << (permuted ? "row-permuted to halves" : "unrelated");
  EXPECT_FALSE(permuted);
  EXPECT_TRUE(BitEqual(GgufFloats("blk.0.attn_k.weight"), BinFloats(L::kWk, L::kKvDim * L::kDim)));
  EXPECT_TRUE(BitEqual(GgufFloats("blk.3.attn_q.weight"),
                       BinFloats(L::kWq + 3 * L::kDim * L::kDim, L::kDim * L::kDim)));
}

TEST_F(StoriesGgufTest, ViewOutlivesGgufFile) {
  auto t = gguf_->GetTensor("output_norm.weight");
  ASSERT_TRUE(t.ok());
  const float first = t->GetFloat({0});
  gguf_.reset();  // the view co-owns the mapping
  EXPECT_EQ(t->GetFloat({0}), first);
}

TEST(GgufFileTest, ReadsF16AndBf16TensorsAndAllMetadataTypes) {
  const std::vector<uint16_t> f16 = {F32ToF16(1.5f), F32ToF16(-2.0f), F32ToF16(0.25f),
                                     F32ToF16(3.0f), F32ToF16(4.0f),  F32ToF16(5.0f)};
  const std::vector<uint16_t> bf16 = {F32ToBf16(-1.0f), F32ToBf16(8.0f)};
  std::vector<std::string> kvs = {
      KvScalar<uint8_t>("u8", 0, 200),
      KvScalar<int8_t>("i8", 1, -5),
      KvScalar<uint16_t>("u16", 2, 60000),
      KvScalar<int16_t>("i16", 3, -300),
      KvScalar<uint32_t>("u32", 4, 4000000000u),
      KvScalar<int32_t>("i32", 5, -70000),
      KvScalar<float>("f32", 6, 0.5f),
      KvScalar<uint8_t>("bool", 7, 1),
      KvString("str", "hello"),
      KvScalar<uint64_t>("u64", 10, ~uint64_t{0}),
      KvScalar<int64_t>("i64", 11, INT64_MIN),
      KvScalar<double>("f64", 12, 2.25),
      KvStringArray("strs", {"a", "", "ccc"}),
      KvArray<int16_t>("i16s", 3, {-1, 2, -3}),
      KvArray<double>("f64s", 12, {1.5, -0.5}),
  };
  // A nested array: [[1, 2], [3]] of uint32.
  std::string nested = testing::KvHeader("nested", 9);
  testing::Put<uint32_t>(&nested, 9);
  testing::Put<uint64_t>(&nested, 2);
  for (const std::vector<uint32_t>& inner : {std::vector<uint32_t>{1, 2}, {3}}) {
    testing::Put<uint32_t>(&nested, 4);
    testing::Put<uint64_t>(&nested, inner.size());
    for (uint32_t x : inner) testing::Put<uint32_t>(&nested, x);
  }
  kvs.push_back(nested);
  const std::string bytes =
      BuildGguf(kvs, {{"a", 1, {3, 2}, RawBytes(f16)}, {"b", 30, {2}, RawBytes(bf16)}});
  auto file = GgufFile::FromBuffer("mem.gguf", reinterpret_cast<const uint8_t*>(bytes.data()),
                                   bytes.size(), nullptr);
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufMetadata& md = (*file)->metadata();
  EXPECT_EQ(md.GetUint("u8").value(), 200u);
  EXPECT_EQ(md.GetInt("i8").value(), -5);
  EXPECT_EQ(md.GetUint("u16").value(), 60000u);
  EXPECT_EQ(md.GetInt("i16").value(), -300);
  EXPECT_EQ(md.GetUint("u32").value(), 4000000000u);
  EXPECT_EQ(md.GetInt("i32").value(), -70000);
  EXPECT_EQ(md.GetFloat("f32").value(), 0.5);
  EXPECT_EQ(md.GetBool("bool").value(), true);
  EXPECT_EQ(md.GetString("str").value(), "hello");
  EXPECT_EQ(md.GetUint("u64").value(), ~uint64_t{0});
  EXPECT_EQ(md.GetInt("i64").value(), INT64_MIN);
  EXPECT_EQ(md.GetFloat("f64").value(), 2.25);
  EXPECT_EQ(md.GetFloat("i32").value(), -70000.0);
  EXPECT_EQ(md.GetStringArray("strs").value(), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(md.GetIntArray("i16s").value(), (std::vector<int64_t>{-1, 2, -3}));
  EXPECT_EQ(md.GetFloatArray("f64s").value(), (std::vector<float>{1.5f, -0.5f}));
  const GgufValue* n = md.Find("nested");
  ASSERT_NE(n, nullptr);
  ASSERT_EQ(n->array_elems.size(), 2u);
  EXPECT_EQ(n->array_elems[0].num_elems, 2u);
  EXPECT_EQ(n->array_elems[1].num_elems, 1u);
  EXPECT_EQ(md.GetArrayLength("nested").value(), 2u);

  auto a = (*file)->GetTensor("a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->dtype(), DType::kF16);
  EXPECT_EQ(a->shape(), (Shape{2, 3}));
  EXPECT_EQ(a->GetFloat({0, 1}), -2.0f);
  EXPECT_EQ(a->GetFloat({1, 0}), 3.0f);
  auto b = (*file)->GetTensor("b");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->dtype(), DType::kBf16);
  EXPECT_EQ(b->GetFloat({1}), 8.0f);
}

TEST(GgufFileTest, AccessorErrorsNameTheKey) {
  const std::string bytes =
      BuildGguf({KvString("s", "x"), KvScalar<int32_t>("neg", 5, -1),
                 KvScalar<uint64_t>("big", 10, ~uint64_t{0}), KvArray<float>("fs", 6, {1.0f})},
                {});
  auto file = GgufFile::FromBuffer("m.gguf", reinterpret_cast<const uint8_t*>(bytes.data()),
                                   bytes.size(), nullptr);
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufMetadata& md = (*file)->metadata();
  auto missing = md.GetString("nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'nope'"), std::string::npos);
  auto wrong = md.GetUint("s");
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("'s' is string"), std::string::npos);
  EXPECT_EQ(md.GetUint("neg").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(md.GetInt("big").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(md.GetString("fs").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(md.GetStringArray("fs").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(md.GetIntArray("fs").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(md.GetBool("s").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(md.Has("nope"));
  EXPECT_TRUE(md.Has("fs"));
}

TEST(GgufFileTest, UnsupportedTypeListsButGetTensorIsUnimplemented) {
  // Q4_0: blocks of 32 weights in 18 bytes.
  const std::string bytes = BuildGguf(
      {}, {{"q", 2, {32, 1}, std::string(18, '\x01')}, {"f", 0, {1}, std::string(4, '\0')}});
  auto file = GgufFile::FromBuffer("q.gguf", reinterpret_cast<const uint8_t*>(bytes.data()),
                                   bytes.size(), nullptr);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->TensorNames(), (std::vector<std::string>{"q", "f"}));
  auto q = (*file)->GetTensor("q");
  EXPECT_EQ(q.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(q.status().message().find("Q4_0"), std::string::npos) << q.status();
  EXPECT_TRUE((*file)->GetTensor("f").ok());
}

TEST(GgufFileTest, SmallAlignmentGivesAlignedCopies) {
  // general.alignment = 2 lets an f32 tensor start at an odd multiple of 2.
  const std::vector<float> values = {1.0f, 2.0f, 3.0f};
  GgufTestTensor h{"h", 1, {1}, std::string(2, '\0')};
  GgufTestTensor f{"f", 0, {3}, RawBytes(values)};
  std::string bytes = BuildGguf({KvScalar<uint32_t>("general.alignment", 4, 2)}, {h, f}, 2);
  // Make the data section start 4-aligned in the buffer so that f lands at +2.
  std::vector<uint8_t> buf(bytes.size() + 8);
  size_t shift = 0;
  while ((reinterpret_cast<uintptr_t>(buf.data() + shift) + (bytes.size() - 2 - 12)) % 4 != 0) {
    ++shift;
  }
  std::memcpy(buf.data() + shift, bytes.data(), bytes.size());
  auto file = GgufFile::FromBuffer("a.gguf", buf.data() + shift, bytes.size(), nullptr);
  ASSERT_TRUE(file.ok()) << file.status();
  auto t = (*file)->GetTensor("f");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->raw_data()) % 4, 0u);
  EXPECT_EQ(t->GetFloat({2}), 3.0f);
}

}  // namespace
}  // namespace sparseserve::model
