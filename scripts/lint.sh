#!/usr/bin/env bash
# lint.sh [BUILD_DIR] — clang-format check of every C++ file, then clang-tidy (root .clang-tidy,
# warnings are errors) over the project's .cc files using BUILD_DIR/compile_commands.json, a file
# checked clean before with the same preprocessed source, command and configuration skipped
# (scripts/tidy_cached.py: its cache is to clang-tidy what ccache is to the compiler).
# Prints "ok lint-format" / "ok lint-tidy" or FAIL lines; exits non-zero on any finding.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${1:-build}
rc=0
files=$(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
if clang-format --dry-run --Werror $files >/tmp/ss-format.log 2>&1; then
  echo "ok lint-format"
else
  echo "FAIL lint-format (run: git ls-files '*.cc' '*.h' | xargs clang-format -i)"
  head -n 40 /tmp/ss-format.log
  rc=1
fi
srcs=$(git ls-files 'common/*.cc' 'kernels/*.cc' 'tools/*.cc' 'router/*.cc' 'prefill_svc/*.cc' \
       'decode_svc/*.cc')
# shellcheck disable=SC2086
if python3 scripts/tidy_cached.py "$build" $srcs >/tmp/ss-tidy.log 2>&1; then
  echo "ok lint-tidy ($(tail -n 1 /tmp/ss-tidy.log))"
else
  echo "FAIL lint-tidy"
  grep -E 'error:|warning:' /tmp/ss-tidy.log | head -n 40
  rc=1
fi
exit $rc
