#include "tools/model_flags.h"

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"

ABSL_FLAG(std::string, device, "cpu", "Backend: cpu (reference) or cuda.");
ABSL_FLAG(int, kv_cache_tokens, 0,
          "KV cache capacity in tokens (0 = what --gpu-memory-fraction leaves on a GPU, 4 x the "
          "model context on the CPU).");
ABSL_FLAG(double, gpu_memory_fraction, 0.9,
          "Share of the GPU's memory this process fills: weights + activations + KV cache "
          "(--device cuda with --kv-cache-tokens 0). Processes sharing one GPU (e.g. the workers "
          "of `up`) each take this share: give them fractions that sum to at most 1.");
ABSL_FLAG(int, block_tokens, 64, "KV block size in tokens (multiple of 16).");
ABSL_FLAG(int, prefill_chunk, 0,
          "One prompt's rows per engine step at most; 0 = the command's default (512; 8192 for "
          "`bench model`). A longer prompt is prefilled in chunks, interleaved with the decode "
          "rows of running streams.");
ABSL_FLAG(int, max_step_tokens, 2048,
          "Rows of one engine step at most, all sequences together: every running stream's "
          "decode row first, then chunks of prompts being prefilled. Bounds how long running "
          "streams wait behind a long prompt (their inter-token latency) and the activations of "
          "a step.");

ABSL_FLAG(double, shadow_dense_rate, 0,
          "Shadow-dense quality monitor: the fraction in [0, 1] of engine steps with sparse "
          "attention (e.g. sliding-window requests) that also compute dense attention in every "
          "layer for their sparse sequences and record the relative L2 error of the output "
          "(metric sparseserve_sparse_attention_error{role, method}; `generate` prints a "
          "summary). Costs about rate x (dense attention / step time). 0 = off.");
ABSL_FLAG(int, cuda_graph_batch, 128,
          "Decode steps of up to this many rows (sequences, plus the draft rows of speculative "
          "verify steps) run as CUDA graphs (--device cuda): a step shape's first step runs "
          "kernel by kernel, its second is captured, later ones replay it in one launch. 0 = off.");

ABSL_FLAG(std::string, tokenswift_heads, "",
          "TokenSwift's trained multi-token draft heads: a safetensors adapter made by "
          "tools/train_spec_adapters.py for this model (tests/data/spec_adapters has ones for "
          "stories260K and the long-context test model). Without it --spec tokenswift drafts one "
          "token per step "
          "from the model's own logits, plus its 4-gram table.");

ABSL_FLAG(std::string, kangaroo_adapter, "",
          "Kangaroo's trained early-exit adapter: a safetensors file made by "
          "tools/train_spec_adapters.py --method kangaroo for this model (tests/data/spec_adapters "
          "has ones for stories260K and the long-context test model). Adds one layer to the KV "
          "cache that every step fills; --spec kangaroo needs it. Prefill and decode workers of "
          "one deployment load the same adapter (their KV layouts must match).");

ABSL_FLAG(int, tensor_parallel, 1,
          "Split the model over this many devices (tensor parallelism, Megatron-style): GPUs "
          "0 .. N-1 with --device cuda, one engine thread each, NCCL between them (the CPU "
          "backend runs N ranks as threads, for tests). N must divide the model's attention heads "
          "and FFN width, and its KV heads must divide N or N them (then KV heads are "
          "replicated). KV moves between workers of any degrees through host staging. MInference "
          "runs each rank's heads' patterns. Not yet with TokenSelect, --shadow-dense-rate, "
          "--tokenswift-heads or --kangaroo-adapter.");
ABSL_FLAG(int, prefill_tensor_parallel, 0,
          "--tensor-parallel for prefill workers only (`prefill`, and the prefill workers of "
          "`up`); 0 = --tensor-parallel. E.g. prefill on 2 GPUs, decode on 1.");

// Defined with the other attention flags (request_options_flags.cc); the runner loads them.
ABSL_DECLARE_FLAG(std::string, minference_config);
ABSL_DECLARE_FLAG(std::string, minference_index);
ABSL_DECLARE_FLAG(int, tokenselect_k);
ABSL_DECLARE_FLAG(bool, tokenselect_per_kv_head);

namespace sparseserve::tools {

absl::StatusOr<Device> DeviceFromFlags() {
  const std::string name = absl::GetFlag(FLAGS_device);
  if (name == "cpu") return Device::kHost;
  if (name == "cuda") return Device::kCuda;
  return absl::InvalidArgumentError("--device must be cpu or cuda, got '" + name + "'");
}

int BlockTokensFromFlags() {
  return absl::GetFlag(FLAGS_block_tokens);
}

int CudaGraphBatchFromFlags() {
  return absl::GetFlag(FLAGS_cuda_graph_batch);
}

int PrefillChunkFromFlags(int command_default) {
  const int chunk = absl::GetFlag(FLAGS_prefill_chunk);
  return chunk == 0 ? command_default : chunk;
}

absl::StatusOr<engine::ModelRunnerOptions> RunnerOptionsFromFlags() {
  engine::ModelRunnerOptions options;
  const std::string index = absl::GetFlag(FLAGS_minference_index);
  if (index != "estimated" && index != "planted") {
    return absl::InvalidArgumentError("--minference-index must be estimated or planted, got '" +
                                      index + "'");
  }
  options.minference_planted = index == "planted";
  options.minference_config = absl::GetFlag(FLAGS_minference_config);
  options.kv_cache_tokens = absl::GetFlag(FLAGS_kv_cache_tokens);
  options.gpu_memory_fraction = absl::GetFlag(FLAGS_gpu_memory_fraction);
  options.block_tokens = absl::GetFlag(FLAGS_block_tokens);
  options.prefill_chunk_tokens = PrefillChunkFromFlags(options.prefill_chunk_tokens);
  options.max_step_tokens = absl::GetFlag(FLAGS_max_step_tokens);
  options.step_graph_rows = CudaGraphBatchFromFlags();
  options.shadow_dense_rate = absl::GetFlag(FLAGS_shadow_dense_rate);
  options.tokenselect_max_k = absl::GetFlag(FLAGS_tokenselect_k);
  options.tokenselect_per_kv_head = absl::GetFlag(FLAGS_tokenselect_per_kv_head);
  options.tokenswift_heads = absl::GetFlag(FLAGS_tokenswift_heads);
  options.kangaroo_adapter = absl::GetFlag(FLAGS_kangaroo_adapter);
  options.tensor_parallel = absl::GetFlag(FLAGS_tensor_parallel);
  return options;
}

}  // namespace sparseserve::tools
