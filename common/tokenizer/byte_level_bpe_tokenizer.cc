#include "common/tokenizer/byte_level_bpe_tokenizer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/tokenizer/internal/byte_unicode.h"
#include "common/tokenizer/internal/special_token_matcher.h"
#include "common/tokenizer/internal/symbol_merger.h"
#include "common/tokenizer/internal/vocab_names.h"
#include "common/tokenizer/utf8.h"

namespace sparseserve::tokenizer {
namespace {

using internal::kTokenControl;
using internal::kTokenNormal;
using internal::kTokenUserDefined;

// Per-call word cache bounds: repeated short words are encoded once per Encode call.
constexpr size_t kMaxCachedWords = 1 << 16;
constexpr size_t kMaxCachedWordBytes = 64;

// The GGUF type of `id`; without types, bos/eos are control.
int32_t TypeAt(const BpeVocab& vocab, size_t id) {
  if (!vocab.token_types.empty()) return vocab.token_types[id];
  const auto signed_id = static_cast<int32_t>(id);
  return signed_id == vocab.bos_id || signed_id == vocab.eos_id ? kTokenControl : kTokenNormal;
}

bool IsLiteral(int32_t type) {
  return type == kTokenControl || type == kTokenUserDefined;
}

std::vector<std::pair<std::string, int32_t>> LiteralTokens(const BpeVocab& vocab) {
  std::vector<std::pair<std::string, int32_t>> literals;
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    if (IsLiteral(TypeAt(vocab, id))) literals.emplace_back(vocab.tokens[id], id);
  }
  return literals;
}

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>> ByteLevelBpeTokenizer::Create(
    BpeVocab vocab) {
  const size_t n = vocab.tokens.size();
  if (n == 0 || n > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat("BPE vocabulary: bad token count ", n));
  }
  if (!vocab.token_types.empty() && vocab.token_types.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("BPE vocabulary: ", vocab.token_types.size(),
                                                   " token types for ", n, " tokens"));
  }
  for (int32_t id : {vocab.bos_id, vocab.eos_id}) {
    if (id < -1 || id >= static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("BPE vocabulary: special id ", id, " out of range [0, ", n, ")"));
    }
  }
  std::vector<std::string> patterns = vocab.pre_patterns;
  if (patterns.empty()) patterns.emplace_back(kGpt2Pattern);
  SS_ASSIGN_OR_RETURN(std::unique_ptr<Pretokenizer> pretokenizer, Pretokenizer::Create(patterns));

  TokenizerInfo info;
  info.vocab_size = static_cast<int32_t>(n);
  info.bos_id = vocab.bos_id;
  info.add_bos = vocab.add_bos && vocab.bos_id >= 0;
  if (vocab.eos_id >= 0) info.eos_ids.push_back(vocab.eos_id);
  for (size_t id = 0; id < n; ++id) {
    if (IsLiteral(TypeAt(vocab, id)) && static_cast<int32_t>(id) != vocab.eos_id &&
        internal::IsEndOfGenerationName(vocab.tokens[id])) {
      info.eos_ids.push_back(static_cast<int32_t>(id));
    }
  }
  std::unique_ptr<ByteLevelBpeTokenizer> tokenizer(
      new ByteLevelBpeTokenizer(std::move(info), std::move(vocab), std::move(pretokenizer)));
  SS_RETURN_IF_ERROR(tokenizer->Build());
  return tokenizer;
}

ByteLevelBpeTokenizer::ByteLevelBpeTokenizer(TokenizerInfo info, BpeVocab vocab,
                                             std::unique_ptr<Pretokenizer> pretokenizer)
    : Tokenizer(std::move(info)),
      vocab_(std::move(vocab)),
      pretokenizer_(std::move(pretokenizer)),
      specials_(std::make_unique<internal::SpecialTokenMatcher>(LiteralTokens(vocab_))) {}

ByteLevelBpeTokenizer::~ByteLevelBpeTokenizer() = default;

absl::Status ByteLevelBpeTokenizer::Build() {
  const size_t n = vocab_.tokens.size();
  token_bytes_.resize(n);
  for (size_t id = 0; id < n; ++id) {
    const std::string& token = vocab_.tokens[id];
    const int32_t type = TypeAt(vocab_, id);
    if (type == kTokenControl || type == internal::kTokenUnused) continue;  // decode to ""
    if (type == kTokenUserDefined) {
      token_bytes_[id] = token;
      continue;
    }
    token_ids_.emplace(token, static_cast<int32_t>(id));
    token_bytes_[id] = internal::DecodeByteLevel(token);
  }
  for (int byte = 0; byte < 256; ++byte) {
    const auto it = token_ids_.find(internal::ByteToUnicode(static_cast<uint8_t>(byte)));
    byte_ids_[byte] = it == token_ids_.end() ? -1 : it->second;
  }
  merge_rules_.reserve(vocab_.merges.size());
  for (size_t rank = 0; rank < vocab_.merges.size(); ++rank) {
    const auto& [left, right] = vocab_.merges[rank];
    const auto left_it = token_ids_.find(left);
    const auto right_it = token_ids_.find(right);
    const auto result_it = token_ids_.find(absl::StrCat(left, right));
    if (left_it == token_ids_.end() || right_it == token_ids_.end() ||
        result_it == token_ids_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("BPE merge ", rank, " '", left, " ", right,
                                                     "' names a token not in the vocabulary"));
    }
    // The first (lowest-rank) rule for a pair wins, as in Hugging Face tokenizers.
    merge_rules_.emplace(PairKey(left_it->second, right_it->second),
                         MergeRule{static_cast<int32_t>(rank), result_it->second});
  }
  return absl::OkStatus();
}

int32_t ByteLevelBpeTokenizer::TypeOf(int32_t id) const {
  return TypeAt(vocab_, static_cast<size_t>(id));
}

absl::StatusOr<std::vector<int32_t>> ByteLevelBpeTokenizer::Encode(absl::string_view text,
                                                                   bool add_special) const {
  SS_RETURN_IF_ERROR(ValidateUtf8(text));
  std::vector<int32_t> ids;
  if (add_special && add_bos()) ids.push_back(bos_id());
  // word -> [offset, offset + count) of its ids, earlier in `ids`.
  absl::flat_hash_map<absl::string_view, std::pair<size_t, size_t>> cache;
  std::string prefixed;
  for (const internal::TextFragment& fragment : specials_->Split(text)) {
    if (fragment.id >= 0) {
      ids.push_back(fragment.id);
      continue;
    }
    absl::string_view plain = fragment.text;
    if (vocab_.add_prefix_space && plain.front() != ' ') {
      // Kept alive until the next fragment; its words are not cached.
      prefixed = absl::StrCat(" ", plain);
      plain = prefixed;
    }
    SS_ASSIGN_OR_RETURN(std::vector<absl::string_view> words, pretokenizer_->Split(plain));
    const bool cacheable = plain.data() == fragment.text.data();
    for (absl::string_view word : words) {
      const auto it = cacheable ? cache.find(word) : cache.end();
      if (it != cache.end()) {
        const auto [offset, count] = it->second;
        for (size_t i = 0; i < count; ++i) {
          const int32_t id = ids[offset + i];  // copied: push_back may reallocate
          ids.push_back(id);
        }
        continue;
      }
      const size_t offset = ids.size();
      SS_RETURN_IF_ERROR(EncodeWord(word, &ids));
      if (cacheable && word.size() <= kMaxCachedWordBytes && cache.size() < kMaxCachedWords) {
        cache.emplace(word, std::make_pair(offset, ids.size() - offset));
      }
    }
  }
  return ids;
}

absl::Status ByteLevelBpeTokenizer::EncodeWord(absl::string_view word,
                                               std::vector<int32_t>* ids) const {
  if (vocab_.ignore_merges) {
    const auto it = token_ids_.find(internal::EncodeByteLevel(word));
    if (it != token_ids_.end()) {
      ids->push_back(it->second);
      return absl::OkStatus();
    }
  }
  if (word.size() > UINT32_MAX) return absl::InvalidArgumentError("word too long");
  std::vector<uint32_t> starts(word.size());
  std::vector<int32_t> symbol_ids(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    const uint8_t byte = static_cast<uint8_t>(word[i]);
    if (byte_ids_[byte] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("byte-level BPE: byte 0x", absl::Hex(byte), " has no token"));
    }
    starts[i] = static_cast<uint32_t>(i);
    symbol_ids[i] = byte_ids_[byte];
  }
  std::vector<internal::MergeSymbol> symbols =
      internal::MakeSymbolList(starts, symbol_ids, static_cast<uint32_t>(word.size()));
  internal::MergeSymbols(
      &symbols, [&](const internal::MergeSymbol& left, const internal::MergeSymbol& right) {
        internal::MergeCandidate candidate;
        const auto it = merge_rules_.find(PairKey(left.id, right.id));
        if (it != merge_rules_.end()) {
          candidate.found = true;
          candidate.priority = -static_cast<double>(it->second.rank);
          candidate.id = it->second.result_id;
        }
        return candidate;
      });
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    ids->push_back(symbols[i].id);
  }
  return absl::OkStatus();
}

std::string ByteLevelBpeTokenizer::TokenBytes(int32_t id, bool with_special) const {
  if (id < 0 || id >= vocab_size()) return "";
  if (with_special && TypeOf(id) == kTokenControl) return vocab_.tokens[id];
  return token_bytes_[id];
}

absl::StatusOr<std::vector<std::string>> ByteLevelBpeTokenizer::PreTokenize(
    absl::string_view text) const {
  SS_RETURN_IF_ERROR(ValidateUtf8(text));
  SS_ASSIGN_OR_RETURN(std::vector<absl::string_view> words, pretokenizer_->Split(text));
  return std::vector<std::string>(words.begin(), words.end());
}

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeByteLevelBpeTokenizer(BpeVocab vocab) {
  SS_ASSIGN_OR_RETURN(std::unique_ptr<ByteLevelBpeTokenizer> tokenizer,
                      ByteLevelBpeTokenizer::Create(std::move(vocab)));
  return std::unique_ptr<Tokenizer>(std::move(tokenizer));
}

}  // namespace sparseserve::tokenizer
