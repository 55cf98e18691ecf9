"""tests/service/test_lora.py - LoRAs through `tessera serve --lora-dir`
(issue 58): the native `loras` field, the prompt's <lora:...> tags through
A1111's txt2img, OpenAI's extra_body `loras`, and /sdapi/v1/loras.

Each image is compared with diffusers' load_lora_weights golden of
tests/data/lora (tools/reference/make_lora_goldens.py) within 1/255, the
same bar as tests/pipeline/test_lora.c, so the service's translation of
each dialect is checked against the reference, not against itself.  The
infotext carries `Lora hashes` as A1111 writes it (AutoV3 of the file,
recomputed here with hashlib).  Bad names are refused with field `loras`
before any work; an unknown name too."""
import base64
import hashlib
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import svc  # noqa: E402

DATA = os.path.join(svc.ROOT, "tests", "data", "lora")
LORAS = os.path.join(DATA, "loras")
MODEL = os.path.join(svc.ROOT, "tests", "data", "models", "sd1_sharp")
PROMPT = "a photo of a red cat on a green sofa"


def manifest_case(name):
    with open(os.path.join(DATA, "manifest.json")) as f:
        for c in json.load(f)["cases"]:
            if c["name"] == name:
                return c
    raise AssertionError(name)


def golden(name):
    with open(os.path.join(DATA, name + ".png"), "rb") as f:
        return svc.png_decode(f.read())


def close_to(png_bytes, name, what):
    got, want = svc.png_decode(png_bytes), golden(name)
    d = max(abs(a - b) for a, b in zip(got.rgb(), want.rgb()))
    svc.figure("%s: max diff vs diffusers' %s: %d/255" % (what, name, d))
    assert d <= 1, "%s: %d/255 from %s" % (what, d, name)
    return got


def autov3(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    return hashlib.sha256(b[8 + n:]).hexdigest()[:12]


def setup():
    s = svc.Server(["--lora-dir", LORAS], model=MODEL)
    s.start()
    return s


def teardown(s):
    s.stop()


def test_native(s):
    c = manifest_case("sd1_kohya_split")
    j = s.submit(prompt=PROMPT, negative_prompt=c["negative"], seed=c["seed"], steps=c["steps"],
                 width=64, height=64, sampler="euler",
                 loras=[{"name": "k_sd1", "te_weight": 0.5, "unet_weight": 1.1}])
    done = s.wait_job(j["id"])
    assert done["state"] == "done", done
    assert done["params"]["loras"] == [{"name": "k_sd1", "te_weight": 0.5, "unet_weight": 1.1}], \
        done["params"]
    got = close_to(s.image(j["id"]), "sd1_kohya_split", "native loras")
    want = 'Lora hashes: "k_sd1: %s"' % autov3(os.path.join(LORAS, "k_sd1.safetensors"))
    assert want in got.texts["parameters"], got.texts["parameters"]


def test_a1111_tag(s):
    r = s.post("/sdapi/v1/txt2img", dict(prompt=PROMPT + "<lora:k_sd1:0.8>", seed=11, steps=4,
                                         width=64, height=64, sampler_name="Euler",
                                         cfg_scale=7.5))
    assert r.status == 200, (r.status, r.body[:300])
    close_to(base64.b64decode(r.json["images"][0]), "sd1_kohya_tag", "A1111 <lora:> tag")


def test_openai_extra_body(s):
    r = s.post("/v1/images/generations",
               dict(prompt=PROMPT, size="64x64", seed=11, steps=4, sampler="euler",
                    response_format="b64_json", loras=[{"name": "p_sd1", "weight": 1}]))
    assert r.status == 200, (r.status, r.body[:300])
    close_to(base64.b64decode(r.json["data"][0]["b64_json"]), "sd1_peft", "OpenAI extra_body")


def test_listing(s):
    r = s.get("/sdapi/v1/loras")
    assert r.status == 200, r.status
    names = [x["name"] for x in r.json]
    assert names == sorted(os.path.splitext(f)[0] for f in os.listdir(LORAS)), names
    assert all(x["path"] == x["name"] + ".safetensors" for x in r.json), r.json
    assert s.post("/sdapi/v1/refresh-loras", {}).status == 200


def test_refusals(s):
    for name in ("../k_sd1", "/etc/passwd", "a/b", ".k_sd1", "nope", "k_sd1\x00../../x"):
        r = s.post("/v1/jobs", dict(prompt="x", steps=1, width=64, height=64,
                                    loras=[{"name": name}]))
        assert r.status in (400, 422), (name, r.status, r.body[:200])
        assert r.json["error"]["field"] == "loras", (name, r.json)
    r = s.post("/v1/jobs", dict(prompt="x", steps=1, width=64, height=64, loras={"name": "k"}))
    assert r.status in (400, 422) and r.json["error"]["field"] == "loras", r.body[:200]
    r = s.post("/v1/jobs", dict(prompt="x <lora:../../etc/passwd:1>", steps=1, width=64,
                                height=64))
    assert r.status in (400, 422), (r.status, r.body[:200])


def test_restart(s):
    """The loras field survives a restart in the job's record (the journal
    keeps the request with its loras, as it keeps every field)."""
    j = s.submit(prompt=PROMPT, seed=11, steps=4, width=64, height=64, sampler="euler",
                 loras=[{"name": "p_sd1", "weight": 1}])
    assert s.wait_job(j["id"])["state"] == "done"
    s.stop()
    t = svc.Server(["--lora-dir", LORAS], model=MODEL, data_dir=s.data_dir)
    t.start()
    try:
        rec = t.job(j["id"])
        assert rec["params"]["loras"] == [{"name": "p_sd1", "te_weight": 1, "unet_weight": 1}], rec
        close_to(t.image(j["id"]), "sd1_peft", "after a restart")
    finally:
        t.stop()
    s.start()


TESTS = [test_native, test_a1111_tag, test_openai_extra_body, test_listing, test_refusals,
         test_restart]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS, setup=setup, teardown=teardown))
