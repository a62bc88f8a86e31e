// Launchers of the CUDA backend's kernels (private to kernels/cuda).
//
// Plain C++ signatures over raw device pointers so that cuda_backend.cc (host code, built by the
// C++ compiler) stays free of device code; each launcher queues its kernel on `stream` and returns
// the launch error. bf16 values travel as uint16_t. Shapes are checked by the caller.
#ifndef SPARSESERVE_KERNELS_CUDA_CUDA_KERNELS_H_
#define SPARSESERVE_KERNELS_CUDA_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace sparseserve::kernels::cuda {

using bf16_t = uint16_t;

// dst[i] = bf16/f32 conversions and fills on the device.
cudaError_t LaunchFillUniform(void* data, bool is_bf16, int64_t n, uint64_t seed, float lo,
                              float hi, cudaStream_t stream);

// out[i, :] = table[ids[i], :]: a bf16 table into bf16 out, or (out_f32) into f32 out, widened;
// with table_f32 an f32 table into f32 out (out_f32 must be set). ids outside [0, vocab) write
// zeros and set *error_flag = 1.
cudaError_t LaunchGatherRows(const void* table, bool table_f32, int64_t vocab, int64_t d,
                             const int32_t* ids, int64_t n, void* out, bool out_f32,
                             int* error_flag, cudaStream_t stream);

// out = x * rsqrt(mean(x^2) + eps) * w per row; with `residual` non-null, first residual += x
// (kept in f32, or rounded to bf16) and the norm is taken of the updated residual. x is f32 only
// without a residual (the first layer's norm of the f32 residual stream); out is bf16.
cudaError_t LaunchRmsNorm(void* residual, bool residual_f32, const void* x, bool x_f32,
                          const bf16_t* w, int64_t n, int64_t d, float eps, bf16_t* out,
                          cudaStream_t stream);

// Rotates q [n, heads, hd] and k [n, kv_heads, hd] in place (pairs i, i + hd/2).
cudaError_t LaunchRope(bf16_t* q, bf16_t* k, int64_t n, int heads, int kv_heads, int head_dim,
                       const int32_t* positions, const float* inv_freq, cudaStream_t stream);

// out [rows, cols] = silu(gate) * up; gate and up rows start every gate_stride / up_stride
// elements.
cudaError_t LaunchSiluMul(const bf16_t* gate, int64_t gate_stride, const bf16_t* up,
                          int64_t up_stride, int64_t rows, int64_t cols, bf16_t* out,
                          cudaStream_t stream);

// out[r, c] += bias[c] for a [rows, cols] matrix in bf16 or f32.
cudaError_t LaunchAddBias(void* out, bool out_f32, const bf16_t* bias, int64_t rows, int64_t cols,
                          cudaStream_t stream);

// The RoPE + paged KV write a skinny QKV projection runs on its output instead of storing it
// (RopeWriteKv's semantics: rows of heads query heads, then kv_heads keys, then kv_heads values).
struct SkinnyRopeKv {
  const int32_t* positions = nullptr;  // [n]
  const float* inv_freq = nullptr;     // [head_dim / 2]
  const int32_t* slots = nullptr;      // [n]
  bf16_t* q = nullptr;                 // [n, heads, head_dim]
  bf16_t* kv_layer = nullptr;          // [blocks * 2, block_tokens, kv_heads, head_dim]
  int heads = 0, kv_heads = 0, head_dim = 0, block_tokens = 0;
};

// out[n, o] = x[n, k] · w[o, k]ᵀ (+ bias[o], or null) for 1 <= n <= kMaxSkinnyRows and k % 8 == 0
// (16-byte aligned rows): the decode-step GEMM as a weight-streaming kernel. f32 accumulation,
// the bias added before the output's rounding.
inline constexpr int kMaxSkinnyRows = 8;
cudaError_t LaunchSkinnyGemm(const bf16_t* x, const bf16_t* w, const bf16_t* bias, int64_t n,
                             int64_t k, int64_t o, void* out, bool out_f32, cudaStream_t stream);

// out[n, j] = silu(x · w[j]ᵀ) · (x · w[ffn + j]ᵀ) for w_gate_up [2 * ffn, k] (gate rows, then up
// rows), the same n and k as LaunchSkinnyGemm: the gate/up projection and SwiGLU in one kernel,
// gate and up rounded to bf16 before the product exactly as LaunchSkinnyGemm + LaunchSiluMul do.
cudaError_t LaunchSkinnySwiGlu(const bf16_t* x, const bf16_t* w_gate_up, int64_t n, int64_t k,
                               int64_t ffn, bf16_t* out, cudaStream_t stream);

// The QKV projection x · w_qkvᵀ (+ bias) with RoPE and the KV write in its epilogue: the bits of
// LaunchSkinnyGemm + LaunchRopeWriteKv. head_dim even.
cudaError_t LaunchSkinnyRopeKv(const bf16_t* x, const bf16_t* w_qkv, const bf16_t* bias, int64_t n,
                               int64_t k, const SkinnyRopeKv& rope, cudaStream_t stream);

// One logits row's sampling knobs on the device (kernels/sampling_plan.h), laid out by the host.
struct SampleRowParams {
  double uniform;            // the row's draw in [0, 1)
  float inv_temperature;     // 1.0f / temperature, taken on the host as the reference does
  float top_p;               // 1 = off
  float min_p;               // 0 = off
  float repetition_penalty;  // θ; 1 = off
  int32_t top_k;             // 0 = off
  int32_t greedy;            // 1 when temperature == 0
  int32_t ids_begin;         // the row's penalised ids: penalized_ids[ids_begin, ids_end)
  int32_t ids_end;
};

struct SampleParams {
  const float* logits;           // f32 [num_rows, vocab] (not modified)
  float* scratch;                // f32 [num_rows, vocab] work space (penalised logits, weights)
  const SampleRowParams* rows;   // [num_rows]
  const int32_t* penalized_ids;  // int32 [rows' ids], each in [0, vocab) (checked on the host)
  int64_t num_rows;
  int32_t vocab;  // 1 .. kMaxSamplingVocab
  int32_t* out;   // int32 [num_rows] the sampled token ids
};

// out[r] = the token kernels::SampleRow picks for row r, bit for bit: one 1024-thread CTA per row
// (radix selects over the weights for top-k and top-p, an id-ordered scan for the draw).
cudaError_t LaunchSample(const SampleParams& params, cudaStream_t stream);

struct TokenLogprobsParams {
  const float* logits;    // f32 [num_rows, vocab]
  const int32_t* tokens;  // int32 [num_rows] the sampled ids
  int64_t num_rows;
  int32_t vocab;
  int32_t top_n;          // 0 .. kernels::kMaxTopLogprobs, <= vocab
  float* values;          // f32 [num_rows, values_stride]: the token's, then top_n alternatives'
  int64_t values_stride;  // >= 1 + top_n
  int32_t* ids;           // int32 [num_rows, ids_stride]: the alternatives' ids
  int64_t ids_stride;     // >= top_n
};

// Backend::TokenLogprobs: one 1024-thread CTA per row (logprob_kernels.cu).
cudaError_t LaunchTokenLogprobs(const TokenLogprobsParams& params, cudaStream_t stream);

// Scatters k, v [n, kv_heads, hd] into the paged layer at slots [n].
// Rope + WriteKv on a fused QKV projection's output qkv [n, (heads + 2 kv_heads) * head_dim]:
// rotated queries to q [n, heads, head_dim], rotated keys and values into their KV slots.
cudaError_t LaunchRopeWriteKv(const bf16_t* qkv, int64_t n, int heads, int kv_heads, int head_dim,
                              const int32_t* positions, const float* inv_freq, const int32_t* slots,
                              bf16_t* q, bf16_t* kv_layer, int block_tokens, cudaStream_t stream);
cudaError_t LaunchWriteKv(const bf16_t* k, const bf16_t* v, const int32_t* slots, int64_t n,
                          bf16_t* kv_layer, int block_tokens, int kv_heads, int head_dim,
                          cudaStream_t stream);

// Per-sequence metadata of an attention call, on the device (see attention_plan.h).
struct AttentionSeqInfo {
  int32_t q_begin;      // first packed query row
  int32_t q_len;        // query rows
  int32_t kv_len;       // keys (cached + new); new rows are the last q_len of them
  int32_t table_begin;  // offset of its block table in the concatenated tables
  int32_t window;       // sliding window in keys (0 = none)
  int32_t sink_tokens;  // with a window: leading keys that stay visible
  int32_t mask_begin;   // byte offset of its uint8 [q_len * q_len] mask in `masks`, -1 = causal
  int32_t state_slot;   // row of the per-sequence state (AttentionBatch::sequence_state), -1 = none
};

// Shapes shared by the attention launchers.
struct AttentionDims {
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int block_tokens = 0;
  int block_shift = -1;  // log2(block_tokens) when it is a power of two (a shift, not a division)
  float scale = 0;       // softmax scale (already resolved)
};

// The device arrays every attention launcher reads: sequence records, their block tables
// concatenated, and the masks (bytes) they point into.
struct AttentionSeqs {
  const AttentionSeqInfo* seqs = nullptr;
  const int32_t* block_tables = nullptr;
  const uint8_t* masks = nullptr;
};

// Prefill/chunk attention (tensor cores, head_dim 64 or 128) with the visibility rule of
// kernels/attention_visibility.h: causal or masked, optionally windowed (tiles outside every row's
// window are skipped). `tiles` lists (sequence index, first query row of a 64-row tile) pairs,
// heaviest first.
// `masked`: some sequence has a mask or a window (the variant that checks every key).
// `gates`: for kMInference sequences' tiles, the index area whose header decides on the device
// whether the tile's head runs here (kDense) or on a sparse kernel (see PrefillTileGates).
struct PrefillTileGates {
  // int32 [num_tiles, 2]: (index_offset, words_per_head) of the tile's MInference sequence (head
  // h's header at index[offset + h * words]), offset -1 for tiles that always run; null = none.
  const int2* areas = nullptr;
  const int32_t* index = nullptr;  // int32 the built MInference index (workspace.sparse_index)
};
// Split-KV prefill tiles (`splits` > 1): each tile's visible key tiles are cut into `splits`
// contiguous parts, one CTA each (grid z), that write their rows' partial softmax states instead
// of `out` — tile t's part z, row r at slot (t * splits + z) + r * num_tiles * splits — for a
// SplitKvMerge to combine (a part with no key writes zeros and lse -inf). For chunks of few rows
// over long contexts (speculative verify trees): one CTA per (tile, head group) walking every key
// would leave most SMs idle.
struct PrefillSplit {
  int splits = 1;
  float* partial_out = nullptr;  // [num_tiles * splits * 64, heads, head_dim]
  float* partial_lse = nullptr;  // [num_tiles * splits * 64, heads]
};
cudaError_t LaunchPrefillAttention(const bf16_t* q, const bf16_t* kv_layer,
                                   const AttentionSeqs& seqs, const int2* tiles, int num_tiles,
                                   const AttentionDims& dims, bool masked,
                                   const PrefillTileGates& gates, const PrefillSplit& split,
                                   bf16_t* out, cudaStream_t stream);
inline constexpr int kPrefillTileRows = 64;
// Whether the prefill kernels run warp-specialised (prefill_ws.cuh: a producer warp feeding
// consumer warpgroups through mbarriers; the MInference tiles always, dense tiles as below): on
// wgmma, unless $SPARSESERVE_PREFILL_WS=0 (read once: the A/B switch).
bool PrefillWarpSpecialized();
// A boolean A/B switch of the warp-specialised kernels read from the environment variable `name`
// ("0" false, anything else true; `fallback` when unset): SPARSESERVE_PREFILL_WS_TURNS (two
// consumers take turns at the tensor cores, default on), SPARSESERVE_PREFILL_WS_ALIGNED
// (MInference tiles of long ranges as aligned blocks copied by TMA, default on: 7-15% faster
// than packing them, bench/RESULTS.md).
// Callers read it once.
bool PrefillWsOption(const char* name, bool fallback);
// Whether a batch's dense prefill tiles run on the warp-specialised kernel (two query heads of a
// GQA group per CTA, one CTA per SM): unmasked batches (`masked` false) of even groups.
bool PrefillOnWarpSpecialized(int group, bool masked);
// Query heads of one GQA group (of `group` heads) a prefill CTA computes: 2 on the
// warp-specialised kernel, else as many as divide the group up to PrefillHeadsPerCta() on wgmma,
// one on mma.sync.
int PrefillCtaHeads(int group, bool masked);
// Whether chunks of few tiles over long contexts take split-KV prefill tiles (the default) or
// keep one CTA per tile ($SPARSESERVE_PREFILL_SPLIT_KV=0, read once: an A/B switch).
bool PrefillSplitKv();
// Whether the prefill kernels (dense and MInference tiles) run their products on Hopper's wgmma
// (the default) or on mma.sync ($SPARSESERVE_PREFILL_MMA=sync, read once: an A/B switch).
bool PrefillTilesOnWgmma();
// With wgmma, the most query heads of a GQA group one dense prefill CTA computes over shared K/V
// tiles: 4 by default, $SPARSESERVE_PREFILL_HEADS_PER_CTA (1, 2 or 4) for A/B runs.
int PrefillHeadsPerCta();

// The split-KV work lists of one decode attention call. Counts that change with the KV lengths
// live on the device and the grid size depends only on the batch, so a captured step graph
// replays correctly while the contexts grow.
struct DecodeWork {
  const int32_t* num_items = nullptr;   // device [1]: items of this call (<= max_items)
  const int4* items = nullptr;          // device: (sequence index, first key, end key, first row)
  int max_items = 0;                    // grid size, >= *num_items; idle CTAs exit at once
  const int2* merges = nullptr;         // device [num_merges]: (first item, item count)
  const int32_t* merge_rows = nullptr;  // device [num_merges]: output row (q_begin) of each merge
  int num_merges = 0;
  // The tensor-core kernel merges in its last chunk (decode_tc::MergeIfLast): per item the first
  // merge of its row group, and per (row group's first merge, KV head) a counter of finished
  // chunks, zero before the call (and left zero by it).
  const int32_t* item_merges = nullptr;  // device [max_items]
  int32_t* merge_counters = nullptr;     // device [num_merges * kv_heads]
  // Row r of an item (counted from its first row) writes its partial state at slot
  // item + r * max_items.
  float* partial_out = nullptr;  // [rows * max_items, heads, head_dim]
  float* partial_lse = nullptr;  // [rows * max_items, heads]
  // The most query rows of an item (1 = decode; a few for a speculative verify step): a
  // sequence with more rows is split into groups of exactly this many (the last one fewer).
  int rows = 1;
  // Some sequence has a mask, a window or several rows (the variant checking every key).
  bool masked = false;
};

// Split-KV decode attention for sequences of one query row, or a few (speculative verify steps:
// kMaxDecodeQueries query heads at most per KV head, rows x GQA group), head_dim 64 or 128: each
// item covers keys [first, end) of one sequence for all its rows (or one group of them), so every
// K/V byte is read once per step and row group (keys a row cannot see inside it are skipped); the
// merges combine a row's items into `out`. A chunk or a row that sees no key yields zeros, not NaN.
inline constexpr int kMaxDecodeQueries = 32;
cudaError_t LaunchDecodeAttention(const bf16_t* q, const bf16_t* kv_layer,
                                  const AttentionSeqs& seqs, const DecodeWork& work,
                                  const AttentionDims& dims, bf16_t* out, cudaStream_t stream);
inline constexpr int kDecodeTileTokens = 64;
// Whether decode items of GQA groups of at least 4 (one or two 16-pair tiles of (row, head)
// pairs) and TokenSelect's lists of such groups run on tensor cores (decode_tensor_core.cuh, the
// default) or on the CUDA-core kernels ($SPARSESERVE_DECODE_TENSOR_CORES=0, read once: an A/B
// switch).
bool DecodeOnTensorCores();
// Whether the tensor-core kernels merge their split-KV chunks in the last chunk of each group
// (decode_tc::MergeIfLast, the default) or leave it to MergeKernel
// ($SPARSESERVE_DECODE_MERGE_KERNEL=1, read once: an A/B switch).
bool DecodeMergesInKernel();

// The second half of split-KV attention: each merge combines the partial softmax states of its
// chunks (log-sum-exp weighting) into one output row. Used by the decode kernel and by the
// TokenSelect kernel, whose items are laid out the same way.
struct SplitKvMerge {
  const float* partial_out = nullptr;   // f32 [chunks, heads, head_dim]
  const float* partial_lse = nullptr;   // f32 [chunks, heads]; -inf for a chunk that saw no key
  const int2* merges = nullptr;         // device [num_merges]: (first chunk, chunk count)
  const int32_t* merge_rows = nullptr;  // device [num_merges]: the output row of each merge
  int num_merges = 0;
  int max_chunks = 0;  // the largest chunk count of a merge (shared memory per block)
};
cudaError_t LaunchSplitKvMerge(const SplitKvMerge& merge, const AttentionDims& dims, bf16_t* out,
                               cudaStream_t stream);

// Any head_dim up to 256, any q_len: one warp per (query row, head), keys in order. The fallback
// for small models (stories260K has head_dim 8) and the GPU-side reference in tests.
cudaError_t LaunchGenericAttention(const bf16_t* q, const bf16_t* kv_layer,
                                   const AttentionSeqs& seqs, int total_q, const int32_t* row_seq,
                                   const AttentionDims& dims, bf16_t* out, cudaStream_t stream);

// The tensor-core MInference kernel (head_dim 64/128): one CTA per (tile, head) with `tiles`
// listing (record of `seqs`, first row of a 64-row query block) pairs. Runs the vertical-slash,
// block-sparse and A-shape heads over their packed cover; kDense heads are left to the dense
// prefill kernel (PrefillTileGates). Defined in attention_minference_tiles.cu.
struct MInferenceSeqInfo;
cudaError_t LaunchMInferenceTileAttention(const bf16_t* q, const bf16_t* kv_layer,
                                          const MInferenceSeqInfo* seqs,
                                          const int32_t* block_tables, const int2* tiles,
                                          int num_tiles, const int32_t* index,
                                          const AttentionDims& dims, bf16_t* out,
                                          cudaStream_t stream);

// One kMInference sequence of an attention plan, on the device (kernels/minference_index.h
// states the semantics; kernels/cuda/cuda_minference.cc fills these).
struct MInferenceSeqInfo {
  const int32_t* heads;   // int32 [num_layers, heads, 3]: the config's (kind, v, s) per head
  uint64_t planted_seed;  // MInferenceConfig::planted_seed
  int32_t seq;            // index of the sequence in the batch (its sparse_stats row)
  int32_t q_begin;        // first packed query row
  int32_t q_len;          // query rows (>= 1)
  int32_t kv_len;         // keys (cached + new)
  int32_t table_begin;    // offset of its block table in the concatenated tables
  int32_t index_offset;   // words: head h's index area starts at index_offset + h * words_per_head
  int32_t num_query_blocks, cap_columns, cap_slashes, cap_blocks, words_per_head;  // the shape
  int32_t scratch_offset;  // floats into MInferenceIndexParams::scratch, -1 = nothing estimated
  int32_t num_layers;      // layers of the config
  int32_t planted;         // 1: planted lines instead of estimation
};
static_assert(sizeof(MInferenceSeqInfo) % 8 == 0, "records are packed into int32 metadata");

// Floats of estimation scratch one head of a sequence needs (estimated vertical-slash or
// block-sparse heads): column sums [kv_len], diagonal sums [kv_len], per-key-tile row partials
// (max, sum) [tiles, 64, 2], merged row statistics [64, 2], mean-pooled keys [tiles, head_dim].
#ifdef __CUDACC__
__host__ __device__
#endif
    inline int64_t
    MInferenceScratchFloatsPerHead(int32_t kv_len, int head_dim) {
  const int64_t tiles = (int64_t{kv_len} + 63) / 64;
  return 2 * int64_t{kv_len} + 128 * tiles + 128 + tiles * head_dim;
}

// BuildAttentionIndex's device work for the MInference sequences of a plan.
struct MInferenceIndexParams {
  const bf16_t* q = nullptr;                // bf16 [rows, heads, head_dim]
  const bf16_t* kv_layer = nullptr;         // paged layer (WriteKv's layout)
  const MInferenceSeqInfo* seqs = nullptr;  // device [num_seqs]
  int num_seqs = 0;
  const int32_t* block_tables = nullptr;  // the plan's concatenated block tables
  AttentionDims dims;
  int layer = 0;             // REQUIRES: < every sequence's num_layers (checked on the host)
  int max_key_tiles = 0;     // max over the sequences of ceil(kv_len / 64)
  int max_query_blocks = 0;  // max over the sequences of num_query_blocks
  int32_t* index = nullptr;  // AttentionWorkspace::sparse_index
  float* stats = nullptr;    // AttentionWorkspace::sparse_stats, f32 [batch sequences, 2]
  float* scratch = nullptr;  // f32 estimation scratch (MInferenceScratchFloatsPerHead per head)
};

// Builds layer `layer`'s index of every sequence of `p` (all heads) and adds their visible and
// causal pairs to `stats`: five launches (estimation tiles, row merge, column/diagonal sums,
// top-k selection, pairs and dense switch), no host round trip.
cudaError_t LaunchMInferenceIndex(const MInferenceIndexParams& p, cudaStream_t stream);

// Attention of the MInference sequences' rows under their built index: rows lists
// (sequence of `seqs`, row within its chunk) pairs, num_rows of them. Any head_dim up to 256.
// `skip_dense`: heads whose index says kDense are left alone (the tensor-core prefill kernel
// runs them); false where no tensor-core kernel exists for the head dim.
cudaError_t LaunchMInferenceAttention(const bf16_t* q, const bf16_t* kv_layer,
                                      const MInferenceSeqInfo* seqs, const int32_t* block_tables,
                                      const int2* rows, int num_rows, const int32_t* index,
                                      const AttentionDims& dims, bool skip_dense, bf16_t* out,
                                      cudaStream_t stream);

// One kTokenSelect sequence of an attention plan, on the device (kernels/tokenselect_index.h
// states the semantics; cuda_attention.cc fills these, one per TokenSelect sequence with rows).
struct TokenSelectSeqInfo {
  int32_t seq;                // index of the sequence in the batch (its stats rows)
  int32_t q_begin;            // first packed query row
  int32_t q_len;              // query rows (>= 1)
  int32_t kv_len;             // keys (cached + new)
  int32_t table_begin;        // offset of its block table in the concatenated tables
  int32_t mask_begin;         // byte offset of its uint8 [q_len * q_len] mask, -1 = causal
  int32_t state_slot;         // row of the sequence state (AttentionBatch::sequence_state)
  int32_t k, initial, local;  // TokenSelectParams
  float theta;
  int32_t dense;  // 1: at most k candidates, every key (the dense kernels run it; stats only)
  int32_t lists;  // selection lists: 1, or one per KV head (tokenselect::ListsOf)
  int32_t unused;
  int64_t scratch_offset;  // floats into TokenSelectIndexParams::scratch, -1 when dense
};
static_assert(sizeof(TokenSelectSeqInfo) % 8 == 0, "records are packed into int32 metadata");

// The f32 words of selection scratch one selecting sequence needs (TokenSelectScratchView's
// areas) for `candidate_cap` candidates, `heads` query heads of width `query_width` in all,
// `chunks` score chunks and `lists` selection lists (each with its scores, radix histograms,
// control words and chunk counts).
#ifdef __CUDACC__
__host__ __device__
#endif
    inline int64_t
    TokenSelectScratchFloats(int64_t candidate_cap, int heads, int64_t query_width, int chunks,
                             int lists = 1) {
  constexpr int64_t kControl = 16, kHistogram = 4096 + 4096 + 256;
  const int64_t floats = query_width + int64_t{2} * chunks * heads + heads * candidate_cap +
                         lists * (kControl + candidate_cap + kHistogram + int64_t{2} * chunks);
  return (floats + 3) / 4 * 4;  // 16-byte aligned areas
}

// BuildAttentionIndex's device work for the TokenSelect sequences of a plan.
struct TokenSelectIndexParams {
  const bf16_t* q = nullptr;                 // bf16 [rows, heads, head_dim]
  const bf16_t* kv_layer = nullptr;          // paged layer (WriteKv's layout)
  const TokenSelectSeqInfo* seqs = nullptr;  // device [num_seqs]
  int num_seqs = 0;
  const int32_t* block_tables = nullptr;  // the plan's concatenated block tables
  const uint8_t* masks = nullptr;         // the plan's masks
  AttentionDims dims;
  int32_t* state = nullptr;  // int32 [slots, slot_words] AttentionBatch::sequence_state
  int64_t slot_words = 0;
  int layer = 0;  // REQUIRES: every selecting sequence's slot holds layer + 1 layer areas
  float* scratch = nullptr;      // f32 selection scratch (TokenSelectScratchFloats per sequence)
  int candidate_cap = 0;         // >= every selecting sequence's candidates (a power of two)
  int chunk_tokens = 0;          // candidates per scoring CTA; divides candidate_cap
  int max_lists = 1;             // the most selection lists of a record (grid bound)
  float* pair_stats = nullptr;   // AttentionWorkspace::sparse_stats, f32 [batch sequences, 2]
  float* cache_stats = nullptr;  // AttentionWorkspace::selection_stats, f32 [batch sequences, 2]
};

// Selects or reuses layer `layer`'s token set of every TokenSelect sequence of `p` and adds their
// pairs and cache counts to the stats, all on the device: the decision (mean query, cosine,
// selection cache), the paged scoring, the per-head softmax and soft vote, and a radix top-k.
// head_dim 64 or 128, GQA group <= 16.
cudaError_t LaunchTokenSelectIndex(const TokenSelectIndexParams& p, cudaStream_t stream);

// Sparse attention of the TokenSelect rows over their token lists (initial, selected, local and
// the row's visible new keys), split along the list into items_per_row chunks of item_tokens
// positions, then merged. head_dim 64 or 128, GQA group <= 16.
struct TokenSelectAttentionParams {
  const bf16_t* q = nullptr;
  const bf16_t* kv_layer = nullptr;
  const TokenSelectSeqInfo* seqs = nullptr;
  const int2* rows = nullptr;  // device [num_rows]: (record of seqs, row within its chunk)
  int num_rows = 0;
  const int32_t* block_tables = nullptr;
  const uint8_t* masks = nullptr;
  AttentionDims dims;
  const int32_t* state = nullptr;  // as TokenSelectIndexParams
  int64_t slot_words = 0;
  int layer = 0;
  int items_per_row = 0;                // split-KV chunks per row
  int item_tokens = 0;                  // list positions per chunk (a multiple of 64)
  float* partial_out = nullptr;         // f32 [num_rows * items_per_row, heads, head_dim]
  float* partial_lse = nullptr;         // f32 [num_rows * items_per_row, heads]
  const int2* merges = nullptr;         // device [num_rows]: (row * items_per_row, items_per_row)
  const int32_t* merge_rows = nullptr;  // device [num_rows]: the packed query row
  // The tensor-core kernel's merge in the last chunk of each (row, KV head), as DecodeWork's.
  int32_t* merge_counters = nullptr;  // device [num_rows * kv_heads], zero
  bf16_t* out = nullptr;              // set by LaunchTokenSelectAttention
};
cudaError_t LaunchTokenSelectAttention(const TokenSelectAttentionParams& p, bf16_t* out,
                                       cudaStream_t stream);

// out[i] = ||actual[R_i] - expected[R_i]|| / ||expected[R_i]|| over the rows R_i = [ranges[2i],
// ranges[2i] + ranges[2i + 1]) of two bf16 [rows, row_elems] arrays (Backend::RelativeL2Error):
// one CTA per range, f32 sums. Rows outside [0, rows) are ignored (ranges are not checked on the
// host: they live on the device).
cudaError_t LaunchRelativeL2Error(const bf16_t* actual, const bf16_t* expected, int64_t rows,
                                  int64_t row_elems, const int32_t* ranges, int64_t num_ranges,
                                  float* out, cudaStream_t stream);

// k, v [n, kv_heads, head_dim] = the keys and values at slots [n] (WriteKv's inverse).
cudaError_t LaunchReadKv(const bf16_t* kv_layer, const int32_t* slots, int64_t n, int block_tokens,
                         int kv_heads, int head_dim, bf16_t* k, bf16_t* v, cudaStream_t stream);

// Backend::MoveKvRows in one launch: the keys and values at slot src[i] go to slot dst[i] in
// every layer (REQUIRES as there: no move reads a slot an earlier move writes). Passed by value
// (kernel parameters): up to kMaxLayers layers and kMaxMoves moves a launch.
struct KvRowMoves {
  static constexpr int kMaxLayers = 128, kMaxMoves = 64;
  bf16_t* layers[kMaxLayers];
  int32_t src[kMaxMoves];
  int32_t dst[kMaxMoves];
  int num_layers = 0, num_moves = 0;
};
cudaError_t LaunchMoveKvRows(const KvRowMoves& moves, int block_tokens, int kv_heads, int head_dim,
                             cudaStream_t stream);

}  // namespace sparseserve::kernels::cuda

#endif  // SPARSESERVE_KERNELS_CUDA_CUDA_KERNELS_H_
