// --model, the one flag every command that names a model shares — the router too, which reads
// only the tokenizer and config from it (so this file needs no engine).
#ifndef SPARSESERVE_TOOLS_MODEL_PATH_FLAG_H_
#define SPARSESERVE_TOOLS_MODEL_PATH_FLAG_H_

#include <string>

namespace sparseserve::tools {

std::string ModelPathFromFlags();

}  // namespace sparseserve::tools

#endif  // SPARSESERVE_TOOLS_MODEL_PATH_FLAG_H_
