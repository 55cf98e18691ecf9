#!/usr/bin/env python3
"""tests/service/test_soak.py - 1,000 jobs through one server (ctest:
service_soak, label slow): the demo model at 64x64 with 1-2 steps, in ten
waves of 100 (half single POST /v1/jobs from four client threads, half one
POST /v1/batches), some followed over SSE.  Checks that no job is lost
(every job done, every image served with its ETag, images_total +1000) and
that the server's resident memory and open file descriptors (from
/proc/PID/status and /proc/PID/fd) stay within 10% of their level after the
four warm-up waves.  The server keeps the last 200 finished jobs
(--keep-jobs), as an operator running it for days would, so what it holds is
bounded and each wave's images are checked while the wave's jobs are still
kept.  Prints the figures."""
import math
import threading
import time

import svc

PROMPTS = ["a red circle", "two green stars on black", "a small blue square in the top left corner",
           "a yellow triangle on a purple background", "there is a white ring on the right"]
WAVES = 10
PER_WAVE = 100
WARMUP = 4


def setup():
    return svc.Server(["--max-batch", "16", "--threads", "2", "--max-queue", "4096",
                       "--keep-jobs", "200"],
                      name="soak").start()


def submit_wave(s, w):
    jobs = []
    lock = threading.Lock()
    errors = []
    singles = [dict(prompt=PROMPTS[k % len(PROMPTS)], width=64, height=64, steps=1 + k % 2,
                    seed=w * 1000 + k) for k in range(PER_WAVE // 2)]

    def client(part):
        try:
            for p in part:
                c = s.submit(**p)
                with lock:
                    jobs.append((c["id"], p))
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
    ts = [threading.Thread(target=client, args=(singles[i::4],)) for i in range(4)]
    for t in ts:
        t.start()
    batch = [dict(seed=w * 1000 + 500 + k, steps=1 + (k // 7) % 2,
                  prompt=PROMPTS[(k * 3) % len(PROMPTS)]) for k in range(PER_WAVE - len(singles))]
    r = s.post("/v1/batches", {"defaults": dict(width=64, height=64), "jobs": batch})
    assert r.status == 202, r
    for x, p in zip(r.json["jobs"], batch):
        jobs.append((x["id"], dict(p, width=64, height=64)))
    for t in ts:
        t.join(120)
    assert not errors, errors[:3]
    return jobs, r.json["id"]


def test_soak(s):
    t_start = time.time()
    m0 = s.metrics()
    images0 = m0.value("tessera_images_total")
    calls0 = m0.value("tessera_unet_calls_total")
    samples = []
    all_jobs = []
    batch_ids = []
    for w in range(WAVES):
        t0 = time.time()
        jobs, bid = submit_wave(s, w)
        batch_ids.append(bid)
        # follow a few jobs and the batch over SSE while they run
        followers = []
        for jid, _ in jobs[:3]:
            th = threading.Thread(target=lambda j=jid: followers.append(
                svc.sse_read(s.port, "/v1/jobs/%s/events" % j, s.auth(None), timeout=300)))
            th.start()
        batch_events = svc.sse_read(s.port, "/v1/batches/%s/events" % bid, s.auth(None),
                                    timeout=600)
        assert batch_events[-1].name == "done", [e.name for e in batch_events[-3:]]
        assert batch_events[-1].data["counts"]["done"] == PER_WAVE // 2, batch_events[-1].data
        for jid, _ in jobs:
            j = s.wait_job(jid, timeout=600)
            assert j["state"] == "done", j
        svc.wait_until(lambda: len(followers) == 3, 60, "SSE followers")
        assert all(f[-1].name == "done" for f in followers)
        # every image served, with its ETag
        for jid, _ in jobs:
            r = s.get("/v1/jobs/%s/images/0.png" % jid)
            assert r.status == 200 and r.headers["etag"] == svc.etag_of(r.body), r
        # one image of the wave against `tessera generate`, while it is kept
        # (a rounding flip of at most 1/255 is recorded as a figure here, not
        # failed: exactness under batching is service_batching's check.  The
        # one these waves used to show came from OpenBLAS's thread count, this
        # server's 2 threads against generate's 1, and went with Tessera's
        # own GEMM: KNOWN_ISSUES.md; batch_threads_cli checks it)
        jid, p = jobs[w * 7 % len(jobs)]
        before = len(svc._pixel_mismatches)
        svc.assert_same_image(s.image(jid), p, "soak job %s" % jid)
        flips = svc._pixel_mismatches[before:]
        del svc._pixel_mismatches[before:]
        for f in flips:
            svc.figure("soak rounding flip: " + f)
        all_jobs += jobs
        rss, fds = s.settled_rss_kib(), s.fds()
        samples.append((rss, fds))
        print("  wave %d: %d jobs in %.1f s, RSS %d KiB, %d fds" % (w + 1, len(jobs),
                                                                   time.time() - t0, rss, fds),
              flush=True)
    took = time.time() - t_start
    m = s.metrics()
    images = m.value("tessera_images_total") - images0
    calls = m.value("tessera_unet_calls_total") - calls0
    assert len(all_jobs) == WAVES * PER_WAVE
    assert len({j for j, _ in all_jobs}) == len(all_jobs), "duplicate job ids"
    assert images == WAVES * PER_WAVE, "images_total grew by %s, want %d" % (images,
                                                                            WAVES * PER_WAVE)
    # the level after warm-up is the highest of waves 2..WARMUP: glibc's
    # heap moves by a few MiB from wave to wave even with nothing held
    rss_w = max(r for r, _ in samples[1:WARMUP])
    fds_w = max(f for _, f in samples[1:WARMUP])
    rss_max = max(r for r, _ in samples[WARMUP:])
    fds_max = max(f for _, f in samples[WARMUP:])
    svc.figure("soak: %d jobs in %.0f s (%.1f jobs/s), %d UNet calls (%.1f images per call)"
               % (len(all_jobs), took, len(all_jobs) / took, calls,
                  (m.value("tessera_unet_call_images_sum") or 0) /
                  max(m.value("tessera_unet_call_images_count") or 1, 1)))
    svc.figure("soak RSS KiB per wave: %s" % [r for r, _ in samples])
    svc.figure("soak open fds per wave: %s" % [f for _, f in samples])
    svc.figure("soak after warm-up: RSS %d -> max %d KiB (%+.1f%%), fds %d -> max %d"
               % (rss_w, rss_max, 100.0 * (rss_max - rss_w) / rss_w, fds_w, fds_max))
    # --keep-jobs 200 collects whole batches too: the first wave's batch and
    # its jobs are gone, the last wave's are kept
    assert s.get("/v1/batches/%s" % batch_ids[0]).status == 404
    assert s.get("/v1/jobs/%s" % all_jobs[0][0]).status == 404
    assert s.get("/v1/batches/%s" % batch_ids[-1]).status == 200
    # 10% of the level after warm-up, plus 8 MiB of slack.  The server hands
    # freed memory back when it goes idle (malloc_trim in dispatch.c): before
    # that, the v2 demo model's 64 px activations left glibc's thread arenas
    # holding 7-9 MiB steps that went down as well as up (23.6 -> 41.7 MiB
    # in one CI run); with it the idle RSS stays within ~1 MiB from wave 3
    # on.  A leak of 16 KiB per job (600 jobs after warm-up) fails.
    assert rss_max <= rss_w * 1.10 + 8192, "RSS grew %d -> %d KiB" % (rss_w, rss_max)
    assert fds_max <= math.ceil(fds_w * 1.10), "fds grew %d -> %d" % (fds_w, fds_max)
    assert s.stop() == 0


TESTS = [test_soak]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS, setup=setup))
