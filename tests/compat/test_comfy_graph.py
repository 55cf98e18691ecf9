"""tests/compat/test_comfy_graph.py - ComfyUI graphs wider than one chain
(issue 59, docs/compat-comfyui.md): several sampled chains in one prompt,
and ImageScale / ImageScaleBy before VAEEncode and before SaveImage.

Why a file of its own: test_comfy_api.py checks the API's shape for the
one-chain graphs (and is near 800 lines); this one checks the graphs that
compile to more than one native job, or whose images are scaled after the
store keeps them.  It reuses test_comfy_api.py's helpers.

- two_chains: a prompt with two KSampler -> VAEDecode -> SaveImage chains
  (another prompt and seed, one checkpoint and negative) and a third output
  behind ImageScale: one prompt_id (the first output's chain's job), each
  image equal to `tessera generate`'s with its settings, the scaled one the
  nearest-exact resize of its chain's image (computed here in Python);
  /history's shape, the websocket's messages (one execution_start and one
  execution_success for both chains, progress and executed per chain), the
  prompt file's jobs, and the same /history and /view after a restart.
- interrupt_two_chains: with --max-batch 1 the second chain waits while the
  first runs; /queue lists the prompt once, /interrupt cancels both jobs;
  cancelling one chain's job natively ends the prompt and cancels the other.
- image_scale: LoadImage -> ImageScale (nearest-exact 2x) -> VAEEncode
  equals `generate --init-image` of the image scaled here; VAEDecode ->
  ImageScaleBy (area 0.5) -> SaveImage equals generate's image averaged
  over 2x2 blocks in float32 and truncated as SaveImage truncates; a method
  ComfyUI does not have and a size past the bound are node errors.
- keep_jobs: with --keep-jobs 1 the first prompt's job is dropped once the
  second is done; the next /history removes its prompt file (it used to stay
  on disk, skipped) and lists only the second.

Run one case: python3 tests/compat/test_comfy_graph.py test_two_chains
"""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "service"))
import svc  # noqa: E402
from test_comfy_api import (SIZE, STEPS, WS, checkpoint, default_workflow, get,  # noqa: E402
                            messages_until, multipart, post, queue_prompt, view,
                            wait_history)

RED = dict(prompt="a red apple on a table", negative_prompt="blurry", width=SIZE, height=SIZE,
           steps=STEPS, seed=42, cfg_scale=7.5, sampler="euler", scheduler="comfy_normal")
BLUE = dict(RED, prompt="a blue ball", seed=7, steps=3)


def two_chains(ckpt, steps=STEPS, second_steps=3):
    """The default graph (output 9) plus a second chain: KSampler 30 on
    "a blue ball", seed 7, saved by 32 and, through ImageScale 33, by 34."""
    wf = default_workflow(ckpt, steps=steps)
    wf["16"] = {"class_type": "CLIPTextEncode", "inputs": {"text": "a blue ball", "clip": ["4", 1]}}
    wf["30"] = {"class_type": "KSampler", "inputs": dict(
        wf["3"]["inputs"], seed=7, steps=second_steps, positive=["16", 0])}
    wf["31"] = {"class_type": "VAEDecode", "inputs": {"samples": ["30", 0], "vae": ["4", 2]}}
    wf["32"] = {"class_type": "SaveImage", "inputs": {"filename_prefix": "b", "images": ["31", 0]}}
    wf["33"] = {"class_type": "ImageScale", "inputs": {
        "image": ["31", 0], "upscale_method": "nearest-exact", "width": 96, "height": 0,
        "crop": "disabled"}}
    wf["34"] = {"class_type": "SaveImage", "inputs": {"filename_prefix": "c", "images": ["33", 0]}}
    return wf


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def nearest_exact(rgb, w, h, ow, oh):
    """torch's nearest-exact: src = min(floor(f32((dst + 0.5) * f32(in / out))), in - 1)."""
    def index(i, n, on):
        scale = f32(f32(n) / f32(on))
        return min(int(f32((i + 0.5) * scale) // 1), n - 1)
    out = bytearray()
    for y in range(oh):
        sy = index(y, h, oh)
        for x in range(ow):
            sx = index(x, w, ow)
            out += rgb[(sy * w + sx) * 3:(sy * w + sx) * 3 + 3]
    return bytes(out)


def area_half(rgb, w, h):
    """adaptive_avg_pool2d to half size (2x2 windows), in float32 as torch sums
    channels-last (+= in order, then / 4), then SaveImage's trunc(255 x)."""
    out = bytearray()
    for y in range(h // 2):
        for x in range(w // 2):
            for c in range(3):
                acc = 0.0
                for iy in (2 * y, 2 * y + 1):
                    for ix in (2 * x, 2 * x + 1):
                        acc = f32(acc + f32(rgb[(iy * w + ix) * 3 + c] / 255.0))
                v = f32(255.0 * f32(acc / 4))
                out.append(max(0, min(255, int(v))))
    return bytes(out)


def test_two_chains():
    s = svc.Server().start()
    ckpt = checkpoint(s)
    ws = WS(s.port, "graph-a")
    ws.message()
    wf = two_chains(ckpt)
    pid = queue_prompt(s, wf, client_id="graph-a")
    got = messages_until(ws, lambda m: m["type"] == "executing" and m["data"]["node"] is None)
    h = wait_history(s, pid)
    assert h["status"]["status_str"] == "success" and h["status"]["completed"], h["status"]
    assert [m[0] for m in h["status"]["messages"]] == ["execution_start", "execution_success"]
    assert h["prompt"][1] == pid and h["prompt"][2] == wf, h["prompt"]
    assert h["prompt"][4] == ["32", "34", "9"], h["prompt"][4]
    assert set(h["outputs"]) == {"32", "34", "9"}, h["outputs"]
    # the prompt id is the first output's chain's job (KSampler 30), a native job
    r = s.get("/v1/jobs/" + pid)
    assert r.status == 200 and r.json["state"] == "done", r
    assert r.json["params"]["prompt"] == "a blue ball", r.json["params"]
    # the prompt file lists both jobs; output 9's image is the second job's
    with open(os.path.join(s.data_dir, "comfy", "prompts", pid + ".json")) as f:
        jobs = json.load(f)["jobs"]
    assert len(jobs) == 2 and jobs[0] == pid, jobs
    red, blue = h["outputs"]["9"]["images"], h["outputs"]["32"]["images"]
    assert len(red) == len(blue) == 1
    assert red[0]["filename"] == jobs[1] + "_00000_.png", red
    assert blue[0]["filename"] == pid + "_00000_.png", blue
    red_png = view(s, red[0])
    svc.assert_same_image(red_png, RED, "chain 9")
    blue_png = svc.assert_same_image(view(s, blue[0]), BLUE, "chain 32")
    # output 34: chain 30's image through ImageScale nearest-exact 96x0 (= 96x96)
    scaled = h["outputs"]["34"]["images"]
    assert len(scaled) == 1 and scaled[0]["filename"] == pid + "_00000_1_.png", scaled
    png34 = view(s, scaled[0])
    big = svc.png_decode(png34)
    assert (big.width, big.height) == (96, 96), (big.width, big.height)
    assert big.rgb() == nearest_exact(blue_png.rgb(), SIZE, SIZE, 96, 96), "ImageScale differs"
    # the websocket: one run, both chains' nodes, one success at the end
    kinds = [m["type"] for m in got]
    assert kinds.count("execution_start") == 1 and kinds.count("execution_success") == 1, kinds
    assert kinds.index("execution_success") > max(i for i, k in enumerate(kinds)
                                                  if k == "executed")
    assert all(m["data"].get("prompt_id", pid) == pid for m in got)
    nodes = [m["data"]["node"] for m in got if m["type"] == "executing"]
    assert sorted(n for n in nodes if n) == sorted(wf), nodes  # every node once
    assert {m["data"]["node"] for m in got if m["type"] == "progress"} == {"3", "30"}
    ex = {m["data"]["node"]: m["data"]["output"] for m in got if m["type"] == "executed"}
    assert ex == h["outputs"], (ex, h["outputs"])
    assert get(s, "/queue").json == {"queue_running": [], "queue_pending": []}
    ws.close()
    s.stop()
    # a restart: the same history and images
    s2 = svc.Server(data_dir=s.data_dir).start()
    h2 = get(s2, "/history/" + pid).json[pid]
    assert h2["outputs"] == h["outputs"] and h2["status"] == h["status"], (h, h2)
    assert view(s2, scaled[0]) == png34 and view(s2, red[0]) == red_png
    s2.stop()


def test_interrupt_two_chains():
    s = svc.Server(["--max-batch", "1", "--threads", "1"]).start()
    ckpt = checkpoint(s)
    pid = queue_prompt(s, two_chains(ckpt, steps=svc.LONG, second_steps=svc.LONG))
    with open(os.path.join(s.data_dir, "comfy", "prompts", pid + ".json")) as f:
        jobs = json.load(f)["jobs"]
    svc.wait_until(lambda: any(s.get("/v1/jobs/" + j).json["state"] == "running" for j in jobs),
                   60, "a chain running")
    q = get(s, "/queue").json
    assert [i[1] for i in q["queue_running"]] == [pid] and q["queue_pending"] == [], q
    assert post(s, "/interrupt", {}).status == 200
    h = wait_history(s, pid, 60)
    assert h["status"]["messages"][-1][0] == "execution_interrupted", h["status"]
    for j in jobs:
        assert s.get("/v1/jobs/" + j).json["state"] == "cancelled", j
    assert all(o["images"] == [] for o in h["outputs"].values()), h["outputs"]
    assert get(s, "/queue").json == {"queue_running": [], "queue_pending": []}
    # one chain's job cancelled natively (DELETE /v1/jobs): the prompt ends,
    # and its other chain, running, is cancelled with it
    pid = queue_prompt(s, two_chains(ckpt, steps=svc.LONG, second_steps=svc.LONG))
    with open(os.path.join(s.data_dir, "comfy", "prompts", pid + ".json")) as f:
        jobs = json.load(f)["jobs"]
    svc.wait_until(lambda: s.get("/v1/jobs/" + jobs[0]).json["state"] == "running", 60,
                   "chain 0 running")
    assert s.request("DELETE", "/v1/jobs/" + jobs[1]).status in (200, 202, 204)
    h = wait_history(s, pid, 60)
    assert h["status"]["messages"][-1][0] == "execution_interrupted", h["status"]
    svc.wait_until(lambda: s.get("/v1/jobs/" + jobs[0]).json["state"] == "cancelled", 30,
                   "chain 0 cancelled with chain 1")
    s.stop()


def test_image_scale():
    s = svc.Server().start()
    ckpt = checkpoint(s)
    half = SIZE // 2
    src = bytes((x * 8 + y * 3 + c * 50) % 256 for y in range(half) for x in range(half)
                for c in range(3))
    body, ctype = multipart({}, {"image": ("small.png", svc.png_encode(half, half, src),
                                           "image/png")})
    assert s.request("POST", "/upload/image", body, headers={"Content-Type": ctype}).status == 200
    # LoadImage -> ImageScale (nearest-exact to 64x64) -> VAEEncode -> KSampler 0.6
    wf = default_workflow(ckpt, seed=5)
    wf["20"] = {"class_type": "LoadImage", "inputs": {"image": "small.png"}}
    wf["22"] = {"class_type": "ImageScale", "inputs": {
        "image": ["20", 0], "upscale_method": "nearest-exact", "width": SIZE, "height": SIZE,
        "crop": "disabled"}}
    wf["21"] = {"class_type": "VAEEncode", "inputs": {"pixels": ["22", 0], "vae": ["4", 2]}}
    wf["3"]["inputs"]["latent_image"] = ["21", 0]
    wf["3"]["inputs"]["denoise"] = 0.6
    # ... and the image out through ImageScaleBy (area 0.5) beside the plain one
    wf["10"] = {"class_type": "ImageScaleBy", "inputs": {
        "image": ["8", 0], "upscale_method": "area", "scale_by": 0.5}}
    wf["11"] = {"class_type": "PreviewImage", "inputs": {"images": ["10", 0]}}
    h = wait_history(s, queue_prompt(s, wf))
    assert h["status"]["status_str"] == "success", h
    init = os.path.join(svc.tmpdir("tsr-comfy-scale-"), "init.png")
    with open(init, "wb") as f:
        f.write(svc.png_encode(SIZE, SIZE, nearest_exact(src, half, half, SIZE, SIZE)))
    plain = svc.assert_same_image(view(s, h["outputs"]["9"]["images"][0]),
                                  dict(RED, seed=5, init_image=init, strength=0.6),
                                  "LoadImage -> ImageScale -> VAEEncode")
    small = h["outputs"]["11"]["images"]
    assert small[0]["type"] == "temp" and small[0]["filename"].endswith("_00000_0_.png"), small
    got = svc.png_decode(view(s, small[0]))
    assert (got.width, got.height) == (half, half)
    assert got.rgb() == area_half(plain.rgb(), SIZE, SIZE), "ImageScaleBy area differs"
    # refused: a method ComfyUI's ImageScale does not list, a size past the bound
    wf["10"]["inputs"]["upscale_method"] = "bislerp"
    r = post(s, "/prompt", {"prompt": wf})
    assert r.status == 400 and r.json["node_errors"]["10"]["errors"][0]["type"] == \
        "value_not_in_list", r.json
    wf["10"]["inputs"].update(upscale_method="bicubic", scale_by=8.0)
    wf["12"] = {"class_type": "ImageScaleBy", "inputs": {
        "image": ["10", 0], "upscale_method": "bicubic", "scale_by": 8.0}}
    wf["13"] = {"class_type": "ImageScaleBy", "inputs": {  # 64 * 8 * 8 * 1.5 > 4096
        "image": ["12", 0], "upscale_method": "bicubic", "scale_by": 1.5}}
    wf["11"]["inputs"]["images"] = ["13", 0]
    r = post(s, "/prompt", {"prompt": wf})
    assert r.status == 400 and r.json["node_errors"]["13"]["class_type"] == "ImageScaleBy", r.json
    assert "1..4096" in r.json["node_errors"]["13"]["errors"][0]["details"], r.json
    s.stop()


def test_keep_jobs():
    s = svc.Server(["--keep-jobs", "1"]).start()
    ckpt = checkpoint(s)
    prompts = os.path.join(s.data_dir, "comfy", "prompts")
    first = queue_prompt(s, default_workflow(ckpt, seed=1))
    wait_history(s, first)
    assert os.path.exists(os.path.join(prompts, first + ".json"))
    second = queue_prompt(s, default_workflow(ckpt, seed=2))
    wait_history(s, second)
    # the first job goes (--keep-jobs 1); a listing then removes its file
    svc.wait_until(lambda: s.get("/v1/jobs/" + first).status == 404, 30, "the first job dropped")
    assert set(get(s, "/history").json) == {second}
    assert sorted(os.listdir(prompts)) == [second + ".json"], os.listdir(prompts)
    assert get(s, "/history/" + first).json == {}
    s.stop()


if __name__ == "__main__":
    sys.exit(svc.run_tests([test_two_chains, test_interrupt_two_chains, test_image_scale,
                            test_keep_jobs]))
