/* A C interface to the CUDA backend's ops over raw device pointers, built as the shared library
 * libsparseserve_cuda_ops.so. It exists so that Python (ctypes + PyTorch) can check every kernel
 * against a PyTorch reference and time it beside torch's SDPA on the same tensors
 * (bench/cuda/kernel_check.py); the serving code uses kernels::Backend directly.
 *
 * Conventions: every pointer named *_dev is device memory of device 0 (the runtime's primary
 * context, the one PyTorch uses), int32 pointers named *_dev included; bf16 tensors unless said
 * otherwise, contiguous row-major. All work is queued on the CUDA legacy default stream
 * (stream 0), so PyTorch's default stream and events order and time it. Host arrays are read
 * before the call returns and may be reused at once. Outputs may alias inputs where
 * kernels/backend.h allows it (rms_norm / add_rms_norm out = x, silu_mul out = gate). Embedding
 * ids outside the table are reported by the next ss_synchronize, not by the call; write_kv slots
 * are not checked (they must lie inside the layer, as block tables checked by the caller do).
 * Each function returns 0 on success, else nonzero, and ss_last_error() describes the failure
 * (thread-local). */
#ifndef SPARSESERVE_KERNELS_CUDA_OPS_C_API_H_
#define SPARSESERVE_KERNELS_CUDA_OPS_C_API_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ss_backend ss_backend;

/* Creates the CUDA backend on device 0; NULL on failure (see ss_last_error). */
ss_backend* ss_backend_create(void);
void ss_backend_destroy(ss_backend* be);
const char* ss_last_error(void);
/* Waits for queued work; returns an asynchronous error if one happened. */
int ss_synchronize(ss_backend* be);

/* out[i,:] = table[ids[i],:]. table [vocab, hidden], ids i32 [n], out [n, hidden]. */
int ss_embedding(ss_backend* be, const void* table_dev, int64_t vocab, int64_t hidden,
                 const int32_t* ids_dev, int64_t n, void* out_dev);
/* out = x / rms(x) * w. x, out [n, d]; w [d]. */
int ss_rms_norm(ss_backend* be, const void* x_dev, const void* w_dev, int64_t n, int64_t d,
                float eps, void* out_dev);
/* residual += x; out = rms_norm(residual) * w. */
int ss_add_rms_norm(ss_backend* be, void* residual_dev, const void* x_dev, const void* w_dev,
                    int64_t n, int64_t d, float eps, void* out_dev);
/* out = x @ w^T (+ bias). x [n, in], w [out_features, in], bias [out_features] or NULL;
 * out [n, out_features], f32 if out_f32 else bf16. */
int ss_linear(ss_backend* be, const void* x_dev, const void* w_dev, const void* bias_dev, int64_t n,
              int64_t in, int64_t out_features, void* out_dev, int out_f32);
/* In-place rotation of q [n, heads, head_dim] and k [n, kv_heads, head_dim]; positions i32 [n];
 * inv_freq f32 [head_dim/2]; pairs (i, i + head_dim/2) (Hugging Face "halves" layout). */
int ss_rope(ss_backend* be, void* q_dev, void* k_dev, int64_t n, int heads, int kv_heads,
            int head_dim, const int32_t* positions_dev, const float* inv_freq_dev);
/* out = silu(gate) * up, all [n, ffn]. */
int ss_silu_mul(ss_backend* be, const void* gate_dev, const void* up_dev, int64_t n, int64_t ffn,
                void* out_dev);
/* Writes k, v [n, kv_heads, head_dim] into kv_layer [num_blocks * 2, block_tokens, kv_heads,
 * head_dim] at slots i32 [n] (block * block_tokens + offset; keys in row 2*block, values in row
 * 2*block + 1). */
int ss_write_kv(ss_backend* be, const void* k_dev, const void* v_dev, const int32_t* slots_dev,
                int64_t n, void* kv_layer_dev, int64_t num_blocks, int block_tokens, int kv_heads,
                int head_dim);
/* Dense causal attention with GQA over paged KV for a batch of sequences.
 * q, out [total_q, heads, head_dim] packed by sequence; kv_layer as in ss_write_kv.
 * Host arrays: q_lens[num_seqs], kv_lens[num_seqs] (kv_len >= q_len; the queries are the last
 * q_len positions), block_tables = the sequences' block ids concatenated, each sequence holding
 * ceil(kv_len / block_tokens) entries. scale 0 means 1/sqrt(head_dim). A call with the same batch
 * as the previous one reuses its plan (a forward step plans once and runs every layer). */
int ss_attention(ss_backend* be, const void* q_dev, const void* kv_layer_dev, int64_t num_blocks,
                 int block_tokens, int heads, int kv_heads, int head_dim, int num_seqs,
                 const int32_t* q_lens, const int32_t* kv_lens, const int32_t* block_tables,
                 float scale, void* out_dev);

/* TokenSelect (kernels/tokenselect_index.h) over paged KV for a batch of sequences: one layer's
 * BuildAttentionIndex (select or reuse, per the selection cache) then Attention. Arguments as
 * ss_attention, plus the TokenSelect parameters (k selected tokens, `initial` leading and `local`
 * trailing cached tokens always attended, selection-cache threshold theta: > 1 never reuses,
 * -1 always reuses a valid selection at most `local` tokens old) and the state:
 * state_dev i32 [num_seqs, slot_words] (sequence s uses row s; a fresh row is zeros), with
 * slot_words >= 4 + heads * head_dim + k (tokenselect::StateWordsPerLayer; layer 0 is used).
 * Sequences with at most k candidates attend every key. Reuses its plan like ss_attention (the
 * selection-cache counters then add up over the calls with one plan). */
int ss_tokenselect_attention(ss_backend* be, const void* q_dev, const void* kv_layer_dev,
                             int64_t num_blocks, int block_tokens, int heads, int kv_heads,
                             int head_dim, int num_seqs, const int32_t* q_lens,
                             const int32_t* kv_lens, const int32_t* block_tables, float scale,
                             int k, int initial, int local, float theta, int32_t* state_dev,
                             int64_t slot_words, void* out_dev);
/* Copies the TokenSelect counters of the current ss_tokenselect_attention plan into host arrays
 * of 2 * num_seqs floats each (either may be NULL): selection (hits, queries) and pairs
 * (computed, causal), summed since that plan was made. Waits for queued work. */
int ss_tokenselect_stats(ss_backend* be, float* selection_host, float* pairs_host);

/* MInference sparse prefill (kernels/minference_index.h) over paged KV for a batch of sequences:
 * one layer's BuildAttentionIndex (when build_index is nonzero; else the index of the previous
 * call with the same batch is reused) then Attention. Arguments as ss_attention, plus every query
 * head's pattern: `pattern` 0 A-shape (v sinks, s window), 1 vertical-slash (v columns, s
 * slashes), 2 block-sparse (v blocks), 3 dense; `planted` nonzero replaces estimation by the
 * seeded planted lines of VS(1000, 6096) (issue 16's speed index, random inputs). Reuses its plan
 * like ss_attention. */
int ss_minference_attention(ss_backend* be, const void* q_dev, const void* kv_layer_dev,
                            int64_t num_blocks, int block_tokens, int heads, int kv_heads,
                            int head_dim, int num_seqs, const int32_t* q_lens,
                            const int32_t* kv_lens, const int32_t* block_tables, float scale,
                            int pattern, int v, int s, int planted, int build_index, void* out_dev);
/* The planted index's lines of (layer, head) at context kv_len (host only, no backend): its
 * columns into columns_host [n_columns] and its slash offsets into slashes_host [n_slashes], both
 * ascending, as the planted config of ss_minference_attention builds them (kernels/
 * minference_index.h). Fills *n_columns and *n_slashes (the sizes VS(1000, 6096) takes at kv_len,
 * at most 1000 and 6096); the arrays must hold 1000 and 6096 entries. */
int ss_minference_planted_lines(int layer, int head, int kv_len, int32_t* columns_host,
                                int32_t* n_columns, int32_t* slashes_host, int32_t* n_slashes);
/* Copies the pair counters of the current ss_minference_attention plan into a host array of
 * 2 * num_seqs floats: per sequence the (row, key) pairs computed and the causal pairs, summed
 * over the calls since that plan was made. Waits for queued work. */
int ss_minference_stats(ss_backend* be, float* pairs_host);

#ifdef __cplusplus
}
#endif

#endif /* SPARSESERVE_KERNELS_CUDA_OPS_C_API_H_ */
