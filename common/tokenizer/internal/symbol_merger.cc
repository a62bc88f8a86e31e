#include "common/tokenizer/internal/symbol_merger.h"

#include <queue>

namespace sparseserve::tokenizer::internal {
namespace {

struct Bigram {
  double priority;
  int32_t left;
  int32_t right;
  uint32_t length;  // left.length + right.length when pushed; stale entries no longer match
  int32_t id;
};

// Max-heap order: higher priority first, then the leftmost pair.
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    if (a.priority != b.priority) return a.priority < b.priority;
    return a.left > b.left;
  }
};

}  // namespace

std::vector<MergeSymbol> MakeSymbolList(const std::vector<uint32_t>& starts,
                                        const std::vector<int32_t>& ids, uint32_t word_length) {
  std::vector<MergeSymbol> symbols(starts.size());
  for (size_t i = 0; i < starts.size(); ++i) {
    MergeSymbol& s = symbols[i];
    s.prev = static_cast<int32_t>(i) - 1;
    s.next = i + 1 < starts.size() ? static_cast<int32_t>(i + 1) : -1;
    s.start = starts[i];
    s.length = (i + 1 < starts.size() ? starts[i + 1] : word_length) - starts[i];
    s.id = ids[i];
  }
  return symbols;
}

void MergeSymbols(std::vector<MergeSymbol>* symbols, MergeRule rule) {
  std::vector<MergeSymbol>& sym = *symbols;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> heap;
  auto try_push = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const MergeCandidate c = rule(sym[left], sym[right]);
    if (c.found) {
      heap.push({c.priority, left, right, sym[left].length + sym[right].length, c.id});
    }
  };
  for (size_t i = 1; i < sym.size(); ++i) {
    try_push(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
  }
  while (!heap.empty()) {
    const Bigram top = heap.top();
    heap.pop();
    MergeSymbol& left = sym[top.left];
    MergeSymbol& right = sym[top.right];
    // Skip entries made stale by an earlier merge of either side.
    if (left.length == 0 || right.length == 0 || left.next != top.right ||
        left.length + right.length != top.length) {
      continue;
    }
    left.length += right.length;
    left.id = top.id;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = top.left;
    try_push(left.prev, top.left);
    try_push(top.left, left.next);
  }
}

}  // namespace sparseserve::tokenizer::internal
