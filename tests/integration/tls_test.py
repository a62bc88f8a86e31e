"""TLS on the public gRPC and HTTP ports and mutual TLS between router and workers (issue 18),
with certificates made at test time by the openssl command: handshakes succeed with the right CA
and fail with a wrong one; a plain client against a TLS port fails cleanly and the server keeps
serving. The cluster's certificates come from scripts/make_dev_certs.sh. Every wait is bounded."""
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import grpc
import openai
import pytest

from services_conftest import (BIN, MODEL, ROOT, Cluster, gen_grpc, greedy_request, run,
                               worker_grpc, worker_pb2)

GOLDEN = open(os.path.join(os.path.dirname(__file__), "..", "data",
                           "golden_once_upon_a_time.txt")).read()[:-1]


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
            f"{name}.pem", "-days", "1", "-subj", f"/CN={name}", cwd=d)
    return os.path.join(d, f"{name}.pem")


def make_cert(d, ca, name):
    """A certificate for 127.0.0.1 / localhost signed by CA `ca`; returns (cert, key) paths."""
    with open(os.path.join(d, f"{name}.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
            f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "1", "-extfile", f"{name}.ext",
            cwd=d)
    return os.path.join(d, f"{name}.pem"), os.path.join(d, f"{name}.key")


def read(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """The cluster's CA and certificate from scripts/make_dev_certs.sh; another CA and a
    certificate it signed (a stranger) made here."""
    d = str(tmp_path_factory.mktemp("pki"))
    subprocess.run(["bash", os.path.join(ROOT, "scripts", "make_dev_certs.sh"), d], check=True,
                   capture_output=True, timeout=120)
    other_ca = make_ca(d, "other-ca")
    stranger_cert, stranger_key = make_cert(d, "other-ca", "stranger")
    return {"ca": os.path.join(d, "ca.crt"), "other_ca": other_ca,
            "cert": os.path.join(d, "tls.crt"), "key": os.path.join(d, "tls.key"),
            "stranger_cert": stranger_cert, "stranger_key": stranger_key}


@pytest.fixture(scope="module")
def cluster(pki):
    # Prompts of 3+ tokens go through the prefill worker: every router-worker link is used.
    c = Cluster(num_prefill=1, num_decode=1,
                extra=[f"--tls-cert={pki['cert']}", f"--tls-key={pki['key']}",
                       f"--tls-ca={pki['ca']}", "--disagg-threshold=3"])
    yield c
    c.close()


def tls_stub(address, ca, cert=None, key=None):
    creds = grpc.ssl_channel_credentials(root_certificates=read(ca),
                                         private_key=read(key) if key else None,
                                         certificate_chain=read(cert) if cert else None)
    return grpc.secure_channel(address, creds)


def test_grpc_over_tls_with_mutual_tls_to_the_workers(cluster, pki):
    with tls_stub(cluster.address, pki["ca"]) as channel:
        stub = gen_grpc.GenerationStub(channel)
        assert run(stub, greedy_request("Once upon a time", max_tokens=60))[1] == GOLDEN


def test_https_with_the_openai_client(cluster, pki):
    context = ssl.create_default_context(cafile=pki["ca"])
    client = openai.OpenAI(base_url=f"https://{cluster.http}/v1", api_key="none", max_retries=0,
                           timeout=60, http_client=openai.DefaultHttpxClient(verify=context))
    out = client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=60,
                                    temperature=0, extra_body={"ignore_eos": True})
    assert out.choices[0].text == GOLDEN


def test_wrong_ca_and_plain_clients_fail_cleanly_and_the_server_keeps_serving(cluster, pki):
    # A client trusting another CA: the handshake fails.
    with tls_stub(cluster.address, pki["other_ca"]) as channel:
        with pytest.raises(grpc.RpcError) as e:
            run(gen_grpc.GenerationStub(channel), greedy_request("Hi", max_tokens=2), timeout=10)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    # A plain gRPC client against the TLS port.
    with grpc.insecure_channel(cluster.address) as channel:
        with pytest.raises(grpc.RpcError) as e:
            run(gen_grpc.GenerationStub(channel), greedy_request("Hi", max_tokens=2), timeout=10)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    # Plain HTTP against the HTTPS port, and HTTPS trusting another CA.
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(f"http://{cluster.http}/health", timeout=10).read()
    with pytest.raises((urllib.error.URLError, ssl.SSLError)):
        urllib.request.urlopen(f"https://{cluster.http}/health", timeout=10,
                               context=ssl.create_default_context(cafile=pki["other_ca"])).read()
    context = ssl.create_default_context(cafile=pki["ca"])
    with urllib.request.urlopen(f"https://{cluster.http}/health", timeout=10,
                                context=context) as r:
        assert r.status == 200
    with tls_stub(cluster.address, pki["ca"]) as channel:
        stub = gen_grpc.GenerationStub(channel)
        assert run(stub, greedy_request("Once upon a time", max_tokens=60))[1] == GOLDEN


def test_workers_accept_only_clients_with_a_certificate_from_the_ca(cluster, pki):
    decode = cluster.role("decode")[0]["address"]

    def status(channel):
        return worker_grpc.DecodeWorkerStub(channel).Status(worker_pb2.WorkerStatusRequest(),
                                                            timeout=10)

    with tls_stub(decode, pki["ca"], pki["cert"], pki["key"]) as channel:
        assert status(channel).role == "decode"
    for cert, key in [(None, None), (pki["stranger_cert"], pki["stranger_key"])]:
        with tls_stub(decode, pki["ca"], cert, key) as channel:
            with pytest.raises(grpc.RpcError) as e:
                status(channel)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    with grpc.insecure_channel(decode) as channel:
        with pytest.raises(grpc.RpcError):
            status(channel)


def test_workers_found_through_dns_are_verified_by_name(pki, tmp_path):
    """A router given dns:///localhost:PORT dials the worker at its IP but verifies the
    certificate against "localhost": a certificate naming only the DNS name must work (the k8s
    base's headless Services resolve to pod IPs no certificate names)."""
    d = str(tmp_path)
    ca_dir = os.path.dirname(pki["ca"])
    with open(os.path.join(d, "dns.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "dns.key", "-out", "dns.csr",
            "-subj", "/CN=dns-only", cwd=d)
    openssl("x509", "-req", "-in", "dns.csr", "-CA", pki["ca"], "-CAkey",
            os.path.join(ca_dir, "ca.key"), "-CAcreateserial", "-out", "dns.pem", "-days", "1",
            "-extfile", "dns.ext", cwd=d)
    worker_tls = [f"--tls-cert={d}/dns.pem", f"--tls-key={d}/dns.key", f"--tls-ca={pki['ca']}"]
    router_tls = [f"--tls-cert={pki['cert']}", f"--tls-key={pki['key']}", f"--tls-ca={pki['ca']}"]
    procs = []
    try:
        decode = subprocess.Popen([BIN, "decode", f"--model={MODEL}", "--log-level=warning"] + worker_tls,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(decode)
        words = decode.stdout.readline().split()
        assert words and words[0] == "READY"
        port = words[2].rsplit(":", 1)[1]
        router = subprocess.Popen([BIN, "router", f"--model={MODEL}", "--log-level=warning",
                                   f"--decode-workers=dns:///localhost:{port}",
                                   "--status-interval-seconds=0.2"] + router_tls,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(router)
        words = router.stdout.readline().split()
        assert words and words[0] == "READY"
        with tls_stub(words[2], pki["ca"]) as channel:
            stub = gen_grpc.GenerationStub(channel)
            deadline = time.time() + 20
            while True:  # the health loop finds the worker within a few rounds
                try:
                    assert run(stub, greedy_request("Once upon a time", max_tokens=60))[1] == GOLDEN
                    break
                except grpc.RpcError as e:
                    if e.code() != grpc.StatusCode.UNAVAILABLE or time.time() > deadline:
                        raise
                    time.sleep(0.2)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
