#include "common/tokenizer/internal/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/tokenizer/internal/jinja_methods.h"
#include "common/tokenizer/internal/jinja_string_ops.h"

namespace sparseserve::tokenizer::internal {
namespace {

// Jinja's sandbox refuses larger ranges (jinja2.sandbox.MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

constexpr absl::string_view kGlobals[] = {"range", "namespace", "dict", "raise_exception",
                                          "strftime_now"};

// Jinja's object_type_repr: "None", or "<type> object".
std::string ObjectTypeRepr(const JinjaValue& object) {
  if (object.is_none()) return "None";
  return absl::StrCat(object.TypeName(), " object");
}

JinjaValue NoAttribute(const JinjaValue& object, absl::string_view name) {
  return JinjaValue::Undefined(
      absl::StrCat("'", ObjectTypeRepr(object), "' has no attribute '", name, "'"));
}

absl::StatusOr<JinjaValue> Range(const JinjaArgs& args) {
  SS_RETURN_IF_ERROR(args.Check("range", 1, 3));
  std::vector<int64_t> bounds;
  for (const JinjaValue& arg : args.positional) {
    SS_ASSIGN_OR_RETURN(const int64_t bound, IntArgument(arg, "range"));
    bounds.push_back(bound);
  }
  const int64_t start = bounds.size() > 1 ? bounds[0] : 0;
  const int64_t stop = bounds.size() > 1 ? bounds[1] : bounds[0];
  const int64_t step = bounds.size() > 2 ? bounds[2] : 1;
  if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
  // Span / step, computed in double: the bounds are arbitrary int64 values.
  const double length = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                                  static_cast<double>(step));
  if (length > static_cast<double>(kMaxRange)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Range too big. The sandbox blocks ranges larger than MAX_RANGE (", kMaxRange, ")."));
  }
  JinjaList items;
  for (int64_t i = 0; i < static_cast<int64_t>(std::max(0.0, length)); ++i) {
    items.push_back(JinjaValue::Int(start + i * step));
  }
  return JinjaValue::List(std::move(items));
}

// namespace(...) and dict(...): entries of positional dicts, then keyword arguments.
absl::StatusOr<JinjaDict> EntriesOf(const JinjaArgs& args, absl::string_view function) {
  JinjaDict entries;
  for (const JinjaValue& arg : args.positional) {
    if (!arg.is_dict()) {
      return absl::InvalidArgumentError(
          absl::StrCat(function, "() positional arguments must be dicts, not ", arg.TypeName()));
    }
    for (const auto& [key, value] : arg.dict().entries()) entries.Set(key, value);
  }
  for (const auto& [key, value] : args.keyword) entries.Set(key, value);
  return entries;
}

absl::StatusOr<JinjaValue> StrftimeNow(const JinjaArgs& args) {
  SS_RETURN_IF_ERROR(args.Check("strftime_now", 1, 1));
  SS_ASSIGN_OR_RETURN(const std::string format, StringArgument(args.positional[0], "strftime_now"));
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[256];
  const size_t size = std::strftime(buf, sizeof(buf), format.c_str(), &local);
  if (size == 0 && !format.empty()) {
    return absl::InvalidArgumentError("strftime_now(): format too long");
  }
  return JinjaValue::String(std::string(buf, size));
}

absl::StatusOr<JinjaValue> CallGlobal(absl::string_view name, const JinjaArgs& args) {
  if (name == "range") return Range(args);
  if (name == "namespace" || name == "dict") {
    SS_ASSIGN_OR_RETURN(JinjaDict entries, EntriesOf(args, name));
    return name == "dict" ? JinjaValue::Dict(std::move(entries))
                          : JinjaValue::Namespace(std::move(entries));
  }
  if (name == "strftime_now") return StrftimeNow(args);
  // raise_exception: the template's own message, verbatim.
  SS_RETURN_IF_ERROR(args.Check(name, 1, 1));
  return absl::InvalidArgumentError(args.positional[0].Str());
}

}  // namespace

const JinjaValue* JinjaArgs::Get(size_t index, absl::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [key, value] : keyword) {
    if (key == name) return &value;
  }
  return nullptr;
}

absl::Status JinjaArgs::Check(absl::string_view function, size_t min, size_t max,
                              std::initializer_list<absl::string_view> keywords) const {
  if (positional.size() < min || positional.size() > max) {
    return absl::InvalidArgumentError(absl::StrCat(function, "() takes ", min == max ? "" : "from ",
                                                   min, min == max ? "" : absl::StrCat(" to ", max),
                                                   " positional arguments but ", positional.size(),
                                                   " were given"));
  }
  for (const auto& kwarg : keyword) {
    if (std::find(keywords.begin(), keywords.end(), kwarg.first) == keywords.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(function, "() got an unexpected keyword argument '", kwarg.first, "'"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckJinjaStringSize(size_t bytes) {
  if (bytes <= kMaxJinjaStringBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("string of ", bytes, " bytes is over the limit of ", kMaxJinjaStringBytes));
}

absl::Status CheckJinjaReplaceSize(absl::string_view text, absl::string_view old_text,
                                   absl::string_view new_text, int64_t count) {
  int64_t matches = PythonCount(text, old_text);
  if (count >= 0) matches = std::min(matches, count);
  const double bytes = static_cast<double>(text.size()) +
                       static_cast<double>(matches) * static_cast<double>(new_text.size());
  if (bytes <= static_cast<double>(kMaxJinjaStringBytes)) return absl::OkStatus();
  return CheckJinjaStringSize(static_cast<size_t>(std::min(bytes, 1e18)));
}

absl::StatusOr<std::string> StringArgument(const JinjaValue& value, absl::string_view function) {
  if (value.is_string()) return value.string_value();
  if (value.is_undefined()) return absl::InvalidArgumentError(value.string_value());
  return absl::InvalidArgumentError(
      absl::StrCat(function, "() argument must be str, not ", value.TypeName()));
}

absl::StatusOr<int64_t> IntArgument(const JinjaValue& value, absl::string_view function) {
  if (value.is_integral()) return value.int_value();
  if (value.is_undefined()) return absl::InvalidArgumentError(value.string_value());
  return absl::InvalidArgumentError(
      absl::StrCat(function, "() argument must be an integer, not ", value.TypeName()));
}

absl::StatusOr<JinjaValue> JinjaGetAttribute(const JinjaValue& object, const std::string& name) {
  if (object.is_undefined()) return absl::InvalidArgumentError(object.string_value());
  if (object.kind() == JinjaValue::Kind::kNamespace) {
    const JinjaValue* value = object.namespace_attributes().Find(name);
    return value != nullptr ? *value : NoAttribute(object, name);
  }
  if (HasJinjaMethod(object, name)) {
    return JinjaValue::Function(name, object);
  }
  if (object.is_dict()) {
    const JinjaValue* value = object.dict().Find(name);
    if (value != nullptr) return *value;
  }
  return NoAttribute(object, name);
}

absl::StatusOr<JinjaValue> JinjaGetItem(const JinjaValue& object, const JinjaValue& key) {
  if (object.is_undefined()) return absl::InvalidArgumentError(object.string_value());
  if (key.is_string() && (object.is_dict() || object.kind() == JinjaValue::Kind::kNamespace)) {
    const JinjaDict& dict = object.is_dict() ? object.dict() : object.namespace_attributes();
    const JinjaValue* value = dict.Find(key.string_value());
    if (value != nullptr) return *value;
  }
  if (key.is_integral() && (object.is_list() || object.is_string())) {
    std::vector<absl::string_view> chars;
    if (object.is_string()) chars = SplitCodepoints(object.string_value());
    const int64_t size = object.is_list() ? static_cast<int64_t>(object.list().size())
                                          : static_cast<int64_t>(chars.size());
    const int64_t index = key.int_value() < 0 ? key.int_value() + size : key.int_value();
    if (index >= 0 && index < size) {
      const auto at = static_cast<size_t>(index);
      return object.is_list() ? object.list()[at] : JinjaValue::String(std::string(chars[at]));
    }
  }
  if (key.is_string()) return JinjaGetAttribute(object, key.string_value());
  return JinjaValue::Undefined(
      absl::StrCat(ObjectTypeRepr(object), " has no element ", key.Repr()));
}

absl::StatusOr<JinjaValue> JinjaSlice(const JinjaValue& object, const JinjaValue& start,
                                      const JinjaValue& stop, const JinjaValue& step) {
  if (object.is_undefined()) return absl::InvalidArgumentError(object.string_value());
  if (!object.is_list() && !object.is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", object.TypeName(), "' object is not subscriptable"));
  }
  auto bound = [](const JinjaValue& v) -> absl::StatusOr<std::optional<int64_t>> {
    if (v.is_undefined() || v.is_none()) return std::optional<int64_t>();
    if (!v.is_integral()) {
      return absl::InvalidArgumentError(
          "slice indices must be integers or None or have an __index__ method");
    }
    return std::optional<int64_t>(v.int_value());
  };
  SS_ASSIGN_OR_RETURN(const std::optional<int64_t> first, bound(start));
  SS_ASSIGN_OR_RETURN(const std::optional<int64_t> last, bound(stop));
  SS_ASSIGN_OR_RETURN(const std::optional<int64_t> stride, bound(step));
  // A step past the size of any sequence behaves like the size itself; clamping keeps -by
  // and the index arithmetic below from overflowing.
  const int64_t by =
      std::clamp<int64_t>(stride.value_or(1), -static_cast<int64_t>(kMaxJinjaStringBytes) - 1,
                          static_cast<int64_t>(kMaxJinjaStringBytes) + 1);
  if (by == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  std::vector<absl::string_view> chars;
  if (object.is_string()) chars = SplitCodepoints(object.string_value());
  const int64_t size = object.is_list() ? static_cast<int64_t>(object.list().size())
                                        : static_cast<int64_t>(chars.size());
  // Python's PySlice_AdjustIndices.
  auto clamp = [&](std::optional<int64_t> index, int64_t fallback) {
    if (!index) return fallback;
    int64_t i = *index < 0 ? *index + size : *index;
    if (i < 0) i = by < 0 ? -1 : 0;
    if (i >= size) i = by < 0 ? size - 1 : size;
    return i;
  };
  const int64_t from = clamp(first, by < 0 ? size - 1 : 0);
  const int64_t to = clamp(last, by < 0 ? -1 : size);
  const int64_t span = by > 0 ? to - from : from - to;
  const int64_t count = span > 0 ? (span - 1) / (by > 0 ? by : -by) + 1 : 0;
  JinjaList items;
  std::string text;
  for (int64_t k = 0; k < count; ++k) {
    const auto at = static_cast<size_t>(from + k * by);
    if (object.is_list()) {
      items.push_back(object.list()[at]);
    } else {
      absl::StrAppend(&text, chars[at]);
    }
  }
  if (object.is_string()) return JinjaValue::String(std::move(text));
  return JinjaValue::List(std::move(items), object.is_tuple());
}

absl::StatusOr<JinjaList> JinjaIterate(const JinjaValue& value) {
  switch (value.kind()) {
    case JinjaValue::Kind::kUndefined: return JinjaList();
    case JinjaValue::Kind::kList: return value.list();
    case JinjaValue::Kind::kDict: {
      JinjaList keys;
      for (const auto& entry : value.dict().entries()) {
        keys.push_back(JinjaValue::String(entry.first));
      }
      return keys;
    }
    case JinjaValue::Kind::kString: {
      const std::vector<absl::string_view> codepoints = SplitCodepoints(value.string_value());
      if (codepoints.size() > kMaxJinjaListItems) {
        return absl::InvalidArgumentError(
            absl::StrCat("iterating a string of more than ", kMaxJinjaListItems, " characters"));
      }
      JinjaList chars;
      chars.reserve(codepoints.size());
      for (absl::string_view c : codepoints) chars.push_back(JinjaValue::String(std::string(c)));
      return chars;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("'", value.TypeName(), "' object is not iterable"));
  }
}

absl::StatusOr<bool> JinjaContains(const JinjaValue& container, const JinjaValue& item) {
  switch (container.kind()) {
    case JinjaValue::Kind::kUndefined: return false;
    case JinjaValue::Kind::kString:
      if (!item.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'in <string>' requires string as left operand, not ", item.TypeName()));
      }
      return absl::StrContains(container.string_value(), item.string_value());
    case JinjaValue::Kind::kList:
      return std::any_of(container.list().begin(), container.list().end(),
                         [&](const JinjaValue& element) { return JinjaEquals(element, item); });
    case JinjaValue::Kind::kDict:
      return item.is_string() && container.dict().Find(item.string_value()) != nullptr;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("argument of type '", container.TypeName(), "' is not iterable"));
  }
}

absl::StatusOr<JinjaValue> CallJinjaFunction(const JinjaValue& function, const JinjaArgs& args) {
  if (function.is_undefined()) return absl::InvalidArgumentError(function.string_value());
  if (function.kind() != JinjaValue::Kind::kFunction) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", function.TypeName(), "' object is not callable"));
  }
  const JinjaValue& receiver = function.receiver();
  if (receiver.is_undefined()) return CallGlobal(function.string_value(), args);
  return CallJinjaMethod(receiver, function.string_value(), args);
}

JinjaDict JinjaGlobals() {
  JinjaDict globals;
  for (absl::string_view name : kGlobals) {
    globals.Set(std::string(name), JinjaValue::Function(std::string(name), JinjaValue()));
  }
  return globals;
}

}  // namespace sparseserve::tokenizer::internal
