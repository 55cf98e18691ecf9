"""tests/compat/test_comfy_exact.py - ComfyUI's arithmetic on `tessera serve`
(issue 59, docs/compat-comfyui.md "Arithmetic"), through ComfyUI's API.

Why a file of its own: test_comfy_api.py checks the API's shape and the
mapping of each graph; this one checks that the schedules and noise ComfyUI
computes reach the image (the sigma lists themselves are checked against
ComfyUI's formulas in tests/scheduler/test_comfy_sched.c).  It reuses
test_comfy_api.py's helpers.

- comfy_schedules: workflows with `normal`, `beta`, `simple` (euler) and
  `karras` (dpmpp_2m) equal `tessera generate --scheduler comfy_<name>`
  (before this slice `beta` and `simple` were refused and `normal` ran
  diffusers' schedule), and `beta` differs from `normal`; a batch of 2 has
  ComfyUI's noise: image 0 is the seed's own image, image 1 (slice 1 of one
  randn over the batch, seed 7 in its infotext) is neither seed 8's nor
  image 0.

Run one case: python3 tests/compat/test_comfy_exact.py test_comfy_schedules
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "service"))
import svc  # noqa: E402
from test_comfy_api import (SIZE, STEPS, checkpoint, default_workflow, get,  # noqa: E402
                            queue_prompt, view, wait_history)


def test_comfy_schedules():
    s = svc.Server().start()
    ckpt = checkpoint(s)
    lists = get(s, "/object_info/KSampler").json["KSampler"]["input"]["required"]
    for name in ("normal", "beta", "simple", "ddim_uniform", "karras", "sgm_uniform"):
        assert name in lists["scheduler"][0], lists["scheduler"]
    pngs = {}
    for sampler, name in (("euler", "normal"), ("euler", "beta"), ("euler", "simple"),
                          ("dpmpp_2m", "karras")):
        wf = default_workflow(ckpt, seed=7)
        wf["3"]["inputs"]["sampler_name"] = sampler
        wf["3"]["inputs"]["scheduler"] = name
        pid = queue_prompt(s, wf)
        h = wait_history(s, pid)
        assert h["status"]["status_str"] == "success", h["status"]
        png = view(s, h["outputs"]["9"]["images"][0])
        svc.assert_same_image(png, dict(prompt="a red apple on a table", negative_prompt="blurry",
                                        width=SIZE, height=SIZE, steps=STEPS, seed=7,
                                        cfg_scale=7.5, sampler=sampler,
                                        scheduler="comfy_" + name), "comfy " + name)
        pngs[name] = svc.png_decode(png).rgb()
    assert pngs["beta"] != pngs["normal"], "beta and normal gave the same image"
    # a batch of 2: ComfyUI's one randn over the batch from the seed; image 0
    # is the seed's own image, image 1 neither seed + 1's nor image 0
    wf = default_workflow(ckpt, seed=7)
    wf["5"]["inputs"]["batch_size"] = 2
    h = wait_history(s, queue_prompt(s, wf))
    imgs = [svc.png_decode(view(s, im)) for im in h["outputs"]["9"]["images"]]
    gen = dict(prompt="a red apple on a table", negative_prompt="blurry", width=SIZE,
               height=SIZE, steps=STEPS, cfg_scale=7.5, sampler="euler",
               scheduler="comfy_normal")
    assert len(imgs) == 2 and imgs[0].rgb() == svc.generate(seed=7, **gen).rgb()
    assert imgs[1].rgb() not in (imgs[0].rgb(), svc.generate(seed=8, **gen).rgb())
    assert "Seed: 7," in imgs[1].texts.get("parameters"), imgs[1].texts
    s.stop()


if __name__ == "__main__":
    sys.exit(svc.run_tests([test_comfy_schedules]))
