#include "common/tokenizer/internal/jinja_interpreter.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/tokenizer/internal/jinja_builtins.h"
#include "common/tokenizer/internal/jinja_filters.h"
#include "common/tokenizer/internal/jinja_operators.h"
#include "common/tokenizer/internal/jinja_tests.h"

namespace sparseserve::tokenizer::internal {
namespace {

// What a statement asks of its enclosing loop.
enum class Flow { kNormal, kBreak, kContinue };

bool ContainsNamespace(const JinjaValue& value) {
  switch (value.kind()) {
    case JinjaValue::Kind::kNamespace: return true;
    case JinjaValue::Kind::kList:
      for (const JinjaValue& item : value.list()) {
        if (ContainsNamespace(item)) return true;
      }
      return false;
    case JinjaValue::Kind::kDict:
      for (const auto& entry : value.dict().entries()) {
        if (ContainsNamespace(entry.second)) return true;
      }
      return false;
    case JinjaValue::Kind::kFunction: return ContainsNamespace(value.receiver());
    default: return false;
  }
}

class Renderer {
 public:
  Renderer(const JinjaDict& variables, const JinjaRenderLimits& limits) : limits_(limits) {
    scopes_.push_back(JinjaGlobals());
    scopes_.push_back(variables);
  }

  absl::StatusOr<std::string> Render(const JinjaBody& body) {
    SS_ASSIGN_OR_RETURN(const Flow flow, ExecBody(body));
    (void)flow;  // the parser keeps break / continue inside loops
    return std::move(output_);
  }

 private:
  // One scope more for the lifetime of the guard: a loop iteration or a {% generation %} body.
  class ScopeGuard {
   public:
    explicit ScopeGuard(std::vector<JinjaDict>* scopes) : scopes_(scopes) {
      scopes_->emplace_back();
    }
    ~ScopeGuard() { scopes_->pop_back(); }
    ScopeGuard(const ScopeGuard&) = delete;
    ScopeGuard& operator=(const ScopeGuard&) = delete;

   private:
    std::vector<JinjaDict>* scopes_;
  };

  absl::Status Write(absl::string_view text) {
    if (out_->size() + text.size() > limits_.max_output_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("rendered chat template is over the limit of ",
                                                     limits_.max_output_bytes, " bytes"));
    }
    absl::StrAppend(out_, text);
    return absl::OkStatus();
  }

  JinjaValue Lookup(const std::string& name) const {
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
      const JinjaValue* value = scope->Find(name);
      if (value != nullptr) return *value;
    }
    return JinjaValue::Undefined(absl::StrCat("'", name, "' is undefined"));
  }

  // A runtime error of the statement or expression at `line`, unless it is the template's own
  // raise_exception message, which the client must see verbatim.
  absl::Status AtLine(int line, const absl::Status& status) const {
    if (status.ok() || raised_) return status;
    return absl::Status(status.code(), absl::StrCat("line ", line, ": ", status.message()));
  }

  absl::StatusOr<JinjaValue> EvalAt(const JinjaExpr& expr) {
    absl::StatusOr<JinjaValue> value = Eval(expr);
    if (!value.ok()) return AtLine(expr.line, value.status());
    return value;
  }

  absl::StatusOr<Flow> ExecBody(const JinjaBody& body) {
    for (const auto& stmt : body) {
      SS_ASSIGN_OR_RETURN(const Flow flow, Exec(*stmt));
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> Exec(const JinjaStmt& stmt) {
    switch (stmt.kind) {
      case JinjaStmtKind::kText: SS_RETURN_IF_ERROR(Write(stmt.text)); return Flow::kNormal;
      case JinjaStmtKind::kOutput: {
        SS_ASSIGN_OR_RETURN(const JinjaValue value, EvalAt(*stmt.expr));
        SS_RETURN_IF_ERROR(Write(value.Str()));
        return Flow::kNormal;
      }
      case JinjaStmtKind::kIf:
        for (const JinjaIfBranch& branch : stmt.branches) {
          SS_ASSIGN_OR_RETURN(const JinjaValue condition, EvalAt(*branch.condition));
          if (condition.Truthy()) return ExecBody(branch.body);
        }
        return ExecBody(stmt.else_body);
      case JinjaStmtKind::kFor: return ExecFor(stmt);
      case JinjaStmtKind::kSet: {
        SS_ASSIGN_OR_RETURN(JinjaValue value, EvalAt(*stmt.expr));
        SS_RETURN_IF_ERROR(AtLine(stmt.line, Assign(stmt, std::move(value))));
        return Flow::kNormal;
      }
      case JinjaStmtKind::kSetBlock: {
        std::string captured;
        std::string* const outer = std::exchange(out_, &captured);
        absl::StatusOr<Flow> flow = ExecBody(stmt.body);
        out_ = outer;
        if (!flow.ok()) return flow.status();
        SS_RETURN_IF_ERROR(Assign(stmt, JinjaValue::String(std::move(captured))));
        return *flow;
      }
      case JinjaStmtKind::kBreak: return Flow::kBreak;
      case JinjaStmtKind::kContinue: return Flow::kContinue;
      case JinjaStmtKind::kScope: {
        const ScopeGuard scope(&scopes_);
        return ExecBody(stmt.body);
      }
    }
    return Flow::kNormal;
  }

  // Binds `targets` to `value`, unpacking it when there are several.
  absl::Status Bind(const std::vector<std::string>& targets, JinjaValue value) {
    if (targets.size() == 1) {
      scopes_.back().Set(targets[0], std::move(value));
      return absl::OkStatus();
    }
    SS_ASSIGN_OR_RETURN(const JinjaList items, JinjaIterate(value));
    if (items.size() != targets.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          items.size() < targets.size() ? "not enough" : "too many", " values to unpack (expected ",
          targets.size(), ", got ", items.size(), ")"));
    }
    for (size_t i = 0; i < targets.size(); ++i) scopes_.back().Set(targets[i], items[i]);
    return absl::OkStatus();
  }

  absl::Status Assign(const JinjaStmt& stmt, JinjaValue value) {
    if (stmt.attribute.empty()) return Bind(stmt.targets, std::move(value));
    const JinjaValue target = Lookup(stmt.targets[0]);
    if (target.kind() != JinjaValue::Kind::kNamespace) {
      return absl::InvalidArgumentError("cannot assign attribute on non-namespace object");
    }
    // Namespaces are the only mutable values: refusing to nest them rules out reference cycles.
    if (ContainsNamespace(value)) {
      return absl::InvalidArgumentError("a namespace attribute cannot hold a namespace");
    }
    target.namespace_attributes().Set(stmt.attribute, std::move(value));
    return absl::OkStatus();
  }

  absl::StatusOr<Flow> ExecFor(const JinjaStmt& stmt) {
    SS_ASSIGN_OR_RETURN(const JinjaValue iterable, EvalAt(*stmt.expr));
    absl::StatusOr<JinjaList> all = JinjaIterate(iterable);
    if (!all.ok()) return AtLine(stmt.line, all.status());
    JinjaList items;
    for (JinjaValue& item : *all) {
      if (stmt.filter != nullptr) {
        const ScopeGuard scope(&scopes_);
        SS_RETURN_IF_ERROR(AtLine(stmt.line, Bind(stmt.targets, item)));
        SS_ASSIGN_OR_RETURN(const JinjaValue keep, EvalAt(*stmt.filter));
        if (!keep.Truthy()) continue;
      }
      items.push_back(std::move(item));
    }
    SS_ASSIGN_OR_RETURN(const bool completed_any, RunIterations(stmt, items));
    // Jinja marks an iteration done at the end of its body, so iterations that all ended in
    // break or continue leave the else body to run, as in jinja2.
    if (!completed_any) return ExecBody(stmt.else_body);
    return Flow::kNormal;
  }

  // The body of `stmt` once per item, with the loop variables and the `loop` object bound.
  // Returns whether some iteration ran to the end of the body.
  absl::StatusOr<bool> RunIterations(const JinjaStmt& stmt, const JinjaList& items) {
    bool completed_any = false;
    const auto length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      if (++num_iterations_ > limits_.max_loop_iterations) {
        return absl::InvalidArgumentError(absl::StrCat(
            "chat template ran more than ", limits_.max_loop_iterations, " loop iterations"));
      }
      const ScopeGuard scope(&scopes_);
      const auto at = static_cast<size_t>(i);
      SS_RETURN_IF_ERROR(AtLine(stmt.line, Bind(stmt.targets, items[at])));
      JinjaDict loop;
      loop.Set("index", JinjaValue::Int(i + 1));
      loop.Set("index0", JinjaValue::Int(i));
      loop.Set("revindex", JinjaValue::Int(length - i));
      loop.Set("revindex0", JinjaValue::Int(length - i - 1));
      loop.Set("first", JinjaValue::Bool(i == 0));
      loop.Set("last", JinjaValue::Bool(i == length - 1));
      loop.Set("length", JinjaValue::Int(length));
      loop.Set("depth", JinjaValue::Int(1));  // loops are never recursive here
      loop.Set("depth0", JinjaValue::Int(0));
      if (i > 0) loop.Set("previtem", items[at - 1]);
      if (i + 1 < length) loop.Set("nextitem", items[at + 1]);
      scopes_.back().Set("loop", JinjaValue::Dict(std::move(loop)));
      SS_ASSIGN_OR_RETURN(const Flow flow, ExecBody(stmt.body));
      if (flow == Flow::kBreak) break;
      completed_any |= flow == Flow::kNormal;
    }
    return completed_any;
  }

  absl::StatusOr<JinjaArgs> EvalArgs(const JinjaExpr& expr) {
    JinjaArgs args;
    for (size_t i = 1; i < expr.operands.size(); ++i) {
      SS_ASSIGN_OR_RETURN(JinjaValue arg, Eval(*expr.operands[i]));
      args.positional.push_back(std::move(arg));
    }
    for (const auto& [name, value_expr] : expr.kwargs) {
      SS_ASSIGN_OR_RETURN(JinjaValue value, Eval(*value_expr));
      args.keyword.emplace_back(name, std::move(value));
    }
    return args;
  }

  // Evaluates `expr` and checks the result against the size and nesting limits.
  absl::StatusOr<JinjaValue> Eval(const JinjaExpr& expr) {
    SS_ASSIGN_OR_RETURN(JinjaValue value, EvalUnchecked(expr));
    if (value.depth() > limits_.max_value_depth) {
      return absl::InvalidArgumentError(
          absl::StrCat("value nested deeper than ", limits_.max_value_depth, " levels"));
    }
    if (value.is_list() && value.list().size() > kMaxJinjaListItems) {
      return absl::InvalidArgumentError(
          absl::StrCat("list of more than ", kMaxJinjaListItems, " items"));
    }
    if (value.is_string()) SS_RETURN_IF_ERROR(CheckJinjaStringSize(value.string_value().size()));
    return value;
  }

  absl::StatusOr<JinjaValue> EvalUnchecked(const JinjaExpr& expr) {
    switch (expr.kind) {
      case JinjaExprKind::kLiteral: return expr.literal;
      case JinjaExprKind::kName: return Lookup(expr.name);
      case JinjaExprKind::kList:
      case JinjaExprKind::kTuple: {
        JinjaList items;
        for (const JinjaExprPtr& operand : expr.operands) {
          SS_ASSIGN_OR_RETURN(JinjaValue item, Eval(*operand));
          items.push_back(std::move(item));
        }
        return JinjaValue::List(std::move(items), expr.kind == JinjaExprKind::kTuple);
      }
      case JinjaExprKind::kDict: {
        JinjaDict entries;
        for (size_t i = 0; i + 1 < expr.operands.size(); i += 2) {
          SS_ASSIGN_OR_RETURN(const JinjaValue key, Eval(*expr.operands[i]));
          if (!key.is_string()) {
            return absl::InvalidArgumentError(
                absl::StrCat("dict keys must be strings, not ", key.TypeName()));
          }
          SS_ASSIGN_OR_RETURN(JinjaValue value, Eval(*expr.operands[i + 1]));
          entries.Set(key.string_value(), std::move(value));
        }
        return JinjaValue::Dict(std::move(entries));
      }
      case JinjaExprKind::kAttribute: {
        SS_ASSIGN_OR_RETURN(const JinjaValue object, Eval(*expr.operands[0]));
        return JinjaGetAttribute(object, expr.name);
      }
      case JinjaExprKind::kItem: {
        SS_ASSIGN_OR_RETURN(const JinjaValue object, Eval(*expr.operands[0]));
        SS_ASSIGN_OR_RETURN(const JinjaValue key, Eval(*expr.operands[1]));
        return JinjaGetItem(object, key);
      }
      case JinjaExprKind::kSlice: {
        SS_ASSIGN_OR_RETURN(const JinjaValue object, Eval(*expr.operands[0]));
        JinjaValue bounds[3];
        for (int i = 0; i < 3; ++i) {
          if (expr.operands[i + 1] != nullptr) {
            SS_ASSIGN_OR_RETURN(bounds[i], Eval(*expr.operands[i + 1]));
          } else {
            bounds[i] = JinjaValue::None();
          }
        }
        return JinjaSlice(object, bounds[0], bounds[1], bounds[2]);
      }
      case JinjaExprKind::kCall: {
        SS_ASSIGN_OR_RETURN(const JinjaValue callee, Eval(*expr.operands[0]));
        SS_ASSIGN_OR_RETURN(const JinjaArgs args, EvalArgs(expr));
        absl::StatusOr<JinjaValue> result = CallJinjaFunction(callee, args);
        raised_ = !result.ok() && callee.kind() == JinjaValue::Kind::kFunction &&
                  callee.receiver().is_undefined() && callee.string_value() == kJinjaRaiseException;
        return result;
      }
      case JinjaExprKind::kFilter: {
        SS_ASSIGN_OR_RETURN(const JinjaValue input, Eval(*expr.operands[0]));
        SS_ASSIGN_OR_RETURN(const JinjaArgs args, EvalArgs(expr));
        return ApplyJinjaFilter(expr.name, input, args);
      }
      case JinjaExprKind::kTest: {
        SS_ASSIGN_OR_RETURN(const JinjaValue input, Eval(*expr.operands[0]));
        SS_ASSIGN_OR_RETURN(const JinjaArgs args, EvalArgs(expr));
        SS_ASSIGN_OR_RETURN(const bool result, ApplyJinjaTest(expr.name, input, args));
        return JinjaValue::Bool(result != expr.negated);
      }
      case JinjaExprKind::kNegate: {
        SS_ASSIGN_OR_RETURN(const JinjaValue operand, Eval(*expr.operands[0]));
        return ApplyJinjaUnary(expr.name, operand);
      }
      case JinjaExprKind::kNot: {
        SS_ASSIGN_OR_RETURN(const JinjaValue operand, Eval(*expr.operands[0]));
        return JinjaValue::Bool(!operand.Truthy());
      }
      case JinjaExprKind::kBinary: {
        SS_ASSIGN_OR_RETURN(const JinjaValue left, Eval(*expr.operands[0]));
        SS_ASSIGN_OR_RETURN(const JinjaValue right, Eval(*expr.operands[1]));
        return ApplyJinjaBinary(expr.name, left, right);
      }
      case JinjaExprKind::kAnd:
      case JinjaExprKind::kOr: {  // Python returns the deciding operand itself
        SS_ASSIGN_OR_RETURN(JinjaValue left, Eval(*expr.operands[0]));
        if (left.Truthy() == (expr.kind == JinjaExprKind::kOr)) return left;
        return Eval(*expr.operands[1]);
      }
      case JinjaExprKind::kCompare: {
        SS_ASSIGN_OR_RETURN(JinjaValue left, Eval(*expr.operands[0]));
        for (size_t i = 0; i < expr.compare_ops.size(); ++i) {
          SS_ASSIGN_OR_RETURN(JinjaValue right, Eval(*expr.operands[i + 1]));
          SS_ASSIGN_OR_RETURN(const bool holds,
                              ApplyJinjaComparison(expr.compare_ops[i], left, right));
          if (!holds) return JinjaValue::Bool(false);
          left = std::move(right);
        }
        return JinjaValue::Bool(true);
      }
      case JinjaExprKind::kConditional: {
        SS_ASSIGN_OR_RETURN(const JinjaValue condition, Eval(*expr.operands[1]));
        if (condition.Truthy()) return Eval(*expr.operands[0]);
        if (expr.operands[2] != nullptr) return Eval(*expr.operands[2]);
        return JinjaValue::Undefined(absl::StrCat("the inline if-expression on line ", expr.line,
                                                  " evaluated to false and no else section was "
                                                  "defined."));
      }
    }
    return absl::InternalError("unknown expression kind");
  }

  const JinjaRenderLimits& limits_;
  std::vector<JinjaDict> scopes_;  // builtins, the caller's variables, then one per open scope
  std::string output_;
  std::string* out_ = &output_;  // where text goes: the output, or a {% set %} block's capture
  int64_t num_iterations_ = 0;
  bool raised_ = false;  // the failing call was raise_exception: its message stays verbatim
};

}  // namespace

absl::StatusOr<std::string> RenderJinja(const JinjaProgram& program, const JinjaDict& variables,
                                        const JinjaRenderLimits& limits) {
  return Renderer(variables, limits).Render(program.body);
}

}  // namespace sparseserve::tokenizer::internal
