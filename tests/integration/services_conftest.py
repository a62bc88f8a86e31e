"""Helpers for the multi-process service tests: start `sparseserve up`, talk to it with a grpcio
client generated from proto/ at test time (only the .proto files are used), scrape metrics."""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import grpc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("SPARSESERVE_BIN", os.path.join(ROOT, "build", "bin", "sparseserve"))
MODEL = os.environ.get("SPARSESERVE_TEST_MODEL",
                       os.path.join(ROOT, "models", "stories260K", "stories260K.gguf"))


def _compile_protos():
    """grpc_tools.protoc on proto/sparseserve/v1/*.proto into a temp dir; returns the modules."""
    from grpc_tools import protoc
    out = tempfile.mkdtemp(prefix="ss_proto_")
    proto_dir = os.path.join(ROOT, "proto")
    protos = ["sparseserve/v1/generation.proto", "sparseserve/v1/worker.proto"]
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    rc = protoc.main(["protoc", f"-I{proto_dir}", f"-I{include}", f"--python_out={out}",
                      f"--grpc_python_out={out}"] + protos)
    assert rc == 0, "protoc failed"
    sys.path.insert(0, out)
    from sparseserve.v1 import generation_pb2, generation_pb2_grpc, worker_pb2, worker_pb2_grpc
    return generation_pb2, generation_pb2_grpc, worker_pb2, worker_pb2_grpc


gen_pb2, gen_grpc, worker_pb2, worker_grpc = _compile_protos()


class Cluster:
    """`sparseserve up` with its workers; stopped (and checked for a clean exit) by close()."""

    def __init__(self, num_prefill=1, num_decode=1, extra=(), model=MODEL):
        args = [BIN, "up", f"--model={model}", f"--num-prefill={num_prefill}",
                f"--num-decode={num_decode}", "--status-interval-seconds=0.2",
                "--drain-seconds=5", "--log-level=warning"] + list(extra)
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.workers = []  # dicts: role, address, metrics, pid
        deadline = time.time() + 120
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("sparseserve up exited: " + self.proc.stderr.read())
            words = line.split()
            if words[0] == "WORKER":
                self.workers.append({"role": words[1], "address": words[2],
                                     "metrics": words[4], "pid": int(words[6])})
            elif words[0] == "READY":
                self.address, self.metrics = words[2], words[4]
                # "http HOST:PORT" when the OpenAI HTTP API is on (the default).
                self.http = words[6] if len(words) > 6 and words[5] == "http" else None
                break
        else:
            raise RuntimeError("sparseserve up not ready in time")
        self.channel = grpc.insecure_channel(self.address)
        self.stub = gen_grpc.GenerationStub(self.channel)

    def role(self, role):
        return [w for w in self.workers if w["role"] == role]

    def close(self):
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise
            assert rc == 0, f"sparseserve up exited with {rc}"
        for w in self.workers:  # every worker process is gone
            assert not _alive(w["pid"]), f"worker {w['pid']} left running"


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead for our purpose
        return f.read().split()[2] != "Z"


def greedy_request(prompt=None, ids=None, max_tokens=40, **kw):
    req = gen_pb2.GenerateRequest(max_tokens=max_tokens, ignore_eos=True, **kw)
    if ids is not None:
        req.token_ids.ids.extend(ids)
    else:
        req.text = prompt
    req.sampling.temperature = 0.0  # `optional`: set to 0 is present, so greedy
    return req


def run(stub, request, timeout=60):
    """Returns (token ids, text, last message)."""
    tokens, text, last = [], "", None
    for msg in stub.Generate(request, timeout=timeout):
        tokens.extend(msg.token_ids)
        text += msg.text
        last = msg
    return tokens, text, last


def reference_tokens(prompt, max_tokens, sampling=("--temperature=0",)):
    """Text of a single-process run of `sparseserve generate` (greedy unless `sampling`)."""
    out = subprocess.run([BIN, "generate", f"--model={MODEL}", f"--prompt={prompt}",
                          f"--max-tokens={max_tokens}", "--ignore-eos", "--log-level=warning"] +
                         list(sampling), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout[:-1]  # the trailing newline the CLI adds


def scrape(address):
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as r:
        return r.read().decode()


def metric(address, name, role=None):
    """Sum of the samples of `name` on one /metrics page."""
    total = 0.0
    for line in scrape(address).splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if role is None or f'role="{role}"' in line:
                total += float(line.rsplit(" ", 1)[1])
    return total


def wait_until(predicate, timeout=20, interval=0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def worker_status(address):
    stub = worker_grpc.DecodeWorkerStub(grpc.insecure_channel(address))
    return stub.Status(worker_pb2.WorkerStatusRequest(), timeout=5)


def send_garbage(address):
    """Random bytes to a port; returns once the peer closed or ignored them."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(os.urandom(4096))
        s.settimeout(5)
        try:
            while s.recv(4096):
                pass
        except (socket.timeout, ConnectionResetError):
            pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prompts(n):
    subjects = ["cat", "dog", "girl", "boy", "bird", "fish", "tree", "ball"]
    verbs = ["saw", "liked", "found", "wanted", "played with", "ran to", "looked at", "had"]
    return [f"Once upon a time a {subjects[i % 8]} {verbs[(i // 8) % 8]} a "
            f"{subjects[(i * 3 + 1) % 8]}" for i in range(n)]

