#include "common/spec/draft_length_controller.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <limits>

#include "absl/strings/str_format.h"
#include "common/core/check.h"

namespace sparseserve::spec {

AcceptanceStats::AcceptanceStats(int max_depth, double decay)
    : decay_(decay),
      reached_(static_cast<size_t>(std::max(max_depth, 0)), 0.0),
      accepted_(static_cast<size_t>(std::max(max_depth, 0)), 0.0) {
  UpdateExpected();
}

void AcceptanceStats::UpdateExpected() {
  expected_.assign(reached_.size() + 1, 0.0);
  double chain = 1;
  for (size_t i = 0; i < reached_.size(); ++i) {
    chain *= Alpha(static_cast<int>(i) + 1);
    expected_[i + 1] = expected_[i] + chain;
  }
}

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
  UpdateExpected();
}

double AcceptanceStats::Alpha(int position) const {
  const size_t i = static_cast<size_t>(position - 1);
  return (accepted_[i] + 1) / (reached_[i] + 2);  // Beta(1, 1) prior
}

double AcceptanceStats::ExpectedAccepted(int depth) const {
  return expected_[static_cast<size_t>(std::clamp(depth, 0, max_depth()))];
}

int StepCostModel::Bucket(int rows) {
  // Exact up to 64 rows (a speculating sequence's first draft rows must not share a bucket with
  // the plain step they extend), then eight buckets per doubling.
  if (rows <= 64) return std::max(rows, 1);
  int base = 64;
  while (base * 2 <= rows) base *= 2;
  const int step = base / 8;
  return base + (rows - base) / step * step;
}

double StepCostModel::Shape(int rows, bool speculative) const {
  return ShapeIn(speculative && !spec_shape_.empty() ? spec_shape_ : shape_, rows);
}

double StepCostModel::ShapeIn(const std::map<int, double>& shapes, int rows) const {
  const int b = Bucket(rows);
  const auto hi = shapes.lower_bound(b);
  if (hi != shapes.end() && hi->first == b) return hi->second;
  if (hi == shapes.begin()) return hi->second;  // below every measurement: no cheaper
  const auto lo = std::prev(hi);
  if (hi != shapes.end()) {
    const double t = static_cast<double>(b - lo->first) / (hi->first - lo->first);
    return lo->second + t * (hi->second - lo->second);
  }
  // Past the largest measurement: the prior (one bucket) or the last two buckets' slope, up to
  // twice its rows plus kHorizonRows; past that, in proportion to the rows (see header).
  const auto extend = [&](double at) {
    if (lo == shapes.begin()) return lo->second * (1 + 0.25 * std::log2(at / lo->first));
    const auto before = std::prev(lo);
    const double slope = std::max(0.0, (lo->second - before->second) / (lo->first - before->first));
    return lo->second + slope * (at - lo->first);
  };
  const double horizon = 2.0 * lo->first + kHorizonRows;
  return b <= horizon ? extend(b) : extend(horizon) * b / horizon;
}

void StepCostModel::Record(int rows, double seconds, bool speculative, int64_t context_tokens) {
  constexpr double kLevelWeight = 0.2;  // of the newest measurement
  constexpr int64_t kStaleSteps = 64;
  const int b = Bucket(rows);
  const bool explored = steps_ >= next_explore_;  // the step was chosen while ExploreDue()
  const bool stale = PlainDue();                  // ... and while a plain step was due
  ++steps_;
  plain_run_ = speculative ? 0 : plain_run_ + 1;
  if (speculative) {
    retry_explore_ = false;
    unmeasured_in_row_ = 0;
    spec_context_ = context_tokens;
  }
  if (explored) {
    // Back off while explores change nothing; a plain step here declined to explore.
    if (speculative) {
      explore_interval_ =
          chosen_since_explore_ ? kExploreSteps : std::min(2 * explore_interval_, kMaxExploreSteps);
      chosen_since_explore_ = false;
    }
    next_explore_ = steps_ - 1 + explore_interval_;
  } else if (speculative) {  // chosen: explores every kExploreSteps again, from here
    chosen_since_explore_ = true;
    explore_interval_ = kExploreSteps;
    next_explore_ = std::min(next_explore_, steps_ - 1 + kExploreSteps);
  }
  if (shape_.empty()) {
    if (speculative) return;  // the level starts from a plain step
    reference_ = b;
    shape_[b] = 1;
    level_ = seconds;
    level_samples_ = 1;
    reference_seen_ = steps_;
    return;
  }
  // The level is learned from the reference bucket alone (its shape stays 1), so drift goes to
  // the level, never into the shape of whatever bucket recent steps had. When the steps have
  // left the reference bucket (the batch changed), the current bucket becomes the reference.
  if (!speculative && b != reference_ && steps_ - reference_seen_ > kStaleSteps &&
      shape_.contains(b)) {
    const double scale = shape_[b];
    for (auto& [bucket, shape] : shape_) shape /= scale;
    for (auto& [bucket, shape] : spec_shape_) shape /= scale;
    level_ *= scale;
    reference_ = b;
  }
  if (!speculative && b == reference_) {
    ++level_samples_;
    if (level_samples_ <= kLevelWarmup) {
      // A first step is often a cold one (a graph's first replay: at batch 64 on the long-context
      // model 0.71 ms against 0.31 after it), and speculative steps measured against it looked
      // twice as cheap as they are for a whole PlainDue streak.
      level_ = std::min(level_, seconds);
    } else if (stale) {
      // The first plain step after a streak (PlainDue): contexts moved under the streak, so this
      // measurement replaces the level, and the shapes measured during the streak — against the
      // stale level, at today's contexts — keep the seconds they measured. (A server's first
      // short requests after long ones, or a batch of fresh sequences after a run's long ones,
      // would otherwise price speculative steps at a fraction of their cost for hundreds of
      // steps: the level's average moves a fifth of the way per plain step, one in kPlainSteps.)
      // Unless the contexts moved since the streak's last speculative step (a sequence ended
      // and a fresh one began plain): then its seconds are another context's, and the shapes,
      // relative costs, carry over better. (Longgen at batch 1 on the long-context model: after
      // one sequence's streak at 8K tokens the next began plain at 4K, its verify step, 2.2
      // plain ones, was priced at 4.5, and speculation stayed off for 1,500-2,000 steps.)
      const bool moved =
          context_tokens >= 0 && spec_context_ >= 0 &&
          8 * std::abs(context_tokens - spec_context_) > std::max(context_tokens, spec_context_);
      if (!moved) {
        const double scale = level_ / seconds;
        for (auto& [bucket, shape] : spec_shape_) shape *= scale;
        for (auto& [bucket, shape] : draft_shape_) shape *= scale;
      }
      level_ = seconds;
    } else {
      level_ += kLevelWeight * (seconds - level_);
    }
    reference_seen_ = steps_;
    return;
  }
  // A measurement counts for at most 4x the estimate: a first launch or a stall must not price a
  // bucket out of reach for good.
  const double measured = std::min(seconds / level_, 4 * Shape(rows, speculative));
  if (speculative && explored) {  // a cheaper explore replaces the bucket's shape (see header)
    const auto it = spec_shape_.find(b);
    if (it != spec_shape_.end() && measured < it->second) {
      it->second = measured;
      ++spec_samples_[b];
      return;
    }
  }
  Learn(speculative ? spec_shape_ : shape_, speculative ? spec_samples_ : shape_samples_, b,
        measured);
}

void StepCostModel::Learn(std::map<int, double>& shapes, std::map<int, int>& samples, int bucket,
                          double measured) {
  constexpr double kShapeWeight = 0.2;  // of the newest measurement
  int& n = samples[bucket];
  const auto [it, inserted] = shapes.try_emplace(bucket, measured);
  if (!inserted) {
    it->second = n < kLevelWarmup ? std::min(it->second, measured)
                                  : it->second + kShapeWeight * (measured - it->second);
  }
  ++n;
}

std::string StepCostModel::Describe() const {
  auto shapes = [](const std::map<int, double>& m) {
    std::string out;
    for (const auto& [bucket, shape] : m) {
      absl::StrAppendFormat(&out, "%s%d:%.2f", out.empty() ? "" : " ", bucket, shape);
    }
    return out.empty() ? std::string("-") : out;
  };
  return absl::StrFormat("level %.3f ms; plain %s; speculative %s; draft pass %s", level_ * 1e3,
                         shapes(shape_), shapes(spec_shape_), shapes(draft_shape_));
}

double StepCostModel::Estimate(int rows, bool speculative) const {
  if (shape_.empty()) return 1.0;
  return level_ * Shape(rows, speculative);
}

double StepCostModel::LeastEstimate(int rows, bool speculative) const {
  double least = Estimate(rows, speculative);
  if (shape_.empty()) return least;
  // Between measured buckets the shape is linear and past the largest it grows: the least is at
  // `rows` or at a measured bucket above it.
  const std::map<int, double>& shapes = speculative && !spec_shape_.empty() ? spec_shape_ : shape_;
  for (auto it = shapes.upper_bound(Bucket(rows)); it != shapes.end(); ++it) {
    least = std::min(least, level_ * it->second);
  }
  return least;
}

void StepCostModel::RecordDraftPass(int rows, double seconds) {
  if (shape_.empty()) return;  // priced against the level, which plain steps set first
  const double measured = std::min(seconds / level_, 4 * EstimateDraftPass(rows) / level_);
  Learn(draft_shape_, draft_samples_, Bucket(rows), measured);
}

double StepCostModel::EstimateDraftPass(int rows) const {
  if (shape_.empty()) return 1.0;
  return level_ * (draft_shape_.empty() ? Shape(rows, false) : ShapeIn(draft_shape_, rows));
}

std::vector<int> ChooseDraftDepths(const StepCostModel& cost, absl::Span<const DraftOption> options,
                                   int base_rows, bool uniform) {
  constexpr double kSpeculationMargin = 1.05;
  std::vector<int> best_depth(options.size(), 0);
  if (!cost.measured() || cost.PlainDue()) return best_depth;
  // What the cheap way out below needs, without the tables (most steps at large batches end
  // there: at batch 64 the controller's host time is a few percent of a GPU step).
  int max_depth = 0, max_rows = base_rows;
  bool unmeasured = false;  // some sequence's acceptance rests on too few drafts
  bool model_drafts = false;
  double most_tokens = static_cast<double>(options.size());
  int fewest_rows = std::numeric_limits<int>::max();
  for (const DraftOption& o : options) {
    const int depths = static_cast<int>(o.rows_at.size());
    if (depths == 0) continue;
    max_depth = std::max(max_depth, depths);
    max_rows += o.rows_at.back();
    most_tokens += o.stats->ExpectedAccepted(depths);
    fewest_rows = std::min(fewest_rows, o.rows_at[0]);
    // Only model drafters: the others' acceptance is measured on plain steps too (shadow drafts).
    unmeasured |= o.model_draft && o.stats->samples() < StepCostModel::kMinAcceptanceSamples;
    model_drafts |= o.model_draft;
  }
  if (max_depth == 0) return best_depth;
  // The cheap way out, every step that speculation cannot win: even every sequence's deepest
  // draft for the price of the cheapest speculative step does not beat plain decoding (whose
  // steps have no draft passes). The cheapest, not the fewest rows': longgen at batch 1 kept a
  // 10-row bucket (and so every step below it) priced at 8.7 plain steps by one slow
  // measurement, and its 39-row drafts, 4.3 tokens for 2.3 plain steps, stayed plain for 16,000
  // steps.
  const bool explore =
      cost.ExploreDue() || (unmeasured && cost.ExploreDue(StepCostModel::kExploreUnmeasuredSteps));
  if (most_tokens / cost.LeastEstimate(base_rows + fewest_rows, true) <=
          static_cast<double>(options.size()) / cost.Estimate(base_rows) * kSpeculationMargin &&
      !explore) {
    return best_depth;
  }
  // Model drafters' passes: passes[j] = model-drafted sequences drafting deeper than j; a pass of
  // n sequences costs EstimateDraftPass(n), looked up in a table.
  std::vector<int> passes(static_cast<size_t>(max_depth), 0);
  std::vector<double> pass_cost(options.size() + 1, -1.0);
  auto pass_seconds = [&](int n) {
    double& c = pass_cost[static_cast<size_t>(n)];
    if (c < 0) c = n == 0 ? 0.0 : cost.EstimateDraftPass(n);
    return c;
  };
  auto draft_seconds = [&]() {
    double total = 0;
    if (model_drafts) {
      for (const int n : passes) total += pass_seconds(n);
    }
    return total;
  };
  auto set_passes = [&](size_t s, int from, int to) {  // sequence s goes from depth `from` to `to`
    if (!options[s].model_draft) return;
    if (options[s].one_pass) {
      passes[0] += (to > 0 ? 1 : 0) - (from > 0 ? 1 : 0);
      return;
    }
    const int delta = to > from ? 1 : -1;
    for (int j = std::max(std::min(from, to), 0); j < std::max(from, to); ++j) {
      passes[static_cast<size_t>(j)] += delta;
    }
  };
  // Costs by row count, filled as the ascent reaches them (0 = not yet): it evaluates
  // thousands of configurations at batch 64, each must be a lookup. Uniform steps evaluate one
  // per depth, and their row counts reach thousands (Lookahead's 119 rows a sequence): no tables.
  const size_t table = uniform ? 0 : static_cast<size_t>(max_rows - base_rows) + 1;
  std::vector<double> plain_cost(table, 0.0), spec_cost(table, 0.0);
  auto rows_of = [&](size_t s, int k) { return k == 0 ? 0 : options[s].rows_at[k - 1]; };
  auto expected = [&](size_t s, int k) { return options[s].stats->ExpectedAccepted(k); };
  auto rate = [&](double tokens, int rows, int drafting) {
    if (uniform) return tokens / (cost.Estimate(rows, drafting > 0) + draft_seconds());
    double& c = (drafting > 0 ? spec_cost : plain_cost)[static_cast<size_t>(rows - base_rows)];
    if (c == 0) c = cost.Estimate(rows, drafting > 0);
    return tokens / (c + draft_seconds());
  };
  const double plain_rate = rate(static_cast<double>(options.size()), base_rows, 0);
  double best_rate = plain_rate, best_speculative_rate = 0;
  std::vector<int> best_speculative;
  // Starts: all plain, every sequence at depth 1, and every sequence at its deepest; uniform
  // steps try every depth and keep it (no per-sequence ascent).
  std::vector<int> starts =
      max_depth > 1 ? std::vector<int>{0, 1, max_depth} : std::vector<int>{0, 1};
  if (uniform) {
    starts.clear();
    for (int k = 0; k <= max_depth; ++k) starts.push_back(k);
  }
  for (const int start : starts) {
    std::vector<int> depth(options.size());
    double tokens = static_cast<double>(options.size());  // every root emits one
    int rows = base_rows, drafting = 0;
    std::fill(passes.begin(), passes.end(), 0);
    for (size_t s = 0; s < options.size(); ++s) {
      depth[s] = std::min(start, static_cast<int>(options[s].rows_at.size()));
      set_passes(s, 0, depth[s]);
      tokens += expected(s, depth[s]);
      rows += rows_of(s, depth[s]);
      drafting += depth[s] > 0;
    }
    double current = rate(tokens, rows, drafting);
    // The uniform start itself: what exploring runs if the ascent below goes back to plain.
    const std::vector<int> start_depth = depth;
    const double start_rate = current;
    for (int pass = 0; pass < (uniform ? 0 : 3); ++pass) {
      bool changed = false;
      for (size_t s = 0; s < options.size(); ++s) {
        const int now = depth[s];
        const double tokens_without = tokens - expected(s, now);
        const int rows_without = rows - rows_of(s, now);
        const int drafting_without = drafting - (now > 0);
        int pick = now;
        for (int k = 0; k <= static_cast<int>(options[s].rows_at.size()); ++k) {
          set_passes(s, now, k);
          const double r = rate(tokens_without + expected(s, k), rows_without + rows_of(s, k),
                                drafting_without + (k > 0));
          set_passes(s, k, now);
          // A change must gain 1% (measurement noise must not flip depths every step).
          if (k != pick && r > current * 1.01) {
            current = r;
            pick = k;
          }
        }
        if (pick != now) {
          set_passes(s, now, pick);
          depth[s] = pick;
          tokens = tokens_without + expected(s, pick);
          rows = rows_without + rows_of(s, pick);
          drafting = drafting_without + (pick > 0);
          changed = true;
        }
      }
      if (!changed) break;
    }
    const bool speculative = drafting > 0;
    // Speculation must beat plain decoding by kSpeculationMargin: the estimates are averages
    // (first launches, graph setups and the verify rows' host work scatter around them), and a
    // speculative step that only breaks even loses to that scatter (oracle acceptance 0.3 at
    // batch 64 on the long-context model: 0.93x plain with a 1% margin).
    if (current > best_rate * 1.01 && (!speculative || current > plain_rate * kSpeculationMargin)) {
      best_rate = current;
      best_depth = depth;
    }
    if (start > 0 && (speculative ? current : start_rate) > best_speculative_rate) {
      best_speculative_rate = speculative ? current : start_rate;
      best_speculative = speculative ? depth : start_depth;
    }
  }
  // Now and then a plain decision is checked by running the best speculative one: a cost or
  // acceptance measured once, badly (a first launch, a cold cache), must not keep speculation
  // off for good.
  // Only choices priced within 2x of plain are retried (a CPU's linear rows are measured well),
  // unless an acceptance was never measured.
  // An explore drafts for as few sequences as measure it: at batch 64 the best speculative choice
  // can be thousands of rows (Lookahead's 119 a sequence), a step that costs dozens of plain ones
  // (stories260K, B=64 on an H100: 0.82-0.88x plain with nothing verified, session 24). In turn
  // from a start that moves between explores, sequences keep their depths while the draft rows
  // stay within the step's own rows (at least one sequence): a few percent of one step in
  // kExploreSteps.
  if (best_rate == plain_rate && explore && !best_speculative.empty() &&
      (best_speculative_rate >= 0.5 * plain_rate || unmeasured)) {
    const size_t n = options.size();
    // A start spread by a hash of the step count (explores come every kExploreSteps or
    // kExploreUnmeasuredSteps steps: a stride would cycle over a few starts for some batches).
    const uint64_t hash = static_cast<uint64_t>(cost.steps() + 1) * 0x9e3779b97f4a7c15ULL;
    const size_t first = static_cast<size_t>((hash >> 33) % n);
    int extra = 0;
    for (size_t i = 0; i < n; ++i) {
      const size_t s = (first + i) % n;
      const int rows = rows_of(s, best_speculative[s]);
      if (rows > 0 && extra > 0 && extra + rows > base_rows) {
        best_speculative[s] = 0;
      } else {
        extra += rows;
      }
    }
    return best_speculative;
  }
  return best_depth;
}

}  // namespace sparseserve::spec
