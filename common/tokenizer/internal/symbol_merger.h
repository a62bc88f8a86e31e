// Greedy pair merging shared by both BPE kinds: repeatedly merge the adjacent symbol pair with
// the highest priority (ties: leftmost) until no pair merges. A heap over a linked list makes it
// O(n log n) in the number of symbols. Stateless, thread-safe.
#ifndef SPARSESERVE_COMMON_TOKENIZER_INTERNAL_SYMBOL_MERGER_H_
#define SPARSESERVE_COMMON_TOKENIZER_INTERNAL_SYMBOL_MERGER_H_

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"

namespace sparseserve::tokenizer::internal {

// One symbol of a word: a byte range of the word text plus the token id it currently is.
struct MergeSymbol {
  int32_t prev = -1;    // index of the previous live symbol, -1 at the start
  int32_t next = -1;    // index of the next live symbol, -1 at the end
  uint32_t start = 0;   // byte offset in the word
  uint32_t length = 0;  // bytes; 0 once merged into its left neighbour
  int32_t id = -1;      // token id, -1 when the symbol has none (yet)
};

// The result of asking whether `left` and `right` merge.
struct MergeCandidate {
  bool found = false;
  double priority = 0;  // higher merges first (SPM: score; byte-level BPE: -rank)
  int32_t id = -1;      // id of the merged symbol
};

using MergeRule = absl::FunctionRef<MergeCandidate(const MergeSymbol&, const MergeSymbol&)>;

// Merges `symbols` in place. REQUIRES: symbols form one list in index order (prev/next set as
// i-1 / i+1) covering the word contiguously. Afterwards the live symbols are reached from
// index 0 by following `next`.
void MergeSymbols(std::vector<MergeSymbol>* symbols, MergeRule rule);

// Builds the initial list for MergeSymbols: symbol i covers [starts[i], starts[i+1]) (the last
// ends at `word_length`), with id `ids[i]`.
std::vector<MergeSymbol> MakeSymbolList(const std::vector<uint32_t>& starts,
                                        const std::vector<int32_t>& ids, uint32_t word_length);

}  // namespace sparseserve::tokenizer::internal

#endif  // SPARSESERVE_COMMON_TOKENIZER_INTERNAL_SYMBOL_MERGER_H_
