"""Router + prefill + decode worker processes on loopback, driven by a Python grpcio client that
uses only the .proto files (issue 3). Every wait is bounded."""
import json
import os
import random
import signal
import subprocess
import tempfile
import threading
import time

import grpc
import pytest

from services_conftest import (BIN, MODEL, ROOT, Cluster, free_port, gen_pb2, greedy_request,
                               metric, prompts, reference_tokens, run, scrape, send_garbage,
                               wait_until, worker_grpc, worker_pb2, worker_status)

GOLDEN = open(os.path.join(os.path.dirname(__file__), "..", "data",
                           "golden_once_upon_a_time.txt")).read()[:-1]


@pytest.mark.parametrize("threshold,disaggregated", [(3, True), (100000, False)])
def test_up_greedy_equals_single_process(threshold, disaggregated):
    c = Cluster(extra=[f"--disagg-threshold={threshold}"])
    try:
        tokens, text, last = run(c.stub, greedy_request("Once upon a time", max_tokens=60))
        assert text == GOLDEN
        assert len(tokens) == 60
        assert last.finish_reason == gen_pb2.FINISH_REASON_LENGTH
        assert last.timings.disaggregated == disaggregated
        assert last.usage.prompt_tokens == 5 and last.usage.completion_tokens == 60
        moved = metric(c.role("prefill")[0]["metrics"], "sparseserve_kv_transfer_bytes_total")
        assert (moved > 0) == disaggregated
        # Seeded sampling continues the same random stream across the prefill/decode split.
        ref = reference_tokens("Once upon a time", 50,
                               ["--temperature=0.9", "--top-p=0.95", "--seed=7"])
        req = greedy_request("Once upon a time", max_tokens=50)
        req.sampling.temperature, req.sampling.top_p, req.sampling.seed = 0.9, 0.95, 7
        assert run(c.stub, req)[1] == ref
    finally:
        c.close()


@pytest.mark.parametrize("disaggregated", [True, False])
def test_sliding_window_model_rolls_its_kv(disaggregated):
    """Issue 17: tiny_mistral (a 64-token window on every layer) through `up` with a KV pool of
    16 blocks of 16 tokens generates 300 tokens after a ~150-token prompt (29 blocks' worth), as
    single-process `generate` does: blocks that left the window go back to the pool. Disaggregated,
    the prefill worker sends only the blocks inside the window of the prompt's next token."""
    model = os.path.join(ROOT, "tests", "data", "tiny_mistral")
    prompt = " ".join(["The router sends long prompts to prefill workers."] * 6)
    pool = ["--block-tokens=16", "--kv-cache-tokens=256", "--prefill-chunk=32"]
    ref = subprocess.run([BIN, "generate", f"--model={model}", f"--prompt={prompt}",
                          "--max-tokens=300", "--ignore-eos", "--temperature=0",
                          "--log-level=warning"] + pool, capture_output=True, text=True,
                         timeout=120)
    assert ref.returncode == 0, ref.stderr
    threshold = 3 if disaggregated else 100000
    c = Cluster(extra=[f"--model={model}", f"--disagg-threshold={threshold}"] + pool)
    try:
        tokens, text, last = run(c.stub, greedy_request(prompt, max_tokens=300))
        assert len(tokens) == 300
        assert text == ref.stdout[:-1]
        assert last.timings.disaggregated == disaggregated
        n = last.usage.prompt_tokens
        assert n > 4 * 16
        moved = metric(c.role("prefill")[0]["metrics"], "sparseserve_kv_transfer_bytes_total")
        # 2 layers x K and V x 16 tokens x 2 KV heads x head_dim 16 x f32.
        block_bytes = 2 * 2 * 16 * 2 * 16 * 4
        in_window = (n + 15) // 16 - (n - 64 + 1) // 16
        assert moved == (in_window * block_bytes if disaggregated else 0), (moved, n)
    finally:
        c.close()


def test_rolling_kv_equals_the_windowed_mask_without_rolling(tmp_path):
    """Issue 17's brute-force reference in one process: tiny_mistral with rolling KV in a pool of
    16 blocks of 16 tokens equals the same weights loaded as a Llama (no model window) with a
    request sliding window of 64 and no sinks in a roomy pool (every block kept, the window only
    a mask) — and differs from full attention."""
    src = os.path.join(ROOT, "tests", "data", "tiny_mistral")
    for name in ("model.safetensors", "tokenizer.json"):
        os.symlink(os.path.join(src, name), tmp_path / name)
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    config.update(model_type="llama", architectures=["LlamaForCausalLM"])
    del config["sliding_window"]
    with open(tmp_path / "config.json", "w") as f:
        json.dump(config, f)
    prompt = " ".join(["The router sends long prompts to prefill workers."] * 6)

    def generate(model, *flags):
        out = subprocess.run([BIN, "generate", f"--model={model}", f"--prompt={prompt}",
                              "--max-tokens=300", "--ignore-eos", "--temperature=0",
                              "--block-tokens=16", "--log-level=warning"] + list(flags),
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    rolling = generate(src, "--kv-cache-tokens=256", "--prefill-chunk=32")
    masked = generate(tmp_path, "--kv-cache-tokens=4096", "--attention=sliding-window",
                      "--sliding-window=64", "--sink-tokens=0")
    assert rolling == masked
    assert generate(tmp_path, "--kv-cache-tokens=4096") != rolling


def test_cancelled_disaggregated_requests_return_their_reservations_promptly():
    """Issue 17: 200 disaggregated requests cancelled at random moments of their prefill (PUTs
    slowed by 4 ms a layer). Each reservation comes back as soon as the prefill worker confirms
    that no PUT of it can still land (its Prefill call ended after the router's Abort): the decode
    worker's KV is idle again within seconds, no reservation waits for its 60 s lease."""
    c = Cluster(extra=["--disagg-threshold=3", "--fault-kv-put-delay-ms=4"])
    try:
        decode = c.role("decode")[0]
        idle = worker_status(decode["address"]).num_free_blocks
        rng = random.Random(17)
        for i in range(200):
            call = c.stub.Generate(greedy_request(f"Once upon a time {i}", max_tokens=20),
                                   timeout=30)
            time.sleep(rng.uniform(0, 0.04))
            call.cancel()
        assert wait_until(lambda: worker_status(decode["address"]).num_free_blocks == idle,
                          timeout=5), worker_status(decode["address"])
        assert metric(decode["metrics"], "sparseserve_kv_reservation_expiries_total") == 0
        # And the cluster still serves.
        assert run(c.stub, greedy_request("Once upon a time", max_tokens=60))[1] == GOLDEN
    finally:
        c.close()


@pytest.mark.parametrize("staging", ["off", "on"])
def test_prefill_worker_batches_concurrent_prompts(staging):
    """Eight concurrent prompts through one prefill worker in chunks of 16 rows: several prompts
    share prefill engine steps (engine_step_sequences counts steps of more than one sequence),
    each prompt's KV reaches the decode worker intact (straight from the KV cache, or through the
    staging ring's lanes), and every output equals single-process `generate`. The 100 ms PUT
    delay per layer keeps each finishing step long enough for the other requests to queue."""
    pool = prompts(16)
    texts = [" ".join(pool[i:i + 3 + i % 3]) for i in range(8)]
    refs = [reference_tokens(t, 16) for t in texts]
    c = Cluster(extra=["--disagg-threshold=3", "--prefill-chunk=16", "--max-step-tokens=64",
                       f"--kv-staging={staging}", "--fault-kv-put-delay-ms=100"])
    try:
        prefill, decode = c.role("prefill")[0], c.role("decode")[0]
        results = [None] * len(texts)

        def one(i):
            _, text, last = run(c.stub, greedy_request(texts[i], max_tokens=16), timeout=120)
            results[i] = (text, last.timings.disaggregated, last.usage.prompt_tokens)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(texts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=180)
        assert [r[0] for r in results] == refs
        assert all(r[1] for r in results), "every prompt went through the prefill worker"
        assert all(r[2] > 16 for r in results)  # several chunks each
        steps = metric(prefill["metrics"], "sparseserve_engine_step_sequences_count")
        single = sum(float(line.rsplit(" ", 1)[1]) for line in scrape_lines(prefill["metrics"])
                     if line.startswith("sparseserve_engine_step_sequences_bucket{") and
                     'le="1"' in line)
        assert steps == metric(prefill["metrics"], "sparseserve_engine_steps_total")
        assert steps - single >= 1, (steps, single)  # a step held chunks of several prompts
        assert wait_until(lambda: _idle_and_full(decode["address"]))
    finally:
        c.close()


def _idle_and_full(address):
    """The decode worker runs nothing and every KV pool and staging block is back."""
    st = worker_status(address)
    return (st.num_running == 0 and st.num_free_blocks == st.num_total_blocks and
            st.num_free_staging_blocks == st.num_total_staging_blocks)


def test_staged_kv_transfer_equals_golden_and_returns_every_block():
    # --kv-staging=on stages KV through registered host memory even though the CPU KV cache could
    # be registered itself: the path a GPU KV cache takes (prefill: device -> host ring -> PUT;
    # decode: PUT into a host staging area, copied into the pool when the decode job adopts it).
    c = Cluster(extra=["--disagg-threshold=3", "--kv-staging=on"])
    try:
        prefill, decode = c.role("prefill")[0], c.role("decode")[0]
        st = worker_status(decode["address"])
        assert st.num_total_staging_blocks > 0
        assert st.num_free_staging_blocks == st.num_total_staging_blocks
        tokens, text, last = run(c.stub, greedy_request("Once upon a time", max_tokens=60))
        assert text == GOLDEN
        assert len(tokens) == 60
        assert last.timings.disaggregated
        # The KV really went through the prefill worker and both staging copies.
        assert metric(prefill["metrics"], "sparseserve_kv_transfer_bytes_total") > 0
        assert metric(prefill["metrics"], "sparseserve_kv_staging_copy_seconds_count") == 1
        assert metric(decode["metrics"], "sparseserve_kv_staging_copy_seconds_count") == 1
        # Seeded sampling continues the same random stream across the staged split.
        ref = reference_tokens("Once upon a time", 50,
                               ["--temperature=0.9", "--top-p=0.95", "--seed=7"])
        req = greedy_request("Once upon a time", max_tokens=50)
        req.sampling.temperature, req.sampling.top_p, req.sampling.seed = 0.9, 0.95, 7
        _, sampled, last = run(c.stub, req)
        assert sampled == ref and last.timings.disaggregated
        # Several at once, each through its own staging blocks.
        texts = prompts(8)
        refs = [reference_tokens(p, 16) for p in texts]
        results = [None] * len(texts)

        def one(i):
            results[i] = run(c.stub, greedy_request(texts[i], max_tokens=16), timeout=120)[1]

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(texts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert results == refs
        assert metric(decode["metrics"], "sparseserve_kv_staging_copy_seconds_count") >= 3
        assert wait_until(lambda: _idle_and_full(decode["address"]))
    finally:
        c.close()


def test_prompt_longer_than_the_prefill_staging_ring():
    # stories260K's f32 KV block is 16 KiB per layer: a 64 KiB ring holds 4 (layer, block) units,
    # while this prompt needs 5 blocks x 5 layers, so the ring wraps (with a flush) inside layers.
    text = " ".join(prompts(22))  # 290 tokens: 5 blocks of 64
    ref = reference_tokens(text, 30)
    c = Cluster(extra=["--disagg-threshold=3", "--kv-staging=on",
                       "--prefill-kv-staging-mb=0.0625"])
    try:
        prefill, decode = c.role("prefill")[0], c.role("decode")[0]
        _, out, last = run(c.stub, greedy_request(text, max_tokens=30))
        assert last.usage.prompt_tokens > 4 * 64
        assert out == ref
        assert last.timings.disaggregated
        moved = metric(prefill["metrics"], "sparseserve_kv_transfer_bytes_total")
        assert moved == 5 * 5 * 16384  # every block of every layer, once
        assert wait_until(lambda: _idle_and_full(decode["address"]))
    finally:
        c.close()


def test_full_staging_area_falls_back_to_local_prefill():
    # A decode staging area of one block (80 KiB = one 16 KiB block x 5 layers): a prompt of two
    # blocks cannot be reserved (RESOURCE_EXHAUSTED) and the router prefills on the decode worker.
    text = " ".join(prompts(8))
    ref = reference_tokens(text, 20)
    c = Cluster(extra=["--disagg-threshold=3", "--kv-staging=on", "--kv-staging-mb=0.08"])
    try:
        prefill, decode = c.role("prefill")[0], c.role("decode")[0]
        assert worker_status(decode["address"]).num_total_staging_blocks == 1
        _, out, last = run(c.stub, greedy_request(text, max_tokens=20))
        assert last.usage.prompt_tokens > 64
        assert out == ref
        assert not last.timings.disaggregated
        assert metric(prefill["metrics"], "sparseserve_kv_transfer_bytes_total") == 0
        # A one-block prompt still fits and goes through the prefill worker.
        _, out, last = run(c.stub, greedy_request("Once upon a time", max_tokens=60))
        assert out == GOLDEN and last.timings.disaggregated
        assert wait_until(lambda: _idle_and_full(decode["address"]))
    finally:
        c.close()


def test_same_prompt_twice_reuses_cached_blocks():
    c = Cluster(num_prefill=0, extra=["--disagg-threshold=100000", "--block-tokens=16"])
    try:
        prompt = " ".join(prompts(6))  # ~80 tokens: several full 16-token blocks
        _, text1, first = run(c.stub, greedy_request(prompt, max_tokens=20))
        _, text2, second = run(c.stub, greedy_request(prompt, max_tokens=20))
        assert text1 == text2
        assert first.usage.cached_prompt_tokens == 0
        assert second.usage.cached_prompt_tokens >= 48
        decode = c.role("decode")[0]["metrics"]
        assert wait_until(lambda: metric(decode, "sparseserve_prefix_cache_hits_total") >= 3)
    finally:
        c.close()


def test_64_concurrent_streams_match_single_process_runs():
    texts = prompts(64)
    refs = [reference_tokens(p, 24) for p in texts]
    c = Cluster(num_prefill=1, num_decode=1, extra=["--disagg-threshold=12"])
    try:
        results = [None] * 64

        def worker(i):
            results[i] = run(c.stub, greedy_request(texts[i], max_tokens=24), timeout=120)[1]

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=180)
        assert results == refs
        decode = c.role("decode")[0]
        assert wait_until(lambda: worker_status(decode["address"]).num_running == 0)
        st = worker_status(decode["address"])
        assert st.num_free_blocks == st.num_total_blocks  # every block came back
        assert wait_until(lambda: metric(decode["metrics"], "sparseserve_kv_cache_usage_ratio")
                          == 0.0)
    finally:
        c.close()


def _stream_and_kill(c, request, victim_pid_fn, after_tokens=8):
    """Streams `request`; after `after_tokens` tokens kills -9 the worker victim_pid_fn() names."""
    tokens, text, last = [], "", None
    killed = False
    for msg in c.stub.Generate(request, timeout=120):
        tokens.extend(msg.token_ids)
        text += msg.text
        last = msg
        if not killed and len(tokens) >= after_tokens:
            os.kill(victim_pid_fn(), signal.SIGKILL)
            killed = True
    return tokens, text, last


def test_decode_worker_killed_mid_stream_migrates():
    prompt = "Once upon a time"
    ref = reference_tokens(prompt, 1500)
    c = Cluster(num_prefill=0, num_decode=2, extra=["--disagg-threshold=100000"])
    try:
        def busy_worker():
            for w in c.role("decode"):
                if worker_status(w["address"]).num_running > 0:
                    return w["pid"]
            raise AssertionError("no decode worker is running the request")

        _, text, last = _stream_and_kill(c, greedy_request(prompt, max_tokens=1500), busy_worker)
        assert text == ref
        assert last.timings.migrations == 1
        survivors = [w for w in c.role("decode") if w["pid"] != busy_worker_pid(c)]
        for w in survivors:
            assert wait_until(lambda: worker_status(w["address"]).num_running == 0)
            st = worker_status(w["address"])
            assert st.num_free_blocks == st.num_total_blocks
    finally:
        c.close()


def busy_worker_pid(c):
    return [w["pid"] for w in c.role("decode") if not _alive(w["pid"])][0]


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


def test_only_decode_worker_killed_gives_unavailable():
    c = Cluster(num_prefill=0, num_decode=1, extra=["--disagg-threshold=100000"])
    try:
        victim = c.role("decode")[0]["pid"]
        with pytest.raises(grpc.RpcError) as err:
            _stream_and_kill(c, greedy_request("Once upon a time", max_tokens=1500),
                             lambda: victim)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        c.close()


def test_prefill_worker_dying_mid_request_falls_back():
    c = Cluster(num_prefill=1, num_decode=1, extra=["--disagg-threshold=3"])
    try:
        prefill = c.role("prefill")[0]
        os.kill(prefill["pid"], signal.SIGSTOP)  # the request will reach a frozen worker
        result = {}
        t = threading.Thread(target=lambda: result.update(
            out=run(c.stub, greedy_request("Once upon a time", max_tokens=60))))
        t.start()
        time.sleep(0.5)
        os.kill(prefill["pid"], signal.SIGKILL)  # ... and it dies holding the request
        t.join(timeout=60)
        _, text, last = result["out"]
        assert text == GOLDEN
        assert not last.timings.disaggregated
        decode = c.role("decode")[0]
        st = worker_status(decode["address"])
        assert wait_until(lambda: worker_status(decode["address"]).num_free_blocks ==
                          st.num_total_blocks)
    finally:
        c.close()


def test_prefill_worker_killed_mid_transfer_falls_back():
    # Fault injection holds the transfer 1 s after each layer's PUT (stories260K: 5 layers), so
    # 1.5 s after the request the prefill worker has PUT some layers and not others.
    c = Cluster(num_prefill=1, num_decode=1,
                extra=["--disagg-threshold=3", "--fault-kv-put-delay-ms=1000"])
    try:
        prefill, decode = c.role("prefill")[0], c.role("decode")[0]
        result = {}
        t = threading.Thread(target=lambda: result.update(
            out=run(c.stub, greedy_request("Once upon a time", max_tokens=60))))
        t.start()
        time.sleep(1.5)
        assert t.is_alive(), "the transfer should still be running"
        os.kill(prefill["pid"], signal.SIGKILL)
        t.join(timeout=60)
        _, text, last = result["out"]
        assert text == GOLDEN  # blocks half-written by the dead worker were not used
        assert not last.timings.disaggregated
        total = worker_status(decode["address"]).num_total_blocks
        assert wait_until(lambda: worker_status(decode["address"]).num_free_blocks == total)
    finally:
        c.close()


def test_prefill_stops_putting_before_the_kv_lease_ends():
    # A 1 s lease and a transfer held 500 ms per layer (2.5 s in all): the router gives the
    # prefill call 0.9 s, the prefill worker refuses to start a PUT past that deadline, the router
    # prefills locally, and the reservation's blocks come back without a late PUT into them.
    c = Cluster(num_prefill=1, num_decode=1,
                extra=["--disagg-threshold=3", "--fault-kv-put-delay-ms=500",
                       "--kv-lease-seconds=1"])
    try:
        prefill, decode = c.role("prefill")[0], c.role("decode")[0]
        _, text, last = run(c.stub, greedy_request("Once upon a time", max_tokens=60))
        assert text == GOLDEN
        assert not last.timings.disaggregated
        assert wait_until(lambda: metric(prefill["metrics"],
                                         "sparseserve_kv_transfer_failures_total") >= 1)
        total = worker_status(decode["address"]).num_total_blocks
        assert wait_until(lambda: worker_status(decode["address"]).num_free_blocks == total)
        # The blocks the lease gave back serve the next requests correctly: had a PUT of the
        # abandoned transfer landed after the lease, these outputs would differ.
        for _ in range(3):
            _, again, _ = run(c.stub, greedy_request("Once upon a time", max_tokens=60))
            assert again == GOLDEN
    finally:
        c.close()


def test_bad_input_gets_clear_codes_and_servers_keep_serving():
    c = Cluster(num_prefill=1, num_decode=1)
    try:
        def code_of(request):
            with pytest.raises(grpc.RpcError) as err:
                run(c.stub, request)
            return err.value.code()

        assert code_of(gen_pb2.GenerateRequest(text="")) == grpc.StatusCode.INVALID_ARGUMENT
        assert code_of(greedy_request(ids=[5] * 5000)) == grpc.StatusCode.INVALID_ARGUMENT
        assert code_of(greedy_request(ids=[1, 99999])) == grpc.StatusCode.INVALID_ARGUMENT
        bad = greedy_request("hello")
        bad.sampling.temperature = -1.0
        assert code_of(bad) == grpc.StatusCode.INVALID_ARGUMENT
        bad = greedy_request("hello")
        bad.sampling.top_p = 1.5
        assert code_of(bad) == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as err:
            c.stub.Abort(gen_pb2.AbortRequest(request_id="no-such-request"), timeout=5)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        ports = [c.address, c.metrics] + [w["address"] for w in c.workers] + \
                [w["metrics"] for w in c.workers]
        for address in ports:
            send_garbage(address)
        _, text, _ = run(c.stub, greedy_request("Once upon a time", max_tokens=60))
        assert text == GOLDEN
        info = c.stub.GetModelInfo(gen_pb2.GetModelInfoRequest(), timeout=5)
        assert info.vocab_size == 512 and info.num_decode_workers == 1
    finally:
        c.close()


def test_prometheus_scrapes_every_process():
    prom = "/usr/bin/prometheus"
    if not os.path.exists(prom):
        pytest.skip("prometheus is not installed (scripts/deps.sh installs it)")
    c = Cluster(num_prefill=1, num_decode=1, extra=["--disagg-threshold=3"])
    tmp = subprocess.check_output(["mktemp", "-d"], text=True).strip()
    port = free_port()
    targets = [c.metrics] + [w["metrics"] for w in c.workers]
    with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
        f.write("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: sparseserve\n"
                "    static_configs:\n      - targets: [" +
                ", ".join(f"'{t}'" for t in targets) + "]\n")
    server = subprocess.Popen([prom, f"--config.file={tmp}/prometheus.yml",
                               f"--storage.tsdb.path={tmp}/data",
                               f"--web.listen-address=127.0.0.1:{port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import json
        import urllib.parse
        import urllib.request

        def query(q):
            url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
            with urllib.request.urlopen(url, timeout=5) as r:
                data = json.load(r)["data"]["result"]
            return float(data[0]["value"][1]) if data else None

        sent = 5
        for i in range(sent):
            run(c.stub, greedy_request(prompts(5)[i], max_tokens=8))
        q = 'sum(sparseserve_time_to_first_token_seconds_count{role="router"})'
        assert wait_until(lambda: _safe(query, q) == sent, timeout=30, interval=0.5)
        up_q = 'count(up{job="sparseserve"} == 1)'
        assert wait_until(lambda: _safe(query, up_q) == len(targets), timeout=30, interval=0.5)
    finally:
        server.terminate()
        server.wait(timeout=20)
        c.close()


def _safe(fn, *args):
    try:
        return fn(*args)
    except OSError:
        return None


def test_generate_cli_as_client():
    c = Cluster(num_prefill=0, num_decode=1)
    try:
        out = subprocess.run([BIN, "generate", f"--server={c.address}",
                              "--prompt=Once upon a time", "--max-tokens=60", "--temperature=0"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout == GOLDEN + "\n"
    finally:
        c.close()


def _start(args):
    """Starts one `sparseserve` role; returns (process, READY words)."""
    proc = subprocess.Popen([BIN] + args + ["--log-level=warning"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().split()
    assert line and line[0] == "READY", proc.stderr.read()
    return proc, line


def _stop(procs):
    """SIGTERMs the processes last-started first; each must drain and exit 0. A failure shows
    the process's stderr (its log and any abort message)."""
    for proc in reversed(procs):
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        assert rc == 0, f"{proc.args[1]} exited with {rc}; stderr:\n{proc.stderr.read()[-4000:]}"


def test_router_alone_binary_serves_and_links_no_model_library():
    """Issue 17: `sparseserve-router` (the router without model, kernel or CUDA libraries) in
    front of a `sparseserve decode` worker gives the golden output; it maps no weights, and no
    CUDA library is among its shared libraries."""
    router_bin = os.path.join(os.path.dirname(BIN), "sparseserve-router")
    libs = subprocess.run(["ldd", router_bin], capture_output=True, text=True, check=True).stdout
    assert not any(name in libs for name in ("libcuda", "libcublas", "libcudart", "libnccl")), libs
    model = f"--model={os.environ.get('SPARSESERVE_TEST_MODEL', 'models/stories260K/stories260K.gguf')}"
    procs = []
    try:
        decode, d = _start(["decode", model])
        procs.append(decode)
        proc = subprocess.Popen([router_bin, model, f"--decode-workers={d[2]}",
                                 "--log-level=warning"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        line = proc.stdout.readline().split()
        assert line and line[0] == "READY", proc.stderr.read()
        with open(f"/proc/{proc.pid}/maps") as f:
            assert "stories260K" not in f.read()  # the tokenizer was read, nothing stays mapped
        stub = gen_grpc_stub(line[2])
        assert run(stub, greedy_request("Once upon a time", max_tokens=60))[1] == GOLDEN
    finally:
        _stop(procs)


def test_kv_layout_mismatch_is_refused_and_router_falls_back():
    model = f"--model={os.environ.get('SPARSESERVE_TEST_MODEL', 'models/stories260K/stories260K.gguf')}"
    procs = []
    try:
        decode, d = _start(["decode", model, "--block-tokens=16"])
        procs.append(decode)
        prefill, p = _start(["prefill", model, "--block-tokens=64"])
        procs.append(prefill)
        router, r = _start(["router", model, f"--decode-workers={d[2]}",
                            f"--prefill-workers={p[2]}", "--disagg-threshold=3"])
        procs.append(router)
        stub = gen_grpc_stub(r[2])
        _, text, last = run(stub, greedy_request("Once upon a time", max_tokens=60))
        assert text == GOLDEN
        assert not last.timings.disaggregated  # the prefill worker refused the reservation
        assert metric(p[4], "sparseserve_kv_transfer_failures_total") >= 1
    finally:
        _stop(procs)


def gen_grpc_stub(address):
    from services_conftest import gen_grpc
    return gen_grpc.GenerationStub(grpc.insecure_channel(address))


def _long_context_tiny_llama(tmp_path):
    """tests/data/tiny_llama with an 8192-token context (random weights: it checks scheduling,
    not quality)."""
    import json
    import shutil
    src = os.path.join(os.path.dirname(__file__), "..", "data", "tiny_llama")
    dst = tmp_path / "tiny_llama_8k"
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config["max_position_embeddings"] = 8192
    (dst / "config.json").write_text(json.dumps(config))
    return str(dst)


def test_long_local_prefill_interleaves_with_a_running_stream(tmp_path):
    """A 4K-token prompt admitted beside a running stream is prefilled in chunks inside the
    stream's steps: no step holds only its chunks (engine_steps_total{kind="prefill"} counts only
    the stream's own prompt), and both outputs equal single-process `generate`."""
    model = _long_context_tiny_llama(tmp_path)
    running_prompt = "The router sends long prompts to prefill workers."
    long_prompt = " ".join(["A decode worker streams tokens back while the next batch is being "
                            "scheduled, and every block has a hash."] * 100)
    cluster = Cluster(num_prefill=0, num_decode=1,
                      extra=[f"--model={model}", "--prefill-chunk=256", "--disagg-threshold=100000"])
    try:
        decode = cluster.role("decode")[0]
        stream = {}
        first_token = threading.Event()

        def read_running():
            tokens, text = [], ""
            for msg in cluster.stub.Generate(greedy_request(running_prompt, max_tokens=1500),
                                             timeout=300):
                tokens.extend(msg.token_ids)
                text += msg.text
                first_token.set()
            stream["text"] = text

        reader = threading.Thread(target=read_running)
        reader.start()
        assert first_token.wait(60)
        _, long_text, last = run(cluster.stub, greedy_request(long_prompt, max_tokens=8),
                                 timeout=300)
        prompt_tokens = last.usage.prompt_tokens
        assert prompt_tokens >= 4096, prompt_tokens

        def steps(kind):
            return sum(float(line.rsplit(" ", 1)[1]) for line in scrape_lines(decode["metrics"])
                       if line.startswith("sparseserve_engine_steps_total{") and
                       f'kind="{kind}"' in line)

        # Measured while the stream still runs: the long prompt shared every step with it.
        assert reader.is_alive(), "the running stream ended before the long prompt was done"
        assert steps("prefill") == 1  # the running stream's own (short) prompt
        assert steps("mixed") >= prompt_tokens // 256
        reader.join(300)
        assert not reader.is_alive()
    finally:
        cluster.close()

    def generate(prompt, max_tokens):
        out = subprocess.run([BIN, "generate", f"--model={model}", f"--prompt={prompt}",
                              f"--max-tokens={max_tokens}", "--ignore-eos", "--temperature=0",
                              "--log-level=warning"], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        return out.stdout[:-1]

    assert long_text == generate(long_prompt, 8)
    assert stream["text"] == generate(running_prompt, 1500)


def scrape_lines(address):
    import urllib.request
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as r:
        return r.read().decode().splitlines()


def _code_and_details(stub, request):
    with pytest.raises(grpc.RpcError) as err:
        run(stub, request)
    return err.value.code(), err.value.details()


def test_request_options_unknown_or_unavailable_are_refused_by_name():
    c = Cluster(num_prefill=1, num_decode=1, extra=["--disagg-threshold=3"])
    try:
        for field, value in (("prefill_attention", "flash"), ("decode_attention", "sparse"),
                             ("speculation", "medusa"), ("decode_attention", "Dense")):
            req = greedy_request("Once upon a time", max_tokens=8)
            getattr(req, field).method = value
            code, details = _code_and_details(c.stub, req)
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (field, value)
            assert f"{field}.method" in details and f"'{value}'" in details
        req = greedy_request("Once upon a time", max_tokens=8)
        req.decode_attention.method = "minference"  # a prefill method
        assert _code_and_details(c.stub, req)[0] == grpc.StatusCode.INVALID_ARGUMENT
        req = greedy_request("Once upon a time", max_tokens=8)
        req.decode_attention.method = "sliding-window"
        req.decode_attention.window = 0
        code, details = _code_and_details(c.stub, req)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "window" in details
        # Kangaroo needs the server's early-exit adapter (this one has none).
        req = greedy_request("Once upon a time", max_tokens=8)
        req.speculation.method = "kangaroo"
        code, details = _code_and_details(c.stub, req)
        assert code == grpc.StatusCode.FAILED_PRECONDITION, details
        assert "--kangaroo-adapter" in details
        # Explicit defaults and a window covering the whole context (= dense) are served.
        req = greedy_request("Once upon a time", max_tokens=60)
        req.prefill_attention.method = "dense"
        req.decode_attention.method = "sliding-window"
        req.decode_attention.window = 512
        req.speculation.method = "none"
        _, text, last = run(c.stub, req)
        assert text == GOLDEN and last.usage.prefill_attention_density == 1.0
        # MInference (issue 12) at covering budgets (the default config at this length) is the
        # golden output; a request may not make the server read a config file of its choice.
        req = greedy_request("Once upon a time", max_tokens=60)
        req.prefill_attention.method = "minference"
        req.prefill_attention.sparse_prefill_threshold = 0
        _, text, last = run(c.stub, req)
        assert text == GOLDEN and last.usage.prefill_attention_density == 1.0
        req.prefill_attention.minference_config = "/etc/passwd"
        code, details = _code_and_details(c.stub, req)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "config" in details
        # TokenSelect (issue 13): the default budget covers this context (= dense, the golden
        # text); a small one selects, and its density and selection-cache use come back in the
        # usage and in the decode worker's metrics; k above the worker's --tokenselect-k is
        # refused.
        req = greedy_request("Once upon a time", max_tokens=60)
        req.decode_attention.method = "tokenselect"
        _, text, last = run(c.stub, req)
        assert text == GOLDEN and last.usage.decode_attention_density == 1.0
        assert last.usage.selection_cache_queries == 0
        req = greedy_request("Once upon a time", max_tokens=200)
        req.decode_attention.method = "tokenselect"
        req.decode_attention.tokenselect_k = 32
        req.decode_attention.tokenselect_initial = 8
        req.decode_attention.tokenselect_local = 16
        _, text, last = run(c.stub, req)
        assert text and 0 < last.usage.decode_attention_density < 0.8, last.usage
        assert 0 <= last.usage.selection_cache_hits < last.usage.selection_cache_queries
        decode = c.role("decode")[0]["metrics"]
        assert metric(decode, "sparseserve_tokenselect_selection_cache_queries_total") == \
            last.usage.selection_cache_queries
        assert metric(decode, "sparseserve_tokenselect_selection_cache_hits_total") == \
            last.usage.selection_cache_hits
        gauge = [line for line in scrape(decode).splitlines()
                 if line.startswith('sparseserve_sparse_attention_density{phase="decode"')]
        assert abs(float(gauge[0].rsplit(" ", 1)[1]) - last.usage.decode_attention_density) < 1e-9
        req.decode_attention.tokenselect_k = 100000
        code, details = _code_and_details(c.stub, req)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "--tokenselect-k" in details
        # Selections per KV head need a worker sized for them (this one is not).
        req.decode_attention.tokenselect_k = 32
        req.decode_attention.tokenselect_per_kv_head = True
        code, details = _code_and_details(c.stub, req)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, details
        assert "--tokenselect-per-kv-head" in details
    finally:
        c.close()


def test_temperature_zero_sent_as_a_present_field_is_greedy():
    from google.protobuf import json_format
    c = Cluster(num_prefill=0, num_decode=1)
    try:
        # As grpcurl sends it through reflection: JSON with "temperature": 0.
        req = json_format.Parse('{"text": "Once upon a time", "max_tokens": 60, '
                                '"ignore_eos": true, "sampling": {"temperature": 0}}',
                                gen_pb2.GenerateRequest())
        assert req.sampling.HasField("temperature")
        assert run(c.stub, req)[1] == GOLDEN
        # Unset is 1.0 (sampled): the same seed as `generate --temperature 1` gives its text.
        req.sampling.ClearField("temperature")
        req.sampling.seed = 3
        assert run(c.stub, req)[1] == reference_tokens("Once upon a time", 60,
                                                       ["--temperature=1", "--seed=3"])
    finally:
        c.close()


def test_request_options_reach_the_workers():
    """The router checks a request with its own defaults and forwards it as given; each worker
    fills what is unset from its own flags. Workers started with --sliding-window=0 (invalid
    only for a request choosing sliding-window without a window) show which hop decided."""
    model = f"--model={os.environ.get('SPARSESERVE_TEST_MODEL', 'models/stories260K/stories260K.gguf')}"
    procs = []
    try:
        # A small MInference config (stories260K: 5 layers, 8 heads), on both workers.
        config = os.path.join(tempfile.mkdtemp(), "minference.json")
        kinds = [["stream_llm", 4, 32, 0], ["vertical_and_slash", 30, 100, 0],
                 ["block_sparse", 2, 0, 0]]
        with open(config, "w") as f:
            json.dump([{str(h): kinds[h % 3] for h in range(8)} for _ in range(5)], f)
        decode, d = _start(["decode", model, "--sliding-window=0", f"--minference-config={config}"])
        procs.append(decode)
        prefill, p = _start(["prefill", model, "--sliding-window=0", "--prefill-chunk=128",
                             f"--minference-config={config}"])
        procs.append(prefill)
        router, r = _start(["router", model, f"--decode-workers={d[2]}",
                            f"--prefill-workers={p[2]}", "--disagg-threshold=3"])
        procs.append(router)
        stub = gen_grpc_stub(r[2])
        # Decode: the router (window 4096) lets it through; the decode worker refuses it.
        req = greedy_request("Once upon a time", max_tokens=60)
        req.decode_attention.method = "sliding-window"
        code, details = _code_and_details(stub, req)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "window" in details
        assert "decode worker" in details
        req.decode_attention.window = 512  # the whole context: same tokens as dense
        _, text, last = run(stub, req)
        assert text == GOLDEN and last.timings.disaggregated
        # Prefill: the prefill worker refuses the unset window, the router prefills on the
        # decode worker instead, which refuses it too (both use --sliding-window=0).
        req = greedy_request("Once upon a time", max_tokens=60)
        req.prefill_attention.method = "sliding-window"
        assert _code_and_details(stub, req)[0] == grpc.StatusCode.INVALID_ARGUMENT
        req.prefill_attention.window = 512
        _, text, last = run(stub, req)
        assert text == GOLDEN and last.timings.disaggregated
        # The workers check what reaches them directly, too.
        dstub = worker_grpc.DecodeWorkerStub(grpc.insecure_channel(d[2]))
        dreq = worker_pb2.DecodeRequest(request_id="direct", prompt_ids=[1, 403, 407, 261, 378],
                                        max_tokens=4)
        dreq.decode_attention.method = "tokenselect"
        dreq.decode_attention.tokenselect_k = 0
        with pytest.raises(grpc.RpcError) as err:
            list(dstub.Decode(dreq, timeout=30))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        pstub = worker_grpc.PrefillWorkerStub(grpc.insecure_channel(p[2]))
        preq = worker_pb2.PrefillRequest(request_id="direct", prompt_ids=[1, 403, 407, 261, 378])
        preq.prefill_attention.method = "minference"
        preq.prefill_attention.minference_config = "/elsewhere.json"
        with pytest.raises(grpc.RpcError) as err:
            pstub.Prefill(preq, timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "/elsewhere.json" in err.value.details()
        # A long prompt under the workers' small MInference config, prefilled on the prefill
        # worker: the measured density (< 1) comes back in the usage.
        req = greedy_request("Once upon a time there was a little girl named Lily. " * 20,
                             max_tokens=8)
        req.prefill_attention.method = "minference"
        req.prefill_attention.sparse_prefill_threshold = 0
        _, text, last = run(stub, req)
        assert last.timings.disaggregated and text
        assert 0 < last.usage.prefill_attention_density < 0.9, last.usage
    finally:
        _stop(procs)


def test_request_option_flags():
    def sparseserve(*args):
        return subprocess.run([BIN] + list(args) + [f"--model={MODEL}", "--log-level=warning"],
                              capture_output=True, text=True, timeout=120)

    # Bad values stop a command before it loads anything, naming the flag or the method.
    for role, code in (("decode", 2), ("prefill", 2), ("up", 2)):
        out = sparseserve(role, "--attention=sparse")
        assert out.returncode == code and "--attention" in out.stderr, out.stderr
    out = sparseserve("up", "--decode-attention=tokenselect", "--tokenselect-local=-1")
    assert out.returncode == 2 and "tokenselect" in out.stderr, out.stderr
    out = sparseserve("router", "--decode-workers=127.0.0.1:1", "--attention=sliding-window",
                      "--sliding-window=0")
    assert out.returncode == 2 and "window" in out.stderr, out.stderr
    out = sparseserve("generate", "--prompt=Once upon a time", "--spec=medusa")
    assert out.returncode == 1 and "--spec" in out.stderr, out.stderr
    # In process: a window covering the whole context gives the dense tokens.
    out = sparseserve("generate", "--prompt=Once upon a time", "--max-tokens=60", "--ignore-eos",
                      "--temperature=0", "--attention=sliding-window", "--sliding-window=512")
    assert out.returncode == 0 and out.stdout == GOLDEN + "\n", out.stderr
    # `generate --server` sends the flags changed from their defaults; up forwards them to its
    # workers, whose defaults fill the rest.
    c = Cluster(num_prefill=0, num_decode=1, extra=["--attention=sliding-window",
                                                    "--sliding-window=512"])
    try:
        out = sparseserve("generate", f"--server={c.address}", "--prompt=Once upon a time",
                          "--max-tokens=60", "--ignore-eos", "--temperature=0")
        assert out.returncode == 0 and out.stdout == GOLDEN + "\n", out.stderr
        out = sparseserve("generate", f"--server={c.address}", "--prompt=Once upon a time",
                          "--max-tokens=60", "--ignore-eos", "--temperature=0",
                          "--decode-attention=tokenselect")
        assert out.returncode == 0 and out.stdout == GOLDEN + "\n", out.stderr
        out = sparseserve("generate", f"--server={c.address}", "--prompt=Once upon a time",
                          "--decode-attention=tokenselect", "--tokenselect-k=4096")
        assert out.returncode == 1 and "--tokenselect-k" in out.stderr, out.stderr
        out = sparseserve("generate", f"--server={c.address}", "--prompt=Once upon a time",
                          "--sliding-window=0")
        assert out.returncode == 1 and "window" in out.stderr, out.stderr
    finally:
        c.close()


@pytest.mark.parametrize("threshold,disaggregated", [(3, True), (100000, False)])
def test_sliding_window_request_equals_generate_and_differs_from_dense(threshold, disaggregated):
    """A request choosing a sliding window smaller than its context (prefill and decode) gets the
    tokens of single-process `generate` with the same flags, and other tokens than dense."""
    window_flags = ("--temperature=0", "--attention=sliding-window", "--sliding-window=16",
                    "--sink-tokens=4")
    want = reference_tokens("Once upon a time", 60, sampling=window_flags)
    assert want != GOLDEN  # the window changes the output
    cluster = Cluster(extra=[f"--disagg-threshold={threshold}"])
    try:
        req = greedy_request("Once upon a time", max_tokens=60)
        for phase in (req.prefill_attention, req.decode_attention):
            phase.method = "sliding-window"
            phase.window = 16
            phase.sink_tokens = 4
        _, text, last = run(cluster.stub, req)
        assert text == want
        assert last.timings.disaggregated == disaggregated
        _, dense_text, _ = run(cluster.stub, greedy_request("Once upon a time", max_tokens=60))
        assert dense_text == GOLDEN
    finally:
        cluster.close()


@pytest.mark.parametrize("threshold,disaggregated", [(3, True), (100000, False)])
def test_speculation_through_up_equals_plain_decoding(threshold, disaggregated):
    """Speculative decoding (issues 14, 15) on the decode worker: the server default (--spec) and
    a per-request choice, greedy and seeded, each give the tokens of plain single-process
    `generate`; the drafts show in the spec_decode metrics. sparse-self and tokenswift draft with
    a budget of 36 keys, far below the outputs' contexts; tokenswift and kangaroo use stories260K's
    trained adapters (tests/data/spec_adapters), loaded by both workers."""
    greedy_want = reference_tokens("Once upon a time", 200)
    seeded = ("--temperature=0.9", "--top-k=40", "--repetition-penalty=1.1", "--seed=11")
    seeded_want = reference_tokens("Once upon a time", 120, sampling=seeded)
    adapters = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                            "spec_adapters")
    c = Cluster(extra=[f"--disagg-threshold={threshold}", "--spec=prompt-lookup",
                       "--spec-controller=false",
                       f"--tokenswift-heads={adapters}/s260k_tokenswift.safetensors",
                       f"--kangaroo-adapter={adapters}/s260k_kangaroo.safetensors"])
    try:
        def choose(req, method):
            if method:
                req.speculation.method = method
            if method == "lookahead":
                req.speculation.lookahead_window = 4
                req.speculation.lookahead_ngram = 4
                req.speculation.lookahead_guesses = 4
            if method in ("sparse-self", "tokenswift"):
                req.speculation.sparse_self_sinks = 4
                req.speculation.sparse_self_window = 16
                req.speculation.sparse_self_k = 16
            if method == "tokenswift":
                req.speculation.tokenswift_ngram_lag = 16

        # Both workers load the Kangaroo adapter: its KV layer moves with the prompt's KV.
        for method in ("", "prompt-lookup", "lookahead", "sparse-self", "tokenswift", "kangaroo",
                       "none"):
            req = greedy_request("Once upon a time", max_tokens=200)
            choose(req, method)
            _, text, last = run(c.stub, req)
            assert text == greedy_want, method
            assert last.timings.disaggregated == disaggregated
            req = greedy_request("Once upon a time", max_tokens=120)
            req.sampling.temperature, req.sampling.top_k, req.sampling.seed = 0.9, 40, 11
            req.sampling.repetition_penalty = 1.1
            choose(req, method)
            req.speculation.controller = True  # under the controller too
            assert run(c.stub, req)[1] == seeded_want, method
        page = scrape(c.role("decode")[0]["metrics"])

        def spec(family, method):
            return sum(float(line.rsplit(" ", 1)[1]) for line in page.splitlines()
                       if line.startswith(f"sparseserve_spec_decode_{family}{{") and
                       f'method="{method}"' in line)

        for method in ("prompt-lookup", "lookahead", "sparse-self", "tokenswift", "kangaroo"):
            assert spec("draft_tokens_total", method) > 0, method
            assert spec("accepted_tokens_per_position_total", method) == \
                spec("accepted_tokens_total", method)
        for method in ("prompt-lookup", "sparse-self", "tokenswift", "kangaroo"):
            assert spec("accepted_tokens_total", method) > 0, method
            assert spec("mean_accepted_length", method) > 0, method
    finally:
        c.close()


@pytest.mark.parametrize("decode_tp,prefill_tp", [(2, 2), (1, 2), (2, 1)])
def test_tensor_parallel_workers_equal_single_process(decode_tp, prefill_tp):
    """Issue 19: workers whose models are split over CPU ranks (threads joined by the in-process
    collective), disaggregated across degrees — prefill TP 2 into decode TP 1 and the reverse,
    and both TP 2 — give the golden greedy text and single-process `generate`'s seeded tokens.
    KV moves in the whole-heads layout through host staging: the prefill worker gathers its
    ranks' head slices, the decode worker scatters them into its ranks'. The decode worker's
    sampled all-reduces show in sparseserve_tp_allreduce_seconds."""
    c = Cluster(extra=["--disagg-threshold=3", f"--tensor-parallel={decode_tp}",
                       f"--prefill-tensor-parallel={prefill_tp}"])
    try:
        _, text, last = run(c.stub, greedy_request("Once upon a time", max_tokens=60))
        assert text == GOLDEN
        assert last.timings.disaggregated
        ref = reference_tokens("Once upon a time", 50,
                               ["--temperature=0.9", "--top-p=0.95", "--seed=7"])
        req = greedy_request("Once upon a time", max_tokens=50)
        req.sampling.temperature, req.sampling.top_p, req.sampling.seed = 0.9, 0.95, 7
        assert run(c.stub, req)[1] == ref
        # A longer prompt: several blocks of 64 tokens cross, every layer's heads in place.
        long_prompt = " ".join(["Once upon a time there was a little girl named Lily."] * 12)
        want = reference_tokens(long_prompt, 40)
        _, text, last = run(c.stub, greedy_request(long_prompt, max_tokens=40))
        assert text == want and last.timings.disaggregated
        assert metric(c.role("prefill")[0]["metrics"], "sparseserve_kv_transfer_bytes_total") > 0
        allreduces = metric(c.role("decode")[0]["metrics"], "sparseserve_tp_allreduce_seconds_count")
        assert (allreduces > 0) == (decode_tp > 1)
    finally:
        c.close()
