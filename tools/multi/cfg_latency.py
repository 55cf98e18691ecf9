#!/usr/bin/env python3
"""tools/multi/cfg_latency.py - a lone image's latency on two CPU devices,
`--parallel cfg` against `--parallel data` (issue 57 part 4; docs/perf.md,
docs/multi-gpu.md section 6).

For each round and mode: a fresh `tessera serve --device cpu,cpu --threads 2
--parallel MODE` (one thread per device), one warm-up job (1 step), then
--images lone jobs one after the other, each timed from its submit to the
client seeing it done (polled every 20 ms).  The server runs in a session
of its own at autogroup nice --nice (-19), as tools/sim/check_cpu.py's.  The modes alternate within a
round, so both see the same background load; the load average is printed
with each figure (this machine is shared).  Prints a table and, with --json,
the raw figures.

Usage: python3 tools/multi/cfg_latency.py --bin build/bin/tessera --model M
       [--size 256] [--steps 8] [--images 1] [--rounds 2]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request


def call(port, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read() or b"null")


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def start(binary, model, mode, nice):
    # a session of its own, so its own CFS autogroup: on a shared machine the
    # kernel shares the cores between sessions first, so a server in the
    # caller's session gets one session's share however many threads it runs
    # (tools/sim/check_cpu.py does the same)
    p = subprocess.Popen([binary, "serve", "--model", model, "--port", "0", "--device",
                          "cpu,cpu", "--threads", "2", "--parallel", mode,
                          "--data-dir", "/tmp/tsr-cfg-latency-%d" % os.getpid()],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    if nice:
        try:
            with open("/proc/%d/autogroup" % p.pid, "w") as f:
                f.write(str(nice))
        except OSError as e:
            print("cfg_latency: cannot set the server's autogroup nice (%s)" % e, flush=True)
    deadline = time.time() + 300
    for line in p.stdout:
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            # keep reading its log, or the server blocks on a full pipe
            threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
            return p, int(m.group(1))
        if time.time() > deadline:
            break
    p.kill()
    raise SystemExit("server did not start (%s)" % mode)


def one(port, params):
    t0 = time.time()
    jid = call(port, "POST", "/v1/jobs", params)["id"]
    while True:
        j = call(port, "GET", "/v1/jobs/%s" % jid)
        if j["state"] in ("done", "failed", "cancelled"):
            break
        time.sleep(0.02)
    assert j["state"] == "done", j
    return time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--images", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--nice", type=int, default=-19,
                    help="the server's autogroup nice (root; 0: leave it)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    params = dict(prompt="a red circle on a blue background", width=a.size, height=a.size,
                  steps=a.steps, seed=57, sampler="euler")
    runs = []
    for r in range(a.rounds):
        for mode in ("data", "cfg") if r % 2 == 0 else ("cfg", "data"):
            p, port = start(a.bin, a.model, mode, a.nice)
            try:
                one(port, dict(params, steps=1, seed=1))
                for i in range(a.images):
                    la0 = loadavg()
                    s = one(port, params)
                    runs.append(dict(round=r, mode=mode, seconds=s, load=(la0 + loadavg()) / 2))
                    print("round %d %-4s %.2f s (load average %.1f)" % (r, mode, s,
                                                                       runs[-1]["load"]),
                          flush=True)
            finally:
                p.terminate()
                p.wait(timeout=120)
    med = {m: statistics.median([x["seconds"] for x in runs if x["mode"] == m])
           for m in ("data", "cfg")}
    loads = [x["load"] for x in runs]
    print("\n| mode | lone image, median (s) | runs | load average |")
    print("|---|---:|---:|---|")
    for m in ("data", "cfg"):
        n = sum(1 for x in runs if x["mode"] == m)
        print("| %s | %.2f | %d | %.1f-%.1f |" % (m, med[m], n, min(loads), max(loads)))
    print("\ncfg: %.2fx lower latency than data" % (med["data"] / med["cfg"]))
    if a.json:
        print(json.dumps(runs))


if __name__ == "__main__":
    sys.exit(main())
