#include "common/tokenizer/internal/jinja_filters.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/core/status.h"
#include "common/tokenizer/internal/jinja_json.h"
#include "common/tokenizer/internal/jinja_operators.h"
#include "common/tokenizer/internal/jinja_string_ops.h"
#include "common/tokenizer/internal/jinja_tests.h"

namespace sparseserve::tokenizer::internal {
namespace {

constexpr absl::string_view kFilters[] = {
    "abs",     "attr",   "capitalize", "count",  "d",          "default",  "e",          "escape",
    "first",   "float",  "indent",     "int",    "items",      "join",     "last",       "length",
    "list",    "lower",  "map",        "max",    "min",        "reject",   "rejectattr", "replace",
    "reverse", "round",  "safe",       "select", "selectattr", "sort",     "string",     "sum",
    "title",   "tojson", "trim",       "unique", "upper",      "wordcount"};

bool BoolOption(const JinjaArgs& args, size_t index, absl::string_view name) {
  const JinjaValue* value = args.Get(index, name);
  return value != nullptr && value->Truthy();
}

// The items of `value` with `attribute` looked up in each (dotted paths and integer indices as
// in Jinja's make_attrgetter), or the items themselves when `attribute` is null.
absl::StatusOr<JinjaList> ItemsOrAttributes(const JinjaList& items, const JinjaValue* attribute) {
  if (attribute == nullptr || attribute->is_none()) return items;
  std::vector<std::string> path;
  if (attribute->is_string()) {
    path = PythonSplit(attribute->string_value(), ".", -1);
  } else {
    path.push_back(attribute->Str());
  }
  JinjaList out;
  for (const JinjaValue& item : items) {
    JinjaValue value = item;
    for (const std::string& part : path) {
      const bool is_index = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) != 0;
      });
      const JinjaValue key =
          is_index ? JinjaValue::Int(std::atoll(part.c_str())) : JinjaValue::String(part);
      SS_ASSIGN_OR_RETURN(value, JinjaGetItem(value, key));
    }
    out.push_back(std::move(value));
  }
  return out;
}

// Sort / min / max / unique keys: strings fold case unless `case_sensitive`.
JinjaValue SortKey(const JinjaValue& value, bool case_sensitive) {
  if (case_sensitive || !value.is_string()) return value;
  return JinjaValue::String(PythonLower(value.string_value()));
}

absl::StatusOr<JinjaValue> Length(const JinjaValue& input) {
  switch (input.kind()) {
    case JinjaValue::Kind::kUndefined: return JinjaValue::Int(0);
    case JinjaValue::Kind::kString: return JinjaValue::Int(CodepointLength(input.string_value()));
    case JinjaValue::Kind::kList: return JinjaValue::Int(static_cast<int64_t>(input.list().size()));
    case JinjaValue::Kind::kDict: return JinjaValue::Int(static_cast<int64_t>(input.dict().size()));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("object of type '", input.TypeName(), "' has no len()"));
  }
}

absl::StatusOr<JinjaValue> ToJson(const JinjaValue& input, const JinjaArgs& args) {
  // transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None,
  // sort_keys=False).
  SS_RETURN_IF_ERROR(
      args.Check("tojson", 0, 4, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JinjaJsonOptions options;
  options.ensure_ascii = BoolOption(args, 0, "ensure_ascii");
  const JinjaValue* indent = args.Get(1, "indent");
  if (indent != nullptr && indent->is_integral()) {
    options.indent =
        std::string(static_cast<size_t>(std::max<int64_t>(0, indent->int_value())), ' ');
  } else if (indent != nullptr && indent->is_string()) {
    options.indent = indent->string_value();
  }
  const JinjaValue* separators = args.Get(2, "separators");
  if (separators != nullptr && !separators->is_none()) {
    if (!separators->is_list() || separators->list().size() != 2 ||
        !separators->list()[0].is_string() || !separators->list()[1].is_string()) {
      return absl::InvalidArgumentError("tojson(): separators must be a pair of strings");
    }
    options.item_separator = separators->list()[0].string_value();
    options.key_separator = separators->list()[1].string_value();
  }
  options.sort_keys = BoolOption(args, 3, "sort_keys");
  SS_ASSIGN_OR_RETURN(std::string json, JinjaToJson(input, options));
  return JinjaValue::String(std::move(json));
}

// Jinja's do_indent: every line but the first (and the first too with `first`) gains the
// indentation; blank lines only with `blank`.
absl::StatusOr<JinjaValue> Indent(const JinjaValue& input, const JinjaArgs& args) {
  SS_RETURN_IF_ERROR(args.Check("indent", 0, 3, {"width", "first", "blank"}));
  const JinjaValue* width = args.Get(0, "width");
  std::string indentation(4, ' ');
  if (width != nullptr && width->is_string()) {
    indentation = width->string_value();
  } else if (width != nullptr) {
    SS_ASSIGN_OR_RETURN(const int64_t n, IntArgument(*width, "indent"));
    indentation.assign(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
  }
  const std::vector<std::string> lines = PythonSplitLines(input.Str() + "\n");
  SS_RETURN_IF_ERROR(CheckJinjaStringSize(input.Str().size() + lines.size() * indentation.size()));
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    const bool indented =
        i == 0 ? BoolOption(args, 1, "first") : !lines[i].empty() || BoolOption(args, 2, "blank");
    if (indented) out += indentation;
    out += lines[i];
  }
  return JinjaValue::String(std::move(out));
}

// int(d) for a float: truncation; NaN takes the filter's default (Python's ValueError, which
// Jinja catches), infinities and values past int64 fail (Python's OverflowError, which it
// does not).
absl::StatusOr<std::optional<int64_t>> TruncateFloat(double d) {
  if (std::isnan(d)) return std::optional<int64_t>();
  if (!(std::fabs(d) < 9.2e18)) {
    return absl::InvalidArgumentError("cannot convert float to a 64-bit integer");
  }
  return std::optional<int64_t>(static_cast<int64_t>(d));
}

absl::StatusOr<JinjaValue> ToInt(const JinjaValue& input, const JinjaArgs& args) {
  SS_RETURN_IF_ERROR(args.Check("int", 0, 2, {"default", "base"}));
  const JinjaValue* fallback = args.Get(0, "default");
  if (input.is_integral()) return JinjaValue::Int(input.int_value());
  if (input.kind() == JinjaValue::Kind::kFloat) {
    SS_ASSIGN_OR_RETURN(const std::optional<int64_t> truncated, TruncateFloat(input.float_value()));
    if (truncated) return JinjaValue::Int(*truncated);
  }
  if (input.is_string()) {
    const std::string text = PythonStrip(input.string_value(), std::nullopt, StripSide::kBoth);
    SS_ASSIGN_OR_RETURN(
        const int64_t base,
        IntArgument(args.Get(1, "base") != nullptr ? *args.Get(1, "base") : JinjaValue::Int(10),
                    "int"));
    char* end = nullptr;
    errno = 0;
    const long long parsed = std::strtoll(text.c_str(), &end, static_cast<int>(base));
    if (!text.empty() && errno == 0 && *end == '\0') return JinjaValue::Int(parsed);
    const double d = std::strtod(text.c_str(), &end);  // "42.23"|int gives 42, as in Jinja
    if (!text.empty() && *end == '\0') {
      SS_ASSIGN_OR_RETURN(const std::optional<int64_t> truncated, TruncateFloat(d));
      if (truncated) return JinjaValue::Int(*truncated);
    }
  }
  return fallback != nullptr ? *fallback : JinjaValue::Int(0);
}

absl::StatusOr<JinjaValue> ToFloat(const JinjaValue& input, const JinjaArgs& args) {
  SS_RETURN_IF_ERROR(args.Check("float", 0, 1, {"default"}));
  if (input.is_number()) return JinjaValue::Float(input.float_value());
  if (input.is_string()) {
    const std::string text = PythonStrip(input.string_value(), std::nullopt, StripSide::kBoth);
    char* end = nullptr;
    const double d = std::strtod(text.c_str(), &end);
    if (!text.empty() && *end == '\0') return JinjaValue::Float(d);
  }
  const JinjaValue* fallback = args.Get(0, "default");
  return fallback != nullptr ? *fallback : JinjaValue::Float(0);
}

absl::StatusOr<JinjaValue> Round(const JinjaValue& input, const JinjaArgs& args) {
  SS_RETURN_IF_ERROR(args.Check("round", 0, 2, {"precision", "method"}));
  if (!input.is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat("type ", input.TypeName(), " doesn't define __round__ method"));
  }
  const JinjaValue* precision_arg = args.Get(0, "precision");
  int64_t precision = 0;
  if (precision_arg != nullptr) {
    SS_ASSIGN_OR_RETURN(precision, IntArgument(*precision_arg, "round"));
  }
  const JinjaValue* method_arg = args.Get(1, "method");
  const std::string method = method_arg != nullptr ? method_arg->Str() : "common";
  if (method == "common" && input.is_integral() && precision >= 0) {
    return JinjaValue::Int(input.int_value());  // Python's round() keeps an int an int
  }
  if (method == "common" && precision >= 0 && std::isfinite(input.float_value())) {
    // Python rounds the exact binary value half to even (round(2.675, 2) is 2.67); printf's
    // %.Nf does the same, and digits past the 17th significant one change nothing.
    const int digits = static_cast<int>(std::min<int64_t>(precision, 340));
    const std::string text = absl::StrFormat("%.*f", digits, input.float_value());
    return JinjaValue::Float(std::strtod(text.c_str(), nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = input.float_value() * scale;
  double rounded;
  if (method == "common") {
    rounded = std::nearbyint(x);  // round half to even, as Python's round()
  } else if (method == "ceil") {
    rounded = std::ceil(x);
  } else if (method == "floor") {
    rounded = std::floor(x);
  } else {
    return absl::InvalidArgumentError("method must be common, ceil or floor");
  }
  return JinjaValue::Float(rounded / scale);
}

std::string HtmlEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

int64_t WordCount(const std::string& text) {
  int64_t words = 0;
  bool in_word = false;
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    const bool word_char = std::isalnum(byte) != 0 || c == '_' || byte >= 0x80;
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return words;
}

// select / reject / selectattr / rejectattr: keeps the items whose test result is `keep`.
absl::StatusOr<JinjaValue> SelectItems(const JinjaValue& input, const JinjaArgs& args,
                                       bool by_attribute, bool keep) {
  SS_ASSIGN_OR_RETURN(const JinjaList items, JinjaIterate(input));
  size_t next_arg = 0;
  JinjaList subjects = items;
  if (by_attribute) {
    if (args.positional.empty()) return absl::InvalidArgumentError("missing attribute");
    SS_ASSIGN_OR_RETURN(subjects, ItemsOrAttributes(items, &args.positional[0]));
    next_arg = 1;
  }
  std::optional<std::string> test;
  JinjaArgs test_args;
  if (next_arg < args.positional.size()) {
    SS_ASSIGN_OR_RETURN(test, StringArgument(args.positional[next_arg], "select"));
    if (!IsJinjaTest(*test))
      return absl::InvalidArgumentError(absl::StrCat("No test named '", *test, "'."));
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next_arg) + 1,
                                args.positional.end());
  }
  JinjaList out;
  for (size_t i = 0; i < items.size(); ++i) {
    bool passes = subjects[i].Truthy();
    if (test) {
      SS_ASSIGN_OR_RETURN(passes, ApplyJinjaTest(*test, subjects[i], test_args));
    }
    if (passes == keep) out.push_back(items[i]);
  }
  return JinjaValue::List(std::move(out));
}

absl::StatusOr<JinjaValue> Map(const JinjaValue& input, const JinjaArgs& args) {
  SS_ASSIGN_OR_RETURN(const JinjaList items, JinjaIterate(input));
  const JinjaValue* attribute = args.Get(args.positional.size(), "attribute");
  if (attribute != nullptr) {
    SS_ASSIGN_OR_RETURN(JinjaList values, ItemsOrAttributes(items, attribute));
    const JinjaValue* fallback = args.Get(args.positional.size(), "default");
    for (JinjaValue& value : values) {
      if (value.is_undefined() && fallback != nullptr) value = *fallback;
    }
    return JinjaValue::List(std::move(values));
  }
  if (args.positional.empty()) return absl::InvalidArgumentError("map(): no filter named");
  SS_ASSIGN_OR_RETURN(const std::string filter, StringArgument(args.positional[0], "map"));
  if (!IsJinjaFilter(filter)) {
    return absl::InvalidArgumentError(absl::StrCat("No filter named '", filter, "'."));
  }
  JinjaArgs filter_args;
  filter_args.positional.assign(args.positional.begin() + 1, args.positional.end());
  filter_args.keyword = args.keyword;
  JinjaList out;
  for (const JinjaValue& item : items) {
    SS_ASSIGN_OR_RETURN(JinjaValue value, ApplyJinjaFilter(filter, item, filter_args));
    out.push_back(std::move(value));
  }
  return JinjaValue::List(std::move(out));
}

// What `unique` compares: Python's equality, under which 1, 1.0 and True are one value.
std::string UniqueKey(const JinjaValue& value) {
  if (value.is_number()) return absl::StrCat("n", PythonFloatRepr(value.float_value()));
  return absl::StrCat(value.TypeName(), ":", value.Repr());
}

// sort, min, max and unique share their options: case_sensitive, attribute (reverse for sort).
absl::StatusOr<JinjaValue> Ordered(absl::string_view name, const JinjaValue& input,
                                   const JinjaArgs& args) {
  const bool is_sort = name == "sort";
  const size_t case_index = is_sort ? 1 : 0;
  const bool case_sensitive = BoolOption(args, case_index, "case_sensitive");
  SS_ASSIGN_OR_RETURN(const JinjaList items, JinjaIterate(input));
  SS_ASSIGN_OR_RETURN(const JinjaList keys,
                      ItemsOrAttributes(items, args.Get(case_index + 1, "attribute")));
  std::vector<size_t> order;
  for (size_t i = 0; i < items.size(); ++i) order.push_back(i);
  if (name == "unique") {
    absl::flat_hash_set<std::string> seen;
    JinjaList out;
    for (size_t i : order) {
      if (seen.insert(UniqueKey(SortKey(keys[i], case_sensitive))).second) {
        out.push_back(items[i]);
      }
    }
    return JinjaValue::List(std::move(out));
  }
  absl::Status error;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    absl::StatusOr<int> c =
        JinjaCompare(SortKey(keys[a], case_sensitive), SortKey(keys[b], case_sensitive));
    if (!c.ok()) error.Update(c.status());
    return c.ok() && *c < 0;
  });
  SS_RETURN_IF_ERROR(error);
  if (is_sort) {
    if (BoolOption(args, 0, "reverse")) std::reverse(order.begin(), order.end());
    JinjaList out;
    for (size_t i : order) out.push_back(items[i]);
    return JinjaValue::List(std::move(out));
  }
  if (order.empty()) {
    return JinjaValue::Undefined(absl::StrCat("No aggregated item, sequence was empty."));
  }
  return items[name == "min" ? order.front() : order.back()];
}

}  // namespace

bool IsJinjaFilter(absl::string_view name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

absl::StatusOr<JinjaValue> ApplyJinjaFilter(absl::string_view name, const JinjaValue& input,
                                            const JinjaArgs& args) {
  if (name == "default" || name == "d") {
    SS_RETURN_IF_ERROR(args.Check(name, 0, 2, {"default_value", "boolean"}));
    const bool replace =
        input.is_undefined() || (BoolOption(args, 1, "boolean") && !input.Truthy());
    if (!replace) return input;
    const JinjaValue* fallback = args.Get(0, "default_value");
    return fallback != nullptr ? *fallback : JinjaValue::String("");
  }
  if (name == "length" || name == "count") return Length(input);
  if (name == "tojson") return ToJson(input, args);
  if (name == "trim") {
    SS_RETURN_IF_ERROR(args.Check(name, 0, 1, {"chars"}));
    const JinjaValue* chars = args.Get(0, "chars");
    std::optional<std::string> strip_chars;
    if (chars != nullptr && !chars->is_none()) {
      SS_ASSIGN_OR_RETURN(strip_chars, StringArgument(*chars, "trim"));
    }
    return JinjaValue::String(PythonStrip(input.Str(), strip_chars, StripSide::kBoth));
  }
  if (name == "string") return input.is_string() ? input : JinjaValue::String(input.Str());
  if (name == "safe") return input;
  if (name == "upper") return JinjaValue::String(PythonUpper(input.Str()));
  if (name == "lower") return JinjaValue::String(PythonLower(input.Str()));
  if (name == "capitalize") return JinjaValue::String(PythonCapitalize(input.Str()));
  if (name == "title") return JinjaValue::String(JinjaTitle(input.Str()));
  if (name == "e" || name == "escape") return JinjaValue::String(HtmlEscape(input.Str()));
  if (name == "wordcount") return JinjaValue::Int(WordCount(input.Str()));
  if (name == "replace") {
    SS_RETURN_IF_ERROR(args.Check(name, 2, 3, {"count"}));
    SS_ASSIGN_OR_RETURN(const std::string old_text, StringArgument(args.positional[0], name));
    SS_ASSIGN_OR_RETURN(const std::string new_text, StringArgument(args.positional[1], name));
    const JinjaValue* count = args.Get(2, "count");
    int64_t limit = -1;
    if (count != nullptr && !count->is_none()) {
      SS_ASSIGN_OR_RETURN(limit, IntArgument(*count, name));
    }
    const std::string text = input.Str();
    SS_RETURN_IF_ERROR(CheckJinjaReplaceSize(text, old_text, new_text, limit));
    return JinjaValue::String(PythonReplace(text, old_text, new_text, limit));
  }
  if (name == "join") {
    SS_RETURN_IF_ERROR(args.Check(name, 0, 2, {"d", "attribute"}));
    SS_ASSIGN_OR_RETURN(const JinjaList items, JinjaIterate(input));
    SS_ASSIGN_OR_RETURN(const JinjaList values, ItemsOrAttributes(items, args.Get(1, "attribute")));
    const JinjaValue* separator_arg = args.Get(0, "d");
    const std::string separator = separator_arg != nullptr ? separator_arg->Str() : "";
    std::string joined;
    for (size_t i = 0; i < values.size(); ++i) {
      if (i > 0) joined += separator;
      joined += values[i].Str();
      SS_RETURN_IF_ERROR(CheckJinjaStringSize(joined.size()));
    }
    return JinjaValue::String(std::move(joined));
  }
  if (name == "first" || name == "last") {
    SS_ASSIGN_OR_RETURN(const JinjaList items, JinjaIterate(input));
    if (items.empty()) {
      return JinjaValue::Undefined(absl::StrCat("No ", name, " item, sequence was empty."));
    }
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list" || name == "items") {
    if (name == "items" && input.is_dict()) {
      JinjaArgs none;
      SS_ASSIGN_OR_RETURN(const JinjaValue items, JinjaGetAttribute(input, "items"));
      return CallJinjaFunction(items, none);
    }
    if (name == "items" && !input.is_undefined()) {
      return absl::InvalidArgumentError("Can only get item pairs from a mapping.");
    }
    SS_ASSIGN_OR_RETURN(JinjaList items, JinjaIterate(input));
    return JinjaValue::List(std::move(items));
  }
  if (name == "reverse") {
    if (input.is_string()) {
      std::vector<absl::string_view> chars = SplitCodepoints(input.string_value());
      std::reverse(chars.begin(), chars.end());
      return JinjaValue::String(absl::StrJoin(chars, ""));
    }
    SS_ASSIGN_OR_RETURN(JinjaList items, JinjaIterate(input));
    std::reverse(items.begin(), items.end());
    return JinjaValue::List(std::move(items));
  }
  if (name == "select" || name == "reject")
    return SelectItems(input, args, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") {
    return SelectItems(input, args, true, name == "selectattr");
  }
  if (name == "map") return Map(input, args);
  if (name == "sort" || name == "min" || name == "max" || name == "unique") {
    return Ordered(name, input, args);
  }
  if (name == "attr") {
    SS_RETURN_IF_ERROR(args.Check(name, 1, 1));
    SS_ASSIGN_OR_RETURN(const std::string attribute, StringArgument(args.positional[0], name));
    return JinjaGetAttribute(input, attribute);
  }
  if ((name == "int" || name == "float") && input.is_undefined()) {
    return absl::InvalidArgumentError(input.string_value());  // Undefined.__int__ fails
  }
  if (name == "int") return ToInt(input, args);
  if (name == "float") return ToFloat(input, args);
  if (name == "round") return Round(input, args);
  if (name == "indent") return Indent(input, args);
  if (name == "abs") {
    if (input.kind() == JinjaValue::Kind::kFloat)
      return JinjaValue::Float(std::fabs(input.float_value()));
    if (input.is_integral() && input.int_value() != INT64_MIN) {
      return JinjaValue::Int(input.int_value() < 0 ? -input.int_value() : input.int_value());
    }
    return absl::InvalidArgumentError(
        absl::StrCat("bad operand type for abs(): '", input.TypeName(), "'"));
  }
  // sum(attribute=None, start=0)
  SS_RETURN_IF_ERROR(args.Check(name, 0, 2, {"attribute", "start"}));
  SS_ASSIGN_OR_RETURN(const JinjaList items, JinjaIterate(input));
  SS_ASSIGN_OR_RETURN(const JinjaList values, ItemsOrAttributes(items, args.Get(0, "attribute")));
  const JinjaValue* start = args.Get(1, "start");
  JinjaValue total = start != nullptr ? *start : JinjaValue::Int(0);
  for (const JinjaValue& value : values) {
    if (!value.is_number() || !total.is_number()) {
      return absl::InvalidArgumentError(absl::StrCat("unsupported operand type(s) for +: '",
                                                     total.TypeName(), "' and '", value.TypeName(),
                                                     "'"));
    }
    if (total.is_integral() && value.is_integral()) {
      int64_t sum = 0;
      if (__builtin_add_overflow(total.int_value(), value.int_value(), &sum)) {
        return absl::InvalidArgumentError("integer overflow");
      }
      total = JinjaValue::Int(sum);
    } else {
      total = JinjaValue::Float(total.float_value() + value.float_value());
    }
  }
  return total;
}

}  // namespace sparseserve::tokenizer::internal
