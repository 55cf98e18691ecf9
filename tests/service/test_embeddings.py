"""tests/service/test_embeddings.py - textual-inversion embeddings through
`tessera serve --embeddings-dir` (issue 58 part 2): a name in the prompt of
each dialect (native, A1111's txt2img, OpenAI's), /sdapi/v1/embeddings in
A1111's shape, and a folder that changes while the server runs.

Each image is compared with diffusers' load_textual_inversion golden of
tests/data/ti (tools/reference/make_ti_goldens.py) within 1/255, the same
bar as tests/textenc/test_ti.c, so each dialect is checked against the
reference.  The infotext carries `TI hashes` as A1111 writes them (SHA-256
of the file, recomputed here with hashlib).  The folder is a copy the test
owns, so it can add files: an embedding added under a new name is used by
the next image without a restart (the engines reload a folder whose mtime
moved), an SDXL file and a pickle are listed as skipped."""
import base64
import hashlib
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import svc  # noqa: E402

DATA = os.path.join(svc.ROOT, "tests", "data", "ti")
MODEL = os.path.join(svc.ROOT, "tests", "data", "models", "sd1_sharp")
PROMPT = "a photo of tiemb on a green sofa"
NEGATIVE = "tione, blurry"
DIR = None


def golden(name):
    with open(os.path.join(DATA, name + ".png"), "rb") as f:
        return svc.png_decode(f.read())


def close_to(png_bytes, name, what):
    got, want = svc.png_decode(png_bytes), golden(name)
    d = max(abs(a - b) for a, b in zip(got.rgb(), want.rgb()))
    svc.figure("%s: max diff vs diffusers' %s: %d/255" % (what, name, d))
    assert d <= 1, "%s: %d/255 from %s" % (what, d, name)
    return got


def far_from(png_bytes, name, what):
    got, want = svc.png_decode(png_bytes), golden(name)
    d = max(abs(a - b) for a, b in zip(got.rgb(), want.rgb()))
    assert d > 8, "%s: only %d/255 from %s" % (what, d, name)


def ti_hash(name):
    with open(os.path.join(DIR, name + ".safetensors"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:12]


def setup():
    global DIR
    DIR = svc.tmpdir("tsr-ti-")
    for f in os.listdir(os.path.join(DATA, "sd1")):
        shutil.copy(os.path.join(DATA, "sd1", f), DIR)
    s = svc.Server(["--embeddings-dir", DIR], model=MODEL)
    s.start()
    return s


def teardown(s):
    s.stop()


def test_native(s):
    j = s.submit(prompt=PROMPT, negative_prompt=NEGATIVE, seed=11, steps=4, width=64, height=64,
                 sampler="euler")
    done = s.wait_job(j["id"])
    assert done["state"] == "done", done
    got = close_to(s.image(j["id"]), "sd1_ti", "native")
    info = got.texts["parameters"]
    for name in ("tiemb", "tione"):
        assert "%s: %s" % (name, ti_hash(name)) in info, info
    assert "TI hashes: " in info, info


def test_a1111(s):
    r = s.post("/sdapi/v1/txt2img", dict(prompt=PROMPT, negative_prompt=NEGATIVE, seed=11,
                                         steps=4, width=64, height=64, sampler_name="Euler",
                                         cfg_scale=7.5))
    assert r.status == 200, (r.status, r.body[:300])
    close_to(base64.b64decode(r.json["images"][0]), "sd1_ti", "A1111 txt2img")
    assert "TI hashes: " in r.json["info"], r.json["info"][:500]


def test_openai(s):
    r = s.post("/v1/images/generations",
               dict(prompt=PROMPT, negative_prompt=NEGATIVE, size="64x64", seed=11, steps=4,
                    sampler="euler", response_format="b64_json"))
    assert r.status == 200, (r.status, r.body[:300])
    close_to(base64.b64decode(r.json["data"][0]["b64_json"]), "sd1_ti", "OpenAI")


def test_listing(s):
    r = s.get("/sdapi/v1/embeddings")
    assert r.status == 200, r.status
    loaded = r.json["loaded"]
    assert sorted(loaded) == ["tiemb", "tione"], r.json
    assert loaded["tiemb"]["vectors"] == 3 and loaded["tiemb"]["shape"] == 16, loaded
    assert loaded["tione"]["vectors"] == 1 and loaded["tione"]["step"] is None, loaded
    assert r.json["skipped"] == {}, r.json
    # an SDXL file and a pickle: skipped, with why
    shutil.copy(os.path.join(DATA, "sdxl", "tixl.safetensors"), DIR)
    with open(os.path.join(DIR, "old.pt"), "wb") as f:
        f.write(b"\x80\x02}q\x00.")
    try:
        r = s.get("/sdapi/v1/embeddings")
        sk = r.json["skipped"]
        assert sorted(sk) == ["old", "tixl"], r.json
        assert "is for SDXL" in sk["tixl"]["error"] and sk["tixl"]["vectors"] == 2, sk
        assert "pickle" in sk["old"]["error"], sk
        assert DIR not in r.body.decode(), "the listing names the server's folder"
    finally:
        os.remove(os.path.join(DIR, "tixl.safetensors"))
        os.remove(os.path.join(DIR, "old.pt"))
    r = s.post("/sdapi/v1/refresh-embeddings", {})
    assert r.status == 200 and r.json is None, (r.status, r.body[:200])


def test_reload(s):
    """A file added while the server runs is used by the next image."""
    prompt = PROMPT.replace("tiemb", "tinew")
    j = s.submit(prompt=prompt, negative_prompt=NEGATIVE, seed=11, steps=4, width=64, height=64,
                 sampler="euler")
    assert s.wait_job(j["id"])["state"] == "done"
    far_from(s.image(j["id"]), "sd1_ti", "before tinew exists")
    shutil.copy(os.path.join(DIR, "tiemb.safetensors"), os.path.join(DIR, ".tmp"))
    os.rename(os.path.join(DIR, ".tmp"), os.path.join(DIR, "tinew.safetensors"))
    try:
        j = s.submit(prompt=prompt, negative_prompt=NEGATIVE, seed=11, steps=4, width=64,
                     height=64, sampler="euler")
        assert s.wait_job(j["id"])["state"] == "done"
        close_to(s.image(j["id"]), "sd1_ti", "tinew, added while serving")
        assert "tinew" in s.get("/sdapi/v1/embeddings").json["loaded"]
    finally:
        os.remove(os.path.join(DIR, "tinew.safetensors"))


TESTS = [test_native, test_a1111, test_openai, test_listing, test_reload]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS, setup=setup, teardown=teardown))
