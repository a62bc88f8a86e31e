#include "common/tokenizer/internal/jinja_methods.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/tokenizer/internal/jinja_string_ops.h"

namespace sparseserve::tokenizer::internal {
namespace {

constexpr absl::string_view kStringMethods[] = {
    "strip", "lstrip",  "rstrip",  "split",      "splitlines", "startswith", "endswith",
    "upper", "lower",   "title",   "capitalize", "replace",    "find",       "count",
    "join",  "isdigit", "isalpha", "isspace",    "isalnum",    "islower",    "isupper"};
constexpr absl::string_view kDictMethods[] = {"items", "keys", "values", "get"};
template <size_t N>
bool Contains(const absl::string_view (&names)[N], absl::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

// Python's str predicates over ASCII (`test` on every byte; false for "").
template <typename Predicate>
JinjaValue AllBytes(const std::string& text, Predicate test) {
  return JinjaValue::Bool(!text.empty() && std::all_of(text.begin(), text.end(), [&](char c) {
    return test(static_cast<unsigned char>(c));
  }));
}

// `prefix` as a str or a tuple of str (startswith / endswith).
absl::StatusOr<std::vector<std::string>> Affixes(const JinjaValue& value,
                                                 absl::string_view method) {
  if (value.is_string()) return std::vector<std::string>{value.string_value()};
  if (!value.is_list()) {
    return absl::InvalidArgumentError(
        absl::StrCat(method, " first arg must be str or a tuple of str, not ", value.TypeName()));
  }
  std::vector<std::string> out;
  for (const JinjaValue& item : value.list()) {
    SS_ASSIGN_OR_RETURN(std::string text, StringArgument(item, method));
    out.push_back(std::move(text));
  }
  return out;
}

absl::StatusOr<std::optional<std::string>> OptionalString(const JinjaArgs& args, size_t index,
                                                          absl::string_view name,
                                                          absl::string_view method) {
  const JinjaValue* value = args.Get(index, name);
  if (value == nullptr || value->is_none()) return std::optional<std::string>();
  SS_ASSIGN_OR_RETURN(std::string text, StringArgument(*value, method));
  return std::optional<std::string>(std::move(text));
}

absl::StatusOr<int64_t> OptionalInt(const JinjaArgs& args, size_t index, absl::string_view name,
                                    absl::string_view method, int64_t fallback) {
  const JinjaValue* value = args.Get(index, name);
  if (value == nullptr) return fallback;
  return IntArgument(*value, method);
}

JinjaValue StringList(std::vector<std::string> parts) {
  JinjaList items;
  items.reserve(parts.size());
  for (std::string& part : parts) items.push_back(JinjaValue::String(std::move(part)));
  return JinjaValue::List(std::move(items));
}

absl::StatusOr<JinjaValue> CallStringMethod(const std::string& text, absl::string_view method,
                                            const JinjaArgs& args) {
  if (method == "strip" || method == "lstrip" || method == "rstrip") {
    SS_RETURN_IF_ERROR(args.Check(method, 0, 1));
    SS_ASSIGN_OR_RETURN(const std::optional<std::string> chars,
                        OptionalString(args, 0, "chars", method));
    const StripSide side = method == "strip"    ? StripSide::kBoth
                           : method == "lstrip" ? StripSide::kLeft
                                                : StripSide::kRight;
    return JinjaValue::String(PythonStrip(text, chars, side));
  }
  if (method == "split") {
    SS_RETURN_IF_ERROR(args.Check(method, 0, 2, {"sep", "maxsplit"}));
    SS_ASSIGN_OR_RETURN(const std::optional<std::string> sep,
                        OptionalString(args, 0, "sep", method));
    SS_ASSIGN_OR_RETURN(const int64_t maxsplit, OptionalInt(args, 1, "maxsplit", method, -1));
    if (sep && sep->empty()) return absl::InvalidArgumentError("empty separator");
    return StringList(PythonSplit(text, sep, maxsplit));
  }
  if (method == "startswith" || method == "endswith") {
    SS_RETURN_IF_ERROR(args.Check(method, 1, 1));
    SS_ASSIGN_OR_RETURN(const std::vector<std::string> affixes,
                        Affixes(args.positional[0], method));
    const bool found = std::any_of(affixes.begin(), affixes.end(), [&](const std::string& a) {
      return method == "startswith" ? absl::StartsWith(text, a) : absl::EndsWith(text, a);
    });
    return JinjaValue::Bool(found);
  }
  if (method == "replace") {
    SS_RETURN_IF_ERROR(args.Check(method, 2, 3));
    SS_ASSIGN_OR_RETURN(const std::string old_text, StringArgument(args.positional[0], method));
    SS_ASSIGN_OR_RETURN(const std::string new_text, StringArgument(args.positional[1], method));
    SS_ASSIGN_OR_RETURN(const int64_t count, OptionalInt(args, 2, "count", method, -1));
    SS_RETURN_IF_ERROR(CheckJinjaReplaceSize(text, old_text, new_text, count));
    return JinjaValue::String(PythonReplace(text, old_text, new_text, count));
  }
  if (method == "find" || method == "count") {
    SS_RETURN_IF_ERROR(args.Check(method, 1, 1));
    SS_ASSIGN_OR_RETURN(const std::string needle, StringArgument(args.positional[0], method));
    return JinjaValue::Int(method == "find" ? PythonFind(text, needle) : PythonCount(text, needle));
  }
  if (method == "join") {
    SS_RETURN_IF_ERROR(args.Check(method, 1, 1));
    SS_ASSIGN_OR_RETURN(const JinjaList items, JinjaIterate(args.positional[0]));
    std::string joined;
    for (const JinjaValue& item : items) {
      SS_ASSIGN_OR_RETURN(const std::string part, StringArgument(item, method));
      if (&item != &items.front()) joined += text;
      joined += part;
      SS_RETURN_IF_ERROR(CheckJinjaStringSize(joined.size()));
    }
    return JinjaValue::String(std::move(joined));
  }
  SS_RETURN_IF_ERROR(args.Check(method, 0, 0));
  if (method == "splitlines") return StringList(PythonSplitLines(text));
  if (method == "upper") return JinjaValue::String(PythonUpper(text));
  if (method == "lower") return JinjaValue::String(PythonLower(text));
  if (method == "title") return JinjaValue::String(PythonTitle(text));
  if (method == "capitalize") return JinjaValue::String(PythonCapitalize(text));
  if (method == "isdigit")
    return AllBytes(text, [](unsigned char c) { return c >= '0' && c <= '9'; });
  if (method == "isalpha")
    return AllBytes(text, [](unsigned char c) { return std::isalpha(c) != 0; });
  if (method == "isalnum")
    return AllBytes(text, [](unsigned char c) { return std::isalnum(c) != 0; });
  if (method == "isspace") return AllBytes(text, [](unsigned char c) { return IsPythonSpace(c); });
  const std::string lower = PythonLower(text);
  const std::string upper = PythonUpper(text);
  const bool has_cased = lower != upper;
  if (method == "islower") return JinjaValue::Bool(has_cased && lower == text);
  return JinjaValue::Bool(has_cased && upper == text);  // isupper
}

absl::StatusOr<JinjaValue> CallDictMethod(const JinjaDict& dict, absl::string_view method,
                                          const JinjaArgs& args) {
  if (method == "get") {
    SS_RETURN_IF_ERROR(args.Check(method, 1, 2));
    const JinjaValue* value =
        args.positional[0].is_string() ? dict.Find(args.positional[0].string_value()) : nullptr;
    if (value != nullptr) return *value;
    return args.positional.size() > 1 ? args.positional[1] : JinjaValue::None();
  }
  SS_RETURN_IF_ERROR(args.Check(method, 0, 0));
  JinjaList items;
  for (const auto& [key, value] : dict.entries()) {
    if (method == "keys") {
      items.push_back(JinjaValue::String(key));
    } else if (method == "values") {
      items.push_back(value);
    } else {  // items: (key, value) tuples
      items.push_back(JinjaValue::List({JinjaValue::String(key), value}, /*is_tuple=*/true));
    }
  }
  return JinjaValue::List(std::move(items));
}

}  // namespace

bool HasJinjaMethod(const JinjaValue& object, absl::string_view name) {
  if (object.is_string()) return Contains(kStringMethods, name);
  if (object.is_dict()) return Contains(kDictMethods, name);
  return false;
}

absl::StatusOr<JinjaValue> CallJinjaMethod(const JinjaValue& receiver, absl::string_view method,
                                           const JinjaArgs& args) {
  if (receiver.is_string()) return CallStringMethod(receiver.string_value(), method, args);
  return CallDictMethod(receiver.dict(), method, args);
}

}  // namespace sparseserve::tokenizer::internal
