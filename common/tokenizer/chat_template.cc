#include "common/tokenizer/chat_template.h"

#include <utility>

#include "common/core/status.h"
#include "common/tokenizer/internal/jinja_ast.h"
#include "common/tokenizer/internal/jinja_interpreter.h"
#include "common/tokenizer/internal/jinja_parser.h"
#include "common/tokenizer/internal/jinja_value.h"

namespace sparseserve::tokenizer {

using internal::JinjaDict;
using internal::JinjaList;
using internal::JinjaProgram;
using internal::JinjaValue;

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(absl::string_view source) {
  SS_ASSIGN_OR_RETURN(JinjaProgram program, internal::ParseJinja(source));
  return ChatTemplate(std::make_unique<const JinjaProgram>(std::move(program)));
}

ChatTemplate::ChatTemplate(std::unique_ptr<const internal::JinjaProgram> program)
    : program_(std::move(program)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

absl::StatusOr<std::string> ChatTemplate::Render(absl::Span<const ChatMessage> messages,
                                                 const ChatTemplateContext& context) const {
  JinjaDict variables;
  for (const auto& [name, value] : context.extra_variables) {
    variables.Set(name, JinjaValue::String(value));
  }
  JinjaList message_values;
  message_values.reserve(messages.size());
  for (const ChatMessage& message : messages) {
    JinjaDict entry;
    entry.Set("role", JinjaValue::String(message.role));
    entry.Set("content", JinjaValue::String(message.content));
    message_values.push_back(JinjaValue::Dict(std::move(entry)));
  }
  variables.Set("messages", JinjaValue::List(std::move(message_values)));
  variables.Set("add_generation_prompt", JinjaValue::Bool(context.add_generation_prompt));
  // An absent token must read as undefined, also when extra_variables names it.
  variables.Set("bos_token", context.bos_token ? JinjaValue::String(*context.bos_token)
                                               : JinjaValue::Undefined("'bos_token' is undefined"));
  variables.Set("eos_token", context.eos_token ? JinjaValue::String(*context.eos_token)
                                               : JinjaValue::Undefined("'eos_token' is undefined"));
  return internal::RenderJinja(*program_, variables);
}

}  // namespace sparseserve::tokenizer
