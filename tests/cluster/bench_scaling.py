#!/usr/bin/env python3
"""tests/cluster/bench_scaling.py - the figures of docs/scale-out.md
(not a ctest entry: it measures, it does not check).

For k = 1, 2, 3 worker nodes with --threads 1 (and one api node), on one
redis-server: images per second for N jobs submitted at once, and the Redis
cost per image (commands, bytes in and out, from INFO); then the XADD rate
one Redis core sustains (redis-benchmark, pipelined and not), which with
the commands per image gives where one Redis node saturates.

    python3 tests/cluster/bench_scaling.py [--jobs 60] [--steps 10] [--size 64]

Timing figures are only as quiet as the machine: rerun on an idle one.
"""
import argparse
import os
import re
import shutil
import subprocess
import time

import cluster
import svc


def info(r):
    text = r.cmd("INFO", "all").decode()
    stats = {}
    for line in text.splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            stats[k] = v
    calls = 0
    for k, v in stats.items():
        if k.startswith("cmdstat_"):
            calls += int(re.search(r"calls=(\d+)", v).group(1))
    return dict(calls=calls, net_in=int(stats["total_net_input_bytes"]),
                net_out=int(stats["total_net_output_bytes"]),
                mem=int(stats["used_memory"]))


def run_k(k, args):
    r = cluster.Redis().start()
    api = cluster.node(r.url, "api", "api")
    workers = [cluster.node(r.url, "worker", "w%d" % i, ["--max-batch", str(args.max_batch)])
               for i in range(k)]
    cluster.start_all([api] + workers)
    # warm-up: one job per worker
    for i in range(k):
        api.wait_job(api.submit(**cluster.spec(i, steps=2))["id"])
    before = info(r)
    t0 = time.time()
    ids = [api.submit(prompt=cluster.PROMPT, width=args.size, height=args.size,
                      steps=args.steps, seed=500 + i)["id"] for i in range(args.jobs)]
    for jid in ids:
        assert api.wait_job(jid, timeout=1800)["state"] == "done"
    dt = time.time() - t0
    after = info(r)
    for n in [api] + workers:
        n.stop(60)
    r.stop()
    n = args.jobs
    return dict(k=k, ips=n / dt, seconds=dt,
                calls=(after["calls"] - before["calls"]) / n,
                net_in=(after["net_in"] - before["net_in"]) / n,
                net_out=(after["net_out"] - before["net_out"]) / n)


def benchmark_xadd():
    rb = shutil.which("redis-benchmark")
    if not rb:
        return None
    r = cluster.Redis().start()
    out = {}
    for pipeline in (1, 16):
        p = subprocess.run([rb, "-p", str(r.port), "-n", "200000", "-P", str(pipeline), "-q",
                            "XADD", "bench", "MAXLEN", "~", "100000", "*", "t", "step", "job",
                            "j_0123456789abcdef", "i", "0", "step", "3", "steps", "30"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        m = re.search(r"([\d.]+) requests per second", p.stdout.decode())
        out[pipeline] = float(m.group(1)) if m else None
    r.stop()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=60)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--max-batch", type=int, default=4)
    ap.add_argument("--k", default="1,2,3")
    args = ap.parse_args()
    rows = [run_k(int(k), args) for k in args.k.split(",")]
    print("\n%d jobs of %dx%d, %d steps, --threads 1 per worker, --max-batch %d, on %d cores"
          % (args.jobs, args.size, args.size, args.steps, args.max_batch, os.cpu_count()))
    print("| workers k | images/s | vs k=1 | Redis commands / image | bytes in / image | "
          "bytes out / image |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| %d | %.2f | %.2fx | %.1f | %.0f | %.0f |" % (
            row["k"], row["ips"], row["ips"] / rows[0]["ips"], row["calls"], row["net_in"],
            row["net_out"]))
    b = benchmark_xadd()
    if b:
        print("\nredis-benchmark XADD (one Redis core): %s requests/s unpipelined, %s with "
              "-P 16" % (b.get(1), b.get(16)))
        per = max(row["calls"] for row in rows)
        for p, rate in sorted(b.items()):
            if rate:
                print("  -> about %.0f images/s before one Redis node saturates (%.1f commands "
                      "per image, %s)" % (rate / per, per,
                                           "unpipelined" if p == 1 else "pipelined"))


if __name__ == "__main__":
    main()
