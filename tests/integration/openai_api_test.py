"""The OpenAI-compatible HTTP API of `sparseserve up` (issue 18), driven by the official `openai`
Python client and by raw HTTP: completions and chat equal `sparseserve generate` on stories260K,
streaming and not; logprobs; every error path (400, 401, 404, 429, 503) gives OpenAI's status and
body and the server keeps serving; API keys. Every wait is bounded."""
import http.client
import json
import os
import threading
import signal
import time
import urllib.error
import urllib.request

import openai
import pytest

from services_conftest import ROOT, Cluster, reference_tokens, scrape, wait_until

TEMPLATE = os.path.join(ROOT, "tests", "data", "chat_templates", "stories_chat.jinja")
PROMPT = "Once upon a time"


def client(cluster, api_key="none", **kw):
    return openai.OpenAI(base_url=f"http://{cluster.http}/v1", api_key=api_key, max_retries=0,
                         timeout=60, **kw)


def post(cluster, path, body, headers=None):
    """(status, parsed JSON body) of a raw POST; `body` bytes or a JSON-able value."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(f"http://{cluster.http}{path}", data=data, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def get(cluster, path, headers=None):
    req = urllib.request.Request(f"http://{cluster.http}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def cluster():
    # Prompts of 3+ tokens prefill on the prefill worker: the first token (and its logprobs)
    # comes from there, the rest from the decode worker.
    c = Cluster(num_prefill=1, num_decode=1,
                extra=["--disagg-threshold=3", f"--chat-template={TEMPLATE}"])
    yield c
    c.close()


def still_serving(cluster):
    out = client(cluster).completions.create(model="stories260K", prompt=PROMPT, max_tokens=4,
                                             temperature=0)
    assert out.choices[0].text


@pytest.mark.parametrize("stream", [False, True])
def test_completions_equal_generate(cluster, stream):
    c = client(cluster)
    for sampling, kw in [(("--temperature=0",), {"temperature": 0}),
                         (("--temperature=0.8", "--top-p=0.9", "--seed=42"),
                          {"temperature": 0.8, "top_p": 0.9, "seed": 42})]:
        want = reference_tokens(PROMPT, 60, sampling)
        out = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=60, stream=stream,
                                   extra_body={"ignore_eos": True}, **kw)
        if stream:
            chunks = list(out)
            text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
            assert chunks[-1].choices[0].finish_reason == "length"
            assert len(chunks) > 10  # token by token, not one blob
        else:
            text = out.choices[0].text
            assert out.choices[0].finish_reason == "length"
            assert out.usage.completion_tokens == 60
            assert out.usage.prompt_tokens == 5  # BOS + 4
            assert out.usage.total_tokens == 65
        assert text == want, kw


def test_token_id_prompt_and_stop(cluster):
    c = client(cluster)
    by_text = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=20, temperature=0)
    ids = [1, 403, 407, 261, 378]  # BOS + "Once upon a time" in stories260K's vocabulary
    by_ids = c.completions.create(model="stories260K", prompt=ids, max_tokens=20, temperature=0)
    assert by_ids.choices[0].text == by_text.choices[0].text
    assert by_ids.usage.prompt_tokens == 5
    text = by_text.choices[0].text
    stop = text.split()[3]
    stopped = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=20,
                                   temperature=0, stop=[stop])
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].text == text[:text.index(stop)]


def test_stream_usage_chunk(cluster):
    chunks = list(client(cluster).completions.create(
        model="stories260K", prompt=PROMPT, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 8
    assert all(ch.usage is None for ch in chunks[:-1])


def test_completion_logprobs(cluster):
    out = client(cluster).completions.create(model="stories260K", prompt=PROMPT, max_tokens=12,
                                             temperature=0, logprobs=3)
    lp = out.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 12
    assert "".join(lp.tokens) == out.choices[0].text
    for token, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert len(top) == 3
        assert value <= 0
        best = max(top.values())
        assert abs(best - value) < 1e-6 and top[token] == value  # greedy: the top token
    # The first token came from the prefill worker, the rest from the decode worker: both
    # report the model's own numbers, so a streamed request reports the same ones.
    streamed = [ch.choices[0].logprobs for ch in client(cluster).completions.create(
        model="stories260K", prompt=PROMPT, max_tokens=12, temperature=0, logprobs=3, stream=True)
        if ch.choices and ch.choices[0].logprobs is not None]
    values = [v for lp_chunk in streamed for v in lp_chunk.token_logprobs]
    assert values == pytest.approx(lp.token_logprobs, abs=1e-5)


def test_chat_equals_generate_on_the_rendered_prompt(cluster):
    messages = [{"role": "system", "content": "A story."},
                {"role": "user", "content": "Once upon a time"}]
    # stories_chat.jinja joins the contents with spaces after BOS: the rendered prompt is this.
    want = reference_tokens("A story. Once upon a time", 40)
    c = client(cluster)
    out = c.chat.completions.create(model="stories260K", messages=messages, max_tokens=40,
                                    temperature=0, extra_body={"ignore_eos": True})
    assert out.choices[0].message.role == "assistant"
    assert out.choices[0].message.content == want
    assert out.object == "chat.completion"
    chunks = list(c.chat.completions.create(model="stories260K", messages=messages, max_tokens=40,
                                            temperature=0, stream=True,
                                            extra_body={"ignore_eos": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == want
    assert chunks[-1].choices[0].finish_reason == "length"
    lp = c.chat.completions.create(model="stories260K", messages=messages, max_tokens=5,
                                   temperature=0, logprobs=True, top_logprobs=2)
    content = lp.choices[0].logprobs.content
    assert len(content) == 5
    assert all(len(t.top_logprobs) == 2 and t.top_logprobs[0].token == t.token for t in content)


def test_models_and_health(cluster):
    models = client(cluster).models.list()
    assert [m.id for m in models.data] == ["stories260K"]
    assert get(cluster, "/v1/models/stories260K")[0] == 200
    status, body = get(cluster, "/v1/models/gpt-4")
    assert status == 404 and body["error"]["type"] == "not_found_error"
    status, body = get(cluster, "/health")
    assert status == 200 and body["status"] == "ok" and body["decode_workers"] == 1


def test_errors_have_openai_status_and_body_and_the_server_keeps_serving(cluster):
    c = client(cluster)
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=-1)
    assert "max_tokens" in str(e.value)
    with pytest.raises(openai.NotFoundError):
        c.completions.create(model="gpt-4", prompt=PROMPT, max_tokens=4)
    cases = [
        (b"{not json", 400, "body"),
        (b'"a string"', 400, "body"),
        ({"prompt": PROMPT, "max_tokens": "many"}, 400, "max_tokens"),
        ({"prompt": PROMPT, "temperature": "hot"}, 400, "temperature"),
        ({"prompt": PROMPT, "stream": 1}, 400, "stream"),
        ({"prompt": PROMPT, "n": 3}, 400, "n"),
        ({"prompt": [1, 99999]}, 400, "prompt"),
        ({"prompt": "word " * 3000}, 400, "prompt"),  # beyond the 2048-token context
        ({"prompt": PROMPT, "prefill_attention": {"method": "no-such-method"}}, 400, "method"),
        ({"prompt": PROMPT, "speculation": {"max_draft": "x"}}, 400, "speculation"),
    ]
    for body, status, word in cases:
        got_status, got = post(cluster, "/v1/completions", body)
        assert got_status == status, (body, got)
        assert word in got["error"]["message"], (body, got)
        assert got["error"]["type"] == "invalid_request_error"
    deep = b'{"prompt": ' + b"[" * 100000 + b"1" + b"]" * 100000 + b"}"
    status, body = post(cluster, "/v1/completions", deep)  # refused, not walked on the stack
    assert status == 400 and "prompt" in body["error"]["message"], body
    status, body = post(cluster, "/v1/nope", {})
    assert status == 404 and "no route" in body["error"]["message"]
    status, body = post(cluster, "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "a"},
                                      {"role": "user", "content": "b"}]})
    assert status == 400 and "alternate" in body["error"]["message"]  # the template's raise
    still_serving(cluster)


def test_client_leaving_mid_stream_cancels_its_request(cluster):
    def aborted():
        return sum(float(line.rsplit(" ", 1)[1]) for line in scrape(cluster.metrics).splitlines()
                   if line.startswith("sparseserve_requests_total{")
                   and 'role="router"' in line and 'finish_reason="aborted"' in line)
    before = aborted()
    stream = client(cluster).completions.create(model="stories260K", prompt=PROMPT,
                                                max_tokens=1900, temperature=0, stream=True,
                                                extra_body={"ignore_eos": True})
    next(iter(stream))
    stream.close()
    deadline = time.time() + 20
    while time.time() < deadline and aborted() == before:
        time.sleep(0.1)
    assert aborted() == before + 1
    still_serving(cluster)


def test_chat_without_a_template_is_400():
    c = Cluster(num_prefill=0, num_decode=1)
    try:
        status, body = post(c, "/v1/chat/completions",
                            {"messages": [{"role": "user", "content": "hi"}]})
        assert status == 400 and "chat template" in body["error"]["message"]
        still_serving(c)
    finally:
        c.close()


def test_full_queue_is_429():
    c = Cluster(num_prefill=0, num_decode=1, extra=["--max-waiting=0"])
    try:
        with pytest.raises(openai.RateLimitError):
            client(c).completions.create(model="stories260K", prompt=PROMPT, max_tokens=4)
    finally:
        c.close()


def test_api_keys(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# one key per line\nsecret-one\n\nsecret-two\n")
    c = Cluster(num_prefill=0, num_decode=1, extra=[f"--api-key-file={keys}"])
    try:
        with pytest.raises(openai.AuthenticationError):
            client(c).completions.create(model="stories260K", prompt=PROMPT, max_tokens=4)
        with pytest.raises(openai.AuthenticationError):
            client(c, api_key="secret-on").completions.create(model="stories260K", prompt=PROMPT,
                                                              max_tokens=4)
        for key in ["secret-one", "secret-two"]:
            out = client(c, api_key=key).completions.create(model="stories260K", prompt=PROMPT,
                                                            max_tokens=4, temperature=0)
            assert out.choices[0].text
        assert get(c, "/health")[0] == 200  # probes need no key
        assert get(c, "/v1/models")[0] == 401
        # A refused POST leaves nothing of its body on a kept-alive connection.
        host, port = c.http.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        body = json.dumps({"prompt": PROMPT, "max_tokens": 4, "temperature": 0})
        for key, status in [("wrong", 401), ("secret-one", 200), ("wrong", 401), ("secret-two", 200)]:
            conn.request("POST", "/v1/completions", body=body,
                         headers={"Authorization": f"Bearer {key}",
                                  "Content-Type": "application/json"})
            r = conn.getresponse()
            assert r.status == status, (key, r.status, r.read())
            json.loads(r.read())
        conn.close()
    finally:
        c.close()


def test_no_healthy_worker_is_503():
    c = Cluster(num_prefill=0, num_decode=1)
    try:
        os.kill(c.role("decode")[0]["pid"], signal.SIGKILL)
        assert wait_until(lambda: get(c, "/health")[0] == 503, timeout=20)
        status, body = post(c, "/v1/completions", {"prompt": PROMPT, "max_tokens": 4})
        assert status == 503 and body["error"]["type"] == "service_unavailable_error", body
    finally:
        c.close()


def test_http_threads_bound_generation_and_keep_health_answering():
    # --http-threads 2: one generation request at a time (half the threads), /health still answers.
    c = Cluster(num_prefill=0, num_decode=1, extra=["--http-threads=2"])
    try:
        started = threading.Event()

        def long_stream():
            stream = client(c).completions.create(model="stories260K", prompt=PROMPT,
                                                  max_tokens=1900, temperature=0, stream=True,
                                                  extra_body={"ignore_eos": True})
            for _ in stream:
                started.set()

        t = threading.Thread(target=long_stream)
        t.start()
        assert started.wait(20)
        status, body = post(c, "/v1/completions", {"prompt": PROMPT, "max_tokens": 4})
        assert status == 429 and "--http-threads" in body["error"]["message"], body
        t.join(120)
        still_serving(c)
    finally:
        c.close()


def test_synthetic_model_serves_through_up():
    """`--model synthetic:tiny`: the preset's shape with random weights (speed only) and the
    generated tokenizer, disaggregated; prompt tokens counted as Hugging Face tokenizers counts
    them with the file `sparseserve synthetic-tokenizer --preset tiny` writes (17, its vocabulary
    of 1000 holding words of up to two letters)."""
    c = Cluster(num_prefill=1, num_decode=1, model="synthetic:tiny",
                extra=["--disagg-threshold=4"])
    try:
        out = client(c).completions.create(model="synthetic:tiny",
                                           prompt="hello world, this is a test", max_tokens=8,
                                           temperature=0, extra_body={"ignore_eos": True})
        assert out.usage.prompt_tokens == 17 and out.usage.completion_tokens == 8
    finally:
        c.close()
