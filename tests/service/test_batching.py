#!/usr/bin/env python3
"""tests/service/test_batching.py - step-level continuous batching
(ctest: service_batching): 8 jobs submitted together share UNet calls
(/metrics), and every image is byte-identical (decoded RGB and infotext) to
`tessera generate` with the same parameters; a job submitted while another
runs joins it; cancelling frees the slot for a waiting job; mixed sizes all
finish; a hires job's second pass shares calls with a job of its size.  Two servers: --max-batch 8 (--max-wait-ms 200) and --max-batch 2;
where the CPU has AVX512_BF16, a third with --precision bf16 (its batched
images equal `tessera generate --precision bf16` too)."""
import time

import svc

PROMPT = "a purple triangle on a white background"


class Ctx:
    pass


def setup():
    c = Ctx()
    c.s = svc.Server(["--max-batch", "8", "--max-wait-ms", "200", "--threads", "1"],
                     name="batch8").start()
    c.two = svc.Server(["--max-batch", "2", "--threads", "1"], name="batch2").start()
    return c


def unet(m):
    return (m.value("tessera_unet_calls_total"), m.value("tessera_unet_call_images_sum"),
            m.value("tessera_unet_call_images_count"), dict(m.buckets("tessera_unet_call_images")))


def test_eight_share_unet_calls(c):
    s = c.s
    steps = 4
    before = unet(s.metrics())
    r = s.post("/v1/batches", {"defaults": dict(prompt=PROMPT, width=64, height=64, steps=steps),
                               "jobs": [{"seed": 1000 + i} for i in range(8)]})
    assert r.status == 202, r
    ids = [x["id"] for x in r.json["jobs"]]
    for jid in ids:
        assert s.wait_job(jid)["state"] == "done"
    after = unet(s.metrics())
    calls = after[0] - before[0]
    images = after[1] - before[1]
    count = after[2] - before[2]
    svc.figure("8 jobs x %d steps: %d UNet calls (%d image evaluations; %.1f images per call)"
               % (steps, calls, images, images / max(count, 1)))
    assert images == 8 * steps, "image evaluations %s != %d" % (images, 8 * steps)
    assert calls < 8 * steps, "no sharing: %d UNet calls for %d image steps" % (calls, 8 * steps)
    assert count == calls, (count, calls)
    big = after[3][8.0] - after[3][4.0] if 8.0 in after[3] else 0
    assert big >= 1, "no UNet call with 5..8 images: buckets %s -> %s" % (before[3], after[3])
    for i, jid in enumerate(ids):
        svc.assert_same_image(s.image(jid), dict(prompt=PROMPT, width=64, height=64, steps=steps,
                                                 seed=1000 + i), "batched job %d" % i)


def test_join_running(c):
    s = c.s
    a = s.submit(prompt=PROMPT, width=64, height=64, steps=24, seed=21)
    svc.sse_read(s.port, "/v1/jobs/%s/events" % a["id"], s.auth(None),
                 until=lambda e: e.name == "step")
    before = unet(s.metrics())
    b = s.submit(prompt="a green circle", width=64, height=64, steps=4, seed=22)
    jb = s.wait_job(b["id"])
    ja = s.wait_job(a["id"])
    assert jb["state"] == ja["state"] == "done", (ja, jb)
    assert jb["started"] < ja["finished"] and jb["finished"] <= ja["finished"], \
        "B did not run alongside A: A %s..%s, B %s..%s" % (ja["started"], ja["finished"],
                                                            jb["started"], jb["finished"])
    after = unet(s.metrics())
    two = after[3][2.0] - after[3][1.0] - (before[3][2.0] - before[3][1.0])
    assert two >= 1, "no UNet call with 2 images after B joined: %s -> %s" % (before[3], after[3])
    svc.assert_same_image(s.image(a["id"]), dict(prompt=PROMPT, width=64, height=64, steps=24,
                                                 seed=21), "A")
    svc.assert_same_image(s.image(b["id"]), dict(prompt="a green circle", width=64, height=64,
                                                 steps=4, seed=22), "B (joined)")


def test_cancel_frees_slot(c):
    s = c.two
    a = s.submit(prompt=PROMPT, width=64, height=64, steps=svc.LONG, seed=31)
    b = s.submit(prompt=PROMPT, width=64, height=64, steps=svc.LONG, seed=32)
    svc.wait_until(lambda: s.job(a["id"])["state"] == "running" and
                   s.job(b["id"])["state"] == "running", 60, "A and B running")
    cjob = s.submit(prompt=PROMPT, width=64, height=64, steps=3, seed=33)
    time.sleep(1.0)
    jc = s.job(cjob["id"])
    assert jc["state"] == "queued" and jc["position"] == 0, jc
    t0 = time.time()
    d = s.delete("/v1/jobs/" + a["id"])
    assert d.status == 200 and d.json["state"] == "cancelled", d
    jc = s.wait_job(cjob["id"], timeout=60)
    took = time.time() - t0
    jb = s.job(b["id"])
    assert jc["state"] == "done" and jb["state"] == "running", (jc, jb["state"])
    svc.figure("cancel -> waiting 3-step job done in %.1f s (B still running)" % took)
    s.delete("/v1/jobs/" + b["id"])
    svc.assert_same_image(s.image(cjob["id"]), dict(prompt=PROMPT, width=64, height=64, steps=3,
                                                    seed=33), "C after cancel")
    svc.wait_until(lambda: s.metrics().value("tessera_running_images") == 0, 30, "idle")


def test_mixed_shapes(c):
    s = c.s
    specs = [dict(prompt=PROMPT, width=64, height=64, steps=3, seed=41),
             dict(prompt=PROMPT, width=128, height=64, steps=2, seed=42),
             dict(prompt="red", width=64, height=64, steps=3, seed=43),
             dict(prompt=PROMPT + ", " + PROMPT + ", (large:1.3)", width=64, height=128, steps=2,
                  seed=44),
             dict(prompt=PROMPT, width=64, height=64, steps=2, seed=45, cfg_scale=1),
             dict(prompt=PROMPT, width=64, height=64, steps=3, seed=46, sampler="euler_a"),
             dict(prompt=PROMPT, width=64, height=64, steps=3, seed=47, sampler="dpmpp_2m",
                  scheduler="karras", negative_prompt="blue")]
    ids = [s.submit(**p)["id"] for p in specs]
    for p, jid in zip(specs, ids):
        assert s.wait_job(jid)["state"] == "done"
        svc.assert_same_image(s.image(jid), p, "mixed %s" % p)


def test_bf16_batched_exact(c):
    # the bf16 GEMM's order of arithmetic does not depend on the batch either
    if not svc.cpu_has_bf16_dot():
        print("  skipped: this CPU has no AVX512_BF16 (--precision bf16 cannot run)")
        return
    s = svc.Server(["--max-batch", "4", "--max-wait-ms", "200", "--threads", "1",
                    "--precision", "bf16"], name="bf16").start()
    try:
        device = s.get("/v1/models").json["data"][0]["device"]
        assert device.startswith("cpu-bf16gemm"), device
        r = s.post("/v1/batches", {"defaults": dict(prompt=PROMPT, width=64, height=64, steps=4),
                                   "jobs": [{"seed": 300 + i} for i in range(4)]})
        assert r.status == 202, r
        ids = [x["id"] for x in r.json["jobs"]]
        for jid in ids:
            assert s.wait_job(jid)["state"] == "done"
        for i, jid in enumerate(ids):
            svc.assert_same_image(s.image(jid), dict(prompt=PROMPT, width=64, height=64, steps=4,
                                                     seed=300 + i, precision="bf16"),
                                  "bf16 batched job %d" % i)
        f32 = svc.generate(prompt=PROMPT, width=64, height=64, steps=4, seed=300)
        assert svc.png_decode(s.image(ids[0])).rgb() != f32.rgb(), "bf16 image equals f32's"
    finally:
        s.stop()


def test_hires_shares_calls(c):
    """A native hires job (issue 58): its second pass (128x128) shares UNet
    calls with a plain 128x128 job, both equal `tessera generate`, and the
    job shows its hires parameters; a bad upscaler is a 400 naming it."""
    s = c.s
    hires = dict(prompt=PROMPT, width=64, height=64, steps=3, seed=51, hires_scale=2,
                 hires_steps=3, hires_strength=0.6, hires_upscaler="Latent (bicubic)")
    plain = dict(prompt=PROMPT, width=128, height=128, steps=6, seed=52)
    before = unet(s.metrics())
    a = s.submit(**hires)["id"]
    b = s.submit(**plain)["id"]
    for jid in (a, b):
        assert s.wait_job(jid)["state"] == "done"
    after = unet(s.metrics())
    calls, images = after[0] - before[0], after[1] - before[1]
    svc.figure("hires 3+3 steps beside a 6-step 128x128 job: %d UNet calls for %d evaluations"
               % (calls, images))
    assert images == 3 + 3 + 6, images
    assert calls < images, "the hires pass shared no UNet call (%d calls)" % calls
    svc.assert_same_image(s.image(a), hires, "native hires job")
    svc.assert_same_image(s.image(b), plain, "plain job beside it")
    params = s.job(a)["params"]
    assert params["hires_scale"] == 2 and params["hires_upscaler"] == "Latent (bicubic)", params
    # its preview tiles moved to the final grid with the second pass
    m = s.get("/v1/jobs/%s/images/0/tiles" % a).json
    assert m["final"] and (m["width"], m["height"]) == (128, 128), m
    assert s.get(m["tiles"][-1]["url"]).status == 200, m["tiles"][-1]
    r = s.post("/v1/jobs", dict(prompt=PROMPT, width=64, height=64, hires_scale=2,
                                hires_upscaler="ESRGAN_4x"))
    err = r.json["error"]
    assert r.status == 400 and err["field"] == "hires_upscaler", r
    assert "ESRGAN_4x" in err["message"] and "Lanczos" in err["message"], err
    r = s.post("/v1/jobs", dict(prompt=PROMPT, width=64, height=64, hires_scale=1.3,
                                hires_upscaler="Lanczos"))
    assert r.status == 400 and r.json["error"]["field"] == "hires_scale", r


TESTS = [test_eight_share_unet_calls, test_join_running, test_cancel_frees_slot,
         test_mixed_shapes, test_bf16_batched_exact, test_hires_shares_calls]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS, setup=setup))
