// The widest draft each tree-shaped method verifies, made without a model: the rows, positions
// and mask of a step in which the drafter fills every row it may (as the engine pads drafts where
// steps replay graphs, StepDraft::PadWithAuxiliaryRows). For timing verify steps on synthetic
// models (`sparseserve bench model --decode-draft-tree`): the tokens are arbitrary, the shape is
// the method's.
#ifndef SPARSESERVE_COMMON_SPEC_DRAFT_SHAPES_H_
#define SPARSESERVE_COMMON_SPEC_DRAFT_SHAPES_H_

#include <cstdint>

#include "common/spec/draft.h"
#include "common/spec/lookahead.h"
#include "common/spec/tokenswift.h"

namespace sparseserve::spec {

// Lookahead's step after its warm-up: the full 2D window (N−1 levels of W columns, the paper's
// mask) and G candidate chains of N−1 tokens; LookaheadProposer::RowsAt(N−1) rows.
// REQUIRES: the params are valid (LookaheadProposer's), vocab_size >= 2.
StepDraft FullLookaheadDraft(const LookaheadParams& params, int32_t vocab_size);

// TokenSwift's step with `heads` draft heads: the tree params.tree (cut to the heads' levels)
// and params.ngram_k 4-gram chains from the drafted token, all distinct;
// TokenSwiftProposer::RowsAt(DepthOf(params, heads)) rows. REQUIRES: vocab_size >= 2.
StepDraft FullTokenSwiftDraft(const TokenSwiftParams& params, int heads, int32_t vocab_size);

}  // namespace sparseserve::spec

#endif  // SPARSESERVE_COMMON_SPEC_DRAFT_SHAPES_H_
