#!/usr/bin/env python3
"""tests/cluster/test_faults.py - faults of a cluster on one Redis Streams
queue (ctest: cluster_faults; docs/scale-out.md "Delivery"):

- test_kills: 300 jobs submitted round robin across two api nodes while
  worker 0 gets kill -9 mid-batch, worker 1 gets SIGTERM (drain) and a new
  worker joins: every job finishes, each image equals `tessera generate`'s,
  and the event stream holds exactly one `image` event per image (none
  missing, none duplicated).
- test_redis_restart: Redis killed mid-run (AOF, appendfsync always) and
  started again on the same port and directory: api nodes answer 503 +
  Retry-After while it is down and accept again by themselves; every job
  accepted before the restart finishes.
- test_poison: a job whose prompt crashes the worker taking it
  (TSR_TEST_POISON_PROMPT) goes to the dead-letter stream after
  --max-attempts takes and is reported failed; the workers, restarted as a
  supervisor would, go on with other jobs.
"""
import collections
import os
import signal
import threading
import time

import cluster
import svc

CLAIM_MS = 1500
POISON = "poison pill"
ctx = {}


def worker(r, name):
    n = cluster.node(r.url, "worker", name, ["--max-batch", "4", "--claim-idle-ms",
                                            str(CLAIM_MS), "--max-attempts", "2",
                                            "--drain-timeout", "20"])
    return n


def setup():
    os.environ["TSR_TEST_POISON_PROMPT"] = POISON  # inherited by the nodes
    r = cluster.Redis().start()
    # 300 jobs are submitted at once: room for all of them in the shared
    # queue whatever the workers' speed (a sanitizer build is ~5x slower)
    apis = [cluster.node(r.url, "api", "api%d" % i, ["--max-queue", "1000"]) for i in range(2)]
    workers = [worker(r, "worker%d" % i) for i in range(3)]
    cluster.start_all(apis + workers)
    ctx.update(redis=r, apis=apis, workers=workers)
    return ctx


def image_events(r):
    """(job, index) -> number of `image` events in the event stream."""
    out = collections.Counter()
    entries = r.cmd("XRANGE", "tsr:demo:events", "-", "+")
    for _id, fields in entries:
        f = dict(zip(fields[::2], fields[1::2]))
        if f.get(b"t") == b"image":
            out[(f[b"job"].decode(), int(f[b"i"]))] += 1
    return out


def done_count(api, ids):
    n = 0
    for jid in ids:
        if api.job(jid)["state"] in ("done", "failed", "cancelled"):
            n += 1
    return n


def test_kills(c):
    apis, r = c["apis"], c["redis"]
    n_jobs = 300
    specs = [cluster.spec(i % 25, steps=4) for i in range(n_jobs)]
    ids = []
    t0 = time.time()
    for i, p in enumerate(specs):
        ids.append(apis[i % 2].submit(**p)["id"])
    svc.figure("300 jobs accepted in %.1fs" % (time.time() - t0))
    w0, w1 = c["workers"][0], c["workers"][1]
    # kill -9 worker 0 while it holds images (mid-batch)
    svc.wait_until(lambda: done_count(apis[0], ids[:60:3]) >= 5, 120, "some jobs done")
    svc.wait_until(lambda: (svc.parse_metrics(r_get(apis[0])).value(
        "tessera_cluster_pending") or 0) > 0, 30, "images pending")
    w0.kill9()
    killed_at = time.time()
    # SIGTERM worker 1 (drain: finishes what it holds, takes nothing new)
    time.sleep(1.0)
    w1.signal(signal.SIGTERM)
    # a new worker joins
    w3 = worker(r, "worker3")
    c["workers"].append(w3)
    w3.start()
    assert w1.wait(60) == 0, w1.output()
    deadline = time.time() + 600
    for jid in ids:
        j = apis[1].wait_job(jid, timeout=max(1, deadline - time.time()))
        assert j["state"] == "done", j
    svc.figure("300 jobs with kill -9 + SIGTERM + join: all done %.1fs after the kill" % (
        time.time() - killed_at))
    # each image once in the stream; same bytes as generate
    ev = image_events(r)
    missing = [jid for jid in ids if ev.get((jid, 0), 0) == 0]
    dup = {k: v for k, v in ev.items() if v > 1}
    claims = sum(w.metrics().value("tessera_cluster_claims_total") or 0
                 for w in c["workers"] if w.alive())
    svc.figure("jobs submitted %d, finished %d, image events missing %d, duplicated %d, "
               "claims by the survivors %d" % (n_jobs, n_jobs, len(missing), len(dup), claims))
    assert not missing and not dup, (missing[:5], list(dup.items())[:5])
    assert claims >= 1, "no image was claimed from the killed worker"
    for i, (p, jid) in enumerate(zip(specs, ids)):
        svc.assert_same_image(apis[i % 2].image(jid), p, "job %d" % i)
    # SSE on an api node: one image event and done
    evs = apis[0].events("/v1/jobs/%s/events" % ids[-1])
    assert [e.name for e in evs].count("image") == 1 and evs[-1].name == "done", evs


def r_get(api):
    resp = api.get("/metrics")
    assert resp.status == 200
    return resp.body.decode()


def test_redis_restart(c):
    apis, r = c["apis"], c["redis"]
    ids = [apis[i % 2].submit(**cluster.spec(100 + i, steps=6))["id"] for i in range(40)]
    time.sleep(0.5)
    r.stop(signal.SIGKILL)  # a crash, not a clean shutdown
    down = time.time()

    def refused():
        resp = apis[0].post("/v1/jobs", cluster.spec(1))
        return resp if resp.status == 503 else None
    resp = svc.wait_until(refused, 10, "a 503 while Redis is down")
    assert resp.headers.get("retry-after") and resp.json["error"]["code"] == "unavailable", resp
    # reads still answer from the mirror
    assert apis[1].get("/v1/jobs/" + ids[0]).status == 200
    time.sleep(2)
    r.start()
    svc.figure("Redis down %.1fs" % (time.time() - down))
    svc.wait_until(lambda: apis[0].post("/v1/jobs", cluster.spec(7)).status == 202, 30,
                   "api 0 accepting again")
    svc.wait_until(lambda: apis[1].post("/v1/jobs", cluster.spec(8)).status == 202, 30,
                   "api 1 accepting again")
    for jid in ids:
        j = apis[0].wait_job(jid, timeout=300)
        assert j["state"] == "done", j
    svc.figure("Redis restart (AOF always): %d jobs accepted before it, %d done" % (
        len(ids), len(ids)))
    for i, jid in enumerate(ids):
        svc.assert_same_image(apis[1].image(jid), cluster.spec(100 + i, steps=6),
                              "job %d" % i)


def test_poison(c):
    apis, r = c["apis"], c["redis"]
    # workers killed by the cases before come back first (a supervisor's job)
    for k, w in enumerate(c["workers"]):
        if w.proc is not None and not w.alive() and w.proc.returncode != 0:
            c["workers"][k] = worker(r, w.name).start()
    before = r.cmd("XLEN", "tsr:demo:dead")
    bad = apis[0].submit(prompt=POISON, width=64, height=64, steps=2, seed=1)["id"]
    good = [apis[1].submit(**cluster.spec(200 + i))["id"] for i in range(6)]
    # a supervisor: restart workers as they die
    deadline = time.time() + 240
    restarts = 0
    while apis[0].job(bad)["state"] not in ("failed", "done") and time.time() < deadline:
        for k, w in enumerate(c["workers"]):
            if w.proc is not None and not w.alive() and w.proc.returncode != 0:
                restarts += 1
                w2 = worker(r, w.name)
                c["workers"][k] = w2
                w2.start()
        time.sleep(0.2)
    j = apis[0].wait_job(bad, timeout=10)
    assert j["state"] == "failed" and "dead-lettered" in j["error"]["message"], j
    assert r.cmd("XLEN", "tsr:demo:dead") == before + 1
    svc.figure("poison job: failed after %d worker crashes: %s" % (restarts, j["error"]))
    for jid in good:
        assert apis[1].wait_job(jid, timeout=120)["state"] == "done"
    svc.wait_until(lambda: (svc.parse_metrics(r_get(apis[0])).value(
        "tessera_cluster_dead_letters") or 0) >= 1, 10, "dead letters in /metrics")
    assert restarts == 2, "expected --max-attempts 2 crashes, saw %d" % restarts


def teardown(c):
    for n in c.get("apis", []) + c.get("workers", []):
        if n.alive():
            n.stop(60)
    c["redis"].stop()


TESTS = [test_kills, test_redis_restart, test_poison]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS, setup=setup, teardown=teardown))
