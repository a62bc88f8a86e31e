#!/usr/bin/env python3
"""Router overhead per request: the same 1-token greedy request N times through the router
(`Generation.Generate`) and directly to the decode worker (`DecodeWorker.Decode`), both over
loopback gRPC from this Python client; prints p50/p99 of each and of the difference.

    python3 bench/router_overhead.py [N]      (needs build/bin/sparseserve and models/)
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))
from services_conftest import Cluster, greedy_request, worker_grpc, worker_pb2  # noqa: E402

import grpc  # noqa: E402


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100.0 * len(values)))]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    c = Cluster(num_prefill=0, num_decode=1, extra=["--disagg-threshold=100000"])
    try:
        decode = worker_grpc.DecodeWorkerStub(grpc.insecure_channel(c.role("decode")[0]["address"]))
        ids = [1, 403, 407, 261, 378]  # "Once upon a time" with BOS
        via_router, direct = [], []
        for i in range(n + 20):  # the first 20 of each warm up connections and caches
            t0 = time.perf_counter()
            for _ in c.stub.Generate(greedy_request(ids=ids, max_tokens=1), timeout=30):
                pass
            t1 = time.perf_counter()
            req = worker_pb2.DecodeRequest(request_id=f"direct-{i}", prompt_ids=ids, max_tokens=1,
                                           ignore_eos=True)
            req.sampling.temperature = 0.0  # greedy (an unset temperature is 1.0)
            for _ in decode.Decode(req, timeout=30):
                pass
            t2 = time.perf_counter()
            if i >= 20:
                via_router.append((t1 - t0) * 1e3)
                direct.append((t2 - t1) * 1e3)
        diff = [a - b for a, b in zip(via_router, direct)]
        for name, v in (("via router", via_router), ("direct to decode", direct),
                        ("router overhead", diff)):
            print(f"{name:18s} p50 {percentile(v, 50):7.3f} ms   p99 {percentile(v, 99):7.3f} ms")
    finally:
        c.close()


if __name__ == "__main__":
    main()
