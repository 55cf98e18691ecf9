"""tests/compat/test_comfy_api.py - ComfyUI's API on `tessera serve` (issue 59,
docs/compat-comfyui.md), driven over HTTP the way ComfyUI clients drive it.

Standard library (the harness is tests/service/svc.py), and PyPI's
comfy-api-simplified for one case (scripts/setup-test-venv.sh): each case starts
its own server on 127.0.0.1, port 0, with a temporary --data-dir.

- txt2img: ComfyUI's default workflow in API format (the checkpoint name from
  /models/checkpoints) runs; its /history entry names the SaveImage output, and
  /view's PNG is `tessera generate`'s with the mapped settings (euler + normal
  = euler + comfy_normal, ComfyUI's own sigmas), pixel for pixel and infotext.
- ComfyUI's schedules and batch noise: tests/compat/test_comfy_exact.py.
- hostile: bad workflows get 400 with node_errors naming the node id and class
  (the full table of 47 is tests/service/test_comfy.c; here the HTTP shape).
- queue: with --max-batch 1, a long prompt runs and a second waits; /queue
  lists them, POST /queue delete cancels the waiting one, POST /interrupt the
  running one; both show in /history as execution_interrupted.
- restart: /history and /view answer the same after a restart on the data dir.
- upload_img2img: POST /upload/image, LoadImage -> VAEEncode -> KSampler with
  denoise 0.6 equals `tessera generate --init-image --strength 0.6`.
- hires: KSampler -> LatentUpscaleBy -> KSampler, and VAEDecode -> ImageScale
  (lanczos) -> VAEEncode between them, equal `generate --hires-*`.
- inpaint: SetLatentNoiseMask / VAEEncodeForInpaint with LoadImage's MASK
  (from an RGBA upload's alpha) equal `generate --mask --mask-blur 0`.
- view_escape: /view and LoadImage names never leave their folders.
- keys: with --token-file the ComfyUI paths take the key like /v1/.
- comfy_api_simplified: PyPI's comfy-api-simplified client (.venv-test)
  runs the exported default template changed only in its checkpoint; its
  image is `tessera generate`'s; its upload + img2img too.
- websocket: /ws?clientId= (a stdlib RFC 6455 client here): the handshake's
  accept key, ComfyUI's message order for a prompt (status, execution_start,
  execution_cached, executing per node, progress per step, executed with the
  SaveImage images, execution_success, executing null), only for that client
  id; execution_interrupted on /interrupt; ping -> pong, close -> close;
  an unmasked frame is refused (1002).

Run one case: python3 tests/compat/test_comfy_api.py test_txt2img
"""
import base64
import copy
import hashlib
import json
import os
import socket
import struct
import sys
import time
import urllib.parse
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "service"))
import svc  # noqa: E402

SIZE = 64
STEPS = 4


def default_workflow(ckpt, seed=42, steps=STEPS, text="a red apple on a table", negative="blurry"):
    """ComfyUI's default graph (its "Load Default"), exported in API format."""
    return {
        "3": {"class_type": "KSampler", "inputs": {
            "seed": seed, "steps": steps, "cfg": 7.5, "sampler_name": "euler",
            "scheduler": "normal", "denoise": 1.0, "model": ["4", 0], "positive": ["6", 0],
            "negative": ["7", 0], "latent_image": ["5", 0]}},
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": ckpt}},
        "5": {"class_type": "EmptyLatentImage",
              "inputs": {"width": SIZE, "height": SIZE, "batch_size": 1}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"text": text, "clip": ["4", 1]}},
        "7": {"class_type": "CLIPTextEncode", "inputs": {"text": negative, "clip": ["4", 1]}},
        "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
        "9": {"class_type": "SaveImage",
              "inputs": {"filename_prefix": "ComfyUI", "images": ["8", 0]}},
    }


# the titles ComfyUI's "Save (API Format)" writes for the default graph
TITLES = {"3": "KSampler", "4": "Load Checkpoint", "5": "Empty Latent Image",
          "6": "CLIP Text Encode (Prompt)", "7": "CLIP Text Encode (Prompt)",
          "8": "VAE Decode", "9": "Save Image"}


def exported_workflow(ckpt_placeholder="v1-5-pruned-emaonly-fp16.safetensors"):
    """The default graph as ComfyUI exports it (with _meta titles), before the
    only edit a user makes for Tessera: the checkpoint's name."""
    wf = default_workflow(ckpt_placeholder)
    for k, node in wf.items():
        node["_meta"] = {"title": TITLES[k]}
    return wf


# every answer is checked against docs/openapi.yaml (tag comfy)
def get(s, path, **kw):
    return s.get(path, **kw)


def post(s, path, body, **kw):
    return s.post(path, body, **kw)


def checkpoint(s):
    r = get(s, "/models/checkpoints")
    assert r.status == 200 and isinstance(r.json, list) and len(r.json) == 1, r
    return r.json[0]


def queue_prompt(s, workflow, client_id=None, previews=False):
    body = {"prompt": workflow, "client_id": client_id or uuid.uuid4().hex}
    if previews:
        body["extra_data"] = {"preview_method": "auto"}
    r = post(s, "/prompt", body)
    assert r.status == 200, r
    assert set(r.json) == {"prompt_id", "number", "node_errors"}, r.json
    assert r.json["node_errors"] == {}, r.json
    return r.json["prompt_id"]


def wait_history(s, pid, timeout=180):
    def done():
        r = get(s, "/history/" + pid)
        assert r.status == 200, r
        return r.json.get(pid)
    return svc.wait_until(done, timeout, "prompt %s in /history" % pid, interval=0.1)


def view(s, image):
    q = urllib.parse.urlencode({"filename": image["filename"], "subfolder": image["subfolder"],
                                "type": image["type"]})
    r = get(s, "/view?" + q)
    assert r.status == 200 and r.headers["content-type"] == "image/png", r
    return r.body


def test_txt2img():
    s = svc.Server().start()
    ckpt = checkpoint(s)
    info = get(s, "/object_info/KSampler")
    assert "euler" in info.json["KSampler"]["input"]["required"]["sampler_name"][0], info.json
    wf = default_workflow(ckpt)
    pid = queue_prompt(s, wf)
    h = wait_history(s, pid)
    assert h["status"]["status_str"] == "success" and h["status"]["completed"], h["status"]
    assert [m[0] for m in h["status"]["messages"]] == ["execution_start", "execution_success"]
    assert h["prompt"][1] == pid and h["prompt"][2] == wf and h["prompt"][4] == ["9"], h["prompt"]
    images = h["outputs"]["9"]["images"]
    assert len(images) == 1 and images[0]["type"] == "output" and images[0]["subfolder"] == ""
    png = view(s, images[0])
    svc.assert_same_image(png, dict(prompt="a red apple on a table", negative_prompt="blurry",
                                    width=SIZE, height=SIZE, steps=STEPS, seed=42, cfg_scale=7.5,
                                    sampler="euler", scheduler="comfy_normal"), "comfy txt2img")
    # ComfyUI's /api/ prefix reaches the same routes (its frontend uses it)
    r = s.get("/api/history/" + pid, validate_spec=False)
    assert r.status == 200 and r.json[pid]["outputs"] == h["outputs"], r
    assert s.get("/api/object_info/KSampler", validate_spec=False).json == info.json
    assert s.get("/api/nothing", validate_spec=False).status == 404
    # the prompt is an ordinary native job
    r = s.get("/v1/jobs/" + pid)
    assert r.status == 200 and r.json["state"] == "done", r
    # the whole history lists it; the queue is empty
    assert pid in get(s, "/history").json
    q = get(s, "/queue").json
    assert q == {"queue_running": [], "queue_pending": []}, q
    s.stop()


def node_error(s, wf, node, err_type, class_type):
    r = post(s, "/prompt", {"prompt": wf})
    assert r.status == 400, r
    assert r.json["error"]["type"] == "prompt_outputs_failed_validation", r.json
    ne = r.json["node_errors"]
    assert node in ne, (node, r.json)
    assert ne[node]["class_type"] == class_type, ne
    assert err_type in [e["type"] for e in ne[node]["errors"]], ne
    return r.json


def test_hostile():
    s = svc.Server().start()
    ckpt = checkpoint(s)
    base = default_workflow(ckpt)
    before = len(get(s, "/history").json)

    wf = copy.deepcopy(base)
    wf["3"]["inputs"]["latent_image"] = ["3", 0]
    node_error(s, wf, "3", "dependency_cycle", "KSampler")
    wf = copy.deepcopy(base)
    wf["3"]["inputs"]["model"] = ["99", 0]
    node_error(s, wf, "3", "bad_linked_input", "KSampler")
    wf = copy.deepcopy(base)
    wf["3"]["inputs"]["positive"] = ["4", 0]
    node_error(s, wf, "3", "return_type_mismatch", "KSampler")
    wf = copy.deepcopy(base)
    wf["4"]["inputs"]["ckpt_name"] = "sd_xl_base_1.0.safetensors"
    node_error(s, wf, "4", "value_not_in_list", "CheckpointLoaderSimple")
    wf = copy.deepcopy(base)
    del wf["3"]["inputs"]["steps"]
    node_error(s, wf, "3", "required_input_missing", "KSampler")
    wf = copy.deepcopy(base)
    wf["5"]["inputs"]["width"] = 100  # not a multiple of 8: the engine refuses, named on node 5
    node_error(s, wf, "5", "value_not_accepted", "EmptyLatentImage")
    # a pair Tessera does not offer (uni_pc has no ComfyUI beta schedule, and
    # diffusers none like it): the engine's refusal, named on the scheduler
    wf = copy.deepcopy(base)
    wf["3"]["inputs"]["sampler_name"] = "uni_pc"
    wf["3"]["inputs"]["scheduler"] = "beta"
    e = node_error(s, wf, "3", "value_not_accepted", "KSampler")
    assert e["node_errors"]["3"]["errors"][0]["extra_info"]["input_name"] == "scheduler", e
    # unknown node class, no outputs, no prompt, bad JSON
    wf = copy.deepcopy(base)
    wf["10"] = {"class_type": "UpscaleModelLoader", "inputs": {"model_name": "x"}}
    r = post(s, "/prompt", {"prompt": wf})
    assert r.status == 400 and r.json["error"]["type"] == "invalid_prompt", r
    assert "UpscaleModelLoader" in r.json["error"]["message"], r.json
    r = post(s, "/prompt", {"prompt": {"1": base["4"]}})
    assert r.status == 400 and r.json["error"]["type"] == "prompt_no_outputs", r
    r = post(s, "/prompt", {"client_id": "x"})
    assert r.status == 400 and r.json["error"]["type"] == "no_prompt", r
    r = post(s, "/prompt", "{not json")
    assert r.status == 400 and "node_errors" in r.json and r.json["error"]["type"], r
    # 300 nodes
    wf = copy.deepcopy(base)
    for i in range(300):
        wf["n%d" % i] = {"class_type": "EmptyLatentImage", "inputs": {}}
    r = post(s, "/prompt", {"prompt": wf})
    assert r.status == 400 and r.json["error"]["type"] == "invalid_prompt", r
    # nothing was queued by any of them
    assert len(get(s, "/history").json) == before
    assert get(s, "/queue").json == {"queue_running": [], "queue_pending": []}
    # a wrong method: 405 in ComfyUI's shape
    r = s.request("DELETE", "/prompt")
    assert r.status == 405 and "node_errors" in r.json, r
    s.stop()


def test_queue():
    s = svc.Server(["--max-batch", "1", "--threads", "1"]).start()
    ckpt = checkpoint(s)
    long_a = queue_prompt(s, default_workflow(ckpt, seed=1, steps=svc.LONG))
    svc.wait_until(lambda: s.get("/v1/jobs/" + long_a).json["state"] == "running", 60,
                   "the first prompt running")
    long_b = queue_prompt(s, default_workflow(ckpt, seed=2, steps=svc.LONG))
    q = get(s, "/queue").json
    assert [i[1] for i in q["queue_running"]] == [long_a], q
    assert [i[1] for i in q["queue_pending"]] == [long_b], q
    assert q["queue_pending"][0][4] == ["9"], q
    r = post(s, "/queue", {"delete": [long_b]})
    assert r.status == 200, r
    hb = wait_history(s, long_b, 30)
    assert hb["status"]["status_str"] == "error" and not hb["status"]["completed"], hb
    assert hb["status"]["messages"][-1][0] == "execution_interrupted", hb
    assert hb["outputs"]["9"]["images"] == [], hb
    r = post(s, "/interrupt", {})
    assert r.status == 200, r
    ha = wait_history(s, long_a, 60)
    assert ha["status"]["messages"][-1][0] == "execution_interrupted", ha
    assert get(s, "/queue").json == {"queue_running": [], "queue_pending": []}
    # clear: a waiting prompt goes, the running one stays
    c1 = queue_prompt(s, default_workflow(ckpt, seed=3, steps=svc.LONG))
    svc.wait_until(lambda: s.get("/v1/jobs/" + c1).json["state"] == "running", 60, "c1 running")
    c2 = queue_prompt(s, default_workflow(ckpt, seed=4, steps=svc.LONG))
    assert post(s, "/queue", {"clear": True}).status == 200
    wait_history(s, c2, 30)
    assert s.get("/v1/jobs/" + c1).json["state"] == "running"
    post(s, "/interrupt", {"prompt_id": c1})
    wait_history(s, c1, 60)
    s.stop()


def test_restart():
    s = svc.Server().start()
    ckpt = checkpoint(s)
    pid = queue_prompt(s, default_workflow(ckpt, seed=7))
    h1 = wait_history(s, pid)
    png1 = view(s, h1["outputs"]["9"]["images"][0])
    s.stop()
    s2 = svc.Server(data_dir=s.data_dir).start()
    h2 = get(s2, "/history/" + pid).json[pid]
    assert h2["outputs"] == h1["outputs"] and h2["prompt"] == h1["prompt"], (h1, h2)
    assert h2["status"]["status_str"] == "success"
    assert view(s2, h2["outputs"]["9"]["images"][0]) == png1
    # POST /history delete: gone from the history, the image stays viewable
    other = queue_prompt(s2, default_workflow(ckpt, seed=8))
    wait_history(s2, other)
    assert post(s2, "/history", {"delete": [pid]}).status == 200
    assert get(s2, "/history/" + pid).json == {}
    assert set(get(s2, "/history").json) == {other}
    assert view(s2, h2["outputs"]["9"]["images"][0]) == png1
    assert post(s2, "/history", {"clear": True}).status == 200
    assert get(s2, "/history").json == {}
    assert post(s2, "/history", {"delete": "x"}).status == 400
    s2.stop()


def multipart(fields, files):
    boundary = "tsr" + uuid.uuid4().hex
    out = b""
    for k, v in fields.items():
        out += ("--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n"
                % (boundary, k, v)).encode()
    for k, (name, data, ctype) in files.items():
        out += ("--%s\r\nContent-Disposition: form-data; name=\"%s\"; filename=\"%s\"\r\n"
                "Content-Type: %s\r\n\r\n" % (boundary, k, name, ctype)).encode() + data + b"\r\n"
    out += ("--%s--\r\n" % boundary).encode()
    return out, "multipart/form-data; boundary=" + boundary


def test_upload_img2img():
    s = svc.Server().start()
    ckpt = checkpoint(s)
    rgb = bytes((x * 4 + y) % 256 for y in range(SIZE) for x in range(SIZE) for _ in range(3))
    png = svc.png_encode(SIZE, SIZE, rgb)
    body, ctype = multipart({"overwrite": "true"}, {"image": ("../my photo.png", png, "image/png")})
    r = s.request("POST", "/upload/image", body, headers={"Content-Type": ctype})
    assert r.status == 200, r
    assert r.json == {"name": "my_photo.png", "subfolder": "", "type": "input"}, r.json
    # the same name again without overwrite gets a new name
    body, ctype = multipart({}, {"image": ("my photo.png", png, "image/png")})
    r2 = s.request("POST", "/upload/image", body, headers={"Content-Type": ctype})
    assert r2.status == 200 and r2.json["name"] == "my_photo_1.png", r2
    # not an image
    body, ctype = multipart({}, {"image": ("x.png", b"hello", "image/png")})
    r3 = s.request("POST", "/upload/image", body, headers={"Content-Type": ctype})
    assert r3.status == 400 and "node_errors" in r3.json, r3
    choices = get(s, "/object_info/LoadImage").json["LoadImage"]["input"]["required"]["image"][0]
    assert choices == ["my_photo.png", "my_photo_1.png"], choices
    assert get(s, "/view?filename=my_photo.png&type=input").body == png
    wf = default_workflow(ckpt, seed=5)
    wf["20"] = {"class_type": "LoadImage", "inputs": {"image": "my_photo.png"}}
    wf["21"] = {"class_type": "VAEEncode", "inputs": {"pixels": ["20", 0], "vae": ["4", 2]}}
    wf["3"]["inputs"]["latent_image"] = ["21", 0]
    wf["3"]["inputs"]["denoise"] = 0.6
    pid = queue_prompt(s, wf)
    h = wait_history(s, pid)
    assert h["status"]["status_str"] == "success", h
    init = os.path.join(svc.tmpdir("tsr-comfy-"), "init.png")
    with open(init, "wb") as f:
        f.write(png)
    svc.assert_same_image(view(s, h["outputs"]["9"]["images"][0]),
                          dict(prompt="a red apple on a table", negative_prompt="blurry",
                               width=SIZE, height=SIZE, steps=STEPS, seed=5, cfg_scale=7.5,
                               sampler="euler",
                               scheduler="comfy_normal", init_image=init, strength=0.6),
                          "comfy img2img")
    s.stop()


def generate_png(*flags):
    """`tessera generate` with these flags (beyond what svc.generate maps), decoded."""
    import subprocess
    out = os.path.join(svc.tmpdir("tsr-comfy-gen-"), "out.png")
    argv = [svc.TSR_BIN, "--log-level", "warn", "generate", "--model", svc.MODEL, "--quiet",
            "--device", "cpu", "--threads", "1", "--output", out] + [str(f) for f in flags]
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert r.returncode == 0, "%s -> %d\n%s" % (argv, r.returncode, r.stdout.decode())
    with open(out, "rb") as f:
        return svc.png_decode(f.read())


def test_hires():
    """KSampler -> LatentUpscaleBy -> KSampler (the hires-fix graph) equals
    `tessera generate --hires-*` with the mapped settings."""
    s = svc.Server().start()
    ckpt = checkpoint(s)
    wf = default_workflow(ckpt)
    wf["10"] = {"class_type": "LatentUpscaleBy",
                "inputs": {"samples": ["3", 0], "upscale_method": "nearest-exact", "scale_by": 2.0}}
    wf["11"] = {"class_type": "KSampler", "inputs": dict(wf["3"]["inputs"], steps=3, denoise=0.5,
                                                         latent_image=["10", 0])}
    wf["8"]["inputs"]["samples"] = ["11", 0]
    h = wait_history(s, queue_prompt(s, wf))
    assert h["status"]["status_str"] == "success", h
    got = svc.assert_same_image(
        view(s, h["outputs"]["9"]["images"][0]),
        dict(prompt="a red apple on a table", negative_prompt="blurry", width=SIZE, height=SIZE,
             steps=STEPS, seed=42, cfg_scale=7.5, sampler="euler", scheduler="comfy_normal",
             hires_scale=2, hires_steps=3, hires_strength=0.5,
             hires_upscaler="Latent (nearest-exact)"), "comfy hires")
    assert (got.width, got.height) == (2 * SIZE, 2 * SIZE)
    # in image space: VAEDecode -> ImageScale (lanczos) -> VAEEncode -> KSampler
    wf["12"] = {"class_type": "ImageScale", "inputs": {
        "image": ["13", 0], "upscale_method": "lanczos", "width": 2 * SIZE, "height": 2 * SIZE,
        "crop": "disabled"}}
    wf["13"] = {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}}
    wf["14"] = {"class_type": "VAEEncode", "inputs": {"pixels": ["12", 0], "vae": ["4", 2]}}
    del wf["10"]
    wf["11"]["inputs"]["latent_image"] = ["14", 0]
    h = wait_history(s, queue_prompt(s, wf))
    assert h["status"]["status_str"] == "success", h
    # generate has no --hires-width: its --hires-scale 2 is the same size, so
    # the same pixels; the infotext says "Hires resize: 128x128" here
    got = svc.png_decode(view(s, h["outputs"]["9"]["images"][0]))
    want = svc.generate(prompt="a red apple on a table", negative_prompt="blurry", width=SIZE,
                        height=SIZE, steps=STEPS, seed=42, cfg_scale=7.5, sampler="euler",
                        scheduler="comfy_normal", hires_scale=2, hires_steps=3,
                        hires_strength=0.5, hires_upscaler="Lanczos")
    assert (got.width, got.height) == (want.width, want.height) == (2 * SIZE, 2 * SIZE)
    assert got.rgb() == want.rgb(), "comfy ImageScale hires differs from generate"
    info = got.texts.get("parameters")
    assert "Hires resize: 128x128, Hires steps: 3, Hires upscaler: Lanczos" in info, info
    s.stop()


def test_inpaint():
    """SetLatentNoiseMask over VAEEncode of an RGBA upload, the mask from its
    alpha (ComfyUI's MASK = 1 - alpha), equals `tessera generate --mask` with
    the white-is-repaint mask and --inpainting-fill 1 (--mask-blur 0: the
    native job's image, as diffusers'); VAEEncodeForInpaint equals it with
    --inpainting-fill 0."""
    s = svc.Server().start()
    ckpt = checkpoint(s)
    d = svc.tmpdir("tsr-comfy-inpaint-")
    rgba, rgb, mask = bytearray(), bytearray(), bytearray()
    for y in range(SIZE):
        for x in range(SIZE):
            px = ((x * 4) % 256, (y * 4) % 256, (x + y) % 256)
            hole = 16 <= x < 48 and 20 <= y < 44
            a = 0 if hole else 255
            rgba += bytes(px) + bytes([a])
            rgb += bytes(px)
            mask += bytes([255 - a] * 3)
    body, ctype = multipart({}, {"image": ("hole.png", svc.png_encode(SIZE, SIZE, bytes(rgba), 4),
                                           "image/png")})
    assert s.request("POST", "/upload/image", body, headers={"Content-Type": ctype}).status == 200
    init, mpath = os.path.join(d, "init.png"), os.path.join(d, "mask.png")
    with open(init, "wb") as f:
        f.write(svc.png_encode(SIZE, SIZE, bytes(rgb)))
    with open(mpath, "wb") as f:
        f.write(svc.png_encode(SIZE, SIZE, bytes(mask)))
    common = ["--prompt", "a red apple on a table", "--negative-prompt", "blurry", "--seed", 42,
              "--steps", STEPS, "--cfg-scale", 7.5, "--sampler", "euler", "--scheduler", "comfy_normal",
              "--width", SIZE, "--height", SIZE, "--init-image", init, "--mask", mpath,
              "--mask-blur", 0]  # a native job is the engine's image, no paste-back
    for kind, denoise, fill in [("SetLatentNoiseMask", 0.7, 1), ("VAEEncodeForInpaint", 1.0, 0)]:
        wf = default_workflow(ckpt)
        wf["20"] = {"class_type": "LoadImage", "inputs": {"image": "hole.png"}}
        if kind == "SetLatentNoiseMask":
            wf["21"] = {"class_type": "VAEEncode",
                        "inputs": {"pixels": ["20", 0], "vae": ["4", 2]}}
            wf["22"] = {"class_type": kind, "inputs": {"samples": ["21", 0], "mask": ["20", 1]}}
        else:
            wf["22"] = {"class_type": kind, "inputs": {"pixels": ["20", 0], "vae": ["4", 2],
                                                       "mask": ["20", 1], "grow_mask_by": 6}}
        wf["3"]["inputs"]["latent_image"] = ["22", 0]
        wf["3"]["inputs"]["denoise"] = denoise
        h = wait_history(s, queue_prompt(s, wf))
        assert h["status"]["status_str"] == "success", h
        got = svc.png_decode(view(s, h["outputs"]["9"]["images"][0]))
        want = generate_png(*(common + ["--strength", denoise, "--inpainting-fill", fill]))
        a, b = got.rgb(), want.rgb()
        assert (got.width, got.height) == (want.width, want.height)
        diff = max(abs(x - y) for x, y in zip(a, b))
        assert diff == 0, "%s: max |diff| %d against generate --mask" % (kind, diff)
        # and the mask mattered: outside the hole the init image stays close
        assert got.rgb() != svc.png_decode(svc.png_encode(SIZE, SIZE, bytes(rgb))).rgb()
    s.stop()


def test_view_escape():
    s = svc.Server().start()
    ckpt = checkpoint(s)
    pid = queue_prompt(s, default_workflow(ckpt))
    h = wait_history(s, pid)
    good = h["outputs"]["9"]["images"][0]["filename"]
    for q in ["filename=../../etc/passwd&type=output", "filename=%2e%2e%2fjournal&type=output",
              "filename=" + good + "&subfolder=..&type=output",
              "filename=" + good.replace("_00000_", "_00001_") + "&type=output",
              "filename=" + good + "x&type=output", "filename=../url-secret&type=input",
              "filename=.hidden&type=input", "filename=" + good + "&type=weird"]:
        r = get(s, "/view?" + q)
        assert r.status in (400, 404), (q, r)
    assert get(s, "/view?filename=" + good + "&type=output").status == 200
    # LoadImage with a path: not in the list
    wf = default_workflow(ckpt)
    wf["20"] = {"class_type": "LoadImage", "inputs": {"image": "../journal"}}
    wf["21"] = {"class_type": "VAEEncode", "inputs": {"pixels": ["20", 0], "vae": ["4", 2]}}
    wf["3"]["inputs"]["latent_image"] = ["21", 0]
    node_error(s, wf, "20", "value_not_in_list", "LoadImage")
    s.stop()


def test_keys():
    d = svc.tmpdir("tsr-comfy-keys-")
    path = os.path.join(d, "keys")
    alice, bob = svc.new_key(path, "alice"), svc.new_key(path, "bob")
    s = svc.Server(["--keys", path]).start()
    A = {"Authorization": "Bearer " + alice}
    B = {"Authorization": "Bearer " + bob}
    for p in ["/object_info", "/history", "/queue", "/models/checkpoints", "/system_stats"]:
        r = s.request("GET", p, headers={"Authorization": "Bearer wrong"})
        assert r.status == 401, (p, r)
    r = s.request("POST", "/prompt", {"prompt": {}}, headers={"Authorization": "Bearer wrong"})
    assert r.status == 401, r
    ckpt = s.get("/models/checkpoints", headers=A).json[0]
    # alice's socket and bob's socket both claim alice's client id
    ws_a = WS(s.port, "shared-id", A)
    ws_b = WS(s.port, "shared-id", B)
    ws_a.message(), ws_b.message()
    r = s.post("/prompt", {"prompt": default_workflow(ckpt), "client_id": "shared-id"}, headers=A)
    assert r.status == 200, r
    pid = r.json["prompt_id"]
    got = messages_until(ws_a, lambda m: m["type"] == "executing" and m["data"]["node"] is None)
    assert "executed" in [m["type"] for m in got]
    h = s.get("/history/" + pid, headers=A).json[pid]
    image = h["outputs"]["9"]["images"][0]
    q = urllib.parse.urlencode({"filename": image["filename"], "type": "output"})
    assert s.get("/view?" + q, headers=A).status == 200
    # bob: no history, no image, no queue entry, no messages of alice's run
    assert s.get("/history/" + pid, headers=B).json == {}
    assert pid not in s.get("/history", headers=B).json
    assert s.get("/view?" + q, headers=B).status == 404
    seen_b = messages_until(ws_b, lambda m: m["type"] == "status" and
                            m["data"]["status"]["exec_info"]["queue_remaining"] == 0)
    assert {m["type"] for m in seen_b} == {"status"}, seen_b
    ws_a.close()
    ws_b.close()
    s.stop()


class WS:
    """A minimal RFC 6455 client (masked frames, no fragmentation)."""

    def __init__(self, port, client_id, headers=None, expect=101):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        extra = "".join("%s: %s\r\n" % kv for kv in (headers or {}).items())
        self.sock.sendall(("GET /ws?clientId=%s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n%s\r\n"
                           % (client_id, port, key, extra)).encode())
        self.buf = b""
        self.binary = []
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(4096)
            assert chunk, "closed during the handshake: %r" % self.buf
            self.buf += chunk
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines[1:]}
        # RFC 6455 1.3's GUID (its example: dGhlIHNhbXBsZSBub25jZQ== -> s3pPLMBiTxaQ9kYGzzhZRbK+xOo=)
        want = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11")
                                             .encode()).digest()).decode()
        assert self.status == expect, head
        if expect != 101:
            return
        assert self.headers.get("sec-websocket-accept") == want, (self.headers, want)

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def frame(self):
        b0, b1 = self._read(2)
        assert not b1 & 0x80, "a server frame must not be masked"
        n = b1 & 0x7f
        if n == 126:
            n = struct.unpack(">H", self._read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", self._read(8))[0]
        return b0 & 0x0f, self._read(n)

    def send(self, opcode, payload=b"", masked=True):
        head = bytes([0x80 | opcode])
        n = len(payload)
        head += bytes([(0x80 if masked else 0) | n]) if n < 126 else \
            bytes([(0x80 if masked else 0) | 126]) + struct.pack(">H", n)
        if masked:
            mask = os.urandom(4)
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            head += mask
        self.sock.sendall(head + payload)

    def message(self):
        """The next JSON message (pings answered, other frames skipped)."""
        while True:
            op, data = self.frame()
            if op == 1:
                return json.loads(data)
            if op == 2:
                self.binary.append(data)
            if op == 9:
                self.send(10, data)
            if op == 8:
                raise EOFError("close %r" % data)

    def close(self):
        self.sock.close()


def messages_until(ws, done):
    got = []
    while True:
        m = ws.message()
        got.append(m)
        if done(m):
            return got


def test_websocket():
    s = svc.Server().start()
    ckpt = checkpoint(s)
    ws = WS(s.port, "client-a")
    other = WS(s.port, "client-b")
    first = ws.message()
    assert first["type"] == "status" and first["data"]["sid"] == "client-a", first
    assert first["data"]["status"]["exec_info"]["queue_remaining"] == 0, first
    assert other.message()["type"] == "status"
    pid = queue_prompt(s, default_workflow(ckpt), client_id="client-a", previews=True)
    got = messages_until(ws, lambda m: m["type"] == "executing" and m["data"]["node"] is None)
    kinds = [m["type"] for m in got]
    # the queue's news, then the run in ComfyUI's order
    assert kinds[0] == "status" and got[0]["data"]["status"]["exec_info"]["queue_remaining"] == 1
    i = kinds.index("execution_start")
    assert kinds[i + 1] == "execution_cached", kinds
    nodes = [m["data"]["node"] for m in got if m["type"] == "executing"]
    # dependencies first (the checkpoint before the encoders), then the sampler's chain
    assert sorted(nodes[:4]) == ["4", "5", "6", "7"] and nodes[0] == "4", nodes
    assert nodes[4:] == ["3", "8", "9", None], nodes
    steps = [m["data"]["value"] for m in got if m["type"] == "progress"]
    assert steps == list(range(1, STEPS + 1)), steps
    assert all(m["data"]["max"] == STEPS and m["data"]["node"] == "3"
               for m in got if m["type"] == "progress"), got
    assert kinds.index("progress") > kinds.index("executing")
    ex = [m for m in got if m["type"] == "executed"]
    assert len(ex) == 1 and ex[0]["data"]["node"] == "9", ex
    h = wait_history(s, pid)
    assert ex[0]["data"]["output"] == h["outputs"]["9"], (ex, h)
    assert kinds[-2:] == ["execution_success", "executing"], kinds
    assert all(m["data"].get("prompt_id", pid) == pid for m in got)
    # previews: ComfyUI's binary frames (PREVIEW_IMAGE, JPEG), decodable, the image's size
    assert ws.binary, "no preview frame"
    for b in ws.binary:
        assert b[:8] == b"\x00\x00\x00\x01\x00\x00\x00\x01" and b[8:10] == b"\xff\xd8", b[:12]
        sof = b.find(b"\xff\xc0", 8)
        assert sof > 0 and struct.unpack(">HH", b[sof + 5:sof + 9]) == (SIZE, SIZE), b[:40]
    assert not other.binary
    # without extra_data.preview_method: no binary frame (a client would take it for a result)
    ws.binary.clear()
    queue_prompt(s, default_workflow(ckpt, seed=9), client_id="client-a")
    messages_until(ws, lambda m: m["type"] == "executing" and m["data"]["node"] is None)
    assert not ws.binary, len(ws.binary)
    after = ws.message()
    assert after["type"] == "status" and \
        after["data"]["status"]["exec_info"]["queue_remaining"] == 0, after
    # client-b heard the queue's status news only, never client-a's run
    seen_b = messages_until(other, lambda m: m["data"]["status"]["exec_info"]["queue_remaining"]
                            == 0 if m["type"] == "status" else False)
    assert {m["type"] for m in seen_b} == {"status"}, seen_b
    # interrupt: execution_interrupted then executing null
    long_pid = queue_prompt(s, default_workflow(ckpt, steps=svc.LONG), client_id="client-a")
    messages_until(ws, lambda m: m["type"] == "progress")
    assert post(s, "/interrupt", {}).status == 200
    got = messages_until(ws, lambda m: m["type"] == "executing" and m["data"]["node"] is None)
    assert "execution_interrupted" in [m["type"] for m in got], got
    assert [m for m in got if m["type"] == "execution_interrupted"][0]["data"]["prompt_id"] \
        == long_pid
    # ping -> pong; close -> close
    ws.send(9, b"hello")
    while True:
        op, data = ws.frame()
        if op == 10:
            assert data == b"hello"
            break
    ws.send(8, struct.pack(">H", 1000))
    while True:
        op, data = ws.frame()
        if op == 8:
            break
    # ... and then the server closes the TCP connection (not a keep-alive)
    t0 = time.time()
    try:
        ws.frame()
        raise AssertionError("a frame after the close")
    except EOFError:
        pass
    assert time.time() - t0 < 5, "the server kept the connection after the close"
    ws.close()
    # an unmasked client frame: close 1002
    bad = WS(s.port, "client-c")
    bad.message()
    bad.send(1, b"{}", masked=False)
    while True:
        op, data = bad.frame()
        if op == 8:
            assert struct.unpack(">H", data[:2])[0] == 1002, data
            break
    bad.close()
    # a reserved bit: 1002; a frame over 64 KiB: 1009; an unknown opcode: 1002
    for head, payload, code in [(bytes([0xC1]), b"{}", 1002), (bytes([0x82]), b"x" * 70000, 1009),
                                (bytes([0x83]), b"", 1002)]:
        w = WS(s.port, "client-f")
        w.message()
        n = len(payload)
        mask = os.urandom(4)
        ln = bytes([0x80 | n]) if n < 126 else bytes([0x80 | 127]) + struct.pack(">Q", n)
        w.sock.sendall(head + ln + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
        while True:
            op, data = w.frame()
            if op == 8:
                assert struct.unpack(">H", data[:2])[0] == code, (head, data)
                break
        w.close()
    other.close()
    # an upgrade on a kept-alive connection after a request with a body (as
    # nginx's pooled upstream connections send it) still switches
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    sock.sendall(b"POST /queue HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 2\r\n\r\n{}")
    got = b""
    while b"\r\n\r\n{}" not in got:
        chunk = sock.recv(4096)
        assert chunk, got
        got += chunk
    assert got.startswith(b"HTTP/1.1 200"), got
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(("GET /ws?clientId=kept HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                  "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                  "Sec-WebSocket-Version: 13\r\n\r\n" % key).encode())
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(4096)
        assert chunk, got
        got += chunk
    assert got.startswith(b"HTTP/1.1 101"), got
    sock.close()
    # the browser defence holds for the websocket: another site's page is refused
    WS(s.port, "client-e", {"Origin": "http://evil.example"}, expect=403).close()
    # not an upgrade: 400
    r = get(s, "/ws?clientId=x")
    assert r.status == 400, r
    # the server still answers, and stops cleanly with sockets open
    WS(s.port, "client-d").message()
    assert get(s, "/queue").status == 200
    assert s.stop() == 0


def test_comfy_api_simplified():
    """PyPI's comfy-api-simplified (scripts/setup-test-venv.sh) drives the server
    as it drives ComfyUI: the exported template changed only in its checkpoint,
    queue_and_wait_images (POST /prompt without a Content-Type, /ws, /history,
    /view), upload_image into its default subfolder, get_object_info."""
    from comfy_api_simplified import ComfyApiWrapper, ComfyWorkflowWrapper
    s = svc.Server().start()
    ckpt = checkpoint(s)
    d = svc.tmpdir("tsr-comfy-client-")
    path = os.path.join(d, "workflow_api.json")
    with open(path, "w") as f:
        json.dump(exported_workflow(), f)
    wf = ComfyWorkflowWrapper(path)
    wf.set_node_param("Load Checkpoint", "ckpt_name", ckpt)
    api = ComfyApiWrapper("http://127.0.0.1:%d" % s.port)
    assert "KSampler" in api.get_object_info()
    images = api.queue_and_wait_images(wf, "Save Image")
    assert len(images) == 1, images.keys()
    (name, png), = images.items()
    assert name.endswith("_00000_.png"), name
    svc.assert_same_image(png, dict(prompt="a red apple on a table", negative_prompt="blurry",
                                    width=SIZE, height=SIZE, steps=STEPS, seed=42, cfg_scale=7.5,
                                    sampler="euler", scheduler="comfy_normal"),
                          "comfy-api-simplified")
    # upload into the client's default subfolder, then img2img from it
    rgb = bytes((x * 3 + y * 5) % 256 for y in range(SIZE) for x in range(SIZE) for _ in range(3))
    src = os.path.join(d, "input.png")
    with open(src, "wb") as f:
        f.write(svc.png_encode(SIZE, SIZE, rgb))
    up = api.upload_image(src)
    assert up == {"name": "input.png", "subfolder": "default_upload_folder", "type": "input"}, up
    i2i = ComfyWorkflowWrapper(exported_workflow(ckpt))
    i2i["20"] = {"class_type": "LoadImage", "_meta": {"title": "Load Image"},
                 "inputs": {"image": "default_upload_folder/input.png"}}
    i2i["21"] = {"class_type": "VAEEncode", "_meta": {"title": "VAE Encode"},
                 "inputs": {"pixels": ["20", 0], "vae": ["4", 2]}}
    i2i.set_node_param("KSampler", "latent_image", ["21", 0])
    i2i.set_node_param("KSampler", "denoise", 0.5)
    images = api.queue_and_wait_images(i2i, "Save Image")
    assert len(images) == 1
    svc.assert_same_image(list(images.values())[0],
                          dict(prompt="a red apple on a table", negative_prompt="blurry",
                               width=SIZE, height=SIZE, steps=STEPS, seed=42, cfg_scale=7.5,
                               sampler="euler", scheduler="comfy_normal", init_image=src,
                               strength=0.5), "comfy-api-simplified img2img")
    s.stop()


if __name__ == "__main__":
    sys.exit(svc.run_tests([test_txt2img, test_hostile, test_queue, test_restart,
                            test_upload_img2img, test_hires, test_inpaint, test_view_escape,
                            test_keys,
                            test_websocket, test_comfy_api_simplified]))
