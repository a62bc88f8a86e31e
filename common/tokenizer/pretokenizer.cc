#include "common/tokenizer/pretokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/tokenizer/utf8.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace sparseserve::tokenizer {
namespace {

std::string Pcre2ErrorMessage(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  if (n < 0) return absl::StrCat("PCRE2 error ", code);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};
using MatchData = std::unique_ptr<pcre2_match_data, MatchDataDeleter>;

}  // namespace

absl::StatusOr<std::string> PatternForGgufPre(absl::string_view pre) {
  if (pre == "default" || pre == "gpt-2" || pre == "gpt2")
    return static_cast<std::string>(kGpt2Pattern);
  if (pre == "llama3" || pre == "llama-bpe" || pre == "llama-v3") {
    return static_cast<std::string>(kLlama3Pattern);
  }
  if (pre == "qwen2") return static_cast<std::string>(kQwen2Pattern);
  return absl::UnimplementedError(absl::StrCat("unsupported tokenizer.ggml.pre '", pre, "'"));
}

// One compiled pattern: owns the pcre2_code.
class Pretokenizer::Regex {
 public:
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(const std::string& pattern) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (code == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("pre-tokenizer regex '", pattern,
                                                     "' at offset ", offset, ": ",
                                                     Pcre2ErrorMessage(error)));
    }
    // JIT is an optimisation; the interpreter is used when it is unavailable.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    return std::unique_ptr<Regex>(new Regex(code));
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the words of `text` (matches and the gaps between them) to `words`.
  absl::Status SplitInto(absl::string_view text, std::vector<absl::string_view>* words) const {
    MatchData data(pcre2_match_data_create_from_pattern(code_, nullptr));
    if (data == nullptr) return absl::ResourceExhaustedError("pcre2 match data");
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t gap_start = 0;
    size_t pos = 0;
    while (pos < text.size()) {
      int rc =
          pcre2_match(code_, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        rc = pcre2_match(code_, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                         data.get(), nullptr);
      }
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("pre-tokenizer regex failed: ", Pcre2ErrorMessage(rc)));
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
      const size_t begin = ovector[0];
      const size_t end = ovector[1];
      if (end <= begin || begin < pos) {
        // An empty (or \K-shifted) match splits nothing: step over one character and keep the
        // gap open.
        const size_t at = std::max(begin, pos);
        if (at >= text.size()) break;
        pos = at + NextUtf8Unit(text, at).length;
        continue;
      }
      if (begin > gap_start) words->push_back(text.substr(gap_start, begin - gap_start));
      words->push_back(text.substr(begin, end - begin));
      pos = end;
      gap_start = end;
    }
    if (text.size() > gap_start) words->push_back(text.substr(gap_start));
    return absl::OkStatus();
  }

 private:
  explicit Regex(pcre2_code* code) : code_(code) {}
  pcre2_code* code_;
};

absl::StatusOr<std::unique_ptr<Pretokenizer>> Pretokenizer::Create(
    const std::vector<std::string>& patterns) {
  if (patterns.empty()) return absl::InvalidArgumentError("pre-tokenizer without a pattern");
  std::vector<std::unique_ptr<Regex>> stages;
  for (const std::string& pattern : patterns) {
    SS_ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex, Regex::Compile(pattern));
    stages.push_back(std::move(regex));
  }
  return std::unique_ptr<Pretokenizer>(new Pretokenizer(std::move(stages)));
}

Pretokenizer::Pretokenizer(std::vector<std::unique_ptr<Regex>> stages)
    : stages_(std::move(stages)) {}

Pretokenizer::~Pretokenizer() = default;

absl::StatusOr<std::vector<absl::string_view>> Pretokenizer::Split(absl::string_view text) const {
  std::vector<absl::string_view> words;
  if (text.empty()) return words;
  words.push_back(text);
  for (const auto& stage : stages_) {
    std::vector<absl::string_view> next;
    next.reserve(words.size());
    for (absl::string_view word : words) SS_RETURN_IF_ERROR(stage->SplitInto(word, &next));
    words = std::move(next);
  }
  return words;
}

}  // namespace sparseserve::tokenizer
