// CudaBackend attention — turns an AttentionBatch into work lists in the caller's workspace
// (PlanAttention) and runs the kernels on them per layer (Attention).
//
// The plan is flattened into one int32 array on the host (sequence records, work lists, masks,
// block tables), uploaded with one copy into workspace.metadata. Single-query sequences, and those
// of a few rows (speculative verify steps: DecodeKernelRows), go to the split-KV decode kernel,
// longer chunks to the tensor-core prefill kernel, whose tiles split their keys too where they
// are too few to fill the GPU (verify trees over long contexts: PrefillSplit); head dims other than
// 64/128 take the generic kernel. kMInference sequences go to their own kernels whatever their
// shape: BuildAttentionIndex builds their per-layer index, Attention reads it; where the
// tensor-core prefill kernel exists, their chunks also get its tiles, which run only the heads
// the index switched to dense (decided on the device from the index header), and the other heads
// run on the tensor-core MInference kernel over the same blocks. Sections whose sizes
// depend only on the batch's shape come first and the block tables (which grow with the contexts)
// last, so a decode batch keeps its layout step after step and a captured step graph stays valid.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/core/logging.h"
#include "common/core/status.h"
#include "kernels/attention_plan_check.h"
#include "kernels/attention_visibility.h"
#include "kernels/cuda/cuda_backend_state.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/cudnn_prefill.h"

namespace sparseserve::kernels {
namespace {

bool HasTensorCoreKernel(int head_dim, int group) {
  return (head_dim == 64 || head_dim == 128) && group <= 16;
}

// The rows of a sequence one decode-kernel CTA takes: as many as keep its (row, query head) pairs
// per KV head within one CTA, at most 8; 0 when even one row's do not fit.
int DecodeGroupRows(int group) {
  constexpr int kMaxRows = 8;
  return std::min(kMaxRows, cuda::kMaxDecodeQueries / group);
}

// Split-KV decode chunks are sized for this many CTAs per SM over all KV heads (twice as many for
// long chunks): $SPARSESERVE_DECODE_CTAS_PER_SM, default 4 (an A/B switch for the benchmarks).
int DecodeCtasPerSm() {
  static const int ctas = [] {
    const char* env = std::getenv("SPARSESERVE_DECODE_CTAS_PER_SM");
    return env == nullptr ? 4 : std::max(1, std::atoi(env));
  }();
  return ctas;
}

// The most rows a sequence may bring to the decode kernel in several row groups (each group its
// own split-KV items over the same keys): $SPARSESERVE_DECODE_KERNEL_MAX_ROWS, default 128 (the
// step graphs' rows; Lookahead's default window and guesses make 119); 0 or at most one group's
// rows turns grouping off (an A/B switch for the benchmarks).
int MaxDecodeKernelRows() {
  static const int rows = [] {
    const char* env = std::getenv("SPARSESERVE_DECODE_KERNEL_MAX_ROWS");
    return env == nullptr ? 128 : std::max(0, std::atoi(env));
  }();
  return rows;
}

// Whether a sequence of `q_len` rows over `kv_len` keys may take the decode kernel in several row
// groups: speculative verify trees (TokenSwift's 40-100 nodes, Lookahead's branches) of up to
// MaxDecodeKernelRows rows over a cached prefix at least 32 times longer.
bool GroupableRows(int q_len, int kv_len, int group) {
  const int rows = DecodeGroupRows(group);
  return rows >= 1 && q_len > rows && q_len <= MaxDecodeKernelRows() &&
         int64_t{kv_len - q_len} >= int64_t{32} * q_len;
}

// Whether a sequence of `q_len` new rows over `kv_len` keys runs on the split-KV decode kernel:
// one row, or a few whose (row, query head) pairs per KV head fit one CTA, or GroupableRows when
// the batch groups them (GroupVerifyRows).
bool DecodeKernelRows(int q_len, int kv_len, int group, bool group_rows) {
  const int rows = DecodeGroupRows(group);
  if (q_len < 1 || rows < 1) return false;
  return q_len <= rows || (group_rows && GroupableRows(q_len, kv_len, group));
}

// Whether the batch's groupable sequences go to the decode kernel in row groups. The prefill
// kernel gives such a sequence one CTA per (64-row tile, query head), each walking every key: at
// batch 1 a 13- or 41-row verify step at 32K leaves most SMs idle and cost ~15 decode steps
// (issue 15). Row groups read the keys once per group and KV head at full parallelism (a group's
// items run beside the other groups' over the same keys, sharing them in L2), so their cost grows
// with the groups times the KV heads while the prefill kernel's grows only with its waves.
// Measured on an H200 (Llama-3-8B shape, 8 KV heads, 32K, bench/RESULTS.md): one row group costs
// about a tenth of one wave of prefill CTAs (two per SM) — B=1 13 rows 19 vs 74 ms a step, 41
// rows 45 vs 75; B=8 13 rows 120 vs 82. So the groups win while there are at most 80 (group, KV
// head) pairs per prefill wave. (A 6-layer model with 2 KV heads, H100, 4K: Lookahead's 29-row
// steps 0.75 ms grouped against 2.14 on the prefill kernel's 4 CTAs.)
// With split-KV prefill tiles (the default, cuda::PrefillSplitKv) the prefill kernel no longer
// leaves the GPU idle there, and they read each key once per (tile, KV head) on wgmma where row
// groups read it once per group: they take every such sequence, and row groups are the A/B
// alternative when the split is off (bench/RESULTS.md, session 25) or the batch cannot split
// (`split_tiles`: SplitTilesFor).
bool GroupVerifyRows(const AttentionBatch& batch, const AttentionShape& shape, int sm_count,
                     bool split_tiles) {
  if (split_tiles) return false;
  constexpr int64_t kGroupHeadsPerPrefillWave = 80;
  const int group = shape.num_heads / shape.num_kv_heads;
  const int rows = DecodeGroupRows(group);
  int64_t groups = 0, ctas = 0;
  for (const SequenceAttention& sa : batch.sequences) {
    if (sa.pattern.kind == AttentionMethodKind::kMInference ||
        (sa.pattern.kind == AttentionMethodKind::kTokenSelect &&
         !tokenselect::RegionsOf(sa.pattern.tokenselect, sa.q_len, sa.kv_len).dense) ||
        !GroupableRows(sa.q_len, sa.kv_len, group)) {
      continue;
    }
    groups += (sa.q_len + rows - 1) / rows;
    ctas +=
        int64_t{(sa.q_len + cuda::kPrefillTileRows - 1) / cuda::kPrefillTileRows} * shape.num_heads;
  }
  if (groups == 0) return false;
  const int64_t slots = int64_t{2} * std::max(sm_count, 1);
  const int64_t waves = (ctas + slots - 1) / slots;
  return groups * shape.num_kv_heads <= kGroupHeadsPerPrefillWave * waves;
}

// Whether the batch's prefill tiles may split their keys (cuda::PrefillSplit): the tensor-core
// kernels run it, the switch is on, and no MInference sequence gates tiles per head (gated
// batches keep whole tiles, and their verify rows the decode kernel's row groups).
bool SplitTilesFor(const AttentionBatch& batch, bool generic) {
  return !generic && cuda::PrefillSplitKv() &&
         std::none_of(batch.sequences.begin(), batch.sequences.end(), [](const auto& sa) {
           return sa.pattern.kind == AttentionMethodKind::kMInference;
         });
}

// Floats of the split prefill tiles' partial outputs (64 rows of every part of every tile, each
// of `heads` x `per_head` floats): head_dim for the outputs, 1 for the log-sum-exps.
int64_t SplitPartialFloats(const AttentionPlan::Layout& l, int heads, int per_head) {
  return l.prefill_splits > 1 ? int64_t{l.num_prefill_tiles} * l.prefill_splits *
                                    cuda::kPrefillTileRows * heads * per_head
                              : 0;
}

// The key ranges a single-query sequence's split-KV items cover: its sinks (when a window leaves a
// gap after them) and everything from the window's start (or 0) to kv_len.
void VisibleRanges(const SequenceAttention& sa, std::vector<std::pair<int, int>>* ranges) {
  ranges->clear();
  int begin = 0;
  if (sa.pattern.kind == AttentionMethodKind::kSlidingWindow) {
    KeyVisibility vis;
    vis.q_len = sa.q_len;
    vis.kv_len = sa.kv_len;
    vis.window = sa.pattern.window;
    begin = WindowBegin(vis, 0);
    const int sinks = std::min(sa.pattern.sink_tokens, begin);
    if (sinks > 0) ranges->push_back({0, sinks});
  }
  ranges->push_back({begin, sa.kv_len});
}

}  // namespace

absl::Status CudaBackend::SupportsAttention(const AttentionPattern& pattern, int head_dim) const {
  if (head_dim < 8 || head_dim > 256 || head_dim % 8 != 0) {
    return absl::UnimplementedError(absl::StrCat(
        "Attention: the CUDA backend needs head_dim a multiple of 8 up to 256, got ", head_dim));
  }
  if (pattern.kind == AttentionMethodKind::kTokenSelect && head_dim != 64 && head_dim != 128) {
    return absl::UnimplementedError(absl::StrCat(
        "Attention: TokenSelect on the CUDA backend needs head_dim 64 or 128, got ", head_dim));
  }
  return CheckPatternSupported(pattern);
}

absl::StatusOr<AttentionPlan> CudaBackend::PlanAttention(const AttentionBatch& batch,
                                                         const AttentionShape& shape,
                                                         AttentionWorkspace& workspace) {
  SS_RETURN_IF_ERROR(ValidateAttentionBatch(batch, shape));
  for (const SequenceAttention& sa : batch.sequences) {
    SS_RETURN_IF_ERROR(SupportsAttention(sa.pattern, shape.head_dim));
  }
  const int bt = batch.block_tokens;
  const int num_seqs = static_cast<int>(batch.sequences.size());
  const int kv_heads = shape.num_kv_heads;
  const int group = shape.num_heads / kv_heads;
  const bool generic = !HasTensorCoreKernel(shape.head_dim, group);

  AttentionPlan plan;  // its layout's variant flags are set while the sequences are flattened
  std::vector<int32_t> seqs, tables, tiles, items, item_merges, merges, merge_rows, row_seq;
  std::vector<uint8_t> masks;
  // A prefill tile: (sequence, first row) plus the MInference index area that gates it.
  struct TileWork {
    int keys;  // keys visible to the tile's last row (heaviest first)
    int2 tile;
    int2 area;  // (index_offset, words_per_head); x = -1: not gated
  };
  std::vector<TileWork> tile_work;
  std::vector<int32_t> tile_areas;
  std::vector<std::pair<int, int>> ranges;
  std::vector<int32_t> table_begins(num_seqs, 0), mask_begins(num_seqs, -1);
  int total_q = 0, decode_groups = 0, decode_rows = 1;
  const int group_rows = DecodeGroupRows(group);
  const bool split_tiles = SplitTilesFor(batch, generic);
  const bool grouped = !generic && GroupVerifyRows(batch, shape, sm_count_, split_tiles);
  int64_t decode_tiles = 0;
  const float scale =
      batch.scale > 0 ? batch.scale : 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  // Dense prefill sequences go to cuDNN where it runs (not inside graph captures: its graphs are
  // built and its workspace grown at plan time), the rest to the prefill kernel's 64-row tiles.
  cuda::CudnnPrefill* cudnn = generic || capturing_ ? nullptr : Cudnn();
  std::vector<int> cudnn_seqs;
  auto add_prefill_tiles = [&](int s) {
    const SequenceAttention& sa = batch.sequences[s];
    for (int q0 = 0; q0 < sa.q_len; q0 += cuda::kPrefillTileRows) {
      const int keys = sa.kv_len - sa.q_len + std::min(sa.q_len, q0 + cuda::kPrefillTileRows);
      tile_work.push_back({keys, make_int2(s, q0), make_int2(-1, 0)});
    }
  };
  for (int s = 0; s < num_seqs; ++s) {
    const SequenceAttention& sa = batch.sequences[s];
    const int table_begin = static_cast<int>(tables.size());
    int mask_begin = -1;
    if (!sa.mask.empty()) {
      mask_begin = static_cast<int>(masks.size());
      masks.insert(masks.end(), sa.mask.begin(), sa.mask.end());
    }
    // A window covering every key (kv_len <= window: row kv_len - 1 still sees key 0) is dense
    // attention and runs as such: on cuDNN or the plain variants, bit-identical to a dense
    // sequence (the shadow-dense monitor's zero at covering windows).
    const bool window =
        sa.pattern.kind == AttentionMethodKind::kSlidingWindow && sa.kv_len > sa.pattern.window;
    seqs.insert(seqs.end(),
                {sa.q_begin, sa.q_len, sa.kv_len, table_begin, window ? sa.pattern.window : 0,
                 window ? sa.pattern.sink_tokens : 0, mask_begin, sa.state_slot});
    const int blocks = (sa.kv_len + bt - 1) / bt;
    tables.insert(tables.end(), sa.block_table.begin(), sa.block_table.begin() + blocks);
    total_q = std::max(total_q, sa.q_begin + sa.q_len);
    table_begins[s] = table_begin;
    mask_begins[s] = mask_begin;
    // TokenSelect steps with at most k candidates attend every key: the dense kernels run them.
    const bool selecting =
        sa.pattern.kind == AttentionMethodKind::kTokenSelect &&
        !tokenselect::RegionsOf(sa.pattern.tokenselect, sa.q_len, sa.kv_len).dense;
    if (generic || sa.q_len == 0 || sa.pattern.kind == AttentionMethodKind::kMInference ||
        selecting) {
      continue;
    }
    const bool decode_kernel = DecodeKernelRows(sa.q_len, sa.kv_len, group, grouped);
    // The decode kernel checks each row's causal bound only in its masked variant; the prefill
    // kernel's plain variant keeps the causal bound itself, so chunks without a mask or window
    // stay off the masked one (per-key visibility on every tile; 7% of a 32K prefill on wgmma).
    if (decode_kernel) {
      plan.layout.decode_masked |= window || !sa.mask.empty() || sa.q_len > 1;
      decode_rows = std::max(decode_rows, std::min(sa.q_len, group_rows));
      const int groups = (sa.q_len + group_rows - 1) / group_rows;
      VisibleRanges(sa, &ranges);
      for (const auto& [b, e] : ranges) {
        decode_tiles +=
            int64_t{groups} * ((e - b + cuda::kDecodeTileTokens - 1) / cuda::kDecodeTileTokens);
      }
      decode_groups += groups;
    } else if (cudnn != nullptr && !window && sa.mask.empty() &&
               !(split_tiles && GroupableRows(sa.q_len, sa.kv_len, group))) {
      // (A causal verify chain over a long prefix takes split tiles: cuDNN would give its one
      // or two tiles a CTA per head walking every key.)
      cudnn_seqs.push_back(s);
    } else {
      plan.layout.prefill_masked |= window || !sa.mask.empty();
      add_prefill_tiles(s);
    }
  }
  // Dense prefill sequences on cuDNN: one graph for the batch's bucketed shape. A shape cuDNN has
  // no engine for, or element offsets past int32, sends them back to the prefill kernel.
  cuda::CudnnPrefillShape cudnn_shape;
  std::vector<int32_t> cudnn_q, cudnn_kv, cudnn_offsets, cudnn_tables;
  if (!cudnn_seqs.empty()) {
    const int64_t row_elems = int64_t{shape.num_heads} * shape.head_dim;
    int max_q = 0, max_kv = 0;
    int64_t end_row = 0;
    for (const int s : cudnn_seqs) {
      const SequenceAttention& sa = batch.sequences[s];
      max_q = std::max(max_q, sa.q_len);
      max_kv = std::max(max_kv, sa.kv_len);
      end_row = std::max<int64_t>(end_row, sa.q_begin + sa.q_len);
    }
    cudnn_shape.batch = static_cast<int>(cudnn_seqs.size());
    cudnn_shape.max_q = cuda::CudnnPrefillBucket(max_q);
    cudnn_shape.max_kv = (cuda::CudnnPrefillBucket(max_kv) + bt - 1) / bt * bt;
    cudnn_shape.heads = shape.num_heads;
    cudnn_shape.kv_heads = kv_heads;
    cudnn_shape.head_dim = shape.head_dim;
    cudnn_shape.block_tokens = bt;
    cudnn_shape.num_blocks = shape.num_blocks;
    cudnn_shape.scale = scale;
    bool on_cudnn = end_row * row_elems <= std::numeric_limits<int32_t>::max();
    if (on_cudnn) {
      absl::StatusOr<int64_t> workspace_bytes = cudnn->Prepare(cudnn_shape);
      on_cudnn = workspace_bytes.ok();
      const int64_t words = on_cudnn ? (*workspace_bytes + 3) / 4 : 0;
      if (words > cudnn_workspace_.numel()) {
        cudnn_workspace_ = Tensor();
        SS_ASSIGN_OR_RETURN(cudnn_workspace_, Allocate(DType::kI32, {words}));
      }
    }
    if (on_cudnn) {
      const int table_size = cudnn_shape.table_size();
      cudnn_tables.assign(size_t{cudnn_seqs.size()} * table_size, 0);
      for (size_t i = 0; i < cudnn_seqs.size(); ++i) {
        const SequenceAttention& sa = batch.sequences[cudnn_seqs[i]];
        cudnn_q.push_back(sa.q_len);
        cudnn_kv.push_back(sa.kv_len);
        cudnn_offsets.push_back(static_cast<int32_t>(sa.q_begin * row_elems));
        const int blocks = (sa.kv_len + bt - 1) / bt;
        std::copy(sa.block_table.begin(), sa.block_table.begin() + blocks,
                  cudnn_tables.begin() + static_cast<int64_t>(i) * table_size);
      }
      cudnn_offsets.push_back(static_cast<int32_t>(end_row * row_elems));
    } else {
      for (const int s : cudnn_seqs) add_prefill_tiles(s);
      cudnn_seqs.clear();
    }
  }
  CudaMInferencePlan minference;
  SS_RETURN_IF_ERROR(PlanMInference(batch, shape, table_begins, &minference));
  CudaTokenSelectPlan tokenselect;
  SS_RETURN_IF_ERROR(
      PlanTokenSelect(batch, shape, table_begins, mask_begins, sm_count_, &tokenselect));
  // MInference chunks get tensor-core tiles too, gated per head on the device by their index
  // header: the heads the dense switch fired for run there at the dense kernel's rate, the rest
  // leave at once (issue 12: never slower than dense). Their work is unknown here, so they sort
  // by the dense bound.
  // Their sparse heads run on the tensor-core MInference kernel over the same 64-row blocks
  // (records, not sequences, in .x), and the CUDA-core row kernel is left to other head dims.
  const bool gated = !generic && !minference.seqs.empty();
  std::vector<TileWork> minference_work;
  std::vector<int32_t> minference_tiles;
  if (gated) {
    for (size_t r = 0; r < minference.seqs.size(); ++r) {
      const cuda::MInferenceSeqInfo& rec = minference.seqs[r];
      for (int q0 = 0; q0 < rec.q_len; q0 += cuda::kPrefillTileRows) {
        const int keys = rec.kv_len - rec.q_len + std::min(rec.q_len, q0 + cuda::kPrefillTileRows);
        tile_work.push_back(
            {keys, make_int2(rec.seq, q0), make_int2(rec.index_offset, rec.words_per_head)});
        minference_work.push_back({keys, make_int2(static_cast<int>(r), q0), make_int2(-1, 0)});
      }
    }
    minference.rows.clear();
    std::stable_sort(minference_work.begin(), minference_work.end(),
                     [](const TileWork& a, const TileWork& b) { return a.keys > b.keys; });
    for (const TileWork& w : minference_work) {
      minference_tiles.insert(minference_tiles.end(), {w.tile.x, w.tile.y});
    }
  }
  std::stable_sort(tile_work.begin(), tile_work.end(),
                   [](const TileWork& a, const TileWork& b) { return a.keys > b.keys; });
  for (const TileWork& w : tile_work) {
    tiles.insert(tiles.end(), {w.tile.x, w.tile.y});
    if (gated) tile_areas.insert(tile_areas.end(), {w.area.x, w.area.y});
  }
  // Split-KV prefill tiles: a chunk of few tiles (a verify tree of 13-128 rows, a small chunk)
  // over a long context gives one CTA per (tile, head group), each walking every key, and leaves
  // most SMs idle (8B shape at 32K: a 119-row Lookahead step 94.6 ms against 7.6 plain, H100).
  // Its keys are then cut into parts, up to one wave of CTAs and at least kMinSplitKeyTiles key
  // tiles a part, in powers of two (the layout changes a few times as a context grows, so step
  // graphs stay valid between). MInference-gated batches keep whole tiles (SplitTilesFor).
  // One key tile a part at least: a 39-row TokenSwift tree at a few hundred keys on the 6-layer
  // test model took 35 us a layer on 2 CTAs with 4 (no split), 17 us on 8 (+ a 4.6 us merge);
  // longgen B=1 1.97-2.23x plain under the controller against 1.69-1.81x (bench/RESULTS.md,
  // session 30). Long contexts are bound by the wave, not by this.
  constexpr int kMinSplitKeyTiles = 1;
  int splits = 1;
  std::vector<int32_t> split_merges, split_merge_rows;
  if (split_tiles && !tile_work.empty()) {
    const bool masked = plan.layout.prefill_masked;
    const int cta_heads = cuda::PrefillCtaHeads(group, masked);
    const int64_t ctas = static_cast<int64_t>(tile_work.size()) * (shape.num_heads / cta_heads);
    // CTAs resident per SM: one of the warp-specialised kernel or of 4 heads, else two.
    const int per_sm = cuda::PrefillOnWarpSpecialized(group, masked) || cta_heads == 4 ? 1 : 2;
    const int64_t wave = int64_t{std::max(sm_count_, 1)} * per_sm;
    int max_key_tiles = 0;
    for (const TileWork& w : tile_work) {
      max_key_tiles =
          std::max(max_key_tiles, (w.keys + cuda::kPrefillTileRows - 1) / cuda::kPrefillTileRows);
    }
    while (2 * splits * ctas <= wave && 2 * splits * kMinSplitKeyTiles <= max_key_tiles) {
      splits *= 2;
    }
    const int num_tiles = static_cast<int>(tile_work.size());
    for (int t = 0; splits > 1 && t < num_tiles; ++t) {
      const SequenceAttention& sa = batch.sequences[tile_work[t].tile.x];
      const int q0 = tile_work[t].tile.y;
      for (int r = 0; r < std::min(cuda::kPrefillTileRows, sa.q_len - q0); ++r) {
        split_merges.insert(split_merges.end(), {t * splits + r * num_tiles * splits, splits});
        split_merge_rows.push_back(sa.q_begin + q0 + r);
      }
    }
  }

  // Split-KV: chunks of whole 64-key tiles, as many as give ~4 CTAs per SM over all KV heads,
  // but chunks of at least kMinChunkTiles where that still leaves 2 CTAs per SM: a short chunk
  // spends its time starting the K/V pipeline (H100, tensor-core kernel, B=1 at 32K: 65.6 us at
  // 8 tiles per chunk, 56.1 at 16; B=8 keeps ~4 per SM).
  // With per_chunk tiles per chunk, a range of t tiles gets ceil(t / per_chunk) chunks, so the
  // total is at most target / kv_heads + (ranges) whatever the lengths; a row group (a sequence,
  // or one group of a many-row sequence's rows) has at most two ranges (sinks, window), so
  // max_target / kv_heads + 2 * decode_groups bounds the items. That bound is the grid, which then
  // stays fixed while a batch's contexts grow (step graphs replay it).
  // Chunks longer than kMaxChunkTiles get up to twice as many CTAs instead (2 are resident per
  // SM, so that is 8 waves, not 4): the last wave's stragglers then hold less of the step (H100,
  // B=8 at 128K: 1573 -> 1528 us at 8 CTAs per SM, while B=1 at 32K lost with it, 56 -> 78 us).
  // Idle CTAs of the bound leave before waiting on the kernels ahead.
  constexpr int64_t kMinChunkTiles = 16, kMaxChunkTiles = 64;
  const int64_t sms = std::max(sm_count_, 1);
  const int64_t work_tiles = decode_tiles * kv_heads;
  const int64_t base_target = int64_t{DecodeCtasPerSm()} * sms;
  const int64_t max_target = 2 * base_target;
  int64_t target =
      std::clamp(work_tiles / kMinChunkTiles, std::min(2 * sms, base_target), base_target);
  if (work_tiles > target * kMaxChunkTiles) {
    target = std::min(max_target, (work_tiles + kMaxChunkTiles - 1) / kMaxChunkTiles);
  }
  const int max_items =
      decode_groups == 0 ? 0 : static_cast<int>(max_target / kv_heads) + 2 * decode_groups;
  if (decode_groups > 0) {
    const int64_t per_chunk = std::max<int64_t>(1, (work_tiles + target - 1) / target);
    const int chunk_tokens = static_cast<int>(per_chunk * cuda::kDecodeTileTokens);
    for (int s = 0; s < num_seqs; ++s) {
      const SequenceAttention& sa = batch.sequences[s];
      if (generic || !DecodeKernelRows(sa.q_len, sa.kv_len, group, grouped) ||
          sa.pattern.kind == AttentionMethodKind::kMInference) {
        continue;
      }
      if (sa.pattern.kind == AttentionMethodKind::kTokenSelect &&
          !tokenselect::RegionsOf(sa.pattern.tokenselect, sa.q_len, sa.kv_len).dense) {
        continue;
      }
      // Each group of group_rows rows gets its own items over the same key chunks (the whole
      // grid is one wave, so the groups reading a chunk run side by side and share it in L2);
      // row r's partials: plane r % group_rows of its group's items (DecodeWork).
      VisibleRanges(sa, &ranges);
      for (int r0 = 0; r0 < sa.q_len; r0 += group_rows) {
        const int first = static_cast<int>(items.size() / 4);
        const int first_merge = static_cast<int>(merges.size() / 2);
        int count = 0;
        for (const auto& [b, e] : ranges) {
          for (int k0 = b; k0 < e; k0 += chunk_tokens, ++count) {
            items.insert(items.end(), {s, k0, std::min(e, k0 + chunk_tokens), r0});
            item_merges.push_back(first_merge);
          }
        }
        for (int r = r0; r < std::min(sa.q_len, r0 + group_rows); ++r) {
          merges.insert(merges.end(), {first + (r - r0) * max_items, count});
          merge_rows.push_back(sa.q_begin + r);
        }
      }
    }
    if (static_cast<int>(items.size() / 4) > max_items) {
      return absl::InternalError(absl::StrCat("Attention: ", items.size() / 4,
                                              " split-KV chunks exceed the bound ", max_items));
    }
  }
  const int num_items = static_cast<int>(items.size() / 4);
  items.resize(size_t{4} * max_items, 0);  // fixed size, so the sections after it do not move
  item_merges.resize(max_items, 0);
  if (generic) {
    row_seq.assign(total_q, -1);
    for (int s = 0; s < num_seqs; ++s) {
      const SequenceAttention& sa = batch.sequences[s];
      if (sa.pattern.kind == AttentionMethodKind::kMInference) continue;  // their own kernel
      for (int r = 0; r < sa.q_len; ++r) row_seq[sa.q_begin + r] = s;
    }
  }

  std::vector<int32_t> host;
  auto append = [&host](const int32_t* data, size_t n) {
    host.resize((host.size() + 3) / 4 * 4, 0);  // 16-byte aligned sections (int2 / int4 reads)
    const int64_t at = static_cast<int64_t>(host.size());
    host.insert(host.end(), data, data + n);
    return at;
  };
  auto append_vec = [&append](const std::vector<int32_t>& v) { return append(v.data(), v.size()); };
  plan.batch = &batch;
  plan.workspace = &workspace;
  plan.shape = shape;
  plan.scale = scale;
  AttentionPlan::Layout& l = plan.layout;
  const int32_t header[1] = {num_items};
  append(header, 1);  // offset 0: the decode item count (read on the device)
  l.seqs = append_vec(seqs);
  l.decode_items = append_vec(items);
  l.merges = append_vec(merges);
  l.merge_rows = append_vec(merge_rows);
  l.decode_item_merges = append_vec(item_merges);
  // The merge counters of the decode kernels' last chunks (decode_tc::MergeIfLast): zero here,
  // and left zero by every call.
  const std::vector<int32_t> counters(
      (merge_rows.size() + tokenselect.merge_rows.size()) * static_cast<size_t>(kv_heads), 0);
  l.merge_counters = append_vec(counters);
  l.prefill_tiles = append_vec(tiles);
  l.prefill_tile_areas = append_vec(tile_areas);
  l.split_merges = append_vec(split_merges);
  l.split_merge_rows = append_vec(split_merge_rows);
  l.row_seq = append_vec(row_seq);
  l.minference_seqs =
      append(reinterpret_cast<const int32_t*>(minference.seqs.data()),
             minference.seqs.size() * sizeof(cuda::MInferenceSeqInfo) / sizeof(int32_t));
  l.minference_rows = append_vec(minference.rows);
  l.minference_tiles = append_vec(minference_tiles);
  l.tokenselect_seqs =
      append(reinterpret_cast<const int32_t*>(tokenselect.seqs.data()),
             tokenselect.seqs.size() * sizeof(cuda::TokenSelectSeqInfo) / sizeof(int32_t));
  l.tokenselect_rows = append_vec(tokenselect.rows);
  l.tokenselect_merges = append_vec(tokenselect.merges);
  l.tokenselect_merge_rows = append_vec(tokenselect.merge_rows);
  std::vector<int32_t> mask_words((masks.size() + 3) / 4, 0);
  std::copy(masks.begin(), masks.end(), reinterpret_cast<uint8_t*>(mask_words.data()));
  l.masks = append_vec(mask_words);
  l.cudnn_seq_q = append_vec(cudnn_q);
  l.cudnn_seq_kv = append_vec(cudnn_kv);
  l.cudnn_offsets = append_vec(cudnn_offsets);
  l.cudnn_tables = append_vec(cudnn_tables);
  // Last: the only section of a graph-able step that grows with its contexts (Layout's comment).
  l.tables = append_vec(tables);
  l.cudnn_batch = static_cast<int>(cudnn_seqs.size());
  l.cudnn_max_q = cudnn_shape.max_q;
  l.cudnn_max_kv = cudnn_shape.max_kv;
  l.max_decode_items = max_items;
  l.decode_rows = decode_rows;
  l.num_merges = static_cast<int>(merge_rows.size());
  l.num_prefill_tiles = static_cast<int>(tiles.size() / 2);
  l.prefill_splits = splits;
  l.num_split_merges = static_cast<int>(split_merge_rows.size());
  l.total_q = total_q;
  l.generic = generic;
  l.prefill_gated = gated;
  l.num_minference_seqs = static_cast<int>(minference.seqs.size());
  l.num_minference_rows = static_cast<int>(minference.rows.size() / 2);
  l.num_minference_tiles = static_cast<int>(minference_tiles.size() / 2);
  l.minference_key_tiles = minference.max_key_tiles;
  l.minference_query_blocks = minference.max_query_blocks;
  l.num_tokenselect_seqs = static_cast<int>(tokenselect.seqs.size());
  l.num_tokenselect_rows = static_cast<int>(tokenselect.merge_rows.size());
  l.tokenselect_candidates = tokenselect.candidate_cap;
  l.tokenselect_chunk_tokens = tokenselect.chunk_tokens;
  l.tokenselect_lists = tokenselect.max_lists;
  l.tokenselect_items = tokenselect.items_per_row;
  l.tokenselect_item_tokens = tokenselect.item_tokens;

  // The decode partials (then TokenSelect's) and the MInference estimation scratch share
  // `partial`: the scratch is dead once BuildAttentionIndex's kernels are done, before
  // Attention's decode kernels run.
  // (16-byte aligned: the merge reads partial outputs as float4.)
  l.tokenselect_partial =
      (int64_t{max_items} * decode_rows * shape.num_heads * (shape.head_dim + 1) + 3) / 4 * 4;
  // Then the split prefill tiles' partials (64 rows of every part of every tile).
  l.split_partial = (l.tokenselect_partial + tokenselect.partial_floats + 3) / 4 * 4;
  const int64_t partial_floats =
      l.split_partial + SplitPartialFloats(l, shape.num_heads, shape.head_dim + 1);
  const int64_t stats_floats = 2 * std::max<int64_t>(1, num_seqs);
  const bool grow_metadata = workspace.metadata.numel() < static_cast<int64_t>(host.size());
  const bool grow_partial =
      workspace.partial.numel() < std::max(partial_floats, minference.scratch_floats);
  const bool grow_index = workspace.sparse_index.numel() < minference.index_words;
  const bool grow_stats = workspace.sparse_stats.numel() < stats_floats ||
                          workspace.selection_stats.numel() < stats_floats;
  const bool grow_selection = workspace.selection_scratch.numel() < tokenselect.scratch_floats;
  if (grow_metadata || grow_partial || grow_index || grow_stats || grow_selection) {
    if (capturing_) {
      return absl::FailedPreconditionError(
          "Attention: the workspace must be planned (and sized) before a graph capture");
    }
    if (grow_metadata) {
      workspace.metadata = Tensor();
      SS_ASSIGN_OR_RETURN(workspace.metadata,
                          Allocate(DType::kI32, {std::max<int64_t>(1024, 2 * host.size())}));
    }
    if (grow_partial) {
      workspace.partial = Tensor();
      SS_ASSIGN_OR_RETURN(
          workspace.partial,
          Allocate(DType::kF32, {std::max(2 * partial_floats, minference.scratch_floats)}));
    }
    if (grow_index) {
      workspace.sparse_index = Tensor();
      SS_ASSIGN_OR_RETURN(workspace.sparse_index, Allocate(DType::kI32, {minference.index_words}));
    }
    if (grow_stats) {
      workspace.sparse_stats = Tensor();
      workspace.selection_stats = Tensor();
      SS_ASSIGN_OR_RETURN(workspace.sparse_stats, Allocate(DType::kF32, {stats_floats}));
      SS_ASSIGN_OR_RETURN(workspace.selection_stats, Allocate(DType::kF32, {stats_floats}));
    }
    if (grow_selection) {
      workspace.selection_scratch = Tensor();
      SS_ASSIGN_OR_RETURN(workspace.selection_scratch,
                          Allocate(DType::kF32, {tokenselect.scratch_floats}));
    }
    ++workspace.generation;  // graphs captured before hold the old addresses
  }
  if (workspace.metadata.device() != Device::kCuda) {
    return absl::InvalidArgumentError("Attention: the workspace is not in CUDA memory");
  }
  SS_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(workspace.metadata.raw_data(), host.data(),
                                 host.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream()),
                 "Attention metadata upload"));
  SS_RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(workspace.sparse_stats.raw_data(), 0,
                                 workspace.sparse_stats.numel() * sizeof(float), stream()),
                 "Attention sparse_stats reset"));
  SS_RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(workspace.selection_stats.raw_data(), 0,
                                 workspace.selection_stats.numel() * sizeof(float), stream()),
                 "Attention selection_stats reset"));
  return plan;
}

namespace {

// The tensor checks BuildAttentionIndex and Attention share: contiguous CUDA bf16 q [rows, heads,
// head_dim] covering the plan's rows and a kv_layer of the plan's shape.
absl::Status CheckAttentionTensors(const AttentionPlan& plan, const Tensor& q,
                                   const Tensor& kv_layer, int layer) {
  if (plan.workspace == nullptr || plan.batch == nullptr) {
    return absl::InvalidArgumentError("Attention: empty plan");
  }
  if (q.device() != Device::kCuda || q.dtype() != DType::kBf16 || q.ndim() != 3 ||
      !q.is_contiguous() || kv_layer.device() != Device::kCuda ||
      kv_layer.dtype() != DType::kBf16 || kv_layer.ndim() != 4 || !kv_layer.is_contiguous() ||
      layer < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Attention: needs contiguous CUDA bf16 q [n, heads, head_dim] and kv_layer, "
                     "got q ",
                     q.DebugString(), " kv_layer ", kv_layer.DebugString()));
  }
  const AttentionShape& shape = plan.shape;
  if (q.dim(0) < plan.layout.total_q || q.dim(1) != shape.num_heads || q.dim(2) != shape.head_dim ||
      kv_layer.dim(0) != 2 * shape.num_blocks || kv_layer.dim(1) != plan.batch->block_tokens ||
      kv_layer.dim(2) != shape.num_kv_heads || kv_layer.dim(3) != shape.head_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("Attention: q ", q.DebugString(), " and kv_layer ", kv_layer.DebugString(),
                     " do not match the plan (", shape.num_heads, "/", shape.num_kv_heads,
                     " heads, head_dim ", shape.head_dim, ")"));
  }
  return absl::OkStatus();
}

cuda::AttentionDims DimsOf(const AttentionPlan& plan) {
  const int bt = plan.batch->block_tokens;
  cuda::AttentionDims dims;
  dims.heads = plan.shape.num_heads;
  dims.kv_heads = plan.shape.num_kv_heads;
  dims.head_dim = plan.shape.head_dim;
  dims.block_tokens = bt;
  dims.block_shift = (bt & (bt - 1)) == 0 ? __builtin_ctz(static_cast<unsigned>(bt)) : -1;
  dims.scale = plan.scale;
  return dims;
}

// The cuDNN graph shape PlanAttention prepared for the plan's dense prefill sequences.
cuda::CudnnPrefillShape CudnnShapeOf(const AttentionPlan& plan) {
  const AttentionPlan::Layout& l = plan.layout;
  cuda::CudnnPrefillShape shape;
  shape.batch = l.cudnn_batch;
  shape.max_q = l.cudnn_max_q;
  shape.max_kv = l.cudnn_max_kv;
  shape.heads = plan.shape.num_heads;
  shape.kv_heads = plan.shape.num_kv_heads;
  shape.head_dim = plan.shape.head_dim;
  shape.block_tokens = plan.batch->block_tokens;
  shape.num_blocks = plan.shape.num_blocks;
  shape.scale = plan.scale;
  return shape;
}

}  // namespace

cuda::CudnnPrefill* CudaBackend::Cudnn() {
  if (!cudnn_tried_) {
    cudnn_tried_ = true;
    if (cuda::PrefillOnCudnnRequested()) {
      absl::StatusOr<std::unique_ptr<cuda::CudnnPrefill>> cudnn = cuda::CudnnPrefill::Create();
      if (cudnn.ok()) {
        cudnn_ = *std::move(cudnn);
        SS_LOG_INFO("CUDA backend: dense prefill attention on cuDNN's fused SDPA");
      } else {
        SS_LOG_WARNING("CUDA backend: dense prefill attention on the project's kernel ({})",
                       std::string(cudnn.status().message()));
      }
    }
  }
  return cudnn_.get();
}

absl::Status CudaBackend::BuildTokenSelectIndex(const AttentionPlan& plan, const Tensor& q,
                                                const Tensor& kv_layer, int layer) {
  SS_RETURN_IF_ERROR(CheckTokenSelectState(plan, layer));
  const AttentionPlan::Layout& l = plan.layout;
  const AttentionWorkspace& ws = *plan.workspace;
  const int32_t* base = ws.metadata.data<int32_t>();
  const Tensor& state = plan.batch->sequence_state;
  cuda::TokenSelectIndexParams p;
  p.q = q.data<cuda::bf16_t>();
  p.kv_layer = kv_layer.data<cuda::bf16_t>();
  p.seqs = reinterpret_cast<const cuda::TokenSelectSeqInfo*>(base + l.tokenselect_seqs);
  p.num_seqs = l.num_tokenselect_seqs;
  p.block_tables = base + l.tables;
  p.masks = reinterpret_cast<const uint8_t*>(base + l.masks);
  p.dims = DimsOf(plan);
  if (l.num_tokenselect_rows > 0) {  // some sequence selects: it has a (checked) state slot
    p.state = state.data<int32_t>();
    p.slot_words = state.dim(1);
  }
  p.layer = layer;
  p.scratch = ws.selection_scratch.numel() > 0 ? ws.selection_scratch.data<float>() : nullptr;
  p.candidate_cap = l.tokenselect_candidates;
  p.chunk_tokens = l.tokenselect_chunk_tokens;
  p.max_lists = l.tokenselect_lists;
  p.pair_stats = ws.sparse_stats.data<float>();
  p.cache_stats = ws.selection_stats.data<float>();
  return CudaStatus(cuda::LaunchTokenSelectIndex(p, stream()), "Attention (TokenSelect index)");
}

absl::Status CudaBackend::BuildAttentionIndex(const AttentionPlan& plan, const Tensor& q,
                                              const Tensor& kv_layer, int layer) {
  SS_RETURN_IF_ERROR(CheckAttentionTensors(plan, q, kv_layer, layer));
  const AttentionPlan::Layout& l = plan.layout;
  if (l.num_tokenselect_seqs > 0)
    SS_RETURN_IF_ERROR(BuildTokenSelectIndex(plan, q, kv_layer, layer));
  if (l.num_minference_seqs == 0) return absl::OkStatus();  // dense and windows: no index
  for (const SequenceAttention& sa : plan.batch->sequences) {
    if (sa.pattern.kind == AttentionMethodKind::kMInference &&
        layer >= sa.pattern.minference->num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("Attention: layer ", layer,
                                                     " outside the MInference config's ",
                                                     sa.pattern.minference->num_layers, " layers"));
    }
  }
  const AttentionWorkspace& ws = *plan.workspace;
  const int32_t* base = ws.metadata.data<int32_t>();
  cuda::MInferenceIndexParams p;
  p.q = q.data<cuda::bf16_t>();
  p.kv_layer = kv_layer.data<cuda::bf16_t>();
  p.seqs = reinterpret_cast<const cuda::MInferenceSeqInfo*>(base + l.minference_seqs);
  p.num_seqs = l.num_minference_seqs;
  p.block_tables = base + l.tables;
  p.dims = DimsOf(plan);
  p.layer = layer;
  p.max_key_tiles = l.minference_key_tiles;
  p.max_query_blocks = l.minference_query_blocks;
  p.index = ws.sparse_index.data<int32_t>();
  p.stats = ws.sparse_stats.data<float>();
  p.scratch = ws.partial.data<float>();
  return CudaStatus(cuda::LaunchMInferenceIndex(p, stream()), "Attention (MInference index)");
}

absl::Status CudaBackend::Attention(const AttentionPlan& plan, const Tensor& q,
                                    const Tensor& kv_layer, int layer, const Tensor& out) {
  SS_RETURN_IF_ERROR(CheckAttentionTensors(plan, q, kv_layer, layer));
  if (out.device() != Device::kCuda || out.dtype() != DType::kBf16 || !(out.shape() == q.shape()) ||
      !out.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Attention: out ", out.DebugString(), " does not match q ", q.DebugString()));
  }
  const AttentionPlan::Layout& l = plan.layout;
  // Before any launch, as the CPU checks it (a slot too small for the layer).
  if (l.num_tokenselect_rows > 0) SS_RETURN_IF_ERROR(CheckTokenSelectState(plan, layer));
  const AttentionWorkspace& ws = *plan.workspace;
  const cuda::AttentionDims dims = DimsOf(plan);
  const int32_t* base = ws.metadata.data<int32_t>();
  cuda::AttentionSeqs seqs;
  seqs.seqs = reinterpret_cast<const cuda::AttentionSeqInfo*>(base + l.seqs);
  seqs.block_tables = base + l.tables;
  seqs.masks = reinterpret_cast<const uint8_t*>(base + l.masks);
  const auto* q_ptr = q.data<cuda::bf16_t>();
  const auto* kv_ptr = kv_layer.data<cuda::bf16_t>();
  auto* out_ptr = out.data<cuda::bf16_t>();
  if (l.generic) {
    SS_RETURN_IF_ERROR(
        CudaStatus(cuda::LaunchGenericAttention(q_ptr, kv_ptr, seqs, l.total_q, base + l.row_seq,
                                                dims, out_ptr, stream()),
                   "Attention (generic)"));
  } else {
    cuda::PrefillTileGates gates;
    if (l.prefill_gated) {
      if (ws.sparse_index.numel() == 0) {
        return absl::FailedPreconditionError("Attention: the MInference index was not planned");
      }
      gates.areas = reinterpret_cast<const int2*>(base + l.prefill_tile_areas);
      gates.index = ws.sparse_index.data<int32_t>();
    }
    if (l.cudnn_batch > 0) {
      if (cudnn_ == nullptr) {
        return absl::FailedPreconditionError("Attention: the plan's cuDNN runner is gone");
      }
      cuda::CudnnPrefillArgs args;
      args.q = q_ptr;
      args.kv_layer = kv_ptr;
      args.out = out_ptr;
      args.seq_q = base + l.cudnn_seq_q;
      args.seq_kv = base + l.cudnn_seq_kv;
      args.row_offsets = base + l.cudnn_offsets;
      args.tables = base + l.cudnn_tables;
      SS_RETURN_IF_ERROR(
          cudnn_->Run(CudnnShapeOf(plan), args, cudnn_workspace_.raw_data(), stream()));
    }
    cuda::PrefillSplit split;
    split.splits = l.prefill_splits;
    if (split.splits > 1) {
      split.partial_out = ws.partial.data<float>() + l.split_partial;
      split.partial_lse = split.partial_out + SplitPartialFloats(l, dims.heads, dims.head_dim);
    }
    SS_RETURN_IF_ERROR(CudaStatus(
        cuda::LaunchPrefillAttention(
            q_ptr, kv_ptr, seqs, reinterpret_cast<const int2*>(base + l.prefill_tiles),
            l.num_prefill_tiles, dims, l.prefill_masked, gates, split, out_ptr, stream()),
        "Attention (prefill)"));
    if (split.splits > 1) {
      cuda::SplitKvMerge merge;
      merge.partial_out = split.partial_out;
      merge.partial_lse = split.partial_lse;
      merge.merges = reinterpret_cast<const int2*>(base + l.split_merges);
      merge.merge_rows = base + l.split_merge_rows;
      merge.num_merges = l.num_split_merges;
      merge.max_chunks = split.splits;
      SS_RETURN_IF_ERROR(CudaStatus(cuda::LaunchSplitKvMerge(merge, dims, out_ptr, stream()),
                                    "Attention (split prefill merge)"));
    }
    cuda::DecodeWork work;
    work.num_items = base;
    work.items = reinterpret_cast<const int4*>(base + l.decode_items);
    work.max_items = l.max_decode_items;
    work.merges = reinterpret_cast<const int2*>(base + l.merges);
    work.merge_rows = base + l.merge_rows;
    work.num_merges = l.num_merges;
    work.item_merges = base + l.decode_item_merges;
    work.merge_counters = ws.metadata.data<int32_t>() + l.merge_counters;
    work.masked = l.decode_masked;
    work.rows = l.decode_rows;
    work.partial_out = ws.partial.data<float>();
    work.partial_lse =
        work.partial_out + int64_t{l.max_decode_items} * l.decode_rows * dims.heads * dims.head_dim;
    SS_RETURN_IF_ERROR(
        CudaStatus(cuda::LaunchDecodeAttention(q_ptr, kv_ptr, seqs, work, dims, out_ptr, stream()),
                   "Attention (decode)"));
  }
  if (l.num_tokenselect_rows > 0) {
    cuda::TokenSelectAttentionParams p;
    p.q = q_ptr;
    p.kv_layer = kv_ptr;
    p.seqs = reinterpret_cast<const cuda::TokenSelectSeqInfo*>(base + l.tokenselect_seqs);
    p.rows = reinterpret_cast<const int2*>(base + l.tokenselect_rows);
    p.num_rows = l.num_tokenselect_rows;
    p.block_tables = base + l.tables;
    p.masks = seqs.masks;
    p.dims = dims;
    p.state = plan.batch->sequence_state.data<int32_t>();
    p.slot_words = plan.batch->sequence_state.dim(1);
    p.layer = layer;
    p.items_per_row = l.tokenselect_items;
    p.item_tokens = l.tokenselect_item_tokens;
    p.partial_out = ws.partial.data<float>() + l.tokenselect_partial;
    p.partial_lse = p.partial_out + int64_t{l.num_tokenselect_rows} * l.tokenselect_items *
                                        dims.heads * dims.head_dim;
    p.merges = reinterpret_cast<const int2*>(base + l.tokenselect_merges);
    p.merge_rows = base + l.tokenselect_merge_rows;
    p.merge_counters =
        ws.metadata.data<int32_t>() + l.merge_counters + int64_t{l.num_merges} * dims.kv_heads;
    SS_RETURN_IF_ERROR(CudaStatus(cuda::LaunchTokenSelectAttention(p, out_ptr, stream()),
                                  "Attention (TokenSelect)"));
  }
  if (l.num_minference_rows == 0 && l.num_minference_tiles == 0) return absl::OkStatus();
  if (ws.sparse_index.numel() == 0) {
    return absl::FailedPreconditionError("Attention: the MInference index was not planned");
  }
  if (l.num_minference_tiles > 0) {
    SS_RETURN_IF_ERROR(CudaStatus(
        cuda::LaunchMInferenceTileAttention(
            q_ptr, kv_ptr,
            reinterpret_cast<const cuda::MInferenceSeqInfo*>(base + l.minference_seqs),
            base + l.tables, reinterpret_cast<const int2*>(base + l.minference_tiles),
            l.num_minference_tiles, ws.sparse_index.data<int32_t>(), dims, out_ptr, stream()),
        "Attention (MInference tiles)"));
  }
  if (l.num_minference_rows == 0) return absl::OkStatus();
  return CudaStatus(
      cuda::LaunchMInferenceAttention(
          q_ptr, kv_ptr, reinterpret_cast<const cuda::MInferenceSeqInfo*>(base + l.minference_seqs),
          base + l.tables, reinterpret_cast<const int2*>(base + l.minference_rows),
          l.num_minference_rows, ws.sparse_index.data<int32_t>(), dims, /*skip_dense=*/!l.generic,
          out_ptr, stream()),
      "Attention (MInference)");
}

absl::Status CudaBackend::ReadKv(const Tensor& kv_layer, const Tensor& slots, const Tensor& k,
                                 const Tensor& v) {
  for (const Tensor* t : {&kv_layer, &k, &v}) {
    if (t->device() != Device::kCuda || t->dtype() != DType::kBf16 || !t->is_contiguous()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ReadKv: needs contiguous CUDA bf16 tensors, got ", t->DebugString()));
    }
  }
  if (slots.device() != Device::kCuda || slots.dtype() != DType::kI32 || slots.ndim() != 1 ||
      k.ndim() != 3 || kv_layer.ndim() != 4 || !(k.shape() == v.shape()) ||
      slots.dim(0) != k.dim(0) || kv_layer.dim(2) != k.dim(1) || kv_layer.dim(3) != k.dim(2)) {
    return absl::InvalidArgumentError(absl::StrCat("ReadKv: shape mismatch k ", k.DebugString(),
                                                   " slots ", slots.DebugString(), " kv_layer ",
                                                   kv_layer.DebugString()));
  }
  return CudaStatus(cuda::LaunchReadKv(kv_layer.data<cuda::bf16_t>(), slots.data<int32_t>(),
                                       k.dim(0), static_cast<int>(kv_layer.dim(1)),
                                       static_cast<int>(k.dim(1)), static_cast<int>(k.dim(2)),
                                       k.data<cuda::bf16_t>(), v.data<cuda::bf16_t>(), stream()),
                    "ReadKv");
}

absl::Status CudaBackend::MoveKvRows(absl::Span<const Tensor> kv_layers,
                                     absl::Span<const int32_t> src, absl::Span<const int32_t> dst) {
  if (src.size() != dst.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("MoveKvRows: ", src.size(), " sources for ", dst.size(), " destinations"));
  }
  if (src.empty() || kv_layers.empty()) return absl::OkStatus();
  const Tensor& first = kv_layers.front();
  for (const Tensor& t : kv_layers) {
    if (t.device() != Device::kCuda || t.dtype() != DType::kBf16 || !t.is_contiguous() ||
        t.ndim() != 4 || !(t.shape() == first.shape())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MoveKvRows: needs contiguous CUDA bf16 layers of one shape, got ", t.DebugString()));
    }
  }
  if (first.dim(2) * first.dim(3) % 8 != 0) return Backend::MoveKvRows(kv_layers, src, dst);
  const int64_t slots = first.dim(0) / 2 * first.dim(1);
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] < 0 || src[i] >= slots || dst[i] < 0 || dst[i] >= slots) {
      return absl::InvalidArgumentError(absl::StrCat("MoveKvRows: move ", i, " (", src[i], " -> ",
                                                     dst[i], ") outside the ", slots, " slots"));
    }
  }
  // Moves in launches of kMaxMoves, in order (the REQUIRES holds across launches too), over
  // layers kMaxLayers at a time.
  using cuda::KvRowMoves;
  for (size_t m0 = 0; m0 < src.size(); m0 += KvRowMoves::kMaxMoves) {
    KvRowMoves moves;
    moves.num_moves = static_cast<int>(std::min<size_t>(KvRowMoves::kMaxMoves, src.size() - m0));
    std::copy_n(src.begin() + m0, moves.num_moves, moves.src);
    std::copy_n(dst.begin() + m0, moves.num_moves, moves.dst);
    for (size_t l0 = 0; l0 < kv_layers.size(); l0 += KvRowMoves::kMaxLayers) {
      moves.num_layers =
          static_cast<int>(std::min<size_t>(KvRowMoves::kMaxLayers, kv_layers.size() - l0));
      for (int l = 0; l < moves.num_layers; ++l) {
        moves.layers[l] = kv_layers[l0 + l].data<cuda::bf16_t>();
      }
      SS_RETURN_IF_ERROR(
          CudaStatus(cuda::LaunchMoveKvRows(moves, static_cast<int>(first.dim(1)),
                                            static_cast<int>(first.dim(2)),
                                            static_cast<int>(first.dim(3)), stream()),
                     "MoveKvRows"));
    }
  }
  return absl::OkStatus();
}

}  // namespace sparseserve::kernels
