#!/usr/bin/env python3
"""tests/service/test_weights.py - the weights read once and broadcast
(issue 57 part 2; ctest: service_weights).

GPUs take the first device's weights by broadcast (an NCCL group, one
worker thread per rank); the same path runs on CPU devices over the host
comm with TESSERA_SHARE_WEIGHTS=broadcast, so here, without a GPU:

- `--device cpu,cpu,cpu --threads 3 --max-batch 1` with
  TESSERA_SHARE_WEIGHTS=broadcast: the log says the weights were read once
  and broadcast (host), rank 0 sent them to 2 devices and both others opened
  with "weights broadcast from the first engine"; jobs run on all three at
  once and every image equals `tessera generate`'s;
- where no group can be made (`--device cuda:0,cuda:0`: no GPU or NCCL here,
  and NCCL refuses two ranks on one GPU where there is one), the server says
  why in one warning and each device reads the model.
"""
import os
import subprocess
import time

import svc

PROMPT = "a red circle in the bottom right corner"


def setup():
    os.environ["TESSERA_SHARE_WEIGHTS"] = "broadcast"
    try:
        return svc.Server(["--device", "cpu,cpu,cpu", "--threads", "3", "--max-batch", "1"],
                          name="broadcast").start()
    finally:
        del os.environ["TESSERA_SHARE_WEIGHTS"]


def test_broadcast_replicas(s):
    out = s.output()
    assert "weights: cpu, cpu, cpu read once, on cpu, then broadcast (host)" in out, out
    assert "weights: sent from cpu to 2 devices" in out, out
    assert out.count("weights broadcast from the first engine") == 2, out
    assert "weights shared with the first engine" not in out, out
    specs = [dict(prompt=PROMPT, width=64, height=64, steps=5, seed=300 + i) for i in range(5)] + \
        [dict(prompt="two green stars", width=96, height=64, steps=3, seed=310, sampler="euler_a")]
    ids = [s.submit(**p)["id"] for p in specs]
    jobs = [s.wait_job(j) for j in ids]
    assert all(j["state"] == "done" for j in jobs), [j["state"] for j in jobs]
    overlaps = sum(1 for i in range(len(jobs)) for k in range(i + 1, len(jobs))
                   if jobs[i]["started"] < jobs[k]["finished"] and
                   jobs[k]["started"] < jobs[i]["finished"])
    svc.figure("broadcast replicas: %d pairs of jobs ran at the same time" % overlaps)
    assert overlaps >= 1
    for p, jid in zip(specs, ids):
        svc.assert_same_image(s.image(jid), p, "job %s" % p)


def test_no_group_falls_back():
    argv = [svc.TSR_BIN, "serve", "--model", svc.MODEL] + svc.LISTEN_ARGS + \
        ["--data-dir", svc.tmpdir("tsr-data-"), "--device", "cuda:0,cuda:0"]
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, cwd=svc.ROOT)
    lines = []
    deadline = time.time() + 60
    try:
        for line in p.stdout:
            lines.append(line)
            if "cannot share one read by broadcast" in line or time.time() > deadline:
                break
    finally:
        p.kill()
        p.wait()
    out = "".join(lines)
    warn = [x for x in lines if "cannot share one read by broadcast" in x]
    assert len(warn) == 1, out
    svc.figure("no group: %s" % warn[0].strip())
    assert "weights: cuda:0, cuda:0 cannot share one read by broadcast (nccl: " in warn[0], out
    assert warn[0].rstrip().endswith("; each reads the model"), out


TESTS = [test_broadcast_replicas, test_no_group_falls_back]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS, setup=setup))
