#!/usr/bin/env python3
"""tests/service/test_cfg_parallel.py - CFG-parallel in the server (issue 57
part 4; ctest: service_cfg_parallel).

`tessera serve --device cpu,cpu --threads 2` (one thread per device):

- `--parallel cfg`: lone images with several samplers (an ancestral and an
  SDE one among them), a hires-fix image and a job of three images (the
  pair's rows split evenly) each equal `tessera generate`'s byte for byte
  (pixels and infotext); /metrics counts every UNet call on both devices as
  a pair's (tessera_device_cfg_calls_total equal to the calls, the same on
  both: each rank makes each call);
- `--parallel auto`: a lone image runs on the pair (cfg calls on both
  devices), and a burst of jobs runs data parallel (at most the last
  image's calls paired), every image equal to generate's;
- `--parallel cfg` with cpu:1 failed mid-run (TESSERA_FAULT_DEVICE, at
  its fourth call: the pair holds 32 of the 40 jobs queued then): every job done with all its images, tessera_images_total
  exactly the images asked (none lost, none stored twice), at least one
  image requeued (the server logs each) and every requeued image equal to
  generate's, /readyz degraded naming cpu:1;
- `--parallel bogus` refused at start;
- `tessera generate --device cpu,cpu --parallel cfg`: a batch of three equal
  to one device's, byte for byte; a device list without it refused.
"""
import os
import re
import subprocess

import svc

BASE = dict(width=64, height=64, steps=4)
FAULT_AFTER = 3    # cpu:1's calls before it fails (the pair's images are at step 3 of 4)
LONE = [
    dict(prompt="a red circle", sampler="euler", seed=11),
    dict(prompt="two green stars on black", sampler="euler_a", seed=12),
    dict(prompt="a blue square top left", sampler="dpmpp_2m_sde", seed=13),
    dict(prompt="a yellow ring", sampler="ddim", seed=14, cfg_scale=5.0),
    dict(prompt="an orange cross", sampler="euler_a", seed=15, hires_scale=1.5,
         hires_steps=2),
]


def server(parallel, name, fault=None):
    old = os.environ.get("TESSERA_FAULT_DEVICE")
    if fault:
        os.environ["TESSERA_FAULT_DEVICE"] = fault
    try:
        return svc.Server(["--device", "cpu,cpu", "--threads", "2", "--parallel", parallel,
                           "--max-queue", "1000"], name=name).start()
    finally:
        if fault:
            if old is None:
                del os.environ["TESSERA_FAULT_DEVICE"]
            else:
                os.environ["TESSERA_FAULT_DEVICE"] = old


def device_counts(s):
    m = s.metrics()
    calls = {d: m.value("tessera_device_images_per_call_count", device=d) for d in ("cpu:0",
                                                                                   "cpu:1")}
    cfg = {d: m.value("tessera_device_cfg_calls_total", device=d) for d in ("cpu:0", "cpu:1")}
    return calls, cfg


def run_lone(s, params):
    p = dict(BASE, **params)
    jid = s.submit(**p)["id"]
    j = s.wait_job(jid, timeout=300)
    assert j["state"] == "done", j
    svc.assert_same_image(s.image(jid, 0), p, "lone %s" % params)


def test_cfg_mode_equals_generate():
    s = server("cfg", "cfg-parallel")
    for params in LONE:
        run_lone(s, params)
    # three images of one job: 6 rows, 3 on each device
    p = dict(BASE, prompt="a purple triangle", sampler="euler_a", seed=40)
    jid = s.submit(n=3, **p)["id"]
    j = s.wait_job(jid, timeout=300)
    assert j["state"] == "done" and len(j["images"]) == 3, j
    for k in range(3):
        svc.assert_same_image(s.image(jid, k), dict(p, seed=p["seed"] + k), "image %d of 3" % k)
    calls, cfg = device_counts(s)
    svc.figure("--parallel cfg: calls %s, as a pair %s" % (calls, cfg))
    assert calls["cpu:0"] > 0 and calls == cfg, (calls, cfg)
    assert calls["cpu:0"] == calls["cpu:1"], calls
    s.stop()


def test_generate_cfg():
    """`tessera generate --device cpu,cpu --parallel cfg`: the same images as
    one device, a batch of three included."""
    d = svc.tmpdir("tsr-gen-cfg-")
    p = dict(BASE, prompt="a pink ring", sampler="dpmpp_2m_sde", seed=77)
    out = os.path.join(d, "out.png")
    argv = [svc.TSR_BIN, "--log-level", "warn", "generate", "--model", svc.MODEL, "--quiet",
            "--device", "cpu,cpu", "--parallel", "cfg", "--threads", "2", "--batch-size", "3",
            "--output", out]
    for k, v in p.items():
        argv += [svc.GEN_FLAGS[k], str(v)]
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert r.returncode == 0, r.stdout.decode()
    for k in range(3):
        with open(os.path.join(d, "out-%d.png" % k), "rb") as f:
            svc.assert_same_image(f.read(), dict(p, seed=p["seed"] + k), "generate cfg %d" % k)
    r = subprocess.run([svc.TSR_BIN, "generate", "--model", svc.MODEL, "--device", "cpu,cpu",
                        "--prompt", "x", "--output", out], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    assert r.returncode == 2 and b"add --parallel cfg" in r.stdout, r.stdout


def test_auto_mode():
    s = server("auto", "cfg-auto")
    run_lone(s, LONE[1])
    calls, cfg = device_counts(s)
    assert cfg["cpu:0"] > 0 and cfg["cpu:0"] == cfg["cpu:1"], (calls, cfg)
    # a burst: the queue is not empty, so each device runs its own images
    jobs = [dict(BASE, prompt="a white star", sampler="euler", seed=100 + i) for i in range(10)]
    r = s.post("/v1/batches", {"jobs": jobs})
    assert r.status == 202, r
    ids = [x["id"] for x in r.json["jobs"]]
    done = [s.wait_job(j, timeout=300) for j in ids]
    assert all(j["state"] == "done" for j in done), done
    calls2, cfg2 = device_counts(s)
    total = sum(calls2.values()) - sum(calls.values())
    paired = sum(cfg2.values()) - sum(cfg.values())
    svc.figure("--parallel auto: a burst of 10 jobs made %d calls, %d of them paired"
               % (total, paired))
    # at most one image of the burst (the first, pushed into an empty
    # queue, or the last) finds the queue empty and its pair idle; the rest
    # run data parallel (a device fills its own call: --max-batch 16)
    assert paired <= 2 * BASE["steps"], (calls2, cfg2)
    assert total - paired >= BASE["steps"], (calls2, cfg2)
    for jid, p in list(zip(ids, jobs))[::3]:
        svc.assert_same_image(s.image(jid, 0), p, "burst job %s" % jid)
    s.stop()


def test_cfg_device_fails():
    s = server("cfg", "cfg-fault", fault="cpu:1@after_calls=%d" % FAULT_AFTER)
    jobs = [dict(BASE, prompt="a green circle bottom right", sampler=("euler_a", "euler")[i % 2],
                 seed=500 + 3 * i) for i in range(40)]
    r = s.post("/v1/batches", {"jobs": jobs})
    assert r.status == 202, r
    ids = [x["id"] for x in r.json["jobs"]]
    done = [s.wait_job(j, timeout=300) for j in ids]
    states = [j["state"] for j in done]
    assert states == ["done"] * len(jobs), states
    assert all(len(j["images"]) == 1 for j in done), done
    m = s.metrics()
    assert m.value("tessera_images_total") == len(jobs), m.value("tessera_images_total")
    requeued = set()
    for line in s.all_output().splitlines():
        hit = re.search(r"job (\S+) image (\d+): its device failed; back in the queue", line)
        if hit:
            requeued.add(hit.group(1))
    svc.figure("--parallel cfg, cpu:1 failed after %d calls: %d images requeued"
               % (FAULT_AFTER, len(requeued)))
    assert requeued, "no image requeued\n%s" % s.output()
    r = s.get("/readyz")
    assert r.status == 200 and r.json["status"] == "degraded", r
    devs = {d["name"]: d for d in r.json["devices"]}
    assert devs["cpu:1"]["state"] == "failed" and devs["cpu:0"]["state"] == "up", devs
    assert m.value("tessera_device_failures_total", device="cpu:1") == 1
    assert m.value("tessera_device_cfg_calls_total", device="cpu:1") >= 1
    by_id = dict(zip(ids, jobs))
    for jid in sorted(requeued):
        svc.assert_same_image(s.image(jid, 0), by_id[jid], "requeued job %s" % jid)
    s.stop()


def test_bad_mode():
    try:
        s = server("bogus", "cfg-bogus")
    except AssertionError as e:
        assert "--parallel must be auto, data or cfg" in str(e), e
    else:
        s.stop()
        raise AssertionError("--parallel bogus was accepted")


TESTS = [test_cfg_mode_equals_generate, test_generate_cfg, test_auto_mode, test_cfg_device_fails,
         test_bad_mode]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS))
