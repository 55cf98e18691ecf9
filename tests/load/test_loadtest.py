#!/usr/bin/env python3
"""tests/load/test_loadtest.py - tessera-loadtest against a real `tessera
serve` (tests/service/svc.py's Server), 64x64 images of 1-2 steps, runs of
a few seconds:

  test_closed_loop      N clients, a job count: every job done, the report
                        consistent (percentiles ordered, images/s > 0, the
                        /metrics delta of tessera_images_total = the images
                        it counted), JSON and CSV parse with one row per job
  test_open_loop        Poisson arrivals for a duration: the same checks;
                        the same --seed gives the same jobs
  test_token            --token-file against a server with --token-file; no
                        token gives http_401 errors and exit 1
  test_bad_flags        every bad flag or profile exits 2 naming it; no
                        server exits 1
  test_static_batching  `serve --batching static`: a job submitted while
                        another runs starts only when that one has ended,
                        never sharing a UNet call (continuous: it joins at
                        the next step and ends first); a bad value exits 2

Standard library only.  TSR_LOADTEST names the binary (set by ctest).
"""
import csv
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "service"))
import svc  # noqa: E402

LOADTEST = os.environ.get("TSR_LOADTEST") or os.path.join(svc.ROOT, "build", "bin",
                                                           "tessera-loadtest")
PROFILE = os.path.join(svc.ROOT, "tools", "loadtest", "profiles", "small.json")


def loadtest(*args, timeout=180):
    """Run tessera-loadtest; (rc, stdout, stderr)."""
    p = subprocess.run([LOADTEST] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout, cwd=svc.ROOT)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def url(s):
    return "http://127.0.0.1:%d" % s.port


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def check_report(out, js, rows, jobs=None):
    """The consistency every run must show; returns the JSON."""
    d = json.load(open(js))
    if jobs is not None:
        assert d["jobs"] == jobs, (d["jobs"], jobs)
    assert d["jobs"] >= 1, d
    assert d["done"] == d["jobs"] and d["errors"] == 0, (d, out)
    assert d["errors_by_kind"] == {}, d["errors_by_kind"]
    assert d["images_per_s"] > 0 and d["jobs_per_s"] > 0, d
    assert d["wall_s"] > 0, d
    for name, st in d["latency_ms"].items():
        assert st["count"] == d["jobs"], (name, st)
        assert 0 <= st["p50"] <= st["p95"] <= st["p99"] <= st["max"], (name, st)
    lat = d["latency_ms"]
    assert lat["queue_wait"]["p50"] <= lat["done"]["max"], lat
    m = d["metrics"]
    assert m is not None, "no /metrics in the report"
    assert m["delta"]["tessera_images_total"] == d["images"], (m["delta"], d["images"])
    assert m["delta"]['tessera_jobs_total{state="done"}'] == d["jobs"], m["delta"]
    assert m["delta"]["tessera_unet_calls_total"] >= 1, m["delta"]
    assert m["images_per_unet_call"] >= 1, m
    # the CSV: one row per job, in submission order, timings in order
    assert len(rows) == d["jobs"], (len(rows), d["jobs"])
    assert [int(r["seq"]) for r in rows] == list(range(d["jobs"]))
    images = 0
    for r in rows:
        assert r["state"] == "done" and r["error"] == "" and r["http_status"] == "202", r
        assert r["job_id"].startswith("j_"), r
        assert int(r["images"]) == int(r["n"]), r
        images += int(r["images"])
        t = [float(r[k]) for k in ("submit_ms", "queue_wait_ms", "first_preview_ms", "done_ms")]
        assert 0 <= t[0] <= t[1] <= t[2] <= t[3], r
        assert float(r["first_preview_ms"]) == min(float(r[k]) for k in
                                                   ("first_step_ms", "first_tiles_ms") if r[k])
        assert float(r["t_end_s"]) >= float(r["t_submit_s"]) >= 0, r
    assert images == d["images"], (images, d["images"])
    mix = d["config"]["mix"]
    assert sum(e["jobs"] for e in mix) == d["jobs"], mix
    shapes = {(e["width"], e["height"], e["steps"], e["n"]) for e in mix}
    for r in rows:
        assert (int(r["width"]), int(r["height"]), int(r["steps"]), int(r["n"])) in shapes, r
    # the table says the same
    assert "%d submitted, %d done, 0 with errors" % (d["jobs"], d["jobs"]) in out, out
    assert "(the client counted %d: equal)" % d["images"] in out, out
    assert "errors      none" in out, out
    return d


def setup():
    if not os.access(LOADTEST, os.X_OK):
        raise AssertionError("TSR_LOADTEST %s is not an executable (build tessera-loadtest)"
                             % LOADTEST)
    return svc.Server(name="server").start()


def test_closed_loop(s):
    d = svc.tmpdir()
    js, cs = os.path.join(d, "r.json"), os.path.join(d, "r.csv")
    rc, out, err = loadtest("--url", url(s), "--clients", 3, "--jobs", 12, "--profile", PROFILE,
                            "--seed", 7, "--timeout", 120, "--quiet", "--json", js, "--csv", cs)
    assert rc == 0, (rc, out, err)
    rows = read_csv(cs)
    r = check_report(out, js, rows, jobs=12)
    assert r["config"]["mode"] == "closed" and r["config"]["clients"] == 3, r["config"]
    # closed loop: never more than 3 jobs in flight
    events = sorted([(float(x["t_submit_s"]), 1) for x in rows] +
                    [(float(x["t_end_s"]), -1) for x in rows], key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    assert peak <= 3, peak
    svc.figure("closed loop, 3 clients: %.2f images/s, done p95 %.0f ms, %.2f images per UNet "
               "call" % (r["images_per_s"], r["latency_ms"]["done"]["p95"],
                         r["metrics"]["images_per_unet_call"]))


def test_open_loop(s):
    d = svc.tmpdir()
    runs = []
    for k in range(2):
        js, cs = os.path.join(d, "o%d.json" % k), os.path.join(d, "o%d.csv" % k)
        rc, out, err = loadtest("--url", url(s), "--rate", 6, "--duration", 2.5, "--jobs", 40,
                                "--profile", PROFILE, "--seed", 11, "--timeout", 120, "--quiet",
                                "--json", js, "--csv", cs)
        assert rc == 0, (rc, out, err)
        rows = read_csv(cs)
        r = check_report(out, js, rows)
        assert r["config"]["mode"] == "open" and r["config"]["rate"] == 6, r["config"]
        # submissions stop at --duration
        assert max(float(x["t_submit_s"]) for x in rows) < 2.5 + 0.5, rows[-1]
        runs.append((r, rows))
    # the same seed: the same arrivals' jobs (mix entries and seeds)
    a = [(x["mix"], x["seed"]) for x in runs[0][1]]
    b = [(x["mix"], x["seed"]) for x in runs[1][1]]
    n = min(len(a), len(b))
    assert n >= 3 and a[:n] == b[:n], (a, b)
    r = runs[0][0]
    svc.figure("open loop, 6 jobs/s: %d jobs, %.2f images/s, done p95 %.0f ms"
               % (r["jobs"], r["images_per_s"], r["latency_ms"]["done"]["p95"]))


def test_token():
    s = svc.Server(token="load-secret-token-0123", name="token-server").start()
    d = svc.tmpdir()
    tf = os.path.join(d, "token")
    with open(tf, "w") as f:
        f.write("load-secret-token-0123\n")
    js, cs = os.path.join(d, "t.json"), os.path.join(d, "t.csv")
    rc, out, err = loadtest("--url", url(s), "--clients", 2, "--jobs", 3, "--steps", 1,
                            "--token-file", tf, "--quiet", "--json", js, "--csv", cs)
    assert rc == 0, (rc, out, err)
    check_report(out, js, read_csv(cs), jobs=3)
    rc, out, err = loadtest("--url", url(s), "--clients", 1, "--jobs", 2, "--steps", 1,
                            "--quiet", "--json", js)
    assert rc == 1, (rc, out, err)
    d = json.load(open(js))
    assert d["errors_by_kind"] == {"http_401": 2}, d["errors_by_kind"]
    assert "http_401 2" in out and "unauthorized" in out, out
    assert "2 of 2 jobs had errors" in err, err
    s.stop()


def test_bad_flags():
    d = svc.tmpdir()
    def prof(text):
        p = os.path.join(d, "p%d.json" % len(os.listdir(d)))
        with open(p, "w") as f:
            f.write(text)
        return p
    cases = [
        (["--clients", "0"], "--clients"),
        (["--clients", "x"], "--clients"),
        (["--rate", "-1"], "--rate"),
        (["--clients", "2", "--rate", "1"], "exclude each other"),
        (["--jobs", "0"], "--jobs"),
        (["--jobs"], "--jobs needs a value"),
        (["--duration", "abc"], "--duration"),
        (["--timeout", "0"], "--timeout"),
        (["--size", "65x64"], "--size"),
        (["--size", "64"], "--size"),
        (["--steps", "0"], "--steps"),
        (["--n", "17"], "--n"),
        (["--url", "https://x:1"], "--url"),
        (["--url", "http://127.0.0.1:99999"], "--url"),
        (["--max-error-rate", "2"], "--max-error-rate"),
        (["--frobnicate"], "unknown option '--frobnicate'"),
        (["stray"], "unexpected argument 'stray'"),
        (["--token", "a", "--token-file", "b"], "exclude each other"),
        (["--profile", prof("not json")], "not a JSON object"),
        (["--profile", prof('{"mix": []}')], '"mix" must be an array'),
        (["--profile", prof('{"mix": [{"stpes": 2}]}')], "mix[0]: unknown key 'stpes'"),
        (["--profile", prof('{"mix": [{"steps": 2}, {"steps": 0}]}')], "mix[1].steps"),
        (["--profile", prof('{"mix": [{"width": 100}]}')], "mix[0].width"),
        (["--profile", prof('{"mix": [{"weight": 0}]}')], "mix[0].weight"),
        (["--profile", prof('{"mix": [{}], "prompts": [1]}')], "prompts[0]"),
        (["--profile", prof('{"mix": [{}], "extra": 1}')], "unknown key 'extra'"),
    ]
    for args, needle in cases:
        rc, out, err = loadtest(*args, timeout=30)
        assert rc == 2, (args, rc, out, err)
        assert needle in err, (args, needle, err)
        assert out == "", (args, out)
        svc.note("tessera-loadtest " + " ".join(a if len(a) < 40 else "FILE" for a in args), rc)
    # the command line is fine but the run cannot happen: exit 1
    rc, out, err = loadtest("--profile", os.path.join(d, "missing.json"))
    assert rc == 1 and "missing.json" in err, (rc, err)
    rc, out, err = loadtest("--url", "http://127.0.0.1:1", "--jobs", 1, "--quiet")
    assert rc == 1 and "cannot read the server's metrics" in err, (rc, err)
    rc, out, err = loadtest("--json", os.path.join(d, "no", "such", "dir.json"))
    assert rc == 1 and "--json" in err, (rc, err)
    rc, out, err = loadtest("--help")
    assert rc == 0 and "--clients" in out and "--profile" in out, (rc, out)


def job_times(s, jid):
    j = s.wait_job(jid, timeout=120)
    assert j["state"] == "done", j
    return j["started"], j["finished"]


def test_static_batching():
    # a bad value is a usage error
    p = subprocess.run([svc.TSR_BIN, "serve", "--batching", "dynamic"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=30)
    assert p.returncode == 2 and b"--batching" in p.stderr, (p.returncode, p.stderr)
    seen = {}
    for mode in ("static", "continuous"):
        s = svc.Server(args=["--batching", mode, "--max-batch", "4"], name=mode).start()
        m0 = s.metrics()
        # a long job, then a short one once the long one runs
        a = s.submit(prompt="a red circle", width=64, height=64, steps=40, seed=1)["id"]
        deadline = time.time() + 60
        while s.job(a)["state"] == "queued" and time.time() < deadline:
            time.sleep(0.01)
        b = s.submit(prompt="a blue square", width=64, height=64, steps=1, seed=2)["id"]
        _, a_end = job_times(s, a)
        _, b_end = job_times(s, b)
        m1 = s.metrics()
        calls = m1.value("tessera_unet_calls_total") - m0.value("tessera_unet_calls_total")
        imgs = (m1.value("tessera_unet_call_images_sum") -
                m0.value("tessera_unet_call_images_sum"))
        seen[mode] = (calls, imgs, b_end > a_end)
        s.stop()
    # static: b waited for a's whole batch (41 calls of one image, b last);
    # continuous: b joined a's batch at the next step and left first
    assert seen["static"] == (41, 41, True), seen
    assert seen["continuous"] == (40, 41, False), seen


TESTS = [test_closed_loop, test_open_loop, test_token, test_bad_flags, test_static_batching]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS, setup=setup))
