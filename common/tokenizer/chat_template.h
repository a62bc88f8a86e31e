// ChatTemplate: a model's chat template (the Jinja2 source in Hugging Face's
// tokenizer_config.json "chat_template", GGUF's tokenizer.chat_template, or a --chat-template
// file), parsed once at start-up and rendered per /v1/chat/completions request into the prompt
// text the model was trained on.
//
// The interpreter (internal/jinja_*.h) covers the Jinja2 subset chat templates use and renders
// as transformers' apply_chat_template does: ImmutableSandboxedEnvironment with trim_blocks and
// lstrip_blocks, the loopcontrols extension ({% break %}, {% continue %}), {% generation %},
// raise_exception() and strftime_now() globals, and transformers' own `tojson` (plain
// json.dumps: keys unsorted, no HTML escaping, non-ASCII kept). Not supported, rejected by
// Parse: macros, call/filter/with blocks, include/import/extends, recursive loops, and filters
// or tests outside the lists in internal/jinja_filters.h and internal/jinja_tests.h (also in
// branches never taken, where jinja2 would fail only when they run). Known differences from
// jinja2 otherwise: integers are 64-bit (overflow is an error), map/select/unique give lists
// rather than lazy generators, range() gives a list, case mapping covers Latin, Greek and
// Cyrillic only, and printf-style `%` on strings is an error.
//
// A ChatTemplate is immutable after Parse: Render is const and thread-safe.
#ifndef SPARSESERVE_COMMON_TOKENIZER_CHAT_TEMPLATE_H_
#define SPARSESERVE_COMMON_TOKENIZER_CHAT_TEMPLATE_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace sparseserve::tokenizer {

namespace internal {
struct JinjaProgram;
}  // namespace internal

// One turn of a conversation. Tool calls are out of scope: content is plain text.
struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool", ...
  std::string content;
};

// The variables a render sees besides `messages`, as apply_chat_template passes them.
struct ChatTemplateContext {
  bool add_generation_prompt = false;  // end with the header of an assistant turn
  // The tokenizer's special tokens; absent ones are undefined in the template, as in
  // transformers (whose special_tokens_map leaves them out).
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  // Further string variables (other special tokens, template keyword arguments). They cannot
  // replace messages, add_generation_prompt, bos_token or eos_token.
  absl::flat_hash_map<std::string, std::string> extra_variables;
};

class ChatTemplate {
 public:
  // Parses `source`. Returns kInvalidArgument "line L, column C: <what>" for syntax errors,
  // unknown or unsupported tags, unknown filters and tests, unclosed blocks, and nesting past
  // the interpreter's limits.
  static absl::StatusOr<ChatTemplate> Parse(absl::string_view source);

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  // Renders `messages` (each a {"role", "content"} dict in the template) with `context`.
  // Returns kInvalidArgument carrying the template's message verbatim for
  // raise_exception(message) (a client error: roles that do not alternate, an unsupported
  // role), "line N: <what>" for runtime errors (an undefined value used where a value is
  // needed, a type error), and a message naming the limit when the output passes 16 MiB or the
  // template loops, nests or builds strings past the interpreter's bounds.
  absl::StatusOr<std::string> Render(absl::Span<const ChatMessage> messages,
                                     const ChatTemplateContext& context) const;

 private:
  explicit ChatTemplate(std::unique_ptr<const internal::JinjaProgram> program);

  std::unique_ptr<const internal::JinjaProgram> program_;
};

}  // namespace sparseserve::tokenizer

#endif  // SPARSESERVE_COMMON_TOKENIZER_CHAT_TEMPLATE_H_
