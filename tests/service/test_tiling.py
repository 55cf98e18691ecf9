"""tests/service/test_tiling.py - seamless tiling through `tessera serve`
(issue 63): the native `tiling` field and A1111's `tiling`.

Each image is compared with diffusers' image from the same request with
every UNet and VAE Conv2d patched to padding_mode 'circular', as A1111
does (tests/data/pipeline/tiling, tools/reference/make_tiling_goldens.py),
within the pipeline goldens' 2/255, and must be far from the plain image
(so a server that dropped the field fails).  A tiled and a plain job
submitted together each still match their own golden (the engine keeps
them out of each other's UNet calls).  The job's params and the PNG's
infotext say "tiling"; a value that is not a boolean is refused naming the
field (native 400 invalid_parameter, A1111 422).  A tiled job still queued
at a kill -9 reruns from the journal, still tiled."""
import base64
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import svc  # noqa: E402

DATA = os.path.join(svc.ROOT, "tests", "data", "pipeline", "tiling")
MODEL = os.path.join(svc.ROOT, "tests", "data", "models", "sd1_sharp")
with open(os.path.join(DATA, "manifest.json")) as f:
    MANIFEST = json.load(f)
TOL = MANIFEST["tolerance"]
CASE = MANIFEST["cases"][0]  # t2i_64x64


def golden(name):
    with open(os.path.join(DATA, name + ".png"), "rb") as f:
        return svc.png_decode(f.read())


def check(png_bytes, name, what):
    got = svc.png_decode(png_bytes)
    want, other = golden(name), golden(name + "_plain" if not name.endswith("_plain")
                                       else name[:-len("_plain")])
    d = max(abs(a - b) for a, b in zip(got.rgb(), want.rgb()))
    far = max(abs(a - b) for a, b in zip(got.rgb(), other.rgb()))
    svc.figure("%s: max diff vs diffusers' %s: %d/255 (%d from the other mode)"
               % (what, name, d, far))
    assert d <= TOL, "%s: %d/255 from %s" % (what, d, name)
    assert far > 4 * TOL, "%s: only %d/255 from the other mode" % (what, far)
    return got


def native_body(tiling, **kw):
    b = dict(prompt=MANIFEST["prompt"], steps=MANIFEST["steps"], cfg_scale=MANIFEST["cfg"],
             sampler=MANIFEST["sampler"], seed=CASE["seed"], width=CASE["width"],
             height=CASE["height"], tiling=tiling)
    b.update(kw)
    return b


def setup():
    return svc.Server([], model=MODEL).start()


def teardown(s):
    assert s.stop() == 0, s.output()[-3000:]


def test_native(s):
    j = s.submit(**native_body(True))
    done = s.wait_job(j["id"])
    assert done["state"] == "done", done
    assert done["params"]["tiling"] is True, done["params"]
    got = check(s.image(j["id"]), CASE["name"], "native tiling")
    assert "Tiling: True" in got.texts.get("parameters", ""), got.texts


def test_together(s):
    """A tiled and a plain job of one shape at once: each its own golden."""
    a = s.submit(**native_body(True))
    b = s.submit(**native_body(False))
    for j, name in ((a, CASE["name"]), (b, CASE["name"] + "_plain")):
        done = s.wait_job(j["id"])
        assert done["state"] == "done", done
        assert "tiling" not in done["params"] or done["params"]["tiling"] is (j is a)
        got = check(s.image(j["id"]), name, "together: " + name)
        assert ("Tiling: True" in got.texts.get("parameters", "")) == (j is a)


def test_a1111(s):
    body = {"prompt": MANIFEST["prompt"], "negative_prompt": "", "steps": MANIFEST["steps"],
            "cfg_scale": MANIFEST["cfg"], "sampler_name": "Euler", "seed": CASE["seed"],
            "width": CASE["width"], "height": CASE["height"], "tiling": True}
    r = s.post("/sdapi/v1/txt2img", body)
    assert r.status == 200, r
    assert r.json["parameters"]["tiling"] is True
    text = json.loads(r.json["info"])["infotexts"][0]
    assert "Tiling: True" in text, text
    check(base64.b64decode(r.json["images"][0]), CASE["name"], "A1111 tiling")


def test_refusals(s):
    for bad in ("yes", 1, [True]):
        r = s.post("/v1/jobs", native_body(bad))
        assert r.status == 400, (bad, r.status, r.body[:200])
        assert r.json["error"]["code"] == "invalid_parameter", r.json
        assert r.json["error"]["field"] == "tiling", r.json
    r = s.post("/sdapi/v1/txt2img", {"prompt": "x", "tiling": "sometimes"})
    assert r.status == 422 and r.json["error"]["field"] == "tiling", r


def test_journal_replay(s):
    """kill -9 with a tiled job still queued: after the restart it reruns
    from the journal, still tiled (its golden, its params)."""
    data = svc.tmpdir("tsr-tiling-data-")
    args = ["--max-batch", "1", "--threads", "1"]
    s1 = svc.Server(args, data_dir=data, model=MODEL, name="before-kill").start()
    try:
        running = s1.submit(**native_body(False, steps=400))
        queued = s1.submit(**native_body(True))
        svc.wait_until(lambda: s1.job(running["id"])["step"] >= 1, 60, "long job stepping")
        assert s1.job(queued["id"])["state"] == "queued"
    finally:
        s1.kill9()
    s2 = svc.Server(args, data_dir=data, model=MODEL, name="after-kill").start()
    try:
        s2.delete("/v1/jobs/" + running["id"])
        done = s2.wait_job(queued["id"], timeout=180)
        assert done["state"] == "done", done
        assert done["params"]["tiling"] is True, done["params"]
        check(s2.image(queued["id"]), CASE["name"], "tiled job rerun after kill -9")
    finally:
        s2.stop()


TESTS = [test_native, test_together, test_a1111, test_refusals, test_journal_replay]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS, setup=setup, teardown=teardown))
