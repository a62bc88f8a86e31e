"""Long-context evaluation (issue 11) on the CPU: the task generator's answers hold by
construction, and `sparseserve eval` with the committed trained test model sees attention
changes (dense passkey at 2K >= 90%, a window covering the context == dense, a 256-token window
loses the needle); bench/longctx/table.py runs its grid."""

import json
import os
import re
import subprocess
import sys
from collections import Counter

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from longctx import bpe, tasks  # noqa: E402

MODEL = os.path.join(ROOT, "tests", "data", "longctx_model")
TOKENIZER = os.path.join(MODEL, "tokenizer.json")
BIN = os.environ.get("SPARSESERVE_BIN", os.path.join(ROOT, "build", "bin", "sparseserve"))


@pytest.fixture(scope="module")
def encoder():
    return bpe.ByteLevelBpe(TOKENIZER)


def test_tasks_are_deterministic_and_sized(encoder):
    for task in tasks.TASKS:
        for length in (700, 3000):
            for seed in range(3):
                a = tasks.make_task(task, length, seed, encoder)
                assert a == tasks.make_task(task, length, seed, bpe.ByteLevelBpe(TOKENIZER))
                assert length - 48 <= a["tokens"] <= length, (task, length, a["tokens"])
                assert a["tokens"] == 1 + len(encoder.encode(a["prompt"]))
                assert not re.search(r"[0-9]", a["prompt"]) or task in (
                    "passkey", "multikey", "multivalue", "vartrack")
    assert tasks.make_task("passkey", 3000, 1, encoder) != tasks.make_task("passkey", 3000, 2,
                                                                           encoder)
    with pytest.raises(ValueError):
        tasks.make_task("summarize", 1000, 0, encoder)
    with pytest.raises(ValueError):
        tasks.make_task("multikey", 40, 0, encoder)


def test_tasks_are_the_same_in_every_process():
    # Deterministic means across processes too: Python seeds its string hashes per process, so
    # anything that iterates a set of strings would differ between two runs of the generator.
    code = ("import hashlib, json, sys; sys.path.insert(0, sys.argv[1]); "
            "from longctx import bpe, tasks; e = bpe.ByteLevelBpe(sys.argv[2]); "
            "print(hashlib.sha256(json.dumps([tasks.make_task(t, 700, 3, e) for t in tasks.TASKS]"
            " + [tasks.multikey_drill(512, 3, e, 6)]).encode()).hexdigest())")
    digests = {
        subprocess.run([sys.executable, "-c", code, os.path.join(ROOT, "tools"), TOKENIZER],
                       env=dict(os.environ, PYTHONHASHSEED=seed), check=True,
                       capture_output=True, text=True).stdout
        for seed in ("1", "2")}
    assert len(digests) == 1, digests


def test_answers_hold_by_construction(encoder):
    for seed in range(5):
        p = tasks.make_task("passkey", 2000, seed, encoder)
        assert p["prompt"].count(f"pass key is {p['answers'][0]}.") == 1
        m = tasks.make_task("multikey", 2000, seed, encoder)
        key = re.search(r"for this key\? (\w+)$", m["prompt"]).group(1)
        needles = dict(re.findall(r"magic number: (\w+) (\d+)\.", m["prompt"]))
        assert len(needles) == tasks.NEEDLES["multikey"] and needles[key] == m["answers"][0]
        assert m["prompt"].count(f" {key}") == 2  # its needle and the question's last word
        v = tasks.make_task("multivalue", 2000, seed, encoder)
        key = re.search(r"magic numbers for (\w+)\?", v["prompt"]).group(1)
        assert re.findall(rf"magic number for {key} is (\d+)\.", v["prompt"]) == v["answers"]
        t = tasks.make_task("vartrack", 2000, seed, encoder)
        value = re.search(r"assigned the value (\d+)\.", t["prompt"]).group(1)
        env = {}
        for name, rhs in re.findall(r"VAR (\w+) = (VAR \w+|\d+)\.", t["prompt"]):
            env[name] = env[rhs[4:]] if rhs.startswith("VAR ") else rhs
        assert sorted(n for n, x in env.items() if x == value) == sorted(t["answers"])
        c = tasks.make_task("cwe", 2000, seed, encoder)
        words = Counter(re.findall(r" (\w+),", c["prompt"].split("Memorize the most common ones.")[1]))
        top = [w for w, _ in words.most_common(tasks.CWE_COMMON)]
        assert sorted(top) == c["answers"]
        assert words.most_common()[tasks.CWE_COMMON][1] * 2 <= words[top[-1]]
        for task in (p, m, v, t, c):
            assert tasks.score(task, task["target"]) == 1.0
            assert tasks.score(task, " nothing.") == 0.0


def test_multikey_drill_asks_every_key(encoder):
    for length, needles in ((256, 5), (1024, 16)):
        d = tasks.multikey_drill(length, 7, encoder, needles)
        assert d == tasks.multikey_drill(length, 7, encoder, needles)
        found = dict(re.findall(r"magic number: (\w+) (\d+)\.", d["prompt"]))
        asked = [re.search(r"(\w+)$", q).group(1) for q, _ in d["qa"]]
        assert len(found) == needles and sorted(asked) == sorted(found)
        assert all(a == f" {found[k]}." for k, (_, a) in zip(asked, d["qa"]))
        total = 1 + encoder.count(d["prompt"]) + sum(encoder.count(q + a) for q, a in d["qa"])
        assert total <= length
    with pytest.raises(ValueError):
        tasks.multikey_drill(256, 0, encoder, 16)


def run_eval(tmp_path, name, items, *flags):
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    out = tmp_path / f"{name}.json"
    proc = subprocess.run([BIN, "eval", "--model", MODEL, "--tasks", str(path), "--out", str(out),
                           *flags], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^passkey\s+2048\s+%d\s" % len(items), proc.stdout, re.M), proc.stdout
    return json.loads(out.read_text())


def test_eval_sees_attention_changes(tmp_path, encoder):
    items = [dict(tasks.make_task("passkey", 2048, seed, encoder), seed=seed) for seed in range(20)]
    dense = run_eval(tmp_path, "dense", items)
    for task, got in zip(items, dense["items"]):
        assert got["prompt_tokens"] == task["tokens"]  # the generator counts as the engine does
    dense_score = sum(i["score"] for i in dense["items"]) / len(items)
    assert dense_score >= 0.9, dense["table"]
    assert dense["table"][0]["density"] == 1.0

    covering = run_eval(tmp_path, "covering", items[:10], "--attention", "sliding-window",
                        "--sliding-window", "4096")
    assert [i["output"] for i in covering["items"]] == [i["output"] for i in dense["items"][:10]]

    narrow = run_eval(tmp_path, "narrow", items, "--attention", "sliding-window",
                      "--sliding-window", "256")
    narrow_score = sum(i["score"] for i in narrow["items"]) / len(items)
    assert narrow_score <= dense_score - 0.3, (dense_score, narrow_score)
    assert narrow["table"][0]["density"] < 0.3  # ~2 x 256 / 2048


def test_eval_refuses_bad_input(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task": "passkey"}\n')
    proc = subprocess.run([BIN, "eval", "--model", MODEL, "--tasks", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "prompt" in proc.stderr
    proc = subprocess.run([BIN, "eval", "--model", MODEL, "--tasks", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "cannot open" in proc.stderr


def test_eval_through_a_server_equals_in_process(tmp_path, encoder):
    """`sparseserve eval --server` over the real gRPC API (router, prefill and decode workers
    started by `sparseserve up` with the test model) gives the in-process outputs."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from services_conftest import Cluster

    items = [dict(tasks.make_task("passkey", 2048, seed, encoder), seed=seed) for seed in range(4)]
    local = run_eval(tmp_path, "local", items)
    cluster = Cluster(num_prefill=1, num_decode=1, extra=[f"--model={MODEL}"])
    try:
        remote = run_eval(tmp_path, "remote", items, "--server", cluster.address,
                          "--concurrency", "2")
    finally:
        cluster.close()
    assert [i["output"] for i in remote["items"]] == [i["output"] for i in local["items"]]
    assert [i["prompt_tokens"] for i in remote["items"]] == [t["tokens"] for t in items]


def test_eval_tokenselect_covering_small_and_through_a_server(tmp_path, encoder):
    """TokenSelect (issue 13) in the evaluation: a budget covering the context gives the dense
    outputs; a small one (prompt chunks and generated tokens) reports its measured densities
    and selection-cache use; through the server (prefill on a prefill worker, decode on a
    decode worker) it gives the in-process outputs — with one selection per layer and with one
    per KV head."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from services_conftest import Cluster

    items = [dict(tasks.make_task("passkey", 2048, seed, encoder), seed=seed) for seed in range(6)]
    dense = run_eval(tmp_path, "ts_dense", items)
    covering = run_eval(tmp_path, "ts_covering", items, "--prefill-attention", "tokenselect",
                        "--decode-attention", "tokenselect", "--tokenselect-k", "4096")
    assert [i["output"] for i in covering["items"]] == [i["output"] for i in dense["items"]]
    assert covering["table"][0]["decode_density"] == 1.0
    small = ["--prefill-attention", "tokenselect", "--decode-attention", "tokenselect",
             "--tokenselect-k", "256", "--tokenselect-initial", "16", "--tokenselect-local", "128",
             "--tokenselect-theta", "0.9"]
    local = run_eval(tmp_path, "ts_small", items, *small)
    row = local["table"][0]
    assert row["density"] < 0.7 and row["decode_density"] < 0.5, row
    assert row["selection_cache_queries"] > 0, row
    cluster = Cluster(num_prefill=1, num_decode=1,
                      extra=[f"--model={MODEL}", "--disagg-threshold=1", "--tokenselect-k=256"])
    try:
        remote = run_eval(tmp_path, "ts_remote", items, "--server", cluster.address, *small)
    finally:
        cluster.close()
    assert [i["output"] for i in remote["items"]] == [i["output"] for i in local["items"]]
    assert remote["table"][0]["decode_density"] == row["decode_density"]
    # Selections per KV head (TokenSwift's partial KV): the same budget per KV head; a worker
    # sized for them (--tokenselect-per-kv-head) gives the in-process outputs.
    per_head = small + ["--tokenselect-per-kv-head"]
    local_ph = run_eval(tmp_path, "ts_small_kvh", items, *per_head)
    assert local_ph["table"][0]["decode_density"] < 0.5, local_ph["table"]
    cluster = Cluster(num_prefill=1, num_decode=1,
                      extra=[f"--model={MODEL}", "--disagg-threshold=1", "--tokenselect-k=256",
                             "--tokenselect-per-kv-head"])
    try:
        remote_ph = run_eval(tmp_path, "ts_remote_kvh", items, "--server", cluster.address,
                             *per_head)
    finally:
        cluster.close()
    assert [i["output"] for i in remote_ph["items"]] == [i["output"] for i in local_ph["items"]]


def test_table_runs_the_grid_and_reports_density(tmp_path):
    # bench/longctx/table.py on the CPU: one eval per (config, length), a table per config with
    # the measured density in every cell; a NAME=FLAGS config runs with its flags; a second call
    # with another prompt count makes new prompts instead of reusing the first call's.
    def table(num):
        proc = subprocess.run(
            [sys.executable, os.path.join(ROOT, "bench", "longctx", "table.py"), "--device", "cpu",
             "--sparseserve", BIN, "--out", str(tmp_path), "--num", str(num), "--lengths", "1K",
             "--tasks", "passkey", "--configs", "dense", "--jobs", "1",
             "--config", "window128=--attention sliding-window --sliding-window 128"],
            capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout, json.loads((tmp_path / "table.json").read_text())

    text, cells = table(2)
    assert set(cells) == {"dense", "window128"}
    dense, window = cells["dense"]["passkey/1024"], cells["window128"]["passkey/1024"]
    assert dense["n"] == 2 and dense["density"] == 1.0
    assert 0 < window["density"] < 0.3  # ~128 of ~512 keys a row on average
    assert re.search(r"^\| passkey \| [0-9.]+ \(100\.0\) \|$", text, re.M), text
    assert (tmp_path / "window128_1k.json").exists()
    _, cells = table(3)
    assert cells["dense"]["passkey/1024"]["n"] == 3
