#!/usr/bin/env python3
"""tools/bench/bench_serve.py - images per second of `tessera serve`: the
same 8 jobs one at a time, then all at once (step-level batching), three
rounds each; wall time and the server's CPU time (from /proc).

    python3 tools/bench/bench_serve.py [--bin build/bin/tessera] [--model models/demo]
        [--steps 30] [--size 128] [--rounds 3] [--max-batch 16]

Starts its own server on a free loopback port with a temporary data dir and
stops it at the end (serve_client.py).  Standard library only.
"""
import argparse
import os
import time

import serve_client

PROMPTS = [
    "a large red circle in the centre on a white background",
    "a small yellow star in the top left corner on a blue background",
    "a green triangle on the right on black",
    "two purple squares on an orange background",
] * 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin/tessera")
    ap.add_argument("--model", default="models/demo")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-batch", type=int, default=16)
    a = ap.parse_args()
    srv, port = serve_client.start(a.bin, a.model, ["--max-batch", str(a.max_batch)],
                                   "bench_serve")
    try:
        tick = os.sysconf("SC_CLK_TCK")

        def cpu():
            f = open("/proc/%d/stat" % srv.pid).read().rsplit(")", 1)[1].split()
            return (int(f[11]) + int(f[12])) / tick

        def req(method, path, body=None):
            return serve_client.call(port, method, path, body)[1]

        def wait(job):
            while True:
                d = req("GET", "/v1/jobs/" + job)
                if d["state"] in ("done", "failed", "cancelled"):
                    return d
                time.sleep(0.05)

        def job(i, p):
            return {"prompt": p, "seed": 100 + i, "steps": a.steps, "width": a.size,
                    "height": a.size}

        wait(req("POST", "/v1/jobs", job(0, "warm up"))["id"])
        res = {"one at a time": [], "8 at once": []}
        for _ in range(a.rounds):
            c0, t0 = cpu(), time.time()
            for i, p in enumerate(PROMPTS):
                wait(req("POST", "/v1/jobs", job(i, p))["id"])
            res["one at a time"].append((time.time() - t0, cpu() - c0))
            c0, t0 = cpu(), time.time()
            ids = [req("POST", "/v1/jobs", job(i, p))["id"] for i, p in enumerate(PROMPTS)]
            for j in ids:
                wait(j)
            res["8 at once"].append((time.time() - t0, cpu() - c0))
        n = len(PROMPTS)
        for k, v in res.items():
            best = min(w for w, _ in v)
            med_cpu = sorted(c for _, c in v)[len(v) // 2]
            print("%-14s best %.2f img/s, median %.2f CPU-s per image  (%s)" % (
                k, n / best, med_cpu / n, "; ".join("%.1f s wall, %.1f s CPU" % x for x in v)))
    finally:
        serve_client.stop(srv)


if __name__ == "__main__":
    main()
