#include "common/tokenizer/spm_tokenizer.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/core/status.h"
#include "common/tokenizer/internal/special_token_matcher.h"
#include "common/tokenizer/internal/symbol_merger.h"
#include "common/tokenizer/internal/vocab_names.h"
#include "common/tokenizer/utf8.h"

namespace sparseserve::tokenizer {
namespace {

constexpr absl::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 '▁'

using internal::kTokenByte;
using internal::kTokenControl;
using internal::kTokenNormal;
using internal::kTokenUnknown;
using internal::kTokenUserDefined;

// The GGUF type of `id`; without types, bos/eos are control and unk is unknown.
int32_t TypeAt(const SpmVocab& vocab, size_t id) {
  if (!vocab.token_types.empty()) return vocab.token_types[id];
  const auto signed_id = static_cast<int32_t>(id);
  if (signed_id == vocab.bos_id || signed_id == vocab.eos_id) return kTokenControl;
  return signed_id == vocab.unk_id ? kTokenUnknown : kTokenNormal;
}

std::vector<std::pair<std::string, int32_t>> LiteralTokens(const SpmVocab& vocab) {
  std::vector<std::pair<std::string, int32_t>> literals;
  for (size_t id = 0; id < vocab.pieces.size(); ++id) {
    const int32_t type = TypeAt(vocab, id);
    // As llama.cpp and HF added tokens do, "<unk>" written in text is the unk token too.
    if (type == kTokenControl || type == kTokenUserDefined || type == kTokenUnknown) {
      literals.emplace_back(vocab.pieces[id], static_cast<int32_t>(id));
    }
  }
  return literals;
}

absl::Status CheckId(int32_t id, size_t size, absl::string_view name) {
  if (id < -1 || id >= static_cast<int64_t>(size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SPM vocabulary: ", name, " id ", id, " out of range [0, ", size, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SpmTokenizer>> SpmTokenizer::Create(SpmVocab vocab) {
  const size_t n = vocab.pieces.size();
  if (n == 0 || n > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat("SPM vocabulary: bad piece count ", n));
  }
  if (!vocab.scores.empty() && vocab.scores.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("SPM vocabulary: ", vocab.scores.size(), " scores for ", n, " pieces"));
  }
  if (!vocab.token_types.empty() && vocab.token_types.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("SPM vocabulary: ", vocab.token_types.size(),
                                                   " token types for ", n, " pieces"));
  }
  SS_RETURN_IF_ERROR(CheckId(vocab.bos_id, n, "bos"));
  SS_RETURN_IF_ERROR(CheckId(vocab.eos_id, n, "eos"));
  SS_RETURN_IF_ERROR(CheckId(vocab.unk_id, n, "unk"));

  TokenizerInfo info;
  info.vocab_size = static_cast<int32_t>(n);
  info.bos_id = vocab.bos_id;
  info.add_bos = vocab.add_bos && vocab.bos_id >= 0;
  if (vocab.eos_id >= 0) info.eos_ids.push_back(vocab.eos_id);
  for (size_t id = 0; id < n; ++id) {
    const int32_t type = TypeAt(vocab, id);
    if ((type == kTokenControl || type == kTokenUserDefined) &&
        vocab.eos_id != static_cast<int32_t>(id) &&
        internal::IsEndOfGenerationName(vocab.pieces[id])) {
      info.eos_ids.push_back(static_cast<int32_t>(id));
    }
  }
  info.strips_leading_space = vocab.add_space_prefix;
  return std::unique_ptr<SpmTokenizer>(new SpmTokenizer(std::move(info), std::move(vocab)));
}

SpmTokenizer::SpmTokenizer(TokenizerInfo info, SpmVocab vocab)
    : Tokenizer(std::move(info)),
      vocab_(std::move(vocab)),
      specials_(std::make_unique<internal::SpecialTokenMatcher>(LiteralTokens(vocab_))) {
  byte_ids_.fill(-1);
  const size_t n = vocab_.pieces.size();
  for (size_t id = 0; id < n; ++id) {
    const int32_t type = TypeAt(vocab_, id);
    if ((type == kTokenNormal || type == kTokenUserDefined) &&
        absl::StrContains(vocab_.pieces[id], kMetaspace)) {
      uses_metaspace_ = true;
    }
  }
  token_bytes_.resize(n);
  for (size_t id = 0; id < n; ++id) {
    const std::string& piece = vocab_.pieces[id];
    const int32_t type = TypeAt(vocab_, id);
    const std::optional<uint8_t> byte = internal::ParseBytePiece(piece);
    if (byte.has_value() && (type == kTokenByte || vocab_.token_types.empty())) {
      if (byte_ids_[*byte] < 0) byte_ids_[*byte] = static_cast<int32_t>(id);
      token_bytes_[id] = std::string(1, static_cast<char>(*byte));
      continue;
    }
    if (type == kTokenControl || type == kTokenUnknown) continue;  // "" unless with_special
    if (type == kTokenNormal || type == kTokenUserDefined) {
      mergeable_.emplace(piece, static_cast<int32_t>(id));
    }
    token_bytes_[id] = uses_metaspace_ && type != kTokenUserDefined
                           ? absl::StrReplaceAll(piece, {{kMetaspace, " "}})
                           : piece;
  }
}

SpmTokenizer::~SpmTokenizer() = default;

int32_t SpmTokenizer::TypeOf(int32_t id) const {
  return TypeAt(vocab_, static_cast<size_t>(id));
}

absl::StatusOr<std::vector<int32_t>> SpmTokenizer::Encode(absl::string_view text,
                                                          bool add_special) const {
  SS_RETURN_IF_ERROR(ValidateUtf8(text));
  std::vector<int32_t> ids;
  if (add_special && add_bos()) ids.push_back(bos_id());
  // As in llama.cpp and HF (normalizers run per segment): every text fragment at the start or
  // after a literal token gets the dummy prefix.
  bool after_token = true;
  for (const internal::TextFragment& fragment : specials_->Split(text)) {
    if (fragment.id >= 0) {
      ids.push_back(fragment.id);
      after_token = true;
      continue;
    }
    SS_RETURN_IF_ERROR(EncodeFragment(fragment.text, after_token && vocab_.add_space_prefix, &ids));
    after_token = false;
  }
  return ids;
}

absl::Status SpmTokenizer::EncodeFragment(absl::string_view text, bool add_prefix,
                                          std::vector<int32_t>* ids) const {
  std::string word = add_prefix ? absl::StrCat(" ", text) : static_cast<std::string>(text);
  if (uses_metaspace_) word = absl::StrReplaceAll(word, {{" ", kMetaspace}});
  if (word.size() > UINT32_MAX) return absl::InvalidArgumentError("text too long");

  std::vector<uint32_t> starts;
  std::vector<int32_t> symbol_ids;
  for (size_t pos = 0; pos < word.size();) {
    const size_t length = NextUtf8Unit(word, pos).length;  // valid: checked by Encode
    const auto it = mergeable_.find(absl::string_view(word).substr(pos, length));
    starts.push_back(static_cast<uint32_t>(pos));
    symbol_ids.push_back(it == mergeable_.end() ? -1 : it->second);
    pos += length;
  }
  std::vector<internal::MergeSymbol> symbols =
      internal::MakeSymbolList(starts, symbol_ids, static_cast<uint32_t>(word.size()));
  const absl::string_view word_view = word;
  internal::MergeSymbols(
      &symbols, [&](const internal::MergeSymbol& left, const internal::MergeSymbol& right) {
        internal::MergeCandidate candidate;
        const auto it = mergeable_.find(word_view.substr(left.start, left.length + right.length));
        if (it != mergeable_.end()) {
          candidate.found = true;
          candidate.id = it->second;
          candidate.priority = vocab_.scores.empty() ? 0.0 : vocab_.scores[it->second];
        }
        return candidate;
      });

  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const internal::MergeSymbol& symbol = symbols[i];
    if (symbol.id >= 0) {
      ids->push_back(symbol.id);
      continue;
    }
    for (uint32_t b = symbol.start; b < symbol.start + symbol.length; ++b) {
      const uint8_t byte = static_cast<uint8_t>(word[b]);
      const int32_t id = byte_ids_[byte] >= 0 ? byte_ids_[byte] : vocab_.unk_id;
      if (id < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "SPM tokenizer: no piece, byte token or <unk> for byte 0x", absl::Hex(byte)));
      }
      ids->push_back(id);
      if (id == vocab_.unk_id) break;  // one <unk> per codepoint, as SentencePiece does
    }
  }
  return absl::OkStatus();
}

std::string SpmTokenizer::TokenBytes(int32_t id, bool with_special) const {
  if (id < 0 || id >= vocab_size()) return "";
  if (with_special) {
    const int32_t type = TypeOf(id);
    if (type == kTokenControl || type == kTokenUnknown) return vocab_.pieces[id];
  }
  return token_bytes_[id];
}

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeSpmTokenizer(SpmVocab vocab) {
  SS_ASSIGN_OR_RETURN(std::unique_ptr<SpmTokenizer> tokenizer,
                      SpmTokenizer::Create(std::move(vocab)));
  return std::unique_ptr<Tokenizer>(std::move(tokenizer));
}

}  // namespace sparseserve::tokenizer
