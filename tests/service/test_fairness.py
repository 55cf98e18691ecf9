#!/usr/bin/env python3
"""tests/service/test_fairness.py - issue 62's quotas and fair turns (ctest:
service_fairness).

Why these cases: one client's flood of jobs must no longer delay another
client's first image beyond one free row, and must not fill the queue for
everyone.  So:

- test_flood_fair: --max-batch 2, key alice submits 20 images (one batch
  of 20 jobs, the realistic flood: one request), then key bob submits 1;
  bob's image must finish while alice has finished at most 6 (docs/perf.md
  carries the figure).  Under the old oldest-first order alice had all 20
  finished first, so the case fails without fair turns.
- test_one_key_fifo: the same flood with the 21st image sent by alice
  herself: with one key the order is oldest-first as before (the 21st
  finishes after at least 18 of the 20), which is also the "before" figure
  (the same binary, the same machine: the queue's rule with one key waiting
  is the old one).
- test_key_quota: --key-max-queue 2: alice, with 2 images waiting, gets 429
  queue_full + Retry-After in every submit route, each in its dialect's
  shape (the six routes of test_gate.py), and nothing is accepted; bob is
  still accepted; a request alone above the cap says so; /metrics has
  tessera_key_waiting_images per key.
- test_quota_keys_off: without keys, --key-max-queue is one cap for all.
- test_quota_cluster: with --queue, two api nodes (no worker, so images
  stay queued): alice's 2 images accepted by one node count on the other,
  which refuses her third and takes bob's (docs/scale-out.md).  Needs
  redis-server (TSR_REDIS_SERVER or on PATH); without it, says so and
  passes.

Sizes: the demo model at 64x64, few steps, --threads 1, so the whole file
runs in well under a minute on a loaded 2-core machine; the bounds (6 of
20, 18 of 20) leave room for the client being slow between the two posts.
"""
import os

import svc
import test_gate as gate

PROMPT = "a red circle on a blue background"
STEPS = 20
FLOOD = 20


class Ctx:
    pass


def setup():
    c = Ctx()
    d = svc.tmpdir("tsr-fair-")
    c.keys = os.path.join(d, "keys")
    c.alice = svc.new_key(c.keys, "alice")
    c.bob = svc.new_key(c.keys, "bob")
    c.s = svc.Server(["--threads", "1", "--max-batch", "2", "--keys", c.keys],
                     name="fair").start()
    return c


def flood(s, flooder, other):
    """flooder posts FLOOD images as one batch, then other posts one image.
    Returns (flooder's jobs, the single job, its position when accepted),
    all final."""
    s.token = flooder
    r = s.post("/v1/batches", {"defaults": dict(prompt=PROMPT, width=64, height=64, steps=STEPS),
                               "jobs": [{"seed": 100 + i} for i in range(FLOOD)]})
    assert r.status == 202, r
    ids = [x["id"] for x in r.json["jobs"]]
    s.token = other
    one = s.submit(prompt="a green square", width=64, height=64, steps=STEPS, seed=7)
    j1 = s.wait_job(one["id"])
    s.token = flooder
    jobs = [s.wait_job(i) for i in ids]
    assert j1["state"] == "done" and all(j["state"] == "done" for j in jobs), (j1, jobs)
    return jobs, j1, one["position"]


def finished_before(jobs, t):
    return sum(1 for j in jobs if j["finished"] <= t)


def test_flood_fair(c):
    s = c.s
    a, b, position = flood(s, c.alice, c.bob)
    at_submit = finished_before(a, b["created"])
    at_done = finished_before(a, b["finished"])
    svc.figure("--max-batch 2, alice 20 images then bob 1: bob's image done after %.2f s, "
               "while alice had %d finished (%d when bob submitted)"
               % (b["finished"] - b["created"], at_done, at_submit))
    assert at_done <= 6, "bob waited behind alice's flood: alice had %d of %d done (%d when " \
        "bob submitted)" % (at_done, FLOOD, at_submit)
    # its position says so: alice's next image at most, not her backlog
    assert position <= 1, "bob's job was told %d images are ahead" % position


def test_one_key_fifo(c):
    s = c.s
    a, b, position = flood(s, c.alice, c.alice)
    at_done = finished_before(a, b["finished"])
    # oldest first: the 21st image starts after every one of the 20 has
    starts = sorted(j["started"] for j in a)
    svc.figure("the same with one key (the old order): the 21st image done after %.2f s, "
               "%d of 20 finished before it" % (b["finished"] - b["created"], at_done))
    assert at_done >= FLOOD - 2, "one key is no longer oldest-first: %d of %d before" % (
        at_done, FLOOD)
    # one key: the plain count of alice's images still queued (20 less the
    # few started before the post; room for a slow client)
    assert position >= 6, "the 21st image was told only %d are ahead" % position
    assert b["started"] >= starts[-1], "the 21st started before the 20th: %s < %s" % (
        b["started"], starts[-1])


def waiting(s, key):
    return s.metrics().value("tessera_key_waiting_images", key=key)


def test_key_quota(c):
    s = svc.Server(["--threads", "1", "--max-batch", "1", "--keys", c.keys,
                    "--key-max-queue", "2", "--drain-timeout", "5"], name="quota").start()
    try:
        s.token = c.alice
        blocker = s.submit(prompt=PROMPT, width=64, height=64, steps=svc.LONG)
        svc.wait_until(lambda: s.job(blocker["id"])["state"] == "running", 60,
                       "alice's blocker running")
        s.submit(prompt=PROMPT, width=64, height=64, steps=1, n=2)   # alice: 2 waiting
        assert waiting(s, "alice") == 2, s.metrics().value("tessera_key_waiting_images",
                                                           key="alice")
        gate.refused_everywhere(s, "key_quota", 429, "queue_full", "--key-max-queue 2")
        r = s.post("/v1/jobs", dict(prompt=PROMPT, width=64, height=64, steps=1), timeout=30)
        assert "key 'alice' has 2 images waiting" in r.json["error"]["message"], r.json
        # bob is not affected: a job, and a batch up to the cap
        s.token = c.bob
        bj = s.submit(prompt=PROMPT, width=64, height=64, steps=1)
        r = s.post("/v1/batches", {"defaults": dict(prompt=PROMPT, width=64, height=64, steps=1),
                                   "jobs": [{}]})
        assert r.status == 202, r
        assert waiting(s, "bob") == 2 and waiting(s, "alice") == 2, s.metrics()
        # a request alone above the cap can never pass: it says so
        r = s.post("/v1/jobs", dict(prompt=PROMPT, width=64, height=64, steps=1, n=3))
        assert r.status == 429 and "alone" in r.json["error"]["message"], r
        # alice's waiting images leave: she may submit again
        s.token = c.alice
        assert s.delete("/v1/jobs/" + blocker["id"]).status in (200, 202)
        svc.wait_until(lambda: waiting(s, "alice") == 0, 60, "alice's images done")
        j = s.submit(prompt=PROMPT, width=64, height=64, steps=1)
        assert s.wait_job(j["id"])["state"] == "done"
        s.token = c.bob
        assert s.wait_job(bj["id"])["state"] == "done"
    finally:
        s.stop(60)


def test_quota_keys_off():
    s = svc.Server(["--threads", "1", "--max-batch", "1", "--key-max-queue", "1",
                    "--drain-timeout", "5"], name="quota-nokeys").start()
    try:
        blocker = s.submit(prompt=PROMPT, width=64, height=64, steps=svc.LONG)
        svc.wait_until(lambda: s.job(blocker["id"])["state"] == "running", 60, "blocker running")
        s.submit(prompt=PROMPT, width=64, height=64, steps=1)
        r = s.post("/v1/jobs", dict(prompt=PROMPT, width=64, height=64, steps=1))
        assert r.status == 429 and r.headers.get("retry-after") == "5", r
        assert "the client has 1 image waiting" in r.json["error"]["message"], r.json
        assert "tessera_key_waiting_images" not in s.get("/metrics").body.decode()
        s.delete("/v1/jobs/" + blocker["id"])
    finally:
        s.stop(60)


def test_quota_cluster(c):
    cluster = gate.cluster
    if not cluster.REDIS_SERVER:
        svc.figure("quota across api nodes: no redis-server (TSR_REDIS_SERVER), not run")
        return
    redis = cluster.Redis().start()
    extra = ["--keys", c.keys, "--key-max-queue", "2"]
    nodes = cluster.start_all([cluster.node(redis.url, "api", "api-a", extra),
                               cluster.node(redis.url, "api", "api-b", extra)])
    a, b = nodes
    try:
        a.token = b.token = c.alice
        a.submit(prompt=PROMPT, width=64, height=64, steps=1, n=2)
        svc.wait_until(lambda: waiting(b, "alice") == 2, 30, "api-b seeing alice's 2 images")
        r = b.post("/v1/jobs", dict(prompt=PROMPT, width=64, height=64, steps=1))
        assert r.status == 429 and r.headers.get("retry-after") == "5", r
        assert "--key-max-queue 2" in r.json["error"]["message"], r.json
        b.token = c.bob
        b.submit(prompt=PROMPT, width=64, height=64, steps=1)
        svc.figure("quota across api nodes: alice's 2 images on api-a -> 429 on api-b; bob 202")
    finally:
        for n in nodes:
            n.kill9()
        redis.stop()


TESTS = [test_flood_fair, test_one_key_fifo, test_key_quota, test_quota_keys_off,
         test_quota_cluster]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS, setup=setup, teardown=lambda c: c.s.stop(60)))
