// `sparseserve bench spec` (tools/bench_spec.cc): speculative decoding against plain decoding on
// a real model, in batches, for the real drafters and an oracle with forced acceptance.
#ifndef SPARSESERVE_TOOLS_BENCH_SPEC_H_
#define SPARSESERVE_TOOLS_BENCH_SPEC_H_

namespace sparseserve::tools {

// Runs it from the flags; the exit code (2 for bad flags, 1 when a run fails).
int RunSpecBenchCommand();

}  // namespace sparseserve::tools

#endif  // SPARSESERVE_TOOLS_BENCH_SPEC_H_
