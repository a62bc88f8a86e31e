#include "common/spec/draft.h"

#include <algorithm>
#include <utility>

#include "common/core/check.h"

namespace sparseserve::spec {

void StepDraft::Clear() {
  tokens.clear();
  offsets.clear();
  parents.clear();
  mask.clear();
}

int32_t StepDraft::AddRow(int32_t token, int32_t offset, int32_t parent) {
  SS_CHECK(parent >= -1 && parent <= size());
  tokens.push_back(token);
  offsets.push_back(offset);
  parents.push_back(parent);
  return size();
}

std::vector<int32_t> StepDraft::AddChain(absl::Span<const int32_t> chain) {
  std::vector<int32_t> rows;
  int32_t node = 0;
  for (size_t d = 0; d < chain.size(); ++d) {
    int32_t next = -1;
    for (int r = 1; r <= size(); ++r) {
      if (parents[r - 1] == node && tokens[r - 1] == chain[d]) {
        next = r;
        break;
      }
    }
    if (next < 0) next = AddRow(chain[d], static_cast<int32_t>(d) + 1, node);
    rows.push_back(next);
    node = next;
  }
  return rows;
}

int StepDraft::Depth(int32_t row) const {
  int depth = 0;
  for (int32_t r = row; r != 0; r = parents[r - 1]) {
    if (parents[r - 1] < 0) return -1;
    ++depth;
  }
  return depth;
}

int StepDraft::MaxDepth() const {
  int depth = 0;
  for (int r = 1; r <= size(); ++r) depth = std::max(depth, Depth(r));
  return depth;
}

int StepDraft::NumVerificationRows() const {
  return static_cast<int>(
      std::count_if(parents.begin(), parents.end(), [](int32_t p) { return p >= 0; }));
}

std::vector<uint8_t> StepDraft::FullMask() const {
  const int n = size() + 1;
  if (!mask.empty()) {
    SS_CHECK(mask.size() == static_cast<size_t>(n) * n);
    return mask;
  }
  std::vector<uint8_t> full(static_cast<size_t>(n) * n, 0);
  full[0] = 1;
  for (int r = 1; r < n; ++r) {
    SS_CHECK(parents[r - 1] >= 0);  // auxiliary rows come with their own mask
    for (int32_t a = r; a != 0; a = parents[a - 1]) full[static_cast<size_t>(r) * n + a] = 1;
    full[static_cast<size_t>(r) * n] = 1;
  }
  return full;
}

std::vector<int32_t> StepDraft::Positions(int32_t root_position) const {
  std::vector<int32_t> positions = {root_position};
  for (const int32_t offset : offsets) positions.push_back(root_position + offset);
  return positions;
}

bool StepDraft::IsChain() const {
  if (!mask.empty()) return false;
  for (int r = 1; r <= size(); ++r) {
    if (parents[r - 1] != r - 1) return false;
  }
  return true;
}

void StepDraft::PadWithAuxiliaryRows(int rows, int32_t token) {
  if (size() >= rows) return;
  const std::vector<uint8_t> old = mask.empty() ? FullMask() : std::move(mask);
  const size_t n = static_cast<size_t>(size()) + 1, padded = static_cast<size_t>(rows) + 1;
  mask.assign(padded * padded, 0);
  for (size_t r = 0; r < n; ++r) std::copy_n(old.begin() + r * n, n, mask.begin() + r * padded);
  for (size_t r = n; r < padded; ++r) {
    mask[r * padded] = 1;
    mask[r * padded + r] = 1;
    AddRow(token, 1, -1);
  }
}

namespace {

// The first verification child of `node` whose token is `token`, or -1.
int32_t MatchingChild(const StepDraft& draft, int32_t node, int32_t token) {
  for (int r = 1; r <= draft.size(); ++r) {
    if (draft.parents[r - 1] == node && draft.tokens[r - 1] == token) return r;
  }
  return -1;
}

}  // namespace

AcceptedDraft AcceptDraft(const StepDraft& draft, absl::Span<const int32_t> sampled) {
  SS_CHECK(sampled.size() == static_cast<size_t>(draft.size()) + 1);
  AcceptedDraft out;
  out.kept.push_back(0);
  int32_t node = 0;
  while (true) {
    const int32_t token = sampled[node];
    out.emitted.push_back(token);
    const int32_t child = MatchingChild(draft, node, token);
    if (child < 0) break;
    out.kept.push_back(child);
    node = child;
  }
  return out;
}

int MatchedDepth(const StepDraft& draft, absl::Span<const int32_t> actual) {
  int32_t node = 0;
  int depth = 0;
  for (const int32_t token : actual) {
    node = MatchingChild(draft, node, token);
    if (node < 0) break;
    ++depth;
  }
  return depth;
}

}  // namespace sparseserve::spec
