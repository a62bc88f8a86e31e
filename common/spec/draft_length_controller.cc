#include "common/spec/draft_length_controller.h"

#include <algorithm>
#include <iterator>

#include "common/core/check.h"

namespace sparseserve::spec {

AcceptanceStats::AcceptanceStats(int max_depth, double decay)
    : decay_(decay),
      reached_(static_cast<size_t>(std::max(max_depth, 0)), 0.0),
      accepted_(static_cast<size_t>(std::max(max_depth, 0)), 0.0) {}

void AcceptanceStats::Record(int depth, int accepted) {
  depth = std::min(depth, max_depth());
  SS_CHECK(accepted >= 0 && accepted <= depth);
  for (size_t i = 0; i < reached_.size(); ++i) {
    reached_[i] *= decay_;
    accepted_[i] *= decay_;
  }
  // Position i (0-based) was reached when the i earlier ones were accepted.
  for (int i = 0; i < depth && i <= accepted; ++i) {
    reached_[i] += 1;
    if (i < accepted) accepted_[i] += 1;
  }
}

double AcceptanceStats::Alpha(int position) const {
  const size_t i = static_cast<size_t>(position - 1);
  return (accepted_[i] + 1) / (reached_[i] + 2);  // Beta(1, 1) prior
}

double AcceptanceStats::ExpectedAccepted(int depth) const {
  double expected = 0, chain = 1;
  for (int i = 1; i <= std::min(depth, max_depth()); ++i) {
    chain *= Alpha(i);
    expected += chain;
  }
  return expected;
}

int StepCostModel::Bucket(int rows) {
  // Exact up to 8 rows, then four buckets per doubling.
  if (rows <= 8) return std::max(rows, 1);
  int base = 8;
  while (base * 2 <= rows) base *= 2;
  const int step = base / 4;
  return base + (rows - base) / step * step;
}

void StepCostModel::Record(int rows, double seconds) {
  constexpr double kWeight = 0.2;  // of the newest measurement
  const auto [it, inserted] = mean_.try_emplace(Bucket(rows), seconds);
  if (!inserted) it->second += kWeight * (seconds - it->second);
}

double StepCostModel::Estimate(int rows) const {
  if (mean_.empty()) return 1.0;
  const int b = Bucket(rows);
  const auto hi = mean_.lower_bound(b);
  if (hi != mean_.end() && hi->first == b) return hi->second;
  if (hi == mean_.begin()) return hi->second;  // below every measurement
  const auto lo = std::prev(hi);
  if (hi != mean_.end()) {
    const double t = static_cast<double>(b - lo->first) / (hi->first - lo->first);
    return lo->second + t * (hi->second - lo->second);
  }
  if (lo == mean_.begin()) return lo->second;  // one bucket measured: assume the same
  const auto before = std::prev(lo);
  const double slope = std::max(0.0, (lo->second - before->second) / (lo->first - before->first));
  return lo->second + slope * (b - lo->first);
}

std::vector<int> ChooseDraftDepths(const StepCostModel& cost, absl::Span<const DraftOption> options,
                                   int base_rows) {
  std::vector<int> depth(options.size(), 0);
  double tokens = static_cast<double>(options.size());  // every root emits one
  int rows = base_rows;
  auto rows_of = [&](size_t s, int k) { return k == 0 ? 0 : options[s].rows_at[k - 1]; };
  auto expected = [&](size_t s, int k) { return options[s].stats->ExpectedAccepted(k); };
  double best = tokens / cost.Estimate(rows);
  for (int pass = 0; pass < 3; ++pass) {
    bool changed = false;
    for (size_t s = 0; s < options.size(); ++s) {
      const int now = depth[s];
      const double tokens_without = tokens - expected(s, now);
      const int rows_without = rows - rows_of(s, now);
      int pick = now;
      for (int k = 0; k <= static_cast<int>(options[s].rows_at.size()); ++k) {
        const double rate =
            (tokens_without + expected(s, k)) / cost.Estimate(rows_without + rows_of(s, k));
        // A change must gain 1% (measurement noise must not flip depths every step).
        if (k != pick && rate > best * 1.01) {
          best = rate;
          pick = k;
        }
      }
      if (pick != now) {
        depth[s] = pick;
        tokens = tokens_without + expected(s, pick);
        rows = rows_without + rows_of(s, pick);
        changed = true;
      }
    }
    if (!changed) break;
  }
  return depth;
}

}  // namespace sparseserve::spec
