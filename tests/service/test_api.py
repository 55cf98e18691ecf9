#!/usr/bin/env python3
"""tests/service/test_api.py - every endpoint of `tessera serve` on the happy
path (ctest: service_api).  One server (demo model, --max-batch 8), 64x64
images of 2-4 steps.  Every response is validated against docs/openapi.yaml
by the harness (svc.py); images are compared pixel for pixel with
`tessera generate`."""
import hashlib
import re
import threading
import time

import svc

PROMPT = "a red circle on a blue background"
FAST = dict(width=64, height=64, steps=2)


def setup():
    return svc.Server(["--max-batch", "8", "--threads", "1"], name="api").start()


def test_healthz_readyz(s):
    r = s.get("/healthz")
    assert r.status == 200 and r.json == {"status": "ok"}, r
    r = s.get("/readyz")
    assert r.status == 200 and r.json == {"status": "ready"}, r
    # a query string does not change the route
    assert s.get("/healthz?verbose=1").status == 200


def test_models(s):
    r = s.get("/v1/models")
    assert r.status == 200, r
    (m,) = r.json["data"]
    assert m["id"] == "demo", m
    assert m["family"] == "SD1.x" and m["default_size"] == 128 and m["inpainting"] is False, m
    assert m["created"] > 1_500_000_000, m
    assert "cpu" in m["device"], m


def test_samplers_schedulers(s):
    r = s.get("/v1/samplers")
    names = {x["name"]: x for x in r.json["samplers"]}
    for n in ("euler", "euler_a", "dpmpp_2m", "ddim"):
        assert n in names, sorted(names)
    assert names["euler_a"]["a1111"] == "Euler a", names["euler_a"]
    assert names["euler"]["diffusers"] == "EulerDiscreteScheduler", names["euler"]
    r2 = s.get("/v1/schedulers")
    sched = {x["name"] for x in r2.json["schedulers"]}
    assert {"default", "karras", "exponential", "sgm_uniform"} <= sched, sched
    for x in r.json["samplers"]:
        assert set(x["schedules"]) <= sched, x
    # every name listed is accepted by POST /v1/jobs (short and A1111 names)
    # at 2 steps: each runs, or is refused at submit naming steps (a sampler
    # that needs more); never accepted and then failed
    ids = []
    bad = []
    for x in r.json["samplers"]:
        for name in (x["name"], x["a1111"]):
            if name:
                rj = s.post("/v1/jobs", dict(prompt=PROMPT, sampler=name, width=64, height=64,
                                             steps=2, seed=1))
                if rj.status == 202:
                    ids.append((name, rj.json["id"]))
                elif not (rj.status == 400 and rj.error.get("field") == "steps"):
                    bad.append("sampler %r: %r" % (name, rj))
                else:
                    svc.note("sampler %s at 2 steps" % name, "400 steps")
    for name, i in ids:
        j = s.wait_job(i)
        if j["state"] != "done":
            bad.append("sampler %r: %s %s" % (name, j["state"], j["error"]))
    assert not bad, "listed samplers that do not run:\n  " + "\n  ".join(bad)


def test_job_lifecycle(s):
    t0 = time.time()
    c = s.submit(prompt=PROMPT, seed=42, **FAST)
    assert c["state"] == "queued" and c["images"] == 1 and c["seed"] == 42, c
    assert c["urls"] == {"self": "/v1/jobs/" + c["id"], "events": "/v1/jobs/%s/events" % c["id"]}
    assert abs(c["created"] - t0) < 5, (c["created"], t0)
    j = s.wait_job(c["id"])
    assert j["state"] == "done", j
    assert j["step"] == j["steps"] == 2 and j["position"] is None and j["error"] is None, j
    assert j["created"] <= j["started"] <= j["finished"], j
    assert j["batch"] is None, j
    p = j["params"]
    assert (p["prompt"], p["seed"], p["width"], p["height"], p["steps"]) == \
        (PROMPT, 42, 64, 64, 2), p
    (img,) = j["images"]
    assert img == dict(img, index=0, seed=42, state="done", step=2,
                       url="/v1/jobs/%s/images/0.png" % c["id"]), img
    data = s.image(c["id"], 0)
    png = svc.assert_same_image(data, dict(prompt=PROMPT, seed=42, **FAST), "job")
    assert img["infotext"] == png.texts["parameters"], (img["infotext"], png.texts)
    assert "Seed: 42" in img["infotext"] and "Size: 64x64" in img["infotext"], img["infotext"]


def test_n_images(s):
    c = s.submit(prompt=PROMPT, seed=100, n=3, **FAST)
    assert c["images"] == 3, c
    j = s.wait_job(c["id"])
    assert j["state"] == "done" and j["steps"] == 6 and j["step"] == 6, j
    assert [(i["index"], i["seed"]) for i in j["images"]] == [(0, 100), (1, 101), (2, 102)], j
    for i in range(3):
        svc.assert_same_image(s.image(c["id"], i), dict(prompt=PROMPT, seed=100 + i, **FAST),
                              "image %d" % i)
    assert s.get("/v1/jobs/%s/images/3.png" % c["id"]).status == 404


def test_random_seed(s):
    a = s.submit(prompt=PROMPT, **FAST)
    b = s.submit(prompt=PROMPT, seed=-1, **FAST)
    assert a["seed"] != b["seed"], (a, b)
    for c in (a, b):
        j = s.wait_job(c["id"])
        assert j["params"]["seed"] == c["seed"] == j["images"][0]["seed"], (c, j)
    # the reported seed reproduces the image (when generate can take it)
    if a["seed"] <= 2**63 - 1:
        svc.assert_same_image(s.image(a["id"]), dict(prompt=PROMPT, seed=a["seed"], **FAST),
                              "random seed")


def test_seed_limits(s):
    top = 2**64 - 1
    c = s.submit(prompt=PROMPT, seed=top, width=64, height=64, steps=1)
    assert c["seed"] == top, c
    j = s.wait_job(c["id"])
    assert j["state"] == "done" and j["params"]["seed"] == top, j
    svc.note("seed 2^64-1", 202)
    c = s.submit(prompt=PROMPT, seed=0, width=64, height=64, steps=1)
    assert c["seed"] == 0
    s.wait_job(c["id"])


def test_exact_numbers(s):
    # 0.8446744073709551 needs 16 digits: cJSON's own printer writes 15
    # (0.844674407370955, another double); the view and the journal must not
    cfg, rescale = 0.8446744073709551, 0.1 + 0.2
    c = s.submit(prompt=PROMPT, seed=3, cfg_scale=cfg, guidance_rescale=rescale, **FAST)
    j = s.wait_job(c["id"])
    assert j["params"]["cfg_scale"] == cfg, j["params"]
    assert j["params"]["guidance_rescale"] == rescale, j["params"]


def test_unknown_fields_ignored(s):
    r = s.post("/v1/jobs", dict(prompt=PROMPT, seed=7, future_field=1,
                                nested={"a": [1, {"b": None}]}, **FAST))
    svc.note("unknown fields future_field, nested", r.status)
    assert r.status == 202, r
    j = s.wait_job(r.json["id"])
    assert j["state"] == "done", j
    svc.assert_same_image(s.image(r.json["id"]), dict(prompt=PROMPT, seed=7, **FAST), "unknown")


def test_max_steps(s):
    """steps 1000 is within the contract's range: either refused at submit
    (400 naming steps) or run; never accepted and then failed."""
    r = s.post("/v1/jobs", dict(prompt=PROMPT, seed=8, width=64, height=64, steps=1000))
    svc.note("steps 1000 (contract maximum, DDIM model)", r.status)
    if r.status == 400:
        assert r.error["field"] == "steps", r
        return
    assert r.status == 202, r
    jid = r.json["id"]
    j = svc.wait_until(lambda: (lambda j: j if j["step"] >= 2 or j["state"] in
                                ("done", "failed", "cancelled") else None)(s.job(jid)),
                       60, "2 steps of a 1000-step job")
    s.delete("/v1/jobs/" + jid)
    assert j["state"] != "failed", "accepted a 1000-step job, then it failed: %s" % j["error"]


def test_png_caching(s):
    c = s.submit(prompt=PROMPT, seed=5, **FAST)
    s.wait_job(c["id"])
    path = "/v1/jobs/%s/images/0.png" % c["id"]
    r = s.get(path)
    assert r.status == 200 and r.headers["content-type"] == "image/png", r
    assert r.headers["cache-control"] == "public, max-age=31536000, immutable", r.headers
    etag = r.headers["etag"]
    assert etag == svc.etag_of(r.body), (etag, svc.etag_of(r.body))
    assert int(r.headers.get("content-length", len(r.body))) == len(r.body)
    r2 = s.get(path, headers={"If-None-Match": etag})
    assert r2.status == 304 and r2.body == b"" and r2.headers["etag"] == etag, r2
    r3 = s.get(path, headers={"If-None-Match": '"0123456789abcdef0123456789abcdef"'})
    assert r3.status == 200 and r3.body == r.body, r3
    r4 = s.get(path, headers={"If-None-Match": '"0123456789abcdef0123456789abcdef", ' + etag})
    svc.note("If-None-Match list containing the ETag", r4.status)
    assert r4.status == 304, "If-None-Match with a list holding the ETag: %d" % r4.status
    # the same bytes every time
    assert s.get(path).body == r.body
    assert hashlib.sha256(r.body).hexdigest()[:32] == etag.strip('"')


def test_head(s):
    c = s.submit(prompt=PROMPT, seed=6, **FAST)
    s.wait_job(c["id"])
    for path in ("/v1/jobs/" + c["id"], "/v1/jobs/%s/images/0.png" % c["id"], "/healthz",
                 "/v1/models"):
        g = s.get(path)
        h = s.request("HEAD", path)
        assert h.status == 200 and h.body == b"", h
        assert h.headers.get("content-type") == g.headers.get("content-type"), (h.headers,
                                                                               g.headers)
        if "etag" in g.headers:
            assert h.headers["etag"] == g.headers["etag"]
    assert s.request("HEAD", "/v1/jobs/j_0000000000000000").status == 404


def test_image_404_until_done_and_cancel(s):
    c = s.submit(prompt=PROMPT, seed=9, width=64, height=64, steps=svc.LONG)
    path = "/v1/jobs/%s/images/0.png" % c["id"]
    r = s.get(path)
    assert r.status == 404 and r.error["code"] == "not_found", r
    svc.wait_until(lambda: s.job(c["id"])["state"] == "running", 60, "job running")
    assert s.get(path).status == 404
    j = s.job(c["id"])
    assert j["started"] is not None and j["finished"] is None and j["position"] is None, j
    d = s.delete("/v1/jobs/" + c["id"])
    assert d.status == 200 and d.json["state"] == "cancelled", d
    assert d.json["finished"] is not None, d.json
    assert all(i["state"] == "cancelled" and i["url"] is None for i in d.json["images"]), d.json
    assert s.get(path).status == 404
    d2 = s.delete("/v1/jobs/" + c["id"])
    svc.note("DELETE cancelled job", d2.status)
    assert d2.status == 409 and d2.error["code"] == "conflict", d2
    # the stream of a cancelled job ends with `cancelled`
    ev = s.events("/v1/jobs/%s/events" % c["id"])
    assert ev[-1].name == "cancelled", ev[-3:]


def test_cancel_queued(s):
    long = s.submit(prompt=PROMPT, seed=1, width=64, height=64, steps=svc.LONG, n=8)
    q = s.submit(prompt=PROMPT, seed=2, width=128, height=128, steps=3)
    j = s.job(q["id"])
    assert j["state"] == "queued" and j["position"] is not None, j
    d = s.delete("/v1/jobs/" + q["id"])
    assert d.status == 200 and d.json["state"] == "cancelled" and d.json["started"] is None, d
    s.delete("/v1/jobs/" + long["id"])
    svc.wait_until(lambda: s.metrics().value("tessera_running_images") == 0, 30, "idle")
    assert s.metrics().value("tessera_queue_images") == 0


def test_delete_done_conflict(s):
    c = s.submit(prompt=PROMPT, seed=3, width=64, height=64, steps=1)
    s.wait_job(c["id"])
    r = s.delete("/v1/jobs/" + c["id"])
    svc.note("DELETE finished job", r.status)
    assert r.status == 409 and r.error["code"] == "conflict", r
    assert s.job(c["id"])["state"] == "done"


def test_batch(s):
    body = {"defaults": dict(prompt=PROMPT, **FAST),
            "jobs": [{"seed": 11}, {"seed": 12, "prompt": "a green star"},
                     {"seed": 13, "n": 2}, {"seed": 14, "steps": 6}]}
    t_submit = time.time()
    r = s.post("/v1/batches", body)
    assert r.status == 202, r
    b = r.json
    assert b["count"] == 4 and len(b["jobs"]) == 4, b
    assert r.headers["location"] == "/v1/batches/" + b["id"], r.headers
    # the events stream each image as it finishes: the 2-step jobs' images
    # come while the 6-step job still runs
    events = []
    first_image_state = {}

    def on(ev):
        events.append((time.time(), ev))
        if ev.name == "image" and not first_image_state:
            first_image_state["last_job"] = s.job(b["jobs"][3]["id"])["state"]
        return False
    svc.sse_read(s.port, "/v1/batches/%s/events" % b["id"], headers=s.auth(None), until=on)
    names = [e.name for _, e in events]
    assert names[-1] == "done", names
    assert names.count("image") == 5 and names.count("job") == 4, names
    assert events[-1][1].data["counts"] == dict(queued=0, running=0, done=4, failed=0,
                                                cancelled=0), events[-1][1].data
    jobs_ids = [x["id"] for x in b["jobs"]]
    seen = {(e.data["job"], e.data["index"]) for _, e in events if e.name == "image"}
    assert seen == {(jobs_ids[0], 0), (jobs_ids[1], 0), (jobs_ids[2], 0), (jobs_ids[2], 1),
                    (jobs_ids[3], 0)}, seen
    for _, e in events:
        if e.name == "image":
            assert e.data["url"] == "/v1/jobs/%s/images/%d.png" % (e.data["job"], e.data["index"])
    # a job event comes after the images of that job
    for jid in jobs_ids:
        pos_job = [i for i, (_, e) in enumerate(events) if e.name == "job" and e.data["job"] == jid]
        pos_img = [i for i, (_, e) in enumerate(events) if e.name == "image" and e.data["job"] == jid]
        assert len(pos_job) == 1 and max(pos_img) < pos_job[0], (jid, names)
    assert first_image_state.get("last_job") in ("queued", "running"), \
        "first image event came only after the 6-step job was %s" % first_image_state
    g = s.get("/v1/batches/" + b["id"])
    assert g.status == 200 and g.json["state"] == "done", g
    assert [x["id"] for x in g.json["jobs"]] == jobs_ids, g.json
    for x in g.json["jobs"]:
        assert x["state"] == "done" and all(i["url"] for i in x["images"]), x
    seeds = [11, 12, 13, 14]
    prompts = [PROMPT, "a green star", PROMPT, PROMPT]
    steps = [2, 2, 2, 6]
    for k, jid in enumerate(jobs_ids):
        j = s.job(jid)
        assert j["batch"] == b["id"], j
        for i in range(len(j["images"])):
            svc.assert_same_image(s.image(jid, i), dict(prompt=prompts[k], seed=seeds[k] + i,
                                                        width=64, height=64, steps=steps[k]),
                                  "batch job %d image %d" % (k, i))
    # DELETE on a finished batch cancels nothing
    d = s.delete("/v1/batches/" + b["id"])
    assert d.status == 200 and d.json["counts"]["done"] == 4 and d.json["state"] == "done", d
    # a client connecting after the end gets the whole stream again
    again = s.events("/v1/batches/%s/events" % b["id"])
    assert [e.name for e in again] == names, [e.name for e in again]
    assert time.time() - t_submit < 300


def test_batch_cancel(s):
    body = {"defaults": dict(prompt=PROMPT, width=64, height=64, steps=svc.LONG),
            "jobs": [{"seed": i} for i in range(5)]}
    r = s.post("/v1/batches", body)
    assert r.status == 202, r
    bid = r.json["id"]
    sse = svc.SSE(s.port, "/v1/batches/%s/events" % bid, s.auth(None))
    d = s.delete("/v1/batches/" + bid)
    assert d.status == 200, d
    assert d.json["state"] == "done" and d.json["counts"]["cancelled"] == 5, d.json
    assert all(x["state"] == "cancelled" for x in d.json["jobs"]), d.json
    evs = []
    while True:
        e = sse.next()
        if e is None:
            break
        evs.append(e)
    sse.close()
    assert [e.name for e in evs].count("job") == 5 and evs[-1].name == "done", evs
    assert all(e.data["state"] == "cancelled" for e in evs if e.name == "job"), evs
    for x in r.json["jobs"]:
        assert s.delete("/v1/jobs/" + x["id"]).status == 409
    svc.wait_until(lambda: s.metrics().value("tessera_running_images") == 0, 30, "idle")


def test_metrics(s):
    m = s.metrics()
    b = [le for le, _ in m.buckets("tessera_unet_call_images")]
    assert b == [1, 2, 4, 8, 16, 32, float("inf")], b
    assert m.value("tessera_images_total") >= 5, m.value("tessera_images_total")
    assert m.value("tessera_jobs_total", state="done") >= 5
    assert m.value("tessera_unet_calls_total") >= 1
    assert m.value("tessera_http_responses_total", code="202") >= 5
    assert m.value("tessera_http_responses_total", code="404") >= 1
    assert m.value("tessera_http_responses_total", code="409") >= 1
    for h in ("tessera_unet_call_seconds", "tessera_job_first_step_seconds",
              "tessera_job_done_seconds"):
        assert m.value(h + "_count") >= 1, h
    rss = m.value("tessera_process_resident_bytes")
    proc_rss = s.rss_kib() * 1024
    assert 0.5 * proc_rss < rss < 2 * proc_rss, (rss, proc_rss)
    fds = m.value("tessera_process_open_fds")
    assert abs(fds - s.fds()) <= 8, (fds, s.fds())
    assert m.value("tessera_queue_images") >= 0 and m.value("tessera_running_images") >= 0
    r = s.get("/metrics")
    assert r.headers["content-type"].replace(" ", "").startswith("text/plain;version=0.0.4"), \
        r.headers


def test_access_log(s):
    s.get("/healthz?access-log-probe=1")
    s.get("/v1/jobs/j_00000000000000ff")

    def logged():
        out = s.all_output()
        return re.search(r"GET\s+/healthz\S*\s.*\b200\b", out) and \
            re.search(r"GET\s+/v1/jobs/j_00000000000000ff\s.*\b404\b", out)
    svc.wait_until(logged, 5, "access log lines for GET /healthz 200 and the 404")


def test_concurrent_clients(s):
    """Many clients at once: every request answered, the server stays up."""
    errors = []

    def client(k):
        try:
            for _ in range(10):
                r = s.get("/v1/models")
                assert r.status == 200
                r = s.get("/v1/jobs/j_%016x" % k)
                assert r.status == 404
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
    ts = [threading.Thread(target=client, args=(k,)) for k in range(32)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors[:3]


TESTS = [test_healthz_readyz, test_models, test_samplers_schedulers, test_job_lifecycle,
         test_n_images, test_random_seed, test_seed_limits, test_unknown_fields_ignored,
         test_max_steps, test_png_caching, test_head, test_image_404_until_done_and_cancel, test_cancel_queued,
         test_delete_done_conflict, test_batch, test_batch_cancel, test_concurrent_clients,
         test_metrics, test_access_log]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS, setup=setup))
