// The filters (`x | trim`) chat templates may use, by name, with Jinja 3.1's semantics, and
// `tojson` as Hugging Face's transformers defines it (see jinja_json.h). The parser rejects
// names not listed here, so a template fails when it is loaded rather than at request time.
// Filters that Jinja implements as lazy generators (map, select, reject, unique, ...) give
// lists here: the same once joined or iterated, which is how templates use them.
// Stateless, thread-safe.
//
// Filters: abs attr capitalize count d default e escape first float indent int items join last
// length list lower map max min reject rejectattr replace reverse round safe select selectattr
// sort string sum title tojson trim unique upper wordcount.
#ifndef SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_FILTERS_H_
#define SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_FILTERS_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/internal/jinja_builtins.h"
#include "common/tokenizer/internal/jinja_value.h"

namespace sparseserve::tokenizer::internal {

bool IsJinjaFilter(absl::string_view name);

// Applies filter `name` to `input`. REQUIRES: IsJinjaFilter(name). Returns kInvalidArgument for
// arguments or inputs of the wrong type (with Python's message where there is one).
absl::StatusOr<JinjaValue> ApplyJinjaFilter(absl::string_view name, const JinjaValue& input,
                                            const JinjaArgs& args);

}  // namespace sparseserve::tokenizer::internal

#endif  // SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_FILTERS_H_
