// Python str methods as chat templates use them (strip, split, upper, title, ...), on UTF-8
// text. Whitespace is Python's str.isspace() set; case mapping covers ASCII, Latin-1, Latin
// Extended-A, Greek and Cyrillic (one-to-one mappings only: 'ß'.upper() stays 'ß', where Python
// gives 'SS'). Stateless, thread-safe.
#ifndef SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_STRING_OPS_H_
#define SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_STRING_OPS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace sparseserve::tokenizer::internal {

// The text split into code points' UTF-8 sequences (invalid bytes one each).
std::vector<absl::string_view> SplitCodepoints(absl::string_view text);

// Python str.isspace() for one code point.
bool IsPythonSpace(uint32_t codepoint);

enum class StripSide { kBoth, kLeft, kRight };
// str.strip / lstrip / rstrip: removes whitespace, or any code point of `chars` when given.
std::string PythonStrip(absl::string_view text, std::optional<absl::string_view> chars,
                        StripSide side);

// str.split(sep, maxsplit): with no `sep`, runs of whitespace separate and the ends are
// trimmed; `maxsplit` < 0 means no limit. REQUIRES: sep, when given, is not empty.
std::vector<std::string> PythonSplit(absl::string_view text, std::optional<absl::string_view> sep,
                                     int64_t maxsplit);

// str.splitlines() (without keepends): \n, \r\n, \r and the other Python line boundaries.
std::vector<std::string> PythonSplitLines(absl::string_view text);

std::string PythonUpper(absl::string_view text);
std::string PythonLower(absl::string_view text);
// str.capitalize(): first code point upper case, the rest lower case.
std::string PythonCapitalize(absl::string_view text);
// str.title(): upper case after every non-letter, lower case elsewhere ("they'Re").
std::string PythonTitle(absl::string_view text);
// Jinja's `title` filter: words start after whitespace, '-', '(', '{', '[' or '<'.
std::string JinjaTitle(absl::string_view text);

// str.replace(old, new, count); `count` < 0 replaces all. An empty `old` inserts `new` between
// code points and at both ends, as Python does.
std::string PythonReplace(absl::string_view text, absl::string_view old_text,
                          absl::string_view new_text, int64_t count);

// str.find: the code point index of the first `needle`, or -1.
int64_t PythonFind(absl::string_view text, absl::string_view needle);
// str.count: non-overlapping occurrences (code points + 1 for an empty needle).
int64_t PythonCount(absl::string_view text, absl::string_view needle);

// Number of code points (Python len()).
int64_t CodepointLength(absl::string_view text);

}  // namespace sparseserve::tokenizer::internal

#endif  // SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_STRING_OPS_H_
