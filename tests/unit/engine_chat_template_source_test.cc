// LoadChatTemplate: finds a model's chat template and special tokens in a Hugging Face
// directory's tokenizer_config.json (string and named-list forms) or chat_template.jinja, in
// GGUF metadata, or in a --chat-template file; kNotFound when there is none.
#include <string>

#include "common/engine/chat_template_source.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/model_file_writers.h"

namespace sparseserve::engine {
namespace {

using ::testing::HasSubstr;
using namespace sparseserve::model::testing;  // NOLINT(google-build-using-namespace): test writers

constexpr char kTemplate[] =
    "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}"
    "{% endfor %}";

// An HF model directory holding tokenizer_config.json with `config` (and nothing else).
std::string HfDirWithConfig(const std::string& tag, const std::string& config) {
  std::string dir = MakeTempDir(tag);
  WriteWholeFile(dir + "/tokenizer_config.json", config);
  return dir;
}

std::string RenderOneTurn(const LoadedChatTemplate& loaded) {
  tokenizer::ChatTemplateContext context;
  context.bos_token = loaded.bos_token;
  context.eos_token = loaded.eos_token;
  const absl::StatusOr<std::string> text = loaded.chat_template.Render({{"user", "hi"}}, context);
  return text.ok() ? *text : std::string(text.status().message());
}

TEST(ChatTemplateSourceTest, HfConfigStringWithTokenObjects) {
  const std::string dir = HfDirWithConfig(
      "ct_string", R"({"chat_template": "{{ bos_token }}{% for m in messages %}<{{ m.role }}>)"
                   R"({{ m.content }}{{ eos_token }}{% endfor %}", "bos_token": "<s>",)"
                   R"( "eos_token": {"__type": "AddedToken", "content": "</s>"}})");
  const absl::StatusOr<LoadedChatTemplate> loaded = LoadChatTemplate(dir, "");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->bos_token, "<s>");
  EXPECT_EQ(loaded->eos_token, "</s>");
  EXPECT_EQ(loaded->origin, dir + "/tokenizer_config.json");
  EXPECT_EQ(RenderOneTurn(*loaded), "<s><user>hi</s>");
}

TEST(ChatTemplateSourceTest, HfConfigNamedListTakesDefault) {
  const std::string dir = HfDirWithConfig(
      "ct_list", R"({"chat_template": [{"name": "tool_use", "template": "tools"},)"
                 R"( {"name": "default", "template": "default: {{ messages[0].content }}"}],)"
                 R"( "bos_token": null})");
  const absl::StatusOr<LoadedChatTemplate> loaded = LoadChatTemplate(dir, "");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->bos_token.has_value());
  EXPECT_EQ(RenderOneTurn(*loaded), "default: hi");
}

TEST(ChatTemplateSourceTest, HfConfigNamedListWithoutDefaultIsNotFound) {
  const std::string dir =
      HfDirWithConfig("ct_nodefault", R"({"chat_template": [{"name": "rag", "template": "x"}]})");
  const absl::StatusOr<LoadedChatTemplate> loaded = LoadChatTemplate(dir, "");
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("no \"default\" among the chat templates (rag)"));
}

TEST(ChatTemplateSourceTest, HfDirectoryWithoutTemplateIsNotFound) {
  const std::string dir = HfDirWithConfig("ct_none", R"({"eos_token": "</s>"})");
  EXPECT_EQ(LoadChatTemplate(dir, "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LoadChatTemplate(MakeTempDir("ct_empty"), "").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(LoadChatTemplate("/nonexistent/model", "").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ChatTemplateSourceTest, HfChatTemplateJinjaBesideConfig) {
  const std::string dir =
      HfDirWithConfig("ct_jinja", R"({"bos_token": "<s>", "eos_token": "</s>"})");
  WriteWholeFile(dir + "/chat_template.jinja", kTemplate);
  const absl::StatusOr<LoadedChatTemplate> loaded = LoadChatTemplate(dir, "");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->origin, dir + "/chat_template.jinja");
  EXPECT_EQ(RenderOneTurn(*loaded), "<s><user>hi</s>");
}

TEST(ChatTemplateSourceTest, TemplateFileOverridesTheModel) {
  const std::string dir = HfDirWithConfig(
      "ct_file", R"({"chat_template": "model's own", "bos_token": "<s>", "eos_token": "</s>"})");
  WriteWholeFile(dir + "/override.jinja", kTemplate);
  const absl::StatusOr<LoadedChatTemplate> loaded = LoadChatTemplate(dir, dir + "/override.jinja");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->origin, dir + "/override.jinja");
  EXPECT_EQ(RenderOneTurn(*loaded), "<s><user>hi</s>");
  EXPECT_EQ(LoadChatTemplate(dir, dir + "/missing.jinja").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ChatTemplateSourceTest, BadTemplateOrConfigIsInvalidArgumentNamingTheSource) {
  const std::string dir = HfDirWithConfig("ct_bad", R"({"chat_template": "{% if x %}unclosed"})");
  const absl::StatusOr<LoadedChatTemplate> loaded = LoadChatTemplate(dir, "");
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("chat template " + dir + "/tokenizer_config.json: line 1, column 4"));
  const std::string broken = HfDirWithConfig("ct_json", "{not json");
  EXPECT_EQ(LoadChatTemplate(broken, "").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateSourceTest, GgufMetadataTemplateAndTokens) {
  const std::string dir = MakeTempDir("ct_gguf");
  WriteWholeFile(dir + "/model.gguf",
                 BuildGguf({KvString("general.architecture", "llama"),
                            KvString("tokenizer.chat_template", kTemplate),
                            KvStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"}),
                            KvScalar<uint32_t>("tokenizer.ggml.bos_token_id", 4, 1),
                            KvScalar<uint32_t>("tokenizer.ggml.eos_token_id", 4, 2)},
                           {}));
  const absl::StatusOr<LoadedChatTemplate> loaded = LoadChatTemplate(dir + "/model.gguf", "");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->origin, dir + "/model.gguf: tokenizer.chat_template");
  EXPECT_EQ(RenderOneTurn(*loaded), "<s><user>hi</s>");

  WriteWholeFile(dir + "/plain.gguf", BuildGguf({KvString("general.architecture", "llama")}, {}));
  EXPECT_EQ(LoadChatTemplate(dir + "/plain.gguf", "").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace sparseserve::engine
