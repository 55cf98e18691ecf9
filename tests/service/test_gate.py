#!/usr/bin/env python3
"""tests/service/test_gate.py - the submit gate (service/jobs/gate.c; ctest:
service_gate): every dialect against the same gate cases.

Issue 56: the checks of the submit gate were copied into each dialect's
submit route, and the copies drifted: a `--role worker` node refused native
jobs with 503 (docs/scale-out.md) but queued A1111 and OpenAI calls, and
refused batches as "queue unreachable".  Here the seven submit routes

    POST /v1/jobs, /v1/batches, /sdapi/v1/txt2img, /sdapi/v1/img2img,
    /v1/images/generations, /v1/images/edits, and ComfyUI's /prompt

meet the same cases, and each must give the same status, code and message
in its own dialect's error shape, with Retry-After, and accept nothing:

- loading: the engines are still opening (503; only when the server can be
  caught before it is ready, which the demo model rarely allows);
- worker: a --queue node with --role worker (503);
- redis_away: an api node whose Redis has stopped (503);
- queue_full: --max-queue 1, one long job running and one image queued
  (429);
- draining: the same server after SIGTERM, the long job still running (503).

The cluster cases need redis-server (TSR_REDIS_SERVER or on PATH); without
it they say so and pass.
"""
import os
import signal
import sys
import time

import svc
import test_admission_cost as adm

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cluster"))
import cluster  # noqa: E402

PROMPT = "a gate in a stone wall"
SMALL = dict(prompt=PROMPT, width=64, height=64, steps=1)
DIALECTS = [
    ("POST /v1/jobs", "native", lambda s: s.post("/v1/jobs", SMALL, timeout=30)),
    ("POST /v1/batches", "native",
     lambda s: s.post("/v1/batches", {"defaults": SMALL, "jobs": [{}]}, timeout=30)),
    ("POST /sdapi/v1/txt2img", "a1111", lambda s: s.post("/sdapi/v1/txt2img", SMALL, timeout=30)),
    ("POST /sdapi/v1/img2img", "a1111", lambda s: s.post("/sdapi/v1/img2img", dict(
        SMALL, steps=2, init_images=[svc.b64(adm.SMALL_PNG)]), timeout=30)),
    ("POST /v1/images/generations", "openai", lambda s: s.post("/v1/images/generations", dict(
        prompt=PROMPT, size="64x64", steps=1), timeout=30)),
    ("POST /v1/images/edits", "openai",
     lambda s: adm.edits(s, dict(prompt=PROMPT, steps=2), adm.SMALL_PNG)),
]
def comfy_prompt(s):
    """ComfyUI's default graph at 64x64, one step, through POST /prompt."""
    names = s.get("/models/checkpoints", timeout=30).json or []
    ckpt = names[0] if names else "demo"
    wf = {"3": {"class_type": "KSampler", "inputs": {
              "seed": 1, "steps": 1, "cfg": 7.5, "sampler_name": "euler", "scheduler": "normal",
              "denoise": 1.0, "model": ["4", 0], "positive": ["6", 0], "negative": ["7", 0],
              "latent_image": ["5", 0]}},
          "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": ckpt}},
          "5": {"class_type": "EmptyLatentImage",
                "inputs": {"width": 64, "height": 64, "batch_size": 1}},
          "6": {"class_type": "CLIPTextEncode", "inputs": {"text": PROMPT, "clip": ["4", 1]}},
          "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["4", 1]}},
          "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
          "9": {"class_type": "SaveImage",
                "inputs": {"filename_prefix": "gate", "images": ["8", 0]}}}
    return s.post("/prompt", {"prompt": wf}, timeout=30)


DIALECTS.append(("POST /prompt", "comfy", comfy_prompt))

# OpenAI's names for the native codes, and its error types by status
OPENAI_CODE = {"queue_full": "rate_limit_exceeded"}
OPENAI_TYPE = {503: "server_error", 429: "rate_limit_error"}


class Ctx:
    pass


def setup():
    c = Ctx()
    c.redis = None
    c.full = svc.Server(["--threads", "1", "--max-batch", "1", "--max-queue", "1"],
                        name="queue-1").start()
    return c


def jobs_seen(s):
    """Jobs the node's table ever held (every state)."""
    m = s.metrics()
    return sum(m.value("tessera_jobs_total", state=st) or 0
               for st in ("queued", "running", "done", "failed", "cancelled"))


def refused_everywhere(s, case, status, code, message_part):
    """Every dialect: `status`, the native `code` (or OpenAI's name for it),
    Retry-After, the same message, in the dialect's shape; nothing accepted."""
    before = jobs_seen(s)
    messages = set()
    for what, dialect, fn in DIALECTS:
        r = fn(s)
        svc.note("%s (%s)" % (what, case), r.status)
        assert r.status == status, "%s, %s: want %d, got %r" % (case, what, status, r)
        assert r.headers.get("retry-after", "").isdigit(), (case, what, r.headers)
        e = (r.json or {}).get("error") or {}
        msg = e.get("message") or ""
        assert message_part in msg, (case, what, r.json)
        messages.add(msg)
        if dialect == "openai":
            assert e.get("code") == OPENAI_CODE.get(code, code), (case, what, r.json)
            assert e.get("type") == OPENAI_TYPE[status], (case, what, r.json)
            assert "param" in e and "detail" not in r.json, (case, what, r.json)
        elif dialect == "comfy":
            # ComfyUI's shape: the code is its "type"
            assert e.get("type") == code and r.json.get("node_errors") == {}, (case, what, r.json)
        else:
            assert e.get("code") == code, (case, what, r.json)
            if dialect == "a1111":
                assert r.json.get("detail") == msg, (case, what, r.json)
            else:
                assert "detail" not in r.json, (case, what, r.json)
    assert len(messages) == 1, "%s: the dialects disagree: %s" % (case, messages)
    assert jobs_seen(s) == before, "%s: jobs were accepted (%s -> %s)" % (
        case, before, jobs_seen(s))
    svc.figure("%s: %d %s in all %d routes: %s" % (case, status, code, len(DIALECTS),
                                                  messages.pop()[:80]))


def test_loading(c):
    """Caught before its engines are open, if it can be (four workers to
    open); else said and passed."""
    s = svc.Server(["--device", "cpu,cpu,cpu,cpu", "--threads", "1"], name="loading")
    s.start(wait_ready=False)
    try:
        r = s.post("/v1/jobs", SMALL, timeout=30)
        if r.status != 503:
            svc.figure("loading: not caught (the demo model was ready first: %d)" % r.status)
            if r.status == 202:
                s.delete("/v1/jobs/" + r.json["id"])
            return
        tried = []
        for what, dialect, fn in DIALECTS:
            r = fn(s)
            if r.status != 503:
                break   # ready meanwhile: what was checked stands
            e = r.json["error"]
            assert e["message"] == "the model is still loading", (what, r.json)
            assert r.headers.get("retry-after") == "5", (what, r.headers)
            assert (e.get("type") if dialect == "comfy" else e["code"]) == "unavailable", \
                (what, r.json)
            assert dialect != "a1111" or r.json.get("detail") == e["message"], (what, r.json)
            tried.append(what)
        svc.figure("loading: 503 in %d of %d routes before the engines were open"
                   % (len(tried), len(DIALECTS)))
    finally:
        s.wait_ready(120)
        s.stop(60)


def test_queue_full(c):
    s = c.full
    c.blocker = s.submit(prompt=PROMPT, width=64, height=64, steps=svc.LONG)
    svc.wait_until(lambda: s.job(c.blocker["id"])["state"] == "running", 60, "the blocker running")
    s.submit(**SMALL)   # one image queued: --max-queue 1 is reached
    refused_everywhere(s, "queue_full", 429, "queue_full", "--max-queue 1")


def test_draining(c):
    s = c.full
    assert s.job(c.blocker["id"])["state"] == "running"
    s.signal(signal.SIGTERM)
    svc.wait_until(lambda: s.get("/readyz").status == 503, 30, "/readyz 503 after SIGTERM")
    refused_everywhere(s, "draining", 503, "unavailable", "the server is shutting down")
    s.kill9()   # the blocker would run for minutes


def start_redis(c):
    if not cluster.REDIS_SERVER:
        return False
    if c.redis is None:
        c.redis = cluster.Redis().start()
    return True


def test_worker(c):
    """The drift of issue 56: a worker node refuses all three dialects."""
    if not start_redis(c):
        svc.figure("worker: no redis-server (TSR_REDIS_SERVER), not run")
        return
    w = cluster.node(c.redis.url, "worker", "worker").start()
    try:
        refused_everywhere(w, "worker", 503, "unavailable", "--role worker")
        entries = w.metrics().value("tessera_cluster_queue_entries")
        assert not entries, "the worker queued %s entries" % entries
    finally:
        w.stop(60)


def test_redis_away(c):
    if not start_redis(c):
        svc.figure("redis_away: no redis-server (TSR_REDIS_SERVER), not run")
        return
    a = cluster.node(c.redis.url, "api", "api").start()
    try:
        c.redis.stop()
        svc.wait_until(lambda: a.post("/v1/jobs", SMALL).status == 503, 60,
                       "the api node seeing Redis away")
        refused_everywhere(a, "redis_away", 503, "unavailable", "cannot be reached")
    finally:
        a.kill9()


def teardown(c):
    if c.redis:
        c.redis.stop()


TESTS = [test_loading, test_queue_full, test_draining, test_worker, test_redis_away]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS, setup=setup, teardown=teardown))
