#include "common/tokenizer/internal/jinja_parser.h"

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/core/status.h"
#include "common/tokenizer/internal/jinja_expression_parser.h"
#include "common/tokenizer/internal/jinja_lexer.h"

namespace sparseserve::tokenizer::internal {
namespace {

// Jinja tags this interpreter deliberately leaves out (chat templates rarely use them).
constexpr absl::string_view kUnsupportedTags[] = {"macro",   "call",       "filter", "with",
                                                  "include", "import",     "from",   "extends",
                                                  "block",   "autoescape", "do"};

using EndTags = std::initializer_list<absl::string_view>;

class StatementParser {
 public:
  explicit StatementParser(std::vector<JinjaToken> tokens) : tokens_(std::move(tokens)) {}

  absl::StatusOr<JinjaProgram> ParseTemplate() {
    JinjaProgram program;
    SS_ASSIGN_OR_RETURN(const std::string end, ParseBody({}, nullptr, &program.body));
    (void)end;  // always "" at the top level
    return program;
  }

 private:
  // Appends statements to `body` until a `{% tag %}` with tag in `end_tags` (the block's own
  // end tag last), whose name it consumes and returns (the caller reads the rest of that tag),
  // or until the end of the template, allowed only at the top level (`opener` null; returns "").
  absl::StatusOr<std::string> ParseBody(EndTags end_tags, const JinjaToken* opener,
                                        JinjaBody* body) {
    while (true) {
      const JinjaToken& token = tokens_.Next();
      switch (token.kind) {
        case JinjaTokenKind::kText: {
          auto stmt = NewStmt(JinjaStmtKind::kText, token);
          stmt->text = token.text;
          body->push_back(std::move(stmt));
          break;
        }
        case JinjaTokenKind::kVariableBegin: {
          auto stmt = NewStmt(JinjaStmtKind::kOutput, token);
          SS_ASSIGN_OR_RETURN(stmt->expr, ParseJinjaExpression(&tokens_, true, true));
          SS_RETURN_IF_ERROR(ExpectTagEnd(JinjaTokenKind::kVariableEnd));
          body->push_back(std::move(stmt));
          break;
        }
        case JinjaTokenKind::kBlockBegin: {
          const JinjaToken& name = tokens_.Peek();
          if (name.kind == JinjaTokenKind::kName &&
              std::find(end_tags.begin(), end_tags.end(), name.text) != end_tags.end()) {
            return tokens_.Next().text;
          }
          SS_ASSIGN_OR_RETURN(auto stmt, ParseTag(token, end_tags));
          body->push_back(std::move(stmt));
          break;
        }
        case JinjaTokenKind::kEnd:
          if (opener == nullptr) return std::string();
          return JinjaTokenStream::Error(
              *opener, absl::StrCat("'{% ", opener->text, " %}' is not closed (expected '",
                                    *(end_tags.end() - 1), "' before the end of the template)"));
        default:
          return JinjaTokenStream::Error(
              token, absl::StrCat("unexpected ", JinjaTokenStream::Describe(token)));
      }
    }
  }

  std::unique_ptr<JinjaStmt> NewStmt(JinjaStmtKind kind, const JinjaToken& at) const {
    auto stmt = std::make_unique<JinjaStmt>();
    stmt->kind = kind;
    stmt->line = at.line;
    return stmt;
  }

  absl::Status ExpectTagEnd(JinjaTokenKind kind = JinjaTokenKind::kBlockEnd) {
    const JinjaToken& token = tokens_.Next();
    if (token.kind == kind) return absl::OkStatus();
    return JinjaTokenStream::Error(
        token, absl::StrCat("expected end of tag, got ", JinjaTokenStream::Describe(token)));
  }

  // The statement of a `{%` tag (`begin`); the tag name is next. `end_tags` are those of the
  // enclosing block, for the message about a stray end tag.
  absl::StatusOr<std::unique_ptr<JinjaStmt>> ParseTag(const JinjaToken& begin, EndTags end_tags) {
    const JinjaToken& name = tokens_.Next();
    if (name.kind != JinjaTokenKind::kName) {
      return JinjaTokenStream::Error(name, "expected a tag name after '{%'");
    }
    const std::string& tag = name.text;
    if (tag == "if" || tag == "for" || tag == "set" || tag == "generation") {
      if (++block_nesting_ > kMaxJinjaBlockNesting) {
        return JinjaTokenStream::Error(name, "blocks nested too deeply");
      }
      absl::StatusOr<std::unique_ptr<JinjaStmt>> stmt;
      if (tag == "if") {
        stmt = ParseIf(name);
      } else if (tag == "for") {
        stmt = ParseFor(name);
      } else if (tag == "set") {
        stmt = ParseSet(name);
      } else {
        stmt = ParseGeneration(name);
      }
      --block_nesting_;
      return stmt;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_nesting_ == 0) {
        return JinjaTokenStream::Error(name, absl::StrCat("'", tag, "' outside of a for loop"));
      }
      SS_RETURN_IF_ERROR(ExpectTagEnd());
      return NewStmt(tag == "break" ? JinjaStmtKind::kBreak : JinjaStmtKind::kContinue, begin);
    }
    if (std::find(std::begin(kUnsupportedTags), std::end(kUnsupportedTags), tag) !=
        std::end(kUnsupportedTags)) {
      return JinjaTokenStream::Error(name, absl::StrCat("unsupported tag '", tag, "'"));
    }
    if (absl::StartsWith(tag, "end") || tag == "else" || tag == "elif") {
      const std::string expected =
          end_tags.size() == 0 ? "no block is open"
                               : absl::StrCat("expected '", absl::StrJoin(end_tags, "' or '"), "'");
      return JinjaTokenStream::Error(name, absl::StrCat("unexpected '", tag, "' (", expected, ")"));
    }
    return JinjaTokenStream::Error(name, absl::StrCat("unknown tag '", tag, "'"));
  }

  absl::StatusOr<std::unique_ptr<JinjaStmt>> ParseIf(const JinjaToken& opener) {
    auto stmt = NewStmt(JinjaStmtKind::kIf, opener);
    while (true) {
      JinjaIfBranch branch;
      SS_ASSIGN_OR_RETURN(branch.condition, ParseJinjaExpression(&tokens_, false, true));
      SS_RETURN_IF_ERROR(ExpectTagEnd());
      SS_ASSIGN_OR_RETURN(const std::string end,
                          ParseBody({"elif", "else", "endif"}, &opener, &branch.body));
      stmt->branches.push_back(std::move(branch));
      if (end == "elif") continue;
      SS_RETURN_IF_ERROR(ExpectTagEnd());
      if (end == "else") {
        SS_ASSIGN_OR_RETURN(const std::string endif,
                            ParseBody({"endif"}, &opener, &stmt->else_body));
        (void)endif;
        SS_RETURN_IF_ERROR(ExpectTagEnd());
      }
      return stmt;
    }
  }

  // Comma-separated names up to (not including) the next non-name token.
  absl::StatusOr<std::vector<std::string>> ParseTargets() {
    std::vector<std::string> targets;
    do {
      const JinjaToken& token = tokens_.Next();
      if (token.kind != JinjaTokenKind::kName) {
        return JinjaTokenStream::Error(token, absl::StrCat("expected a variable name, got ",
                                                           JinjaTokenStream::Describe(token)));
      }
      targets.push_back(token.text);
    } while (tokens_.ConsumeOperator(","));
    return targets;
  }

  absl::StatusOr<std::unique_ptr<JinjaStmt>> ParseFor(const JinjaToken& opener) {
    auto stmt = NewStmt(JinjaStmtKind::kFor, opener);
    SS_ASSIGN_OR_RETURN(stmt->targets, ParseTargets());
    if (!tokens_.ConsumeName("in")) {
      return JinjaTokenStream::Error(tokens_.Peek(), "expected 'in' in for loop");
    }
    SS_ASSIGN_OR_RETURN(stmt->expr, ParseJinjaExpression(&tokens_, false, true));
    if (tokens_.ConsumeName("if")) {
      SS_ASSIGN_OR_RETURN(stmt->filter, ParseJinjaExpression(&tokens_, true, false));
    }
    if (tokens_.IsName("recursive")) {
      return JinjaTokenStream::Error(tokens_.Peek(), "recursive for loops are not supported");
    }
    SS_RETURN_IF_ERROR(ExpectTagEnd());
    ++loop_nesting_;
    absl::StatusOr<std::string> end = ParseBody({"else", "endfor"}, &opener, &stmt->body);
    --loop_nesting_;
    if (!end.ok()) return end.status();
    SS_RETURN_IF_ERROR(ExpectTagEnd());
    if (*end == "else") {
      // The else body runs when nothing was iterated: break and continue do not belong to it.
      const int outer_loops = std::exchange(loop_nesting_, 0);
      absl::StatusOr<std::string> endfor = ParseBody({"endfor"}, &opener, &stmt->else_body);
      loop_nesting_ = outer_loops;
      if (!endfor.ok()) return endfor.status();
      SS_RETURN_IF_ERROR(ExpectTagEnd());
    }
    return stmt;
  }

  absl::StatusOr<std::unique_ptr<JinjaStmt>> ParseSet(const JinjaToken& opener) {
    auto stmt = NewStmt(JinjaStmtKind::kSet, opener);
    SS_ASSIGN_OR_RETURN(stmt->targets, ParseTargets());
    if (stmt->targets.size() == 1 && tokens_.ConsumeOperator(".")) {
      const JinjaToken& attribute = tokens_.Next();
      if (attribute.kind != JinjaTokenKind::kName) {
        return JinjaTokenStream::Error(attribute, "expected an attribute name after '.'");
      }
      stmt->attribute = attribute.text;
    }
    if (tokens_.ConsumeOperator("=")) {
      SS_ASSIGN_OR_RETURN(stmt->expr, ParseJinjaExpression(&tokens_, true, true));
      SS_RETURN_IF_ERROR(ExpectTagEnd());
      return stmt;
    }
    if (stmt->targets.size() != 1 || !stmt->attribute.empty()) {
      return JinjaTokenStream::Error(tokens_.Peek(), "expected '=' in set");
    }
    if (tokens_.IsOperator("|")) {
      return JinjaTokenStream::Error(tokens_.Peek(), "filters on a set block are not supported");
    }
    SS_RETURN_IF_ERROR(ExpectTagEnd());
    stmt->kind = JinjaStmtKind::kSetBlock;
    SS_ASSIGN_OR_RETURN(const std::string end, ParseBody({"endset"}, &opener, &stmt->body));
    (void)end;
    SS_RETURN_IF_ERROR(ExpectTagEnd());
    return stmt;
  }

  absl::StatusOr<std::unique_ptr<JinjaStmt>> ParseGeneration(const JinjaToken& opener) {
    auto stmt = NewStmt(JinjaStmtKind::kScope, opener);
    SS_RETURN_IF_ERROR(ExpectTagEnd());
    SS_ASSIGN_OR_RETURN(const std::string end, ParseBody({"endgeneration"}, &opener, &stmt->body));
    (void)end;
    SS_RETURN_IF_ERROR(ExpectTagEnd());
    return stmt;
  }

  JinjaTokenStream tokens_;
  int block_nesting_ = 0;
  int loop_nesting_ = 0;  // enclosing for bodies: where break / continue may appear
};

}  // namespace

absl::StatusOr<JinjaProgram> ParseJinja(absl::string_view source) {
  SS_ASSIGN_OR_RETURN(std::vector<JinjaToken> tokens, LexJinja(source));
  return StatementParser(std::move(tokens)).ParseTemplate();
}

}  // namespace sparseserve::tokenizer::internal
