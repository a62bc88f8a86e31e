// ChatTemplate: renders exactly what Python jinja2 renders under Hugging Face's settings for the
// test templates in tests/data/chat_templates (Llama-3, Qwen2 and Mistral shapes) x cases.json,
// and for the construct snippets of snippets.json (goldens.json, from render_goldens.py); fails
// at Parse for templates it cannot run; bounds runaway templates.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/tokenizer/chat_template.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace sparseserve::tokenizer {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

std::string DataPath(const std::string& file) {
  return std::string(SPARSESERVE_TEST_DATA_DIR) + "/chat_templates/" + file;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Json ReadJson(const std::string& file) {
  return Json::parse(ReadText(DataPath(file)));
}

std::vector<ChatMessage> Messages(const Json& list) {
  std::vector<ChatMessage> messages;
  for (const Json& m : list) messages.push_back({m["role"], m["content"]});
  return messages;
}

// The context render_goldens.py renders `item` (a case or a snippet) with.
ChatTemplateContext ContextFor(const Json& special_tokens, const Json& item) {
  ChatTemplateContext context;
  context.add_generation_prompt = item.value("add_generation_prompt", false);
  if (special_tokens.contains("bos_token")) context.bos_token = special_tokens["bos_token"];
  if (special_tokens.contains("eos_token")) context.eos_token = special_tokens["eos_token"];
  const Json variables = item.value("variables", Json::object());
  for (const auto& [name, value] : variables.items()) {
    context.extra_variables[name] = value.get<std::string>();
  }
  return context;
}

// Checks one rendering against its golden: the same text, or the same kind of failure
// (raise_exception's message verbatim; any kInvalidArgument for jinja2's other errors).
void ExpectGolden(const ChatTemplate& chat_template, const std::vector<ChatMessage>& messages,
                  const ChatTemplateContext& context, const Json& golden) {
  const absl::StatusOr<std::string> rendered = chat_template.Render(messages, context);
  if (golden.contains("output")) {
    ASSERT_TRUE(rendered.ok()) << rendered.status();
    EXPECT_EQ(*rendered, golden["output"].get<std::string>());
    return;
  }
  ASSERT_FALSE(rendered.ok()) << "rendered " << *rendered << "; jinja2 failed with "
                              << golden["error"];
  EXPECT_EQ(rendered.status().code(), absl::StatusCode::kInvalidArgument);
  if (golden["kind"] == "raise") {
    EXPECT_EQ(rendered.status().message(), golden["error"].get<std::string>());
  }
}

int ExpectTemplateMatchesGoldens(const std::string& name) {
  const Json cases = ReadJson("cases.json");
  const Json goldens = ReadJson("goldens.json")["templates"][name];
  const absl::StatusOr<ChatTemplate> chat_template = ChatTemplate::Parse(ReadText(DataPath(name)));
  EXPECT_TRUE(chat_template.ok()) << chat_template.status();
  if (!chat_template.ok()) return 0;
  int num_compared = 0;
  for (const Json& c : cases["cases"]) {
    SCOPED_TRACE(name + " x " + c["name"].get<std::string>());
    ExpectGolden(*chat_template, Messages(c["messages"]), ContextFor(cases["templates"][name], c),
                 goldens.at(c["name"].get<std::string>()));
    ++num_compared;
  }
  return num_compared;
}

TEST(ChatTemplateGoldenTest, Llama3ShapeMatchesJinja2) {
  EXPECT_GE(ExpectTemplateMatchesGoldens("llama3.jinja"), 18);
}

TEST(ChatTemplateGoldenTest, Qwen2ShapeMatchesJinja2) {
  EXPECT_GE(ExpectTemplateMatchesGoldens("qwen2.jinja"), 18);
}

TEST(ChatTemplateGoldenTest, MistralShapeMatchesJinja2) {
  EXPECT_GE(ExpectTemplateMatchesGoldens("mistral.jinja"), 18);
}

TEST(ChatTemplateGoldenTest, ConstructSnippetsMatchJinja2) {
  const Json snippets = ReadJson("snippets.json");
  const Json goldens = ReadJson("goldens.json")["snippets"];
  int num_compared = 0;
  for (const Json& snippet : snippets["snippets"]) {
    const std::string name = snippet["name"];
    SCOPED_TRACE("snippet " + name + ": " + snippet["template"].get<std::string>());
    const Json& golden = goldens.at(name);
    const absl::StatusOr<ChatTemplate> chat_template =
        ChatTemplate::Parse(snippet["template"].get<std::string>());
    if (golden.value("kind", "") == "parse") {
      EXPECT_FALSE(chat_template.ok());
      continue;
    }
    ASSERT_TRUE(chat_template.ok()) << chat_template.status();
    ExpectGolden(*chat_template, Messages(snippet.value("messages", snippets["default_messages"])),
                 ContextFor(Json::object(), snippet), golden);
    ++num_compared;
  }
  EXPECT_GE(num_compared, 70);
}

absl::StatusOr<std::string> RenderSource(absl::string_view source,
                                         const std::vector<ChatMessage>& messages = {},
                                         const ChatTemplateContext& context = {}) {
  absl::StatusOr<ChatTemplate> chat_template = ChatTemplate::Parse(source);
  if (!chat_template.ok()) return chat_template.status();
  return chat_template->Render(messages, context);
}

TEST(ChatTemplateTest, RaiseExceptionIsInvalidArgumentWithTheMessage) {
  const absl::StatusOr<std::string> rendered = RenderSource(
      "{% if messages[0].role != 'user' %}{{ raise_exception('First turn must be the user\\'s') }}"
      "{% endif %}ok",
      {{"assistant", "hi"}});
  EXPECT_EQ(rendered.status(), absl::InvalidArgumentError("First turn must be the user's"));
  EXPECT_EQ(*RenderSource("{% if messages[0].role != 'user' %}{{ raise_exception('x') }}"
                          "{% endif %}ok",
                          {{"user", "hi"}}),
            "ok");
}

TEST(ChatTemplateTest, RuntimeErrorsNameTheLine) {
  const absl::StatusOr<std::string> rendered = RenderSource("a\n{{ messages }}\n{{ 'x' + 1 }}");
  EXPECT_EQ(rendered.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rendered.status().message(), HasSubstr("line 3: can only concatenate str"));
  EXPECT_THAT(RenderSource("{{ missing.method() }}").status().message(),
              HasSubstr("'missing' is undefined"));
}

TEST(ChatTemplateTest, UndefinedRendersEmptyAndIsFalsy) {
  EXPECT_EQ(*RenderSource("[{{ nope }}]{{ nope is defined }}{% if not nope %}!{% endif %}"),
            "[]False!");
}

TEST(ChatTemplateTest, MissingSpecialTokensAreUndefined) {
  ChatTemplateContext context;
  context.eos_token = "</s>";
  context.extra_variables["bos_token"] = "not used: an absent token stays undefined";
  EXPECT_EQ(*RenderSource("{{ bos_token is defined }} {{ eos_token }}", {}, context), "False </s>");
}

TEST(ChatTemplateTest, WhitespaceControlAndHfDefaults) {
  // trim_blocks drops the newline after a block tag, lstrip_blocks the indentation before it.
  EXPECT_EQ(*RenderSource("{% for m in messages %}\n  {% if true %}\n{{ m.role }}\n  {% endif %}\n"
                          "{% endfor %}\n",
                          {{"user", ""}, {"assistant", ""}}),
            "user\nassistant\n");
  EXPECT_EQ(*RenderSource("a  {{- 'b' -}}  \n c"), "abc");
  EXPECT_EQ(*RenderSource("x {#- comment -#} y"), "xy");
}

TEST(ChatTemplateTest, StringsWithTemplateSyntaxInMessagesAreNotInterpreted) {
  EXPECT_EQ(*RenderSource("{{ messages[0].content }}", {{"user", "{{ 1 + 1 }} {% if %}"}}),
            "{{ 1 + 1 }} {% if %}");
}

TEST(ChatTemplateTest, RenderIsRepeatableAndKeepsNoState) {
  const absl::StatusOr<ChatTemplate> chat_template = ChatTemplate::Parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}"
      "{{ ns.n }}");
  ASSERT_TRUE(chat_template.ok());
  const std::vector<ChatMessage> messages = {{"user", "a"}, {"assistant", "b"}};
  EXPECT_EQ(*chat_template->Render(messages, {}), "2");
  EXPECT_EQ(*chat_template->Render(messages, {}), "2");
}

void ExpectParseError(absl::string_view source, absl::string_view where, absl::string_view what) {
  const absl::StatusOr<ChatTemplate> chat_template = ChatTemplate::Parse(source);
  ASSERT_FALSE(chat_template.ok()) << source;
  EXPECT_EQ(chat_template.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(chat_template.status().message());
  EXPECT_THAT(message, HasSubstr(where)) << source;
  EXPECT_THAT(message, HasSubstr(what)) << source;
}

TEST(ChatTemplateParseTest, UnknownTagNamesLineAndColumn) {
  ExpectParseError("hello\n  {% foo %}", "line 2, column 6", "unknown tag 'foo'");
}

TEST(ChatTemplateParseTest, UnclosedBlocks) {
  ExpectParseError("a\n{% if messages %}\nb", "line 2, column 4",
                   "'{% if %}' is not closed (expected 'endif'");
  ExpectParseError("{% for m in messages %}{% if true %}{% endfor %}", "line 1, column 40",
                   "unexpected 'endfor' (expected 'elif' or 'else' or 'endif')");
  ExpectParseError("{% endif %}", "line 1, column 4", "unexpected 'endif' (no block is open)");
  ExpectParseError("{{ messages ", "line 1, column 1", "unclosed '{{'");
  ExpectParseError("{# never closed", "line 1, column 1", "unclosed comment");
  ExpectParseError("{% raw %} x", "line 1, column 10", "missing {% endraw %}");
}

TEST(ChatTemplateParseTest, UnknownFiltersAndTestsFailAtLoad) {
  // Stricter than jinja2, which defers these to render time inside an untaken branch.
  ExpectParseError("{% if false %}{{ x | frobnicate }}{% endif %}", "line 1, column 22",
                   "unknown filter 'frobnicate'");
  ExpectParseError("{{ x is frobnicated }}", "line 1, column 9", "unknown test 'frobnicated'");
}

TEST(ChatTemplateParseTest, UnsupportedConstructs) {
  ExpectParseError("{% macro m() %}{% endmacro %}", "line 1, column 4", "unsupported tag 'macro'");
  ExpectParseError("{% include 'x' %}", "line 1, column 4", "unsupported tag 'include'");
  ExpectParseError("{% for x in y recursive %}{% endfor %}", "line 1, column 15",
                   "recursive for loops are not supported");
  ExpectParseError("{% break %}", "line 1, column 4", "'break' outside of a for loop");
}

TEST(ChatTemplateParseTest, SyntaxErrors) {
  ExpectParseError("{{ 1 + }}", "line 1, column 8", "unexpected end of tag");
  ExpectParseError("{{ 'open }}", "line 1, column 4", "unterminated string literal");
  ExpectParseError("{{ 99999999999999999999 }}", "line 1, column 4",
                   "integer literal out of range");
  ExpectParseError("{{ a ? b }}", "line 1, column 6", "unexpected character '?'");
  ExpectParseError("{% set x %}", "line 1, column 4", "'{% set %}' is not closed");
  ExpectParseError("{{ f(a=1, 2) }}", "line 1, column 11",
                   "positional argument follows keyword argument");
}

TEST(ChatTemplateLimitsTest, DeepNestingFailsAtParse) {
  ExpectParseError("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}", "line 1",
                   "nested too deeply");
  std::string long_sum = "{{ 1";
  for (int i = 0; i < 1000; ++i) long_sum += " + 1";
  ExpectParseError(long_sum + " }}", "line 1", "too deeply nested or too long");
  ExpectParseError("{{ " + std::string(1000, '-') + "1 }}", "line 1", "nested too deeply");
  std::string deep_ifs;
  for (int i = 0; i < 100; ++i) deep_ifs += "{% if true %}";
  ExpectParseError(deep_ifs, "line 1", "blocks nested too deeply");
}

TEST(ChatTemplateLimitsTest, RunawayRendersFailCleanly) {
  ChatTemplateContext context;
  context.extra_variables["kilobyte"] = std::string(1024, 'x');
  const struct {
    const char* source;
    const char* what;
  } kRunaways[] = {
      {"{% for i in range(100000) %}{{ kilobyte }}{% endfor %}", "over the limit"},
      {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
       "loop iterations"},
      {"{{ 'x' * 100000000 }}", "over the limit"},
      {"{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
       "{% endfor %}",
       "over the limit"},
      {"{% set ns = namespace(v=[]) %}{% for i in range(100) %}{% set ns.v = [ns.v] %}"
       "{% endfor %}",
       "nested deeper than"},
      {"{{ [kilobyte] * 100000 }}", "over the limit"},
      {"{{ (kilobyte * 10000) | replace('x', kilobyte) }}", "over the limit"},
      {"{% set ns = namespace() %}{% set ns.me = ns %}", "cannot hold a namespace"},
      {"{{ range(100001) | length }}", "Range too big"},
  };
  for (const auto& runaway : kRunaways) {
    const absl::StatusOr<std::string> rendered = RenderSource(runaway.source, {}, context);
    EXPECT_EQ(rendered.status().code(), absl::StatusCode::kInvalidArgument) << runaway.source;
    EXPECT_THAT(rendered.status().message(), HasSubstr(runaway.what)) << runaway.source;
  }
}

}  // namespace
}  // namespace sparseserve::tokenizer
