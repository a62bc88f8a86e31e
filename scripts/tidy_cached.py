#!/usr/bin/env python3
"""clang-tidy over source files, skipping what is known clean, as ccache skips compiles.

usage: tidy_cached.py BUILD_DIR FILE...

Each file is checked with `clang-tidy -p BUILD_DIR --quiet FILE`, NPROC at a time, unless it is
known clean in one of two ways:
  * unchanged since a clean commit: .ci/tidy_clean_commit names a commit at which every file was
    checked clean (an ancestor of HEAD). A file none of whose project dependencies (the file and
    every project header it includes, from the build's own dependency log, `ninja -t deps`)
    differs from that commit is skipped — unless something every file depends on changed (any
    CMake file, cmake/, proto/, .clang-tidy, this script), which checks every file. By induction
    over landed commits (each passed this check) the skipped files are clean at HEAD too.
  * cached: a clean result is remembered under the hash of everything it depends on (the file's
    preprocessed source with comments, its compile command, .clang-tidy and clang-tidy's
    version) in $SPARSESERVE_TIDY_CACHE (default ~/.cache/sparseserve-tidy; "off" turns it off).
A finding is never remembered. SPARSESERVE_TIDY_ALL=1 checks every file (what to run before
moving .ci/tidy_clean_commit forward).

Prints clang-tidy's output for files with findings and a last line "tidy: N checked, M cached,
K unchanged since <commit>"; exits 1 if any file has a finding (or cannot be checked), else 0.
"""

import concurrent.futures
import hashlib
import json
import os
import shlex
import subprocess
import sys


def preprocess_command(entry):
    """The entry's compile command turned into one that writes its preprocessed source (comments
    kept) to stdout."""
    args = entry.get("arguments") or shlex.split(entry["command"])
    if args and os.path.basename(args[0]) == "ccache":
        args = args[1:]
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD") or a.startswith("-o"):
            continue
        out.append(a)
    return out + ["-E", "-C"]


def key_of(entry, salt):
    """The hash of everything a clang-tidy result depends on; None when it cannot be made."""
    cmd = preprocess_command(entry)
    try:
        pre = subprocess.run(cmd, cwd=entry["directory"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    h = hashlib.sha256()
    h.update(salt)
    h.update(json.dumps(cmd).encode())
    h.update(pre)
    return h.hexdigest()


def check(path, entry, build, cache, salt):
    """Returns (path, ok, cached, output)."""
    key = key_of(entry, salt) if cache and entry is not None else None
    marker = os.path.join(cache, key[:2], key) if key else None
    if marker and os.path.exists(marker):
        return path, True, True, ""
    res = subprocess.run(["clang-tidy", "-p", build, "--quiet", path], capture_output=True,
                         text=True)
    ok = res.returncode == 0
    if ok and marker:
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        with open(marker, "w") as f:
            f.write(path + "\n")
    return path, ok, False, res.stdout + res.stderr


# Inputs of every file's check: a change to any of them checks every file.
GLOBAL_INPUTS = (".clang-tidy", "cmake/", "proto/", "scripts/tidy_cached.py")


def git(*args):
    res = subprocess.run(["git", *args], capture_output=True, text=True)
    return res.stdout if res.returncode == 0 else None


def unchanged_since_clean(build, entries, root):
    """The sources (realpaths) unchanged since .ci/tidy_clean_commit, as a set with the commit,
    or (empty set, None) when nothing can be skipped."""
    if os.environ.get("SPARSESERVE_TIDY_ALL") == "1":
        return set(), None
    try:
        with open(os.path.join(root, ".ci", "tidy_clean_commit")) as f:
            commit = f.read().split()[0]
    except (OSError, IndexError):
        return set(), None
    if git("merge-base", "--is-ancestor", commit, "HEAD") is None:
        return set(), None
    diff = git("diff", "--name-only", commit)  # the working tree against the clean commit
    untracked = git("ls-files", "--others", "--exclude-standard")
    if diff is None or untracked is None:
        return set(), None
    changed = {os.path.realpath(os.path.join(root, p)) for p in (diff + untracked).split()}
    for p in (diff + untracked).split():
        if p.startswith(GLOBAL_INPUTS) or os.path.basename(p) == "CMakeLists.txt":
            return set(), None
    # The build's dependency log: object -> the files it was compiled from.
    log = subprocess.run(["ninja", "-C", build, "-t", "deps"], capture_output=True, text=True)
    if log.returncode != 0:
        return set(), None
    deps, current = {}, None
    for line in log.stdout.splitlines():
        if not line.startswith(" ") and "#deps" in line:
            current = os.path.realpath(os.path.join(build, line.split(":")[0]))
            deps[current] = set() if "(VALID)" in line else None
        elif line.startswith("    ") and current is not None and deps[current] is not None:
            deps[current].add(os.path.realpath(os.path.join(build, line.strip())))
    root_prefix = os.path.realpath(root) + os.sep
    build_prefix = os.path.realpath(build) + os.sep
    skip = set()
    for src, entry in entries.items():
        args = entry.get("arguments") or shlex.split(entry["command"])
        obj = args[args.index("-o") + 1] if "-o" in args else None
        if obj is None:
            continue
        d = deps.get(os.path.realpath(os.path.join(entry["directory"], obj)))
        if d is None or src not in d:
            continue
        # Project files only (system headers are the machine's; generated ones follow proto/).
        project = {p for p in d if p.startswith(root_prefix) and not p.startswith(build_prefix)}
        if not project & changed:
            skip.add(src)
    return skip, commit[:12]


def main():
    if len(sys.argv) < 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    build, files = sys.argv[1], sys.argv[2:]
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = {os.path.realpath(e["file"]): e for e in json.load(f)}
    cache = os.environ.get("SPARSESERVE_TIDY_CACHE",
                           os.path.join(os.path.expanduser("~"), ".cache", "sparseserve-tidy"))
    if cache == "off":
        cache = None
    salt = subprocess.run(["clang-tidy", "--version"], capture_output=True).stdout
    with open(".clang-tidy", "rb") as f:
        salt += f.read()
    skip, commit = unchanged_since_clean(build, entries, os.getcwd())
    todo = [p for p in files if os.path.realpath(p) not in skip]
    checked = cached = 0
    failed = False
    workers = os.cpu_count() or 1
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(check, p, entries.get(os.path.realpath(p)), build, cache, salt)
                   for p in todo]
        for fut in concurrent.futures.as_completed(futures):
            path, ok, was_cached, output = fut.result()
            cached += was_cached
            checked += not was_cached
            if not ok:
                failed = True
                sys.stdout.write(output if output else "%s: clang-tidy failed\n" % path)
    print("tidy: %d checked, %d cached, %d unchanged since %s" % (
        checked, cached, len(files) - len(todo), commit or "(no clean commit)"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
