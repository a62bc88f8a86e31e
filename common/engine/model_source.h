// ModelSource: everything read from a model path before any weight is uploaded — its config,
// its weight file(s) and its tokenizer — whatever the on-disk format.
//
// Formats: a GGUF file (config, tokenizer and weights inside), a Hugging Face directory
// (config.json, model.safetensors[.index.json] with shards, tokenizer.json), or
// "synthetic:PRESET": a preset's shape (model_presets.h) with random weights and a generated
// tokenizer of its vocabulary (tokenizer/synthetic_tokenizer.h), for serving benchmarks of
// models whose weights are not here. Immutable once opened; the weight file stays memory-mapped
// for as long as the ModelSource lives.
#ifndef SPARSESERVE_COMMON_ENGINE_MODEL_SOURCE_H_
#define SPARSESERVE_COMMON_ENGINE_MODEL_SOURCE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/model/gguf_file.h"
#include "common/model/model_config.h"
#include "common/model/tensor_file.h"
#include "common/tokenizer/tokenizer.h"

namespace sparseserve::engine {

struct ModelSource {
  std::string path;
  model::ModelConfig config;
  model::WeightNaming naming = model::WeightNaming::kHuggingFace;
  std::unique_ptr<model::TensorFile> weights;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  // "synthetic:PRESET": no weight file; ModelRunner draws random weights (speed only).
  bool synthetic = false;
};

// The prefix of a synthetic model path ("synthetic:llama3-8b").
inline constexpr char kSyntheticModelPrefix[] = "synthetic:";

// Opens `path` (a .gguf file or an HF directory). kNotFound when the path or a required file is
// missing, kInvalidArgument for malformed files, kUnimplemented for unsupported architectures
// or tensor types; messages name the file. With `open_weights` false only the config and the
// tokenizer are read (`weights` stays null): what the router needs, without mapping or indexing
// the weights.
absl::StatusOr<ModelSource> OpenModelSource(const std::string& path, bool open_weights = true);

// Builds the tokenizer stored in GGUF metadata (`tokenizer.ggml.model` = "llama" for
// SentencePiece-style BPE, "gpt2" for byte-level BPE).
absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> TokenizerFromGguf(
    const model::GgufFile& gguf);

}  // namespace sparseserve::engine

#endif  // SPARSESERVE_COMMON_ENGINE_MODEL_SOURCE_H_
