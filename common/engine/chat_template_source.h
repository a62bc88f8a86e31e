// LoadChatTemplate: finds and parses the chat template a model path serves
// /v1/chat/completions with, together with the special tokens the template reads.
//
// Where the template comes from, first match wins:
//   1. `template_file` (--chat-template FILE), when given;
//   2. a Hugging Face directory: tokenizer_config.json's "chat_template" (a string, or a list
//      of {"name", "template"} entries, of which "default" is taken), else chat_template.jinja
//      beside it (where recent transformers versions save it);
//   3. a .gguf file: the "tokenizer.chat_template" metadata string.
// bos_token / eos_token come from tokenizer_config.json (strings, or {"content": ...} objects)
// or from the GGUF vocabulary (tokenizer.ggml.bos_token_id / eos_token_id), also when the
// template itself comes from `template_file`. Lives in sparseserve_model_source because it
// reads both HF directories and GGUF files (sparseserve_tokenizer depends on neither).
// Stateless, thread-safe.
#ifndef SPARSESERVE_COMMON_ENGINE_CHAT_TEMPLATE_SOURCE_H_
#define SPARSESERVE_COMMON_ENGINE_CHAT_TEMPLATE_SOURCE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/tokenizer/chat_template.h"

namespace sparseserve::engine {

struct LoadedChatTemplate {
  tokenizer::ChatTemplate chat_template;
  std::string origin;  // where the template was read: a file path, "<gguf>: <key>"
  std::optional<std::string> bos_token;  // absent when the model names none
  std::optional<std::string> eos_token;
};

// Loads the template for `model_path` (an HF directory or a .gguf file), or from
// `template_file` when that is not empty. Returns kNotFound when the model has no template and
// no file is given (the caller answers chat requests with 400), or `template_file` does not
// exist; kInvalidArgument for malformed tokenizer_config.json or GGUF metadata, and for a
// template that does not parse, annotated with where it came from; the I/O errors of reading
// the files.
absl::StatusOr<LoadedChatTemplate> LoadChatTemplate(const std::string& model_path,
                                                    const std::string& template_file);

}  // namespace sparseserve::engine

#endif  // SPARSESERVE_COMMON_ENGINE_CHAT_TEMPLATE_SOURCE_H_
