// The run behind `sparseserve bench model`: a synthetic model (a preset's shape, random weights
// made on the device) and one KV cache on a backend; prefill and decode cases timed and set
// against their roofline (tools/bench_roofline.h); the table printed to stdout, progress lines to
// stderr. tools/bench_command.cc turns the flags into ModelBenchOptions. Runs on the calling
// thread, which owns the backend for the run.
#ifndef SPARSESERVE_TOOLS_BENCH_MODEL_H_
#define SPARSESERVE_TOOLS_BENCH_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/model/model_config.h"
#include "common/spec/draft.h"
#include "common/tensor/tensor.h"
#include "kernels/minference_index.h"
#include "kernels/tokenselect_index.h"

namespace sparseserve::tools {

struct ModelBenchOptions {
  std::string preset;                    // the preset's name, for output
  model::ModelConfig config;             // its shape
  Device device = Device::kHost;         // the backend to create
  std::vector<int64_t> prefill_lengths;  // prompt lengths, each prefilled once from empty
  std::vector<int64_t> decode_batches;   // B of the decode cases
  std::vector<int64_t> decode_contexts;  // C of the decode cases (every B x every C)
  int iters = 10;                        // timed decode steps per decode case (>= 1)
  int warmup = 2;                        // untimed decode steps before them (>= 0)
  int block_tokens = 64;                 // KV block size (multiple of 16)
  int prefill_chunk = 8192;              // tokens per prefill step
  double peak_bandwidth_gbps = 0;        // 1e9 bytes/s of the bytes floor; 0 = measure a copy
  double peak_tflops = 0;                // of the arithmetic floor; 0 = 989 on cuda, none on cpu
  // Ranks the model is split over (--tensor-parallel; GPUs 0 .. N-1 on CUDA): every step runs on
  // all of them, the KV cache holds each rank's slice of the KV heads.
  int tensor_parallel = 1;
  bool op_profile = false;  // after each timed case, time its ops one by one and print the split
  // Decode batches up to this size run as step graphs (LlamaModel::set_step_graph_rows); 0 = off.
  int step_graph_rows = 64;
  // The interleave case (0 = off): a prompt of this many tokens prefilled in chunks inside the
  // decode steps of interleave_batch sequences at context interleave_context, each step at most
  // max_step_tokens rows (the decode scheduler's step). Every step's time is an inter-token
  // latency of the running sequences; p50/p99/max and the prompt's total time are printed.
  int64_t interleave_prompt = 0;
  int64_t interleave_batch = 8;
  int64_t interleave_context = 1024;
  int max_step_tokens = 2048;
  // Decode cases attend with a sliding window of this many keys (4 sinks) instead of densely;
  // 0 = dense. The shadow-dense monitor only shadows sparse steps, so its overhead needs one.
  int decode_window = 0;
  // Decode cases verify a chain of this many draft rows per sequence (speculative decoding's
  // verify step, issue 14): each step feeds 1 + decode_draft rows per sequence at positions
  // C .. C + decode_draft and samples every row; 0 = plain decode steps.
  int decode_draft = 0;
  // ... or verify this draft (a method's widest, spec/draft_shapes.h; --decode-draft-tree names
  // it): 1 + its size rows per sequence at its positions under its mask, every row sampled.
  std::optional<spec::StepDraft> decode_draft_tree;
  std::string decode_draft_tree_name;
  // Decode cases attend under TokenSelect with these parameters (--decode-attention tokenselect)
  // instead; every sequence gets a state slot. Each step feeds the same token at the same
  // position, so its query repeats: with theta <= 1 every step after the first reuses the
  // selection (a cache hit), and --tokenselect-reselect (theta above 1) makes every step select.
  std::optional<kernels::TokenSelectParams> decode_tokenselect;
  // Prefill under MInference with these patterns (--prefill-attention minference; with random
  // weights only --minference-index planted means anything), or null for dense.
  std::shared_ptr<const kernels::MInferenceConfig> prefill_minference;
  // The shadow-dense monitor's cost (LlamaModel::set_shadow_dense): each decode case runs once
  // per rate, and the table is followed by the throughput each rate loses against rate 0 (which
  // should be in the list). Empty = the monitor stays off and decode cases run once.
  std::vector<double> shadow_dense_rates;
};

// Runs every case and prints the table. A case beyond the preset's context or the KV memory is
// a "skipped: ..." row, not an error. Returns the backend's error when it cannot be created
// (kUnimplemented for cuda in a CPU-only build) and kResourceExhausted when the weights or the
// bandwidth probe's buffers do not fit. A case whose forward step fails becomes a "failed: ..."
// row and the others still run; the first such error is returned after the table.
absl::Status RunModelBench(const ModelBenchOptions& options);

}  // namespace sparseserve::tools

#endif  // SPARSESERVE_TOOLS_BENCH_MODEL_H_
