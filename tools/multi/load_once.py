#!/usr/bin/env python3
"""tools/multi/load_once.py - what reading the weights once saves (issue 57
part 2, docs/multi-gpu.md section 5): `tessera serve` on N CPU devices,
with the weights shared (the default), read once and broadcast to each
device's own copy (TESSERA_SHARE_WEIGHTS=broadcast: the path GPUs take, here
over the host comm) and read per device (TESSERA_SHARE_WEIGHTS=0).

For each run: seconds from the process start to its "listening on" line
(every engine open), and the process's resident memory then (VmRSS) and
its peak (VmHWM), from /proc.  The server is killed right after; nothing is
generated.  One run at a time (the machine's cores are shared).

Usage: python3 tools/multi/load_once.py --bin build/bin/tessera
           --model models/demo [--devices 1,2,4] [--modes shared,broadcast,separate]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time


def status_kb(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


MODES = {"shared": "1", "broadcast": "broadcast", "separate": "0"}
LABELS = {"shared": "read once", "broadcast": "read once, broadcast", "separate": "read per device"}


def run(binary, model, n, mode, threads):
    env = dict(os.environ)
    env["TESSERA_SHARE_WEIGHTS"] = MODES[mode]
    data = tempfile.mkdtemp(prefix="tsr-load-")
    argv = [binary, "serve", "--model", model, "--host", "127.0.0.1", "--port", "0",
            "--data-dir", data, "--device", ",".join(["cpu"] * n), "--threads", str(threads)]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                         text=True)
    try:
        for line in p.stdout:
            if "listening on" in line:
                secs = time.monotonic() - t0
                rss, hwm = status_kb(p.pid, "VmRSS"), status_kb(p.pid, "VmHWM")
                return secs, rss, hwm
            if re.search(r"\berror\b", line):
                sys.stderr.write(line)
        raise SystemExit("server ended before listening: %s" % argv)
    finally:
        p.kill()
        p.wait()
        subprocess.run(["rm", "-rf", data])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--devices", default="1,2,4")
    ap.add_argument("--modes", default="shared,separate")
    ap.add_argument("--threads", type=int, default=0, help="--threads (0: one per device)")
    a = ap.parse_args()
    print("| model | devices | weights | load (s) | RSS after load (MiB) | peak RSS (MiB) |")
    print("|---|---:|---|---:|---:|---:|")
    for n in [int(x) for x in a.devices.split(",")]:
        for mode in a.modes.split(","):
            if n == 1 and mode != "shared":
                continue
            secs, rss, hwm = run(a.bin, a.model, n, mode, a.threads or n)
            print("| %s | %d | %s | %.2f | %.0f | %.0f |" % (
                os.path.basename(a.model.rstrip("/")), n, LABELS[mode],
                secs, rss / 1024, hwm / 1024), flush=True)


if __name__ == "__main__":
    main()
