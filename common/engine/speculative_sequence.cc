#include "common/engine/speculative_sequence.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/core/check.h"
#include "common/core/status.h"
#include "common/spec/lookahead.h"
#include "common/spec/prompt_lookup.h"
#include "common/spec/tokenswift.h"

namespace sparseserve::engine {

absl::StatusOr<std::unique_ptr<SpeculativeSequence>> SpeculativeSequence::Create(
    const SpeculationChoice& choice, const ModelRunner& runner) {
  SS_ASSIGN_OR_RETURN(std::unique_ptr<SpeculativeSequence> seq, ForMethod(choice, runner));
  seq->pad_drafts_ = runner.replays_step_graphs();
  return seq;
}

absl::StatusOr<std::unique_ptr<SpeculativeSequence>> SpeculativeSequence::ForMethod(
    const SpeculationChoice& choice, const ModelRunner& runner) {
  const model::ModelConfig& config = runner.config();
  std::unique_ptr<spec::DraftProposer> proposer;
  int depth = choice.max_draft;
  switch (choice.method) {
    case SpecMethod::kNone:
      return absl::InvalidArgumentError("speculation method 'none' has no drafter");
    case SpecMethod::kPromptLookup:
      if (depth == 0) depth = spec::kDefaultPromptLookupDepth;
      proposer = std::make_unique<spec::PromptLookupProposer>(depth);
      break;
    case SpecMethod::kLookahead: {
      // Its window rows sit at KV indices past their positions, and a sliding window is measured
      // in KV indices: the rows would lose keys at the window's far edge (not lossless).
      if (config.sliding_window > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "speculation lookahead: not available on a model with its own sliding window (",
            config.sliding_window, " tokens); prompt-lookup is"));
      }
      proposer = std::make_unique<spec::LookaheadProposer>(LookaheadParamsOf(choice, config));
      break;
    }
    case SpecMethod::kSparseSelf:
    case SpecMethod::kTokenSwift: {
      const bool tokenswift = choice.method == SpecMethod::kTokenSwift;
      const absl::string_view name = SpecMethodName(choice.method);
      // Its drafts run sparse attention, which a model with its own window does not (the
      // window is the model's attention; LlamaModel::CheckPattern).
      if (config.sliding_window > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "speculation ", name, ": not available on a model with its own sliding window (",
            config.sliding_window, " tokens); prompt-lookup is"));
      }
      absl::StatusOr<kernels::AttentionPattern> draft_pattern =
          runner.DecodePattern(SparseSelfDraftAttention(choice));
      if (!draft_pattern.ok()) {
        return AnnotateStatus(draft_pattern.status(),
                              absl::StrCat("speculation ", name, " draft attention"));
      }
      std::unique_ptr<spec::ModelDraftProposer> drafter;
      if (tokenswift) {
        const spec::TokenSwiftParams params = TokenSwiftParamsOf(choice, config);
        const int most = spec::TokenSwiftProposer::DepthOf(params, runner.num_draft_heads());
        depth = depth == 0 ? most : std::min(depth, most);
        drafter =
            std::make_unique<spec::TokenSwiftProposer>(params, runner.num_draft_heads(), depth);
      } else {
        if (depth == 0) depth = spec::kDefaultSparseSelfDepth;
        drafter = std::make_unique<spec::ModelDraftProposer>(depth);
      }
      std::unique_ptr<SpeculativeSequence> seq = ModelDrafted(
          choice, std::move(drafter), depth, *std::move(draft_pattern), /*early_exit=*/false);
      seq->heads_after_step_ =
          tokenswift && !choice.tokenswift_draft_pass && seq->DraftHeadTopK() > 0;
      return seq;
    }
    case SpecMethod::kKangaroo: {
      if (!runner.has_early_exit_adapter()) {
        return absl::FailedPreconditionError(
            "speculation kangaroo: the server has no early-exit adapter (start it with "
            "--kangaroo-adapter, made by tools/train_spec_adapters.py --method kangaroo)");
      }
      if (depth == 0) depth = spec::kDefaultKangarooDepth;
      // Dense attention over the shallow layers' full cache.
      return ModelDrafted(choice, std::make_unique<spec::ModelDraftProposer>(depth), depth,
                          kernels::AttentionPattern(), /*early_exit=*/true);
    }
    default:
      return absl::InternalError(
          absl::StrCat("no drafter for speculation method '", SpecMethodName(choice.method), "'"));
  }
  depth = depth == 0 ? proposer->max_depth() : std::min(depth, proposer->max_depth());
  return std::unique_ptr<SpeculativeSequence>(
      new SpeculativeSequence(choice, std::move(proposer), depth));
}

void RecordStepCost(const ModelRunner& runner, absl::Span<const StepRows> rows, double seconds,
                    spec::StepCostModel& cost) {
  int total = 0;
  int64_t context = 0;
  bool speculative = false;
  for (const StepRows& r : rows) {
    total += static_cast<int>(r.tokens.size());
    if (r.seq != nullptr) context += static_cast<int64_t>(r.seq->tokens.size());
    speculative |= r.speculative;
  }
  if (runner.last_step_was_graph_setup()) {
    cost.NoteUnmeasured(speculative);
    return;
  }
  cost.Record(total, seconds, speculative, context);
}

spec::LookaheadParams LookaheadParamsOf(const SpeculationChoice& spec,
                                        const model::ModelConfig& config) {
  spec::LookaheadParams p = spec::DefaultLookaheadParams(model::NumModelParams(config));
  if (spec.lookahead_window > 0) p.window = spec.lookahead_window;
  if (spec.lookahead_ngram > 0) p.ngram = spec.lookahead_ngram;
  if (spec.lookahead_guesses > 0) p.guesses = spec.lookahead_guesses;
  return p;
}

spec::TokenSwiftParams TokenSwiftParamsOf(const SpeculationChoice& spec,
                                          const model::ModelConfig& config) {
  spec::TokenSwiftParams p;
  if (!spec.tokenswift_tree.empty()) p.tree = spec.tokenswift_tree;
  if (spec.tokenswift_ngram_k >= 0) p.ngram_k = spec.tokenswift_ngram_k;
  p.draft_pass = spec.tokenswift_draft_pass;
  p.ngram_chain = spec.tokenswift_ngram_chain;
  p.ngram_lag = spec.tokenswift_ngram_lag >= 0
                    ? spec.tokenswift_ngram_lag
                    : std::min(p.ngram_lag, config.max_position_embeddings / 8);
  return p;
}

std::unique_ptr<SpeculativeSequence> SpeculativeSequence::ModelDrafted(
    const SpeculationChoice& choice, std::unique_ptr<spec::ModelDraftProposer> drafter, int depth,
    kernels::AttentionPattern pattern, bool early_exit) {
  spec::ModelDraftProposer* model_draft = drafter.get();
  auto seq = std::unique_ptr<SpeculativeSequence>(
      new SpeculativeSequence(choice, std::move(drafter), depth));
  seq->model_draft_ = model_draft;
  seq->draft_pattern_ = std::move(pattern);
  seq->draft_early_exit_ = early_exit;
  return seq;
}

std::unique_ptr<SpeculativeSequence> SpeculativeSequence::CreateWithProposer(
    const SpeculationChoice& choice, std::unique_ptr<spec::DraftProposer> proposer) {
  SS_CHECK(proposer != nullptr);
  const int max_depth = choice.max_draft > 0 ? std::min(choice.max_draft, proposer->max_depth())
                                             : proposer->max_depth();
  return std::unique_ptr<SpeculativeSequence>(
      new SpeculativeSequence(choice, std::move(proposer), max_depth));
}

SpeculativeSequence::SpeculativeSequence(const SpeculationChoice& choice,
                                         std::unique_ptr<spec::DraftProposer> proposer,
                                         int max_depth)
    : choice_(choice),
      proposer_(std::move(proposer)),
      max_depth_(max_depth),
      acceptance_(max_depth) {
  for (int k = 1; k <= max_depth_; ++k) rows_at_.push_back(proposer_->RowsAt(k));
}

void SpeculativeSequence::SetModelDraft(spec::ModelDraft draft) {
  SS_CHECK(model_draft_ != nullptr);
  heads_for_history_ = draft.head_candidates.empty() ? -1 : draft.history_size;
  model_draft_->SetDraft(std::move(draft));
}

spec::DraftOption SpeculativeSequence::Option(int room, int wanted) const {
  spec::DraftOption option;
  option.stats = &acceptance_;
  // Drafts without passes (TokenSwift's heads read after the step) cost the controller no pass.
  option.model_draft = drafts_on_model() && model_draft_->PassesAt(max_depth_) > 0;
  option.one_pass = option.model_draft && model_draft_->PassesAt(max_depth_) == 1;
  const int depth = FixedDepth(room, wanted);
  option.rows_at = absl::MakeConstSpan(rows_at_).first(static_cast<size_t>(depth));
  return option;
}

bool SpeculativeSequence::WantsDraftHeads(const spec::StepCostModel& cost) const {
  if (!heads_after_step_) return false;
  // Before an explore too: without the heads its draft would be the 4-grams alone, a shape and
  // an acceptance of their own (a chained 4-gram chain of 9 tokens, an unmasked 10-row step).
  return !controlled() || planned_depth_ > 0 || cost.ExploreDueNext() ||
         (shadow_.empty() && shadow_actual_.empty() && cost.steps() % shadow_every_ == 0);
}

int SpeculativeSequence::FixedDepth(int room, int wanted) const {
  int depth = 0;
  while (depth < std::min(max_depth_, wanted) && rows_at_[static_cast<size_t>(depth)] <= room) {
    ++depth;
  }
  return depth;
}

std::vector<int> PickDraftDepths(const spec::StepCostModel& cost,
                                 absl::Span<const DraftRoom> sequences, int base_rows,
                                 std::vector<spec::DraftOption>* options, bool uniform) {
  std::vector<spec::DraftOption> local;
  std::vector<spec::DraftOption>& opts = options != nullptr ? *options : local;
  opts.clear();
  std::vector<int> depths(sequences.size(), 0);
  // While the decision is settled the controlled sequences stay plain unread (their options empty).
  const bool settled = cost.DecisionSettled();
  bool controlled = false;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const DraftRoom& s = sequences[i];
    if (s.seq->controlled()) {
      controlled = true;
      opts.push_back(settled ? spec::DraftOption() : s.seq->Option(s.room, s.wanted));
    } else {
      opts.push_back(s.seq->Option(s.room, s.wanted));
      depths[i] = static_cast<int>(opts.back().rows_at.size());  // its FixedDepth
    }
  }
  if (!controlled || settled) return depths;
  const std::vector<int> chosen = spec::ChooseDraftDepths(cost, opts, base_rows, uniform);
  for (size_t i = 0; i < sequences.size(); ++i) {
    if (sequences[i].seq->controlled()) depths[i] = chosen[i];
  }
  return depths;
}

void SpeculativeSequence::Plan(int depth, absl::Span<const int32_t> history, SequenceKv* seq,
                               const kernels::AttentionPattern& pattern, sampling::Sampler& sampler,
                               StepRows* rows, kernels::SamplingBatch* sampling) {
  SS_CHECK(!history.empty() && !planned_);
  planned_ = true;
  planned_depth_ = depth;
  if (depth > 0) {
    drafted_since_shadow_ = true;
    shadow_every_ = kShadowEvery;
  }
  draft_.Clear();
  // A heads-drafted sequence drafting less deep than it could shadows its deepest draft too: the
  // controller learns the positions past `depth` from shadows only, and a sequence that drafts at
  // every step makes none on plain steps — its deeper positions stayed at the prior (chained
  // 4-grams: depth 2 of 9 chosen for good, 1.3x where depth 9 gives 1.9x).
  deeper_shadow_ = false;
  if (depth > 0 && depth < max_depth_ && heads_after_step_ && shadow_.empty() &&
      shadow_actual_.empty() && heads_for_history_ == static_cast<int64_t>(history.size())) {
    proposer_->Propose(history, max_depth_, /*verify_only=*/true, &shadow_);
    deeper_shadow_ = !shadow_.empty();
  }
  if (depth > 0) proposer_->Propose(history, depth, /*verify_only=*/false, &draft_);
  // Trees and branches come in many sizes; chains of each depth are one shape already — up to
  // kGraphRowsPerSequence rows: a longer unmasked chain is a prefill chunk to the model (cuDNN,
  // which no step graph holds) and ran op by op at every step (longgen with chained 4-grams: a
  // 10-row chain measured at 8.7 plain steps, its depth's padded tree replays at 2.2). Masked,
  // and padded as a tree, it replays its depth's graph.
  const bool graph_chain =
      draft_.IsChain() && draft_.size() + 1 <= model::LlamaModel::kGraphRowsPerSequence;
  if (pad_drafts_ && !draft_.empty() && !graph_chain) {
    draft_.PadWithAuxiliaryRows(rows_at_[static_cast<size_t>(depth - 1)], history.back());
    if (draft_.mask.empty()) draft_.mask = draft_.FullMask();
  }
  const bool chain = draft_.IsChain();
  // Heads-drafted sequences shadow when their heads were read for this root (WantsDraftHeads).
  if (draft_.empty() && shadow_.empty() && shadow_actual_.empty() &&
      proposer_->shadow_predicts_acceptance() &&
      (heads_after_step_ ? heads_for_history_ == static_cast<int64_t>(history.size())
                         : ++plain_steps_since_shadow_ >= kShadowEvery)) {
    // A plain step: keep measuring what a draft would have had accepted — on every
    // kShadowEvery-th one, which is plenty for the rates and keeps a batch of plain steps
    // cheap (a Lookahead draft builds a trie of G guesses).
    plain_steps_since_shadow_ = 0;
    if (heads_after_step_) {
      shadow_every_ =
          drafted_since_shadow_ ? kShadowEvery : std::min(2 * shadow_every_, kMaxShadowEvery);
      drafted_since_shadow_ = false;
    }
    proposer_->Propose(history, max_depth_, /*verify_only=*/true, &shadow_);
  }
  const int n = draft_.size() + 1;
  const int32_t base = static_cast<int32_t>(seq->tokens.size());
  *rows = StepRows();
  rows->seq = seq;
  rows->pattern = pattern;
  rows->tokens.push_back(history.back());
  if (draft_.empty()) {
    rows->sample = model::LogitRows::kLast;
  } else {
    rows->tokens.insert(rows->tokens.end(), draft_.tokens.begin(), draft_.tokens.end());
    rows->positions = draft_.Positions(base);
    if (!chain) rows->mask = draft_.FullMask();  // a chain is the causal default
    rows->sample = model::LogitRows::kAll;
    rows->speculative = true;
  }
  // One draw per depth: a verification row at depth d samples the token plain decoding would
  // draw d tokens from now, with that token's draw (peeked: Finish takes the emitted ones').
  if (sampling->penalized_begin.empty()) sampling->penalized_begin.push_back(0);
  for (int r = 0; r < n; ++r) {
    if (r > 0 && draft_.parents[r - 1] < 0) {  // auxiliary: greedy, unpenalised
      sampling->rows.push_back(kernels::SamplingRow{});
    } else {
      path_.clear();
      for (int32_t a = r; a != 0; a = draft_.parents[a - 1]) path_.push_back(draft_.tokens[a - 1]);
      std::reverse(path_.begin(), path_.end());  // root side first
      sampling->rows.push_back(
          sampler.RowWithDraw(history, path_, sampler.PeekUniform(static_cast<int>(path_.size())),
                              &sampling->penalized_ids));
    }
    sampling->penalized_begin.push_back(static_cast<int32_t>(sampling->penalized_ids.size()));
  }
}

void SpeculativeSequence::Abandon() {
  if (!planned_) return;
  planned_ = false;  // Plan only peeked at the sampler's draws
  draft_.Clear();
}

void SpeculativeSequence::FeedShadow(absl::Span<const int32_t> emitted) {
  if (shadow_.empty()) return;
  shadow_actual_.insert(shadow_actual_.end(), emitted.begin(), emitted.end());
  const int depth = shadow_.MaxDepth();
  const int matched = spec::MatchedDepth(shadow_, shadow_actual_);
  // Decided once a token failed to match or the deepest path matched.
  if (matched < static_cast<int>(shadow_actual_.size()) || matched == depth) {
    acceptance_.Record(depth, matched);
    shadow_.Clear();
    shadow_actual_.clear();
  }
}

absl::StatusOr<SpecStepResult> SpeculativeSequence::Finish(absl::Span<const int32_t> sampled,
                                                           ModelRunner& runner, SequenceKv& seq,
                                                           sampling::Sampler& sampler) {
  SS_CHECK(planned_);
  planned_ = false;
  SS_CHECK(sampled.size() == static_cast<size_t>(draft_.size()) + 1);
  SpecStepResult result;
  if (draft_.empty()) {
    result.emitted = {sampled[0]};
    result.emitted_rows = {0};
  } else {
    spec::AcceptedDraft accepted = verifier_(draft_, sampled);
    SS_RETURN_IF_ERROR(runner.Commit(seq, accepted.kept));
    result.emitted.assign(accepted.emitted.begin(), accepted.emitted.end());
    // AcceptDraft's walk: emitted[j] is the token sampled at kept[j].
    result.emitted_rows.assign(accepted.kept.begin(), accepted.kept.end());
    result.drafted = draft_.NumVerificationRows();
    result.depth = draft_.MaxDepth();
    result.accepted = static_cast<int>(result.emitted.size()) - 1;
    // The deeper shadow records these positions too (its draft holds this one's paths).
    if (!deeper_shadow_) acceptance_.Record(result.depth, result.accepted);
  }
  // The emitted tokens' draws, as plain decoding takes them.
  for (size_t i = 0; i < result.emitted.size(); ++i) sampler.SkipDraw();
  proposer_->Observe(draft_, sampled, result.emitted);
  FeedShadow(result.emitted);
  draft_.Clear();
  return result;
}

}  // namespace sparseserve::engine
