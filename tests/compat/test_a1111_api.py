#!/usr/bin/env python3
"""tests/compat/test_a1111_api.py - AUTOMATIC1111's own API test shapes
(its test/test_txt2img.py, test_img2img.py, test_utils.py, test_extras.py;
conftest.py sends init images as data: URLs), sent to `tessera serve`,
ctest: compat_a1111_api (issue 63).

Each case checks what came back (sizes, counts, info text, the options
read back), not only the status, and every response is validated against
docs/openapi.yaml (svc.request).  Also: pydantic's coercions at the HTTP
edge (the table itself is unit_fields), the options store round trip and
its survival of a restart on the same data dir, a damaged options file,
and the extras routes (upscale by factor / to a size, two upscalers
blended, batch, png-info, refusals with their reasons).

Shapes Tessera refuses on purpose (face restoration, interrogation) are
checked to answer 422 with the reason.  Tiling (seamless textures) answers
200 with "Tiling: True" in its infotext and an image whose wrap-around
seams look like any neighbouring columns and rows, unlike the same request
without it.
"""
import base64
import io
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "service"))
import svc  # noqa: E402

from PIL import Image  # noqa: E402

PROMPT = "example prompt"


class Ctx:
    pass


def setup():
    c = Ctx()
    c.s = svc.Server(["--threads", "1"], name="a1111-api").start()
    return c


def teardown(c):
    assert c.s.stop() == 0, c.s.output()[-3000:]


def post(s, path, body, **kw):
    return s.request("POST", "/sdapi/v1" + path, body, **kw)


def get(s, path, **kw):
    return s.request("GET", "/sdapi/v1" + path, **kw)


def expect_error(r, status, field, what, words=None):
    svc.note("%s %s" % (r.path, what), r.status)
    assert r.status == status, "%s: want %d, got %r" % (what, status, r)
    err = (r.json or {}).get("error") or {}
    if field is not None:
        assert err.get("field") == field, (what, err)
    if words:
        assert words in err.get("message", ""), (what, err)
    return err


def png_bytes(w, h, color=(200, 40, 40), mode="RGB"):
    buf = io.BytesIO()
    im = Image.new(mode, (w, h), color)
    # a gradient so that resamplers differ
    for x in range(w):
        im.putpixel((x, h // 2), (x * 255 // max(w - 1, 1), 0, 0) if mode == "RGB" else x)
    im.save(buf, format="PNG")
    return buf.getvalue()


def data_url(png):
    return "data:image/png;base64," + base64.b64encode(png).decode()


def image_of(b64):
    if b64.startswith("data:"):
        b64 = b64.split(",", 1)[1]
    return Image.open(io.BytesIO(base64.b64decode(b64)))


# A1111's test/test_txt2img.py simple_txt2img_request (steps and size as theirs)
def a1111_txt2img():
    return {"batch_size": 1, "cfg_scale": 7, "denoising_strength": 0, "enable_hr": False,
            "eta": 0, "firstphase_height": 0, "firstphase_width": 0, "height": 64, "n_iter": 1,
            "negative_prompt": "", "prompt": PROMPT, "restore_faces": False, "s_churn": 0,
            "s_noise": 1, "s_tmax": 0, "s_tmin": 0, "sampler_index": "Euler a", "seed": -1,
            "seed_resize_from_h": -1, "seed_resize_from_w": -1, "steps": 3, "styles": [],
            "subseed": -1, "subseed_strength": 0, "tiling": False, "width": 64}


# test/test_img2img.py simple_img2img_request
def a1111_img2img():
    return {"batch_size": 1, "cfg_scale": 7, "denoising_strength": 0.75, "eta": 0,
            "height": 64, "include_init_images": False,
            "init_images": [data_url(png_bytes(64, 64))], "inpaint_full_res": False,
            "inpaint_full_res_padding": 0, "inpainting_fill": 0, "inpainting_mask_invert": False,
            "mask": None, "mask_blur": 4, "n_iter": 1, "negative_prompt": "",
            "override_settings": {}, "prompt": PROMPT, "resize_mode": 0, "restore_faces": False,
            "s_churn": 0, "s_noise": 1, "s_tmax": 0, "s_tmin": 0, "sampler_index": "Euler a",
            "seed": -1, "seed_resize_from_h": -1, "seed_resize_from_w": -1, "steps": 3,
            "styles": [], "subseed": -1, "subseed_strength": 0, "tiling": False, "width": 64}


# --------------------------------------------------------------------------
def test_txt2img_shapes(c):
    s = c.s
    cases = [("simple", {}), ("negative", {"negative_prompt": "example negative prompt"}),
             ("complex prompt", {"prompt": "((emphasis)), (emphasis1:1.1), [to:1], [from::2], "
                                           "[from:to:0.3], [alt|alt1]"}),
             ("batch", {"batch_size": 2, "n_iter": 2}),
             ("sampler", {"sampler_index": "DPM++ 2M"})]
    for name, extra in cases:
        body = a1111_txt2img()
        body.update(extra)
        r = post(s, "/txt2img", body)
        svc.note("txt2img %s" % name, r.status)
        assert r.status == 200, (name, r)
        n = body["batch_size"] * body["n_iter"]
        assert len(r.json["images"]) == n, (name, len(r.json["images"]))
        assert image_of(r.json["images"][0]).size == (64, 64), name
        info = json.loads(r.json["info"])
        assert len(info["infotexts"]) == n and "Steps: 3" in info["infotexts"][0], info
    # the hires fix, A1111's shape (its denoising_strength 0 means no pass)
    body = a1111_txt2img()
    body.update(enable_hr=True, hr_scale=2, denoising_strength=0.5)
    r = post(s, "/txt2img", body)
    assert r.status == 200, r
    assert image_of(r.json["images"][0]).size == (128, 128)
    assert "Hires upscale: 2" in json.loads(r.json["info"])["infotexts"][0]
    body["denoising_strength"] = 0
    expect_error(post(s, "/txt2img", body), 422, "denoising_strength", "hires strength 0",
                 "denoising_strength")
    for field, words in (("restore_faces", "face"),):
        body = a1111_txt2img()
        body[field] = True
        expect_error(post(s, "/txt2img", body), 422, field, "txt2img %s" % field, words)
    check_tiling(s)


def seams(im):
    """(left/right wrap seam, mean neighbouring-column difference, top/bottom
    seam, mean neighbouring-row difference) of an RGB image, per channel value."""
    w, h = im.size
    px = im.convert("RGB").load()

    def col(x0, x1):
        return sum(abs(a - b) for y in range(h) for a, b in zip(px[x0, y], px[x1, y])) / (3 * h)

    def row(y0, y1):
        return sum(abs(a - b) for x in range(w) for a, b in zip(px[x, y0], px[x, y1])) / (3 * w)

    return (col(w - 1, 0), sum(col(x, x + 1) for x in range(w - 1)) / (w - 1),
            row(h - 1, 0), sum(row(y, y + 1) for y in range(h - 1)) / (h - 1))


def check_tiling(s):
    """test_txt2img.py's tiling shape (simple request, tiling true): 200, the
    infotext says so, and the image tiles (the demo model at seed 12: tiled
    seams 0.90 / 1.02 against neighbours 1.17 / 1.18, plain seams 6.0 / 4.9)."""
    got = {}
    for tiling in (True, False):
        body = a1111_txt2img()
        body.update(tiling=tiling, seed=12)
        r = post(s, "/txt2img", body)
        svc.note("txt2img tiling=%s" % tiling, r.status)
        assert r.status == 200, r
        assert r.json["parameters"]["tiling"] is tiling, r.json["parameters"]
        text = json.loads(r.json["info"])["infotexts"][0]
        assert ("Tiling: True" in text) == tiling, text
        im = image_of(r.json["images"][0])
        assert im.size == (64, 64)
        got[tiling] = seams(im)
    (th, tnh, tv, tnv), (ph, _, pv, _) = got[True], got[False]
    svc.figure("tiling: seams %.2f/%.2f (neighbours %.2f/%.2f); without tiling %.2f/%.2f"
               % (th, tv, tnh, tnv, ph, pv))
    assert th <= 1.5 * tnh and tv <= 1.5 * tnv, ("tiled seams", got[True])
    assert ph >= 2 * th and pv >= 2 * tv, ("plain seams not larger", got)


def test_img2img_shapes(c):
    s = c.s
    r = post(s, "/img2img", a1111_img2img())
    assert r.status == 200, r
    assert len(r.json["images"]) == 1 and image_of(r.json["images"][0]).size == (64, 64)
    assert r.json["parameters"]["inpainting_mask_invert"] == 0, r.json["parameters"]
    # a data URL that does not say base64 is refused, as natively (A1111's
    # readers of images once took its data as base64: one reader now)
    plain = "data:image/png," + base64.b64encode(png_bytes(64, 64)).decode()
    for field in ("init_images", "mask"):
        body = a1111_img2img()
        if field == "mask":
            body["mask"] = plain
        else:
            body["init_images"] = [plain]
        expect_error(post(s, "/img2img", body), 422, field, "img2img %s data URL" % field,
                     "only base64 data URLs are accepted")
    # inpainting, A1111's shape: a mask (data URL), inpainting_mask_invert
    # false / true, and A1111's own inpainting_fill 0 ("fill")
    body = a1111_img2img()
    body["mask"] = data_url(png_bytes(64, 64, 255, "L"))
    r = post(s, "/img2img", body)
    svc.note("img2img inpaint fill 0", r.status)
    assert r.status == 200, r
    for invert in (False, True):
        body = a1111_img2img()
        body["mask"] = data_url(png_bytes(64, 64, 255, "L"))
        body["inpainting_mask_invert"] = invert
        body["inpainting_fill"] = 1
        r = post(s, "/img2img", body)
        svc.note("img2img inpaint invert=%s" % invert, r.status)
        assert r.status == 200, r
        assert image_of(r.json["images"][0]).size == (64, 64)


def test_coercions(c):
    """pydantic's coercions on the wire: each is read as its value (the
    parameters echo it converted) and the image says so; the rest stays a
    422 naming the field."""
    s = c.s
    body = dict(prompt=PROMPT, width="64", height=64.0, steps="2", cfg_scale="7.5",
                seed="5", send_images=1, batch_size=True, override_settings=None, eta=None)
    r = post(s, "/txt2img", body)
    assert r.status == 200, r
    p = r.json["parameters"]
    assert p["steps"] == 2 and p["cfg_scale"] == 7.5 and p["width"] == 64, p
    assert p["batch_size"] == 1 and p["send_images"] is True, p
    info = json.loads(r.json["info"])
    assert info["steps"] == 2 and info["cfg_scale"] == 7.5 and info["width"] == 64, info
    assert len(r.json["images"]) == 1 and image_of(r.json["images"][0]).size == (64, 64)
    for extra, field in ((dict(steps="2.5"), "steps"), (dict(cfg_scale="x"), "cfg_scale"),
                         (dict(send_images=2), "send_images"), (dict(width=[64]), "width"),
                         (dict(steps=True, cfg_scale=True), "cfg_scale")):
        b = dict(prompt=PROMPT, width=64, height=64, steps=2)
        b.update(extra)
        expect_error(post(s, "/txt2img", b), 422, field, "coercion %s" % json.dumps(extra),
                     field + " must be")


def test_options_round_trip(c):
    """test_utils.py's test_options_write, then every kind of key, then a
    restart on the same data dir."""
    s = c.s
    opts = get(s, "/options").json
    for k in ("sd_model_checkpoint", "CLIP_stop_at_last_layers", "eta_ddim", "eta_ancestral",
              "samples_format", "send_seed", "send_size", "jpeg_quality", "outdir_samples",
              "sd_vae", "quicksettings_list"):
        assert k in opts, (k, sorted(opts))
    pre = opts["send_seed"]
    r = post(s, "/options", {"send_seed": not pre})
    assert r.status == 200 and r.json["stored"] == ["send_seed"] and r.json["saved"], r
    assert get(s, "/options").json["send_seed"] == (not pre)
    new = {"send_seed": pre, "samples_format": "jpg", "jpeg_quality": "95", "eta_ddim": 0.5,
           "CLIP_stop_at_last_layers": 2.0, "quicksettings_list": ["sd_vae"],
           "sd_model_checkpoint": opts["sd_model_checkpoint"], "not_an_option": 1}
    r = post(s, "/options", new)
    assert r.status == 200, r
    assert r.json["applied"] == ["CLIP_stop_at_last_layers", "sd_model_checkpoint"], r.json
    assert r.json["stored"] == ["send_seed", "samples_format", "jpeg_quality", "eta_ddim",
                                "quicksettings_list"], r.json
    assert r.json["ignored"] == ["not_an_option"] and "PNG" in r.json["notes"]["samples_format"]
    want = {"send_seed": pre, "samples_format": "jpg", "jpeg_quality": 95, "eta_ddim": 0.5,
            "CLIP_stop_at_last_layers": 2, "quicksettings_list": ["sd_vae"]}
    got = get(s, "/options").json
    assert {k: got[k] for k in want} == want and "not_an_option" not in got, got
    # refused: all or nothing, each refused key named
    r = post(s, "/options", {"send_size": False, "jpeg_quality": 101, "eta_ddim": "fast"})
    err = expect_error(r, 422, "jpeg_quality", "options: two bad keys")
    assert "eta_ddim" in err["message"], err
    assert get(s, "/options").json["send_size"] is True, "nothing applied on a 422"
    # the value applies: clip skip 2 from the options
    r = post(s, "/txt2img", dict(prompt=PROMPT, width=64, height=64, steps=1))
    assert r.status == 200 and json.loads(r.json["info"])["clip_skip"] == 2, r
    # a restart on the same data dir keeps them
    assert s.stop() == 0
    path = os.path.join(s.data_dir, "a1111-options.json")
    assert json.load(open(path))["samples_format"] == "jpg"
    c.s = s = svc.Server(["--threads", "1"], data_dir=s.data_dir, name="a1111-api-2").start()
    got = get(s, "/options").json
    assert {k: got[k] for k in want} == want, got
    r = post(s, "/txt2img", dict(prompt=PROMPT, width=64, height=64, steps=1))
    assert json.loads(r.json["info"])["clip_skip"] == 2, r
    # null puts the default back
    r = post(s, "/options", {"CLIP_stop_at_last_layers": None, "samples_format": None})
    assert r.status == 200, r
    got = get(s, "/options").json
    assert got["CLIP_stop_at_last_layers"] == 1 and got["samples_format"] == "png", got
    # a damaged file is reported and ignored
    assert s.stop() == 0
    with open(path, "w") as f:
        f.write("{\"send_seed\": tru")
    c.s = s = svc.Server(["--threads", "1"], data_dir=s.data_dir, name="a1111-api-3").start()
    assert get(s, "/options").json["send_seed"] is True
    assert "a1111-options.json: damaged" in s.output(), s.output()[-2000:]


def extras_request(image_, **kw):
    """test/test_extras.py's test_simple_upscaling_performed payload."""
    body = {"resize_mode": 0, "show_extras_results": True, "gfpgan_visibility": 0,
            "codeformer_visibility": 0, "codeformer_weight": 0, "upscaling_resize": 2,
            "upscaling_resize_w": 128, "upscaling_resize_h": 128, "upscaling_crop": True,
            "upscaler_1": "Lanczos", "upscaler_2": "None", "extras_upscaler_2_visibility": 0,
            "image": image_}
    body.update(kw)
    return body


def test_extras_single(c):
    s = c.s
    src_png = png_bytes(64, 64)
    src = Image.open(io.BytesIO(src_png)).convert("RGB")
    ups = get(s, "/upscalers").json
    assert [u["name"] for u in ups] == ["None", "Lanczos", "Nearest"], ups
    # A1111's own shape (data URL, as its conftest sends): Lanczos x2 = Pillow's bytes
    r = post(s, "/extra-single-image", extras_request(data_url(src_png)))
    assert r.status == 200 and set(r.json) == {"html_info", "image"}, r
    out = image_of(r.json["image"]).convert("RGB")
    assert out.size == (128, 128), out.size
    assert out.tobytes() == src.resize((128, 128), Image.LANCZOS).tobytes(), "Lanczos != Pillow"
    assert "Postprocess upscale by: 2" in r.json["html_info"], r.json["html_info"]
    assert "Postprocess upscaler: Lanczos" in r.json["html_info"], r.json["html_info"]
    # plain base64, Nearest
    b64 = base64.b64encode(src_png).decode()
    r = post(s, "/extra-single-image", extras_request(b64, upscaler_1="Nearest"))
    out = image_of(r.json["image"]).convert("RGB")
    assert out.tobytes() == src.resize((128, 128), Image.NEAREST).tobytes(), "Nearest != Pillow"
    # two upscalers blended by visibility (Pillow's Image.blend)
    r = post(s, "/extra-single-image", extras_request(b64, upscaler_2="Nearest",
                                                      extras_upscaler_2_visibility=0.5))
    assert r.status == 200 and "Postprocess upscaler 2: Nearest" in r.json["html_info"], r
    want = Image.blend(src.resize((128, 128), Image.LANCZOS),
                       src.resize((128, 128), Image.NEAREST), 0.5)
    got = image_of(r.json["image"]).convert("RGB")
    diff = max(abs(a - b) for a, b in zip(got.tobytes(), want.tobytes()))
    assert diff <= 1, "blend differs from Pillow's by %d" % diff
    # to a size, cropped: A1111's scale = max ratio, dest // 8 * 8, then the box
    r = post(s, "/extra-single-image", extras_request(b64, resize_mode=1, upscaling_resize_w=100,
                                                      upscaling_resize_h=60))
    assert image_of(r.json["image"]).size == (100, 60), r
    assert "Postprocess upscale to: 100x60" in r.json["html_info"], r.json["html_info"]
    r = post(s, "/extra-single-image", extras_request(b64, resize_mode=1, upscaling_resize_w=100,
                                                      upscaling_resize_h=60, upscaling_crop=False))
    assert image_of(r.json["image"]).size == (96, 96), r
    # test_png_info_performed / test_interrogate_performed: only an image (and
    # "model") to extra-single-image: 200, the image as it was
    for body in ({"image": b64}, {"image": b64, "model": "clip"}):
        r = post(s, "/extra-single-image", body)
        assert r.status == 200 and image_of(r.json["image"]).size == (64, 64), r
        assert r.json["html_info"] == "<p></p>", r.json
    # refusals, each with its reason, before any work
    for extra, field, words in (
            (dict(gfpgan_visibility=0.5), "gfpgan_visibility", "GFPGAN model"),
            (dict(codeformer_visibility=1), "codeformer_visibility", "CodeFormer model"),
            (dict(upscaler_1="R-ESRGAN 4x+"), "upscaler_1", "Lanczos"),
            (dict(upscaling_resize=9), "upscaling_resize", "upscaling_resize must be"),
            (dict(upscaling_resize_w=100000, resize_mode=1), "upscaling_resize_w", None),
            (dict(upscaling_resize_w=8192, upscaling_resize_h=8192, resize_mode=1),
             "upscaling_resize_w", "at most"),
            (dict(image="%%%"), "image", "base64"), (dict(image=""), "image", None),
            (dict(image="data:image/png," + b64), "image", "only base64 data URLs")):
        expect_error(post(s, "/extra-single-image", extras_request(b64, **extra)), 422, field,
                     "extras %s" % json.dumps(extra)[:40], words)
    big = base64.b64encode(png_bytes(1024, 1024)).decode()
    expect_error(post(s, "/extra-single-image", extras_request(big, upscaling_resize=8)), 422,
                 "upscaling_resize", "8192x8192 from 1024x1024", "at most")


def test_extras_batch_and_png_info(c):
    s = c.s
    a, b = png_bytes(64, 64), png_bytes(32, 48)
    body = extras_request(None, upscaler_1="Nearest")
    del body["image"]
    body["imageList"] = [{"data": data_url(a), "name": "a.png"},
                         {"data": base64.b64encode(b).decode(), "name": "b.png"},
                         base64.b64encode(a).decode()]
    r = post(s, "/extra-batch-images", body)
    assert r.status == 200 and set(r.json) == {"html_info", "images"}, r
    sizes = [image_of(i).size for i in r.json["images"]]
    assert sizes == [(128, 128), (64, 96), (128, 128)], sizes
    body["imageList"] = []
    expect_error(post(s, "/extra-batch-images", body), 422, "imageList", "empty imageList")
    body["imageList"] = [{"name": "x"}]
    expect_error(post(s, "/extra-batch-images", body), 422, "imageList[0].data", "no data")
    # png-info of an image Tessera made: A1111's infotext, parsed
    t = a1111_txt2img()
    t.update(seed=42, negative_prompt="blurry, bad")
    r = post(s, "/txt2img", t)
    assert r.status == 200, r
    infotext = json.loads(r.json["info"])["infotexts"][0]
    r = post(s, "/png-info", {"image": r.json["images"][0]})
    assert r.status == 200 and r.json["info"] == infotext, (r.json, infotext)
    p = r.json["parameters"]
    assert p["Prompt"] == PROMPT and p["Negative prompt"] == "blurry, bad", p
    assert p["Steps"] == "3" and p["Seed"] == "42" and p["Size-1"] == "64", p
    assert p["Sampler"] == "Euler a", p
    # the infotext survives an upscale
    up = post(s, "/extra-single-image", extras_request(data_url(base64.b64decode(
        post(s, "/txt2img", t).json["images"][0]))))
    assert post(s, "/png-info", {"image": up.json["image"]}).json["info"] == infotext
    # an image without one
    r = post(s, "/png-info", {"image": data_url(a)})
    assert r.status == 200 and r.json["info"] == "" and r.json["parameters"] == {}, r.json
    expect_error(post(s, "/png-info", {"image": "aGVsbG8="}), 422, "image", "not an image")
    expect_error(post(s, "/png-info", {}), 422, "image", "no image")


if __name__ == "__main__":
    sys.exit(svc.run_tests([test_txt2img_shapes, test_img2img_shapes, test_coercions,
                            test_options_round_trip, test_extras_single,
                            test_extras_batch_and_png_info],
                           setup=setup, teardown=teardown))
