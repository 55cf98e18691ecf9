#!/usr/bin/env python3
"""tests/cluster/test_basic.py - two api nodes and two worker nodes on one
Redis Streams queue (ctest: cluster_basic): jobs submitted round robin
across the api nodes, followed by SSE on the *other* api node; every image,
fetched from either api node, equals `tessera generate`'s; the queue drains
to zero and /metrics shows the shared figures.  Also: a cancel and a batch
seen through the other api node, the 429 of a node that counts the shared
queue, worker nodes refusing jobs, bad --queue URLs (exit 2); preview tiles
computed on a worker node served by both api nodes (same bytes, ETag,
immutable), and one job's event stream resumed on the other api node with
Last-Event-ID (same ids everywhere: no gap, no repeat)."""
import os
import time

import cluster
import svc

ctx = {}


def setup():
    r = cluster.Redis().start()
    apis = [cluster.node(r.url, "api", "api%d" % i) for i in range(2)]
    workers = [cluster.node(r.url, "worker", "worker%d" % i, ["--max-batch", "4"])
               for i in range(2)]
    cluster.start_all(apis + workers)
    ctx.update(redis=r, apis=apis, workers=workers)
    return ctx


def test_round_robin(c):
    apis = c["apis"]
    specs = [cluster.spec(i) for i in range(12)]
    ids = []
    for i, p in enumerate(specs):
        ids.append(apis[i % 2].submit(**p)["id"])
    for i, jid in enumerate(ids):
        other = apis[(i + 1) % 2]
        ev = other.events("/v1/jobs/%s/events" % jid, timeout=120)
        names = [e.name for e in ev]
        assert names[-1] == "done", (jid, names)
        assert names.count("image") == 1, (jid, names)
        assert "started" in names, (jid, names)
        assert [e.id for e in ev] == list(range(1, len(ev) + 1)), [e.id for e in ev]
    for i, (p, jid) in enumerate(zip(specs, ids)):
        for a in apis:
            svc.assert_same_image(a.image(jid), p, "job %d via %s" % (i, a.name))
        j = apis[(i + 1) % 2].job(jid)
        assert j["state"] == "done" and j["images"][0]["state"] == "done", j
    # the images were computed by the worker nodes only
    results = sum(w.metrics().value("tessera_cluster_results_total") for w in c["workers"])
    assert results == len(ids), results
    svc.figure("2 api + 2 worker nodes: %d jobs, results stored per worker: %s" % (
        len(ids), [w.metrics().value("tessera_cluster_results_total") for w in c["workers"]]))
    svc.wait_until(lambda: apis[0].metrics().value("tessera_cluster_queue_entries") == 0, 10,
                   "an empty shared queue")


def test_cancel_everywhere(c):
    """A DELETE on one api node cancels the job on the other too; the
    workers skip its images not yet started."""
    apis = c["apis"]
    # enough queued work that the last job is still waiting when cancelled
    ids = [apis[0].submit(**cluster.spec(300 + i, steps=20))["id"] for i in range(12)]
    r = apis[0].delete("/v1/jobs/" + ids[-1])
    assert r.status == 200 and r.json["state"] == "cancelled", r
    ev = apis[1].events("/v1/jobs/%s/events" % ids[-1], timeout=60)
    assert ev[-1].name == "cancelled", [e.name for e in ev]
    for jid in ids[:-1]:
        assert apis[1].wait_job(jid)["state"] == "done"
    assert apis[0].job(ids[-1])["state"] == "cancelled"
    svc.wait_until(lambda: apis[0].metrics().value("tessera_cluster_queue_entries") == 0, 10,
                   "an empty shared queue")
    # a running image stops on its worker (a long job: minutes if it ran on)
    long = apis[0].submit(**dict(cluster.spec(350), steps=svc.LONG))["id"]
    svc.wait_until(lambda: apis[1].job(long)["state"] == "running", 30, "the long job running")
    svc.wait_until(lambda: apis[0].metrics().value("tessera_cluster_queue_entries") == 1, 5,
                   "the long job's entry in the shared figures")
    t0 = time.time()
    assert apis[1].delete("/v1/jobs/" + long).status == 200
    svc.wait_until(lambda: apis[0].metrics().value("tessera_cluster_queue_entries") == 0, 15,
                   "the running image stopped and acked")
    svc.figure("a running image cancelled through the other api node left the queue in %.2fs"
               % (time.time() - t0))
    assert apis[0].job(long)["state"] == "cancelled"


def test_batch_on_other_node(c):
    """A batch submitted on api 0 is served, with its event stream, by api 1."""
    apis = c["apis"]
    d = dict(prompt=cluster.PROMPT, width=64, height=64, steps=2)
    r = apis[0].post("/v1/batches", {"defaults": d, "jobs": [{"seed": 400 + i}
                                                             for i in range(4)]})
    assert r.status == 202, r
    # known on api 1 right away (the batch lookup waits for the follower)
    assert apis[1].get("/v1/batches/" + r.json["id"]).status == 200
    ev = apis[1].events("/v1/batches/%s/events" % r.json["id"], timeout=120)
    assert ev[-1].name == "done" and ev[-1].data["counts"]["done"] == 4, [e.name for e in ev]
    b = apis[1].get("/v1/batches/" + r.json["id"]).json
    assert [x["id"] for x in b["jobs"]] == [x["id"] for x in r.json["jobs"]], b
    for i, x in enumerate(r.json["jobs"]):
        svc.assert_same_image(apis[1].image(x["id"]), dict(d, seed=400 + i), "batch job %d" % i)


def _comparable(ev):
    """An event without what each api node measures itself (the eta)."""
    data = dict(ev.data or {})
    data.pop("eta", None)
    return (ev.id, ev.name, data)


def test_tiles_across_nodes(c):
    """Tiles computed on a worker node: `tiles` events on api 1 for a job
    submitted on api 0; every tile URL serves the same bytes and ETag from
    both api nodes, immutable; the final tiles stay after the job ends."""
    apis = c["apis"]
    job = apis[0].submit(prompt=cluster.PROMPT, width=128, height=96, steps=6, seed=77)
    jid = job["id"]
    ev = apis[1].events("/v1/jobs/%s/events" % jid, timeout=120)
    names = [e.name for e in ev]
    assert names[-1] == "done", names
    tiles = [e for e in ev if e.name == "tiles"]
    assert len(tiles) >= 2, names
    # 128x96 with the default 64 px tiles: 2 x 2; the final publish has them all, before `image`
    last = tiles[-1]
    assert names.index("image") > ev.index(last), names
    assert len(last.data["tiles"]) == 4, last.data
    urls = [t["url"] for e in tiles for t in e.data["tiles"]]
    assert all(u.startswith("/v1/jobs/%s/images/0/tiles/" % jid) for u in urls), urls
    seen = {}
    for u in urls:
        got = []
        for a in apis:
            r = a.get(u)
            assert r.status == 200 and r.body[:2] == b"\xff\xd8", (a.name, u, r)
            assert r.headers["cache-control"] == "public, max-age=31536000, immutable", r.headers
            got.append((r.body, r.headers["etag"]))
        assert got[0] == got[1], (u, "bytes or ETag differ between the api nodes")
        seen[u] = got[0]
    # the manifest (final versions) agrees on both nodes, and its URLs serve the same bytes
    # (each node applies the job's `done` from the stream on its own: the
    # node that did not serve the events may still say "running" for a few
    # ms after the other said done, so each is read once it says done)
    m = []
    for a in apis:
        deadline = time.time() + 10
        while True:
            r = a.get("/v1/jobs/%s/images/0/tiles" % jid)
            if r.status != 200 or r.json.get("state") == "done" or time.time() > deadline:
                break
            time.sleep(0.02)
        m.append(r)
    assert m[0].status == 200 and m[1].status == 200, m
    assert m[0].json == m[1].json, (m[0].json, m[1].json)
    final = {t["url"] for t in last.data["tiles"]}
    assert {t["url"] for t in m[0].json["tiles"]} == final, (m[0].json, final)
    # the same URLs, fetched again later, are the same bytes (immutable)
    for u in final:
        for a in apis:
            r = a.get(u)
            assert (r.body, r.headers["etag"]) == seen[u], u
    # the final tiles are each api node's <i>.tiles (served after a restart), the same
    # bytes; the worker nodes keep no scratch copy once the image is stored
    files = [open(os.path.join(a.data_dir, "jobs", jid, "0.tiles"), "rb").read() for a in apis]
    assert files[0] == files[1] and files[0][:8] == b"TSRTILE1", [len(f) for f in files]
    for w in c["workers"]:
        left = os.path.join(w.data_dir, "worker", "jobs", jid)
        svc.wait_until(lambda: not os.path.exists(left), 10, "no scratch files on " + w.name)
    svc.figure("tiles across nodes: %d tiles events, %d tile URLs, same bytes on 2 api nodes"
               % (len(tiles), len(urls)))
    nbytes = sum(w.metrics().value("tessera_tile_bytes_total") or 0 for w in c["workers"])
    ntiles = sum(w.metrics().value("tessera_tiles_published_total") or 0 for w in c["workers"])
    svc.figure("tiles published by the worker nodes: %d tiles, %d bytes (%.0f bytes per tile)"
               % (ntiles, nbytes, nbytes / max(ntiles, 1)))


def test_resume_on_other_node(c):
    """A job's event stream read in part on api 0, resumed on api 1 with
    Last-Event-ID: exactly the remaining events (same ids, same order)."""
    apis = c["apis"]
    jid = apis[1].submit(prompt=cluster.PROMPT, width=128, height=64, steps=8, seed=91)["id"]
    part = apis[0].events("/v1/jobs/%s/events" % jid, timeout=60,
                          until=lambda e: e.name == "step")
    assert part and part[-1].name == "step", [e.name for e in part]
    rest = apis[1].events("/v1/jobs/%s/events" % jid, timeout=120,
                          headers={"Last-Event-ID": str(part[-1].id)})
    assert rest and rest[-1].name == "done", [e.name for e in rest]
    full = [apis[k].events("/v1/jobs/%s/events" % jid, timeout=60) for k in range(2)]
    a, b = [[_comparable(e) for e in f] for f in full]
    assert a == b, ("the api nodes disagree", a, b)
    assert [e.id for e in full[0]] == list(range(1, len(full[0]) + 1)), a
    assert [_comparable(e) for e in part] + [_comparable(e) for e in rest] == a, (
        "gap or repeat", [e.id for e in part], [e.id for e in rest])
    assert full[0][0].name == "queued", a
    svc.figure("SSE resumed on the other api node after event %d: %d more events, none "
               "missing or repeated" % (part[-1].id, len(rest)))


def test_events_before_accept_ends(c):
    """The accepting node hears of the job's first events (queued, started,
    steps) from the stream before its own accept has ended
    (TSR_TEST_ACCEPT_DELAY_MS): it applies them afterwards, in the stream's
    order, so its event ids are those of the other api nodes."""
    os.environ["TSR_TEST_ACCEPT_DELAY_MS"] = "600"
    try:
        slow = cluster.node(c["redis"].url, "api", "api-slow").start()
    finally:
        del os.environ["TSR_TEST_ACCEPT_DELAY_MS"]
    try:
        # its follower at the head of the stream first (it read it all from the start)
        warm = c["apis"][0].submit(**cluster.spec(93))["id"]
        assert slow.wait_job(warm)["state"] == "done"
        jid = slow.submit(prompt=cluster.PROMPT, width=64, height=64, steps=6, seed=93)["id"]
        full = [a.events("/v1/jobs/%s/events" % jid, timeout=60) for a in (slow, c["apis"][0])]
        a, b = [[_comparable(e) for e in f] for f in full]
        assert a == b, ("the api nodes disagree", a, b)
        names = [e.name for e in full[0]]
        assert names[0] == "queued" and "started" in names and names[-1] == "done", names
    finally:
        assert slow.stop(60) == 0, slow.output()


def test_429_from_shared_queue(c):
    """An api node's 429 counts the shared queue, whichever node queued it."""
    apis = c["apis"]
    small = cluster.node(c["redis"].url, "api", "api-small", ["--max-queue", "4"]).start()
    try:
        r = apis[0].post("/v1/batches", {"defaults": dict(prompt=cluster.PROMPT, width=64,
                                                          height=64, steps=100),
                                         "jobs": [{"seed": 500 + i} for i in range(12)]})
        assert r.status == 202, r
        svc.wait_until(lambda: (small.metrics().value("tessera_cluster_queue_entries") or 0)
                       > 4, 10, "the shared queue seen by the new node")
        resp = small.post("/v1/jobs", cluster.spec(9))
        assert resp.status == 429 and resp.headers.get("retry-after"), (resp.status, resp.body)
        svc.figure("api node with --max-queue 4: 429 with %d images in the shared queue" %
                   small.metrics().value("tessera_cluster_queue_entries"))
        assert apis[0].delete("/v1/batches/" + r.json["id"]).status == 200
        svc.wait_until(lambda: apis[0].metrics().value("tessera_cluster_queue_entries") == 0,
                       120, "the cancelled batch leaving the queue")
    finally:
        small.stop(60)


def test_worker_refuses_jobs(c):
    r = c["workers"][0].post("/v1/jobs", cluster.spec(0))
    assert r.status == 503 and r.headers.get("retry-after"), (r.status, r.body)


def test_bad_queue_url(c):
    import subprocess
    for url in ["http://x", "redis://h:0", "redis://u:p@h", "redis://h/x"]:
        p = subprocess.run([svc.TSR_BIN, "serve", "--queue", url], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=30)
        assert p.returncode == 2 and b"--queue" in p.stdout, (url, p.returncode, p.stdout)


def teardown(c):
    for n in c.get("apis", []) + c.get("workers", []):
        assert n.stop(60) == 0, n.output()
    c["redis"].stop()


TESTS = [test_round_robin, test_cancel_everywhere, test_batch_on_other_node,
         test_tiles_across_nodes, test_resume_on_other_node, test_events_before_accept_ends,
         test_429_from_shared_queue, test_worker_refuses_jobs, test_bad_queue_url]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS, setup=setup, teardown=teardown))
