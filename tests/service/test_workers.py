#!/usr/bin/env python3
"""tests/service/test_workers.py - two CPU workers sharing one queue
(ctest: service_workers): `--device cpu,cpu --threads 2 --max-batch 1`, so
two jobs running at the same time can only be on two workers; every image
still equals `tessera generate`'s."""
import svc

PROMPT = "an orange square in the top left corner"


def setup():
    return svc.Server(["--device", "cpu,cpu", "--threads", "2", "--max-batch", "1"],
                      name="workers").start()


def test_two_workers(s):
    m = svc.request(s.port, "GET", "/v1/models", headers=s.auth(None)).json
    svc.figure("device of /v1/models with --device cpu,cpu: %r" % m["data"][0]["device"])
    specs = [dict(prompt=PROMPT, width=64, height=64, steps=6, seed=50 + i) for i in range(4)] + \
        [dict(prompt="a black star", width=128, height=64, steps=3, seed=60),
         dict(prompt=PROMPT, width=64, height=64, steps=4, seed=61, sampler="euler_a")]
    ids = [s.submit(**p)["id"] for p in specs]
    jobs = [s.wait_job(j) for j in ids]
    assert all(j["state"] == "done" for j in jobs), [j["state"] for j in jobs]
    overlaps = 0
    for i in range(len(jobs)):
        for k in range(i + 1, len(jobs)):
            a, b = jobs[i], jobs[k]
            if a["started"] < b["finished"] and b["started"] < a["finished"]:
                overlaps += 1
    svc.figure("two CPU workers: %d pairs of jobs ran at the same time" % overlaps)
    assert overlaps >= 1, "no two jobs ran at once: %s" % [(j["started"], j["finished"])
                                                          for j in jobs]
    for p, jid in zip(specs, ids):
        svc.assert_same_image(s.image(jid), p, "worker job %s" % p)


def test_batch_across_workers(s):
    r = s.post("/v1/batches", {"defaults": dict(prompt=PROMPT, width=64, height=64, steps=2),
                               "jobs": [{"seed": 70 + i} for i in range(6)]})
    assert r.status == 202, r
    ev = svc.sse_read(s.port, "/v1/batches/%s/events" % r.json["id"], s.auth(None))
    assert ev[-1].name == "done" and ev[-1].data["counts"]["done"] == 6, [e.name for e in ev]
    for i, x in enumerate(r.json["jobs"]):
        svc.assert_same_image(s.image(x["id"]), dict(prompt=PROMPT, width=64, height=64, steps=2,
                                                     seed=70 + i), "batch job %d" % i)


TESTS = [test_two_workers, test_batch_across_workers]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS, setup=setup))
