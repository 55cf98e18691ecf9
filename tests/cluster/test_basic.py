#!/usr/bin/env python3
"""tests/cluster/test_basic.py - two api nodes and two worker nodes on one
Redis Streams queue (ctest: cluster_basic): jobs submitted round robin
across the api nodes, followed by SSE on the *other* api node; every image,
fetched from either api node, equals `tessera generate`'s; the queue drains
to zero and /metrics shows the shared figures.  Also: a cancel and a batch
seen through the other api node, the 429 of a node that counts the shared
queue, worker nodes refusing jobs, bad --queue URLs (exit 2)."""
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
    apis[1].job(r.json["jobs"][0]["id"])  # known on api 1 (waits for the follower)
    ev = apis[1].events("/v1/batches/%s/events" % r.json["id"], timeout=120)
    assert ev[-1].name == "done" and ev[-1].data["counts"]["done"] == 4, [e.name for e in ev]
    b = apis[1].get("/v1/batches/" + r.json["id"]).json
    assert [x["id"] for x in b["jobs"]] == [x["id"] for x in r.json["jobs"]], b
    for i, x in enumerate(r.json["jobs"]):
        svc.assert_same_image(apis[1].image(x["id"]), dict(d, seed=400 + i), "batch job %d" % i)


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
         test_429_from_shared_queue, test_worker_refuses_jobs, test_bad_queue_url]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS, setup=setup, teardown=teardown))
