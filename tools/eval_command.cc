// `sparseserve eval`: long-context accuracy of the engine with any attention and speculation
// options, on tasks written by tools/longctx (RULER-style, answers known by construction).
//
// Every task is generated greedily (temperature 0) in process (--model) or through a running
// server (--server, several requests in flight); a task scores the fraction of its answers found
// in the output (RULER's string match). Prints a table per task and length with the attention
// density beside each score, and writes every output to --out as JSON.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/core/status.h"
#include "common/core/thread_pool.h"
#include "common/engine/generator.h"
#include "common/engine/model_source.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"
#include "router/generation_client.h"
#include "tools/command.h"
#include "tools/model_flags.h"
#include "tools/request_options_flags.h"
#include "tools/serve_flags.h"

ABSL_FLAG(std::string, tasks, "",
          "JSON-lines task file written by `python3 tools/longctx --tokenizer ...` (required).");
ABSL_FLAG(std::string, out, "",
          "Output file. eval: every task's output, score and the table as JSON; "
          "search-patterns: the pattern config (MInference's JSON layout).");
ABSL_FLAG(int, limit, 0, "Run only the first N tasks of the file (0 = all).");
ABSL_FLAG(int, max_new_tokens, 0, "New tokens per task; 0 = the task's own max_new_tokens.");
ABSL_FLAG(int, concurrency, 8, "With --server: requests in flight at once.");
// Shared with `generate` (generate_command.cc): --server and --timeout-seconds.
ABSL_DECLARE_FLAG(std::string, server);
ABSL_DECLARE_FLAG(double, timeout_seconds);

namespace sparseserve::tools {
namespace {

using nlohmann::json;

struct Task {
  std::string task;
  int length = 0;
  int seed = 0;
  std::string prompt;
  std::vector<std::string> answers;
  int max_new_tokens = 16;
};

struct Outcome {
  std::string text;
  int prompt_tokens = 0;
  int new_tokens = 0;
  double ttft_s = 0;
  double total_s = 0;
  // The prefill's measured attention density (MInference, TokenSelect's chunked variant) and the
  // decode's (TokenSelect), from the engine or the server, with TokenSelect's selection-cache
  // hits and queries.
  std::optional<double> prefill_density;
  std::optional<double> decode_density;
  double selection_hits = 0;
  double selection_queries = 0;
  // Speculative decoding (in process only): decode steps, draft tokens verified and accepted.
  double decode_steps = 0, spec_drafted = 0, spec_accepted = 0;
  std::string error;  // non-empty when the request failed
};

absl::StatusOr<std::vector<Task>> ReadTasks(const std::string& path, int limit) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open --tasks file '", path, "'"));
  std::vector<Task> tasks;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    const auto bad = [&](const char* what) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", number, ": ", what));
    };
    if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
    Task t;
    if (!j.contains("task") || !j["task"].is_string()) return bad("no string 'task'");
    if (!j.contains("prompt") || !j["prompt"].is_string()) return bad("no string 'prompt'");
    t.task = j["task"].get<std::string>();
    t.prompt = j["prompt"].get<std::string>();
    if (j.contains("length") && j["length"].is_number_integer()) t.length = j["length"].get<int>();
    if (j.contains("seed") && j["seed"].is_number_integer()) t.seed = j["seed"].get<int>();
    if (j.contains("max_new_tokens") && j["max_new_tokens"].is_number_integer()) {
      t.max_new_tokens = j["max_new_tokens"].get<int>();
    }
    if (j.contains("answers")) {
      if (!j["answers"].is_array()) return bad("'answers' is not a list");
      for (const json& a : j["answers"]) {
        if (!a.is_string()) return bad("an answer is not a string");
        t.answers.push_back(a.get<std::string>());
      }
    }
    if (t.prompt.empty()) return bad("empty prompt");
    if (t.max_new_tokens < 1) return bad("max_new_tokens < 1");
    tasks.push_back(std::move(t));
    if (limit > 0 && static_cast<int>(tasks.size()) >= limit) break;
  }
  if (tasks.empty()) return absl::InvalidArgumentError(absl::StrCat("'", path, "' has no tasks"));
  return tasks;
}

// RULER's string-match score: the fraction of answers found in the output; none without answers.
std::optional<double> Score(const Task& task, const std::string& output) {
  if (task.answers.empty()) return std::nullopt;
  int found = 0;
  for (const std::string& a : task.answers) found += output.find(a) != std::string::npos ? 1 : 0;
  return static_cast<double>(found) / static_cast<double>(task.answers.size());
}

int MaxTokens(const Task& task) {
  const int flag = absl::GetFlag(FLAGS_max_new_tokens);
  return flag > 0 ? flag : task.max_new_tokens;
}

// Prints "eval: k/n ..." at most every two seconds, and at the end.
class Progress {
 public:
  explicit Progress(size_t total) : total_(total), start_(absl::Now()) {}
  void Done() {
    std::lock_guard<std::mutex> lock(mu_);
    ++done_;
    const absl::Time now = absl::Now();
    if (done_ != total_ && now - last_ < absl::Seconds(2)) return;
    last_ = now;
    const double elapsed = absl::ToDoubleSeconds(now - start_);
    const double eta = elapsed / static_cast<double>(done_) * static_cast<double>(total_ - done_);
    std::fprintf(stderr, "eval: %zu/%zu tasks, %.0f s elapsed, about %.0f s left\n", done_, total_,
                 elapsed, eta);
  }

 private:
  std::mutex mu_;
  size_t total_;
  size_t done_ = 0;
  absl::Time start_;
  absl::Time last_ = absl::InfinitePast();
};

absl::StatusOr<std::vector<Outcome>> RunLocal(const std::vector<Task>& tasks,
                                              const engine::RequestOptions& options) {
  SS_ASSIGN_OR_RETURN(Device device, DeviceFromFlags());
  SS_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Backend> backend, kernels::CreateBackend(device));
  SS_ASSIGN_OR_RETURN(engine::ModelSource source, engine::OpenModelSource(ModelPathFromFlags()));
  SS_ASSIGN_OR_RETURN(const engine::ModelRunnerOptions runner_options, RunnerOptionsFromFlags());
  SS_ASSIGN_OR_RETURN(std::unique_ptr<engine::ModelRunner> runner,
                      engine::ModelRunner::Create(source, backend.get(), runner_options));
  engine::Generator generator(runner.get(), source.tokenizer.get());
  std::vector<Outcome> outcomes(tasks.size());
  Progress progress(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    engine::GenerationRequest request;
    request.prompt = tasks[i].prompt;
    request.max_tokens = MaxTokens(tasks[i]);
    request.sampling.temperature = 0;
    request.options = options;
    absl::StatusOr<engine::GenerationResult> r = generator.Generate(request);
    Outcome& o = outcomes[i];
    if (r.ok()) {
      o.text = r->text;
      o.prompt_tokens = static_cast<int>(r->prompt_tokens.size());
      o.new_tokens = static_cast<int>(r->output_tokens.size());
      o.ttft_s = r->time_to_first_token_s;
      o.total_s = r->total_s;
      o.prefill_density = r->prefill_attention_density;
      o.decode_density = r->decode_attention_density;
      o.selection_hits = r->selection_cache_hits;
      o.selection_queries = r->selection_cache_queries;
      o.decode_steps = r->decode_steps;
      o.spec_drafted = static_cast<double>(r->spec_draft_tokens);
      o.spec_accepted = static_cast<double>(r->spec_accepted_tokens);
    } else {
      o.error = r.status().ToString();
    }
    progress.Done();
  }
  return outcomes;
}

std::vector<Outcome> RunRemote(const std::vector<Task>& tasks,
                               const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  std::vector<Outcome> outcomes(tasks.size());
  Progress progress(tasks.size());
  std::atomic<size_t> next{0};
  const int concurrency = std::max(1, absl::GetFlag(FLAGS_concurrency));
  core::ThreadPool pool(concurrency);
  // One client per lane; lanes pull tasks in order so a slow one does not hold a fixed share.
  pool.ParallelFor(concurrency, 1, [&](int64_t begin, int64_t end) {
    for (int64_t lane = begin; lane < end; ++lane) {
      router::GenerationClient client(absl::GetFlag(FLAGS_server), credentials, ApiKeyFromEnv());
      for (size_t i = next++; i < tasks.size(); i = next++) {
        v1::GenerateRequest request;
        request.set_text(tasks[i].prompt);
        request.set_max_tokens(MaxTokens(tasks[i]));
        request.mutable_sampling()->set_temperature(0);
        Outcome& o = outcomes[i];
        absl::Status s = SetRequestOptionsFromChangedFlags(&request);
        absl::StatusOr<router::RemoteGeneration> r =
            s.ok() ? client.Generate(request, absl::Seconds(absl::GetFlag(FLAGS_timeout_seconds)))
                   : absl::StatusOr<router::RemoteGeneration>(s);
        if (r.ok()) {
          o.text = r->text;
          o.prompt_tokens = static_cast<int>(r->usage.prompt_tokens());
          o.new_tokens = static_cast<int>(r->tokens.size());
          o.ttft_s = r->timings.time_to_first_token_seconds();
          o.total_s = r->timings.e2e_seconds();
          o.prefill_density = r->usage.prefill_attention_density();
          o.decode_density = r->usage.decode_attention_density();
          o.selection_hits = static_cast<double>(r->usage.selection_cache_hits());
          o.selection_queries = static_cast<double>(r->usage.selection_cache_queries());
        } else {
          o.error = r.status().ToString();
        }
        progress.Done();
      }
    }
  });
  return outcomes;
}

struct Cell {
  int n = 0;
  int scored = 0;
  int errors = 0;
  double score = 0;
  double density = 0;
  bool density_known = true;
  double decode_density = 0;  // summed over requests (TokenSelect's measured decode density)
  double selection_hits = 0;
  double selection_queries = 0;
  double prompt_tokens = 0;
  double new_tokens = 0;
  double ttft_s = 0;
  double decode_tokens = 0;
  double decode_s = 0;
  double decode_steps = 0, spec_drafted = 0, spec_accepted = 0;
};

absl::Status Evaluate() {
  const std::string path = absl::GetFlag(FLAGS_tasks);
  if (path.empty()) return absl::InvalidArgumentError("--tasks is required (see --help)");
  const bool remote = !absl::GetFlag(FLAGS_server).empty();
  if (!remote && ModelPathFromFlags().empty()) {
    return absl::InvalidArgumentError("give --model PATH or --server HOST:PORT");
  }
  SS_ASSIGN_OR_RETURN(const engine::RequestOptions options, RequestOptionsFromFlags());
  SS_ASSIGN_OR_RETURN(const std::vector<Task> tasks, ReadTasks(path, absl::GetFlag(FLAGS_limit)));
  std::fprintf(stderr, "eval: %zu tasks from %s, %s\n", tasks.size(), path.c_str(),
               remote ? "through the server" : "in process");
  std::vector<Outcome> outcomes;
  if (remote) {
    SS_ASSIGN_OR_RETURN(const std::shared_ptr<grpc::ChannelCredentials> credentials,
                        ClientCredentialsFromFlags());
    outcomes = RunRemote(tasks, credentials);
  } else {
    SS_ASSIGN_OR_RETURN(outcomes, RunLocal(tasks, options));
  }

  std::map<std::pair<std::string, int>, Cell> cells;
  json items = json::array();
  int errors = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& t = tasks[i];
    const Outcome& o = outcomes[i];
    Cell& c = cells[{t.task, t.length}];
    ++c.n;
    json item = {{"task", t.task}, {"length", t.length}, {"seed", t.seed}};
    if (!o.error.empty()) {
      ++c.errors;
      ++errors;
      item["error"] = o.error;
      if (errors <= 3)
        std::fprintf(stderr, "eval: %s/%d seed %d: %s\n", t.task.c_str(), t.length, t.seed,
                     o.error.c_str());
      items.push_back(std::move(item));
      continue;
    }
    const std::optional<double> score = Score(t, o.text);
    if (score.has_value()) {
      c.score += *score;
      ++c.scored;
      item["score"] = *score;
    }
    absl::StatusOr<double> density =
        engine::AttentionDensity(options, o.prompt_tokens, std::max(0, o.new_tokens - 1),
                                 o.prefill_density, o.decode_density);
    c.decode_density += o.decode_density.value_or(1.0);
    c.selection_hits += o.selection_hits;
    c.selection_queries += o.selection_queries;
    if (density.ok()) {
      c.density += *density;
    } else {
      c.density_known = false;
    }
    c.prompt_tokens += o.prompt_tokens;
    c.new_tokens += o.new_tokens;
    c.ttft_s += o.ttft_s;
    c.decode_tokens += std::max(0, o.new_tokens - 1);
    c.decode_steps += o.decode_steps;
    c.spec_drafted += o.spec_drafted;
    c.spec_accepted += o.spec_accepted;
    c.decode_s += o.total_s - o.ttft_s;
    item["output"] = o.text;
    item["prompt_tokens"] = o.prompt_tokens;
    item["new_tokens"] = o.new_tokens;
    item["ttft_s"] = o.ttft_s;
    items.push_back(std::move(item));
  }

  json table = json::array();
  // TokenSelect's columns: the measured density of the prompt's chunks and of the generated
  // tokens, and the selection cache's hit rate.
  const bool tokenselect = options.prefill.method == engine::AttentionMethod::kTokenSelect ||
                           options.decode.method == engine::AttentionMethod::kTokenSelect;
  // Speculation's columns (in process): steps compression (tokens per decode step) and the
  // share of draft tokens accepted.
  const bool speculating = options.spec.method != engine::SpecMethod::kNone && !remote;
  std::printf("%-11s %7s %5s %8s %9s %11s %8s %9s %11s%s%s\n", "task", "length", "n", "score%",
              "density%", "prompt_tok", "new_tok", "ttft_ms", "decode_tok/s",
              tokenselect ? "  dec_density%   hit%" : "", speculating ? "  tok/step accept%" : "");
  for (const auto& [key, c] : cells) {
    const int ok = c.n - c.errors;
    const double per = ok > 0 ? 1.0 / ok : 0.0;
    json row = {{"task", key.first},
                {"length", key.second},
                {"n", c.n},
                {"errors", c.errors},
                {"prompt_tokens", c.prompt_tokens * per},
                {"new_tokens", c.new_tokens * per},
                {"ttft_ms", c.ttft_s * per * 1e3}};
    const std::string score =
        c.scored > 0 ? absl::StrFormat("%.1f", 100.0 * c.score / c.scored) : "-";
    const std::string density =
        c.density_known && ok > 0 ? absl::StrFormat("%.1f", 100.0 * c.density * per) : "-";
    if (c.scored > 0) row["score"] = c.score / c.scored;
    if (c.density_known && ok > 0) row["density"] = c.density * per;
    const double tps = c.decode_s > 0 ? c.decode_tokens / c.decode_s : 0.0;
    row["decode_tokens_per_s"] = tps;
    std::string extra;
    if (tokenselect && ok > 0) {
      row["decode_density"] = c.decode_density * per;
      row["selection_cache_hits"] = c.selection_hits;
      row["selection_cache_queries"] = c.selection_queries;
      const std::string hits =
          c.selection_queries > 0
              ? absl::StrFormat("%.1f", 100.0 * c.selection_hits / c.selection_queries)
              : "-";
      extra = absl::StrFormat(" %13.1f %6s", 100.0 * c.decode_density * per, hits);
    }
    if (speculating && ok > 0) {
      row["steps_compression"] = c.decode_steps > 0 ? c.decode_tokens / c.decode_steps : 1.0;
      row["spec_draft_tokens"] = c.spec_drafted;
      row["spec_accepted_tokens"] = c.spec_accepted;
      absl::StrAppendFormat(
          &extra, " %9.2f %8s", c.decode_steps > 0 ? c.decode_tokens / c.decode_steps : 1.0,
          c.spec_drafted > 0 ? absl::StrFormat("%.1f", 100.0 * c.spec_accepted / c.spec_drafted)
                             : "-");
    }
    std::printf("%-11s %7d %5d %8s %9s %11.0f %8.1f %9.1f %11.1f%s%s\n", key.first.c_str(),
                key.second, c.n, score.c_str(), density.c_str(), c.prompt_tokens * per,
                c.new_tokens * per, c.ttft_s * per * 1e3, tps, extra.c_str(),
                c.errors > 0 ? absl::StrCat("  (", c.errors, " failed)").c_str() : "");
    table.push_back(std::move(row));
  }
  std::fflush(stdout);

  const std::string out = absl::GetFlag(FLAGS_out);
  if (!out.empty()) {
    std::ofstream f(out);
    f << json{{"tasks_file", path},
              {"prefill_attention", engine::AttentionMethodName(options.prefill.method)},
              {"decode_attention", engine::AttentionMethodName(options.decode.method)},
              {"speculation", engine::SpecMethodName(options.spec.method)},
              {"table", table},
              {"items", items}}
             .dump(1)
      << "\n";
    if (!f) return absl::InternalError(absl::StrCat("cannot write --out file '", out, "'"));
  }
  if (errors > 0) {
    return absl::InternalError(absl::StrCat(errors, " of ", tasks.size(), " tasks failed"));
  }
  return absl::OkStatus();
}

}  // namespace

int RunEvalCommand(const std::vector<char*>& positional) {
  if (positional.size() > 1) {
    std::fprintf(stderr, "error: unexpected argument '%s' (flags start with --)\n", positional[1]);
    return 2;
  }
  absl::Status s = Evaluate();
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace sparseserve::tools
