#!/usr/bin/env python3
"""End-to-end goldens for `tessera generate`: images made by diffusers' own
pipelines on the tiny random models in tests/data/models/.

Why this script exists: the issue's bar for the pipeline is "the image that
diffusers gives", pixel for pixel within 2/255.  The only honest reference
for that is diffusers' pipeline classes themselves - not a re-implementation
of their loop - run with the same scheduler class and options that Tessera's
scheduler/ maps each CLI name to, and with generator=torch.Generator("cpu")
seeded as Tessera seeds (image i of a batch uses seed s+i, A1111's
convention; diffusers gets a LIST of generators for that).  Each case is
written down with the exact `tessera generate` arguments that must reproduce
it, so the C test driver (tests/pipeline/test_generate.c) needs no Python.

Pinned: torch 2.9.1 (CPU), diffusers 0.35.2, transformers 4.57.1,
numpy 2.3.4, scipy 1.16.3 (LMSDiscreteScheduler), torchsde 0.2.6 (imported by
DPMSolverSDEScheduler, whose BrownianTree we replace, see below), Pillow.
Deterministic: fixed seeds, explicit generators, no global RNG use (the
inputs - init image and mask - are computed, not drawn).

Sampler names -> diffusers classes (as scheduler/sched_config.c and
tools/reference/make_scheduler_goldens.py map them):
  SchedulerClass.from_config(<model>/scheduler/scheduler_config.json, **opts)
  euler EulerDiscreteScheduler, euler_a EulerAncestralDiscreteScheduler,
  heun HeunDiscreteScheduler, dpmpp_2m DPMSolverMultistepScheduler
  (algorithm_type="dpmsolver++"), dpmpp_2m_sde the same with
  "sde-dpmsolver++", dpmpp_sde DPMSolverSDEScheduler, ddim DDIMScheduler,
  pndm PNDMScheduler, lms LMSDiscreteScheduler, unipc UniPCMultistepScheduler,
  lcm LCMScheduler.  --scheduler karras adds use_karras_sigmas=True.
  No --sampler: the pipeline's own scheduler (the model's _class_name).

DPM++ SDE: diffusers draws its noise from torchsde's BrownianTree seeded from
torch's *global* RNG, which no seed reproduces.  Tessera's documented
convention (scheduler/sampler_sigma.c) is a standard normal from the image's
own generator wherever diffusers calls its noise sampler; we patch exactly
that into the scheduler after every set_timesteps().

Writes tests/data/pipeline/:
  init.png, mask.png       the img2img / inpainting inputs (64x64)
  <case>.png, <case>-<i>.png   diffusers' output_type="pil" images
  manifest.json            per case: the tessera arguments, the reference
                           files, the diffusers pipeline/scheduler used and
                           the timesteps it ran; plus the bad-input cases

Run: . .venv/bin/activate && python tools/reference/make_pipeline_goldens.py
     [--only NAME[,NAME...]]  (regenerates just those cases' images; the
     manifest is always rewritten in full)
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
from PIL import Image

import diffusers
from diffusers.utils.torch_utils import randn_tensor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "pipeline")
MODELS_REL = "tests/data/models"  # paths in the manifest are relative to the repo root
SIZE = 64     # tiny VAE: factor 2 (block_out_channels [8, 16]); UNet: one downsample;
              # 64 is Tessera's minimum side (TSR_MIN_SIZE) and a multiple of 8
STEPS = 6
TOLERANCE = 2  # max abs difference per 8-bit channel value

SAMPLERS = {
    "euler": ("EulerDiscreteScheduler", {}),
    "euler_a": ("EulerAncestralDiscreteScheduler", {}),
    "heun": ("HeunDiscreteScheduler", {}),
    "dpmpp_2m": ("DPMSolverMultistepScheduler", {"algorithm_type": "dpmsolver++"}),
    "dpmpp_2m_sde": ("DPMSolverMultistepScheduler", {"algorithm_type": "sde-dpmsolver++"}),
    "dpmpp_sde": ("DPMSolverSDEScheduler", {}),
    "ddim": ("DDIMScheduler", {}),
    "pndm": ("PNDMScheduler", {}),
    "lms": ("LMSDiscreteScheduler", {}),
    "unipc": ("UniPCMultistepScheduler", {}),
    "lcm": ("LCMScheduler", {}),
    # issue 10
    "plms": ("PNDMScheduler", {"skip_prk_steps": True}),
    "dpm2": ("KDPM2DiscreteScheduler", {}),
    "dpm2_a": ("KDPM2AncestralDiscreteScheduler", {}),
    "dpmpp_3m_sde": ("DPMSolverMultistepScheduler", {"algorithm_type": "sde-dpmsolver++",
                                                     "solver_order": 3}),
    "ddpm": ("DDPMScheduler", {}),
    # no diffusers class: k-diffusion's sample_dpmpp_2s_ancestral as written
    # out in make_scheduler_goldens.py (docs/samplers.md)
    "dpmpp_2s_a": ("KDiffusionDPMPP2SAncestral", {}),
}

PROMPT = "a photo of a red cat on a green sofa"
PROMPT_XL = "a watercolor painting of a lighthouse at dusk"
NEGATIVE = "blurry, low quality"


SHARP = "sd1_sharp"


def make_sharp_model():
    """tests/data/models/sd1_sharp: the tiny SD1 model with its UNet and text
    encoder re-initialised at unit gain.  diffusers' default initialisation
    leaves the tiny UNet nearly deaf to its conditioning (cond - uncond
    ~ 2e-5), so on the plain tiny models a wrong prompt, negative prompt or
    guidance rescale would still pass the 2/255 comparison.  On this model
    they move pixels by 10-35/255 (asserted below), so the cases run on it
    can fail for conditioning bugs."""
    import math
    from diffusers import StableDiffusionPipeline
    dst = os.path.join(ROOT, MODELS_REL, SHARP)
    pipe = StableDiffusionPipeline.from_pretrained(os.path.join(ROOT, MODELS_REL, "sd1"),
                                                   safety_checker=None,
                                                   requires_safety_checker=False)
    g = torch.Generator().manual_seed(0)

    def reinit(module, gain):
        with torch.no_grad():
            for n, p in module.named_parameters():
                if p.ndim >= 2:
                    p.copy_(torch.randn(p.shape, generator=g) * gain / math.sqrt(p[0].numel()))
                elif "norm" in n and n.endswith("weight"):
                    p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
                else:
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))

    reinit(pipe.unet, 1.6)
    reinit(pipe.text_encoder, 1.3)
    pipe.save_pretrained(dst, safe_serialization=True)
    # the point of the model: conditioning must show in the pixels
    pipe.set_progress_bar_config(disable=True)

    def run(**kw):
        args = dict(prompt=PROMPT, num_inference_steps=STEPS, width=SIZE, height=SIZE,
                    generator=torch.Generator().manual_seed(1), output_type="np")
        args.update(kw)
        with torch.no_grad():
            return pipe(**args).images[0] * 255

    base = run()
    for what, kw in (("prompt", {"prompt": "a blue dog"}), ("negative", {"negative_prompt": NEGATIVE}),
                     ("guidance_rescale", {"guidance_rescale": 0.7})):
        d = float(np.abs(run(**kw) - base).max())
        assert d > 4 * TOLERANCE, f"{SHARP}: changing {what} moves pixels by only {d:.1f}"
        print(f"{SHARP}: changing {what} moves pixels by up to {d:.1f}/255")


TURBO = "sd_turbo"
# SD-Turbo / SDXL-Turbo's scheduler_config.json: Euler ancestral with
# "trailing" spacing (1-4 steps, no guidance)
TURBO_SCHEDULER = {"_class_name": "EulerAncestralDiscreteScheduler", "_diffusers_version": "0.35.2",
                   "beta_end": 0.012, "beta_schedule": "scaled_linear", "beta_start": 0.00085,
                   "clip_sample": False, "interpolation_type": "linear",
                   "num_train_timesteps": 1000, "prediction_type": "epsilon",
                   "sample_max_value": 1.0, "set_alpha_to_one": False, "skip_prk_steps": True,
                   "steps_offset": 1, "timestep_spacing": "trailing", "trained_betas": None,
                   "use_karras_sigmas": False}


def make_turbo_model():
    """tests/data/models/sd_turbo: the sharp tiny SD1 model with SD-Turbo's
    scheduler config.  Only model_index.json and the scheduler are files; the
    other components are symlinks to sd1_sharp's (a few hundred bytes in git
    instead of a copy of the weights)."""
    src = os.path.join(ROOT, MODELS_REL, SHARP)
    dst = os.path.join(ROOT, MODELS_REL, TURBO)
    os.makedirs(os.path.join(dst, "scheduler"), exist_ok=True)
    for part in ("text_encoder", "tokenizer", "unet", "vae"):
        link = os.path.join(dst, part)
        if os.path.islink(link):
            os.remove(link)
        os.symlink(os.path.join("..", SHARP, part), link)
    with open(os.path.join(src, "model_index.json")) as f:
        index = json.load(f)
    index["scheduler"] = ["diffusers", TURBO_SCHEDULER["_class_name"]]
    index.pop("_name_or_path", None)
    with open(os.path.join(dst, "model_index.json"), "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(dst, "scheduler", "scheduler_config.json"), "w") as f:
        json.dump(TURBO_SCHEDULER, f, indent=2, sort_keys=True)
        f.write("\n")


def case(name, model, **kw):
    c = dict(name=name, model=model, kind="txt2img", prompt=PROMPT, negative=None,
             steps=STEPS, cfg=7.5, sampler="euler", schedule="default", seed=1000,
             width=SIZE, height=SIZE, batch=1, strength=None, init=None, mask=None,
             guidance_rescale=0.0)
    c.update(kw)
    return c


def build_cases():
    cases = []
    # every sampler, default schedule, SD1 (epsilon)
    for i, s in enumerate(SAMPLERS):
        cases.append(case(f"sd1_{s}", "sd1", sampler=s, seed=100 + i))
    # the model's own scheduler (no --sampler): DDIMScheduler from model_index;
    # same seed as sd1_ddim, so both references are the same image
    ddim_seed = 100 + list(SAMPLERS).index("ddim")
    cases.append(case("sd1_model_default", "sd1", sampler=None, schedule=None, seed=ddim_seed))
    # Karras sigmas
    for i, s in enumerate(("euler", "heun", "dpmpp_2m", "dpmpp_2m_sde", "lms", "dpm2_a",
                           "dpmpp_2s_a", "dpmpp_3m_sde")):
        cases.append(case(f"sd1_{s}_karras", "sd1", sampler=s, schedule="karras", seed=200 + i))
    # negative prompt, no guidance, batch of two (seeds s, s+1)
    cases.append(case("sd1_negative", "sd1", sampler="euler_a", negative=NEGATIVE, seed=300))
    cases.append(case("sd1_cfg1", "sd1", sampler="euler", cfg=1.0, seed=301))
    cases.append(case("sd1_batch2_euler_a", "sd1", sampler="euler_a", batch=2, seed=302))
    cases.append(case("sd1_batch2_dpmpp_2m_sde", "sd1", sampler="dpmpp_2m_sde", batch=2, seed=304))
    # non-square
    cases.append(case("sd1_wide", "sd1", sampler="dpmpp_2m", width=96, height=64, seed=306))
    # SD2-like v-prediction
    # conditioning-sensitive model: prompt, negative, guidance and rescale show
    cases.append(case("sharp_euler", SHARP, sampler="euler", seed=600))
    cases.append(case("sharp_other_prompt", SHARP, sampler="euler", seed=600,
                      prompt="a blue dog in the snow"))
    cases.append(case("sharp_negative_dpmpp_2m", SHARP, sampler="dpmpp_2m", negative=NEGATIVE,
                      seed=601))
    cases.append(case("sharp_cfg3_euler_a", SHARP, sampler="euler_a", cfg=3.0, seed=602))
    cases.append(case("sharp_rescale_heun_karras", SHARP, sampler="heun", schedule="karras",
                      guidance_rescale=0.7, seed=603))
    cases.append(case("sharp_img2img_ddim", SHARP, kind="img2img", sampler="ddim", strength=0.6,
                      init="init.png", steps=8, seed=604))
    # A1111's "PLMS" on a config without skip_prk_steps: PNDM without the PRK
    # warm-up (the plain tiny model cannot tell the two apart within 2/255)
    cases.append(case("sharp_plms_a1111", SHARP, sampler="PLMS", steps=10, seed=605))

    cases.append(case("sd2v_euler", "sd2v", sampler="euler", seed=400))
    cases.append(case("sd2v_dpmpp_2m", "sd2v", sampler="dpmpp_2m", seed=401))
    cases.append(case("sd2v_euler_a_rescale", "sd2v", sampler="euler_a", guidance_rescale=0.7,
                      seed=402))
    # SDXL-like: no negative prompt -> zero uncond embeddings (force_zeros_for_empty_prompt)
    cases.append(case("sdxl_euler", "sdxl", sampler="euler", prompt=PROMPT_XL, seed=500))
    cases.append(case("sdxl_dpmpp_2m", "sdxl", sampler="dpmpp_2m", prompt=PROMPT_XL, seed=501))
    cases.append(case("sdxl_negative_euler_a", "sdxl", sampler="euler_a", prompt=PROMPT_XL,
                      negative=NEGATIVE, seed=502))
    cases.append(case("sdxl_dpmpp_2m_karras", "sdxl", sampler="dpmpp_2m", schedule="karras",
                      prompt=PROMPT_XL, seed=503))
    # img2img: VAE posterior sample + add_noise, truncated schedule
    cases.append(case("sd1_img2img_ddim", "sd1", kind="img2img", sampler="ddim", strength=0.6,
                      init="init.png", steps=8, seed=600))
    cases.append(case("sd1_img2img_euler_a", "sd1", kind="img2img", sampler="euler_a",
                      strength=0.6, init="init.png", steps=8, seed=601))
    cases.append(case("sd1_img2img_batch2_dpmpp_2m", "sd1", kind="img2img", sampler="dpmpp_2m",
                      strength=0.6, init="init.png", steps=8, batch=2, seed=602))
    cases.append(case("sdxl_img2img_euler", "sdxl", kind="img2img", sampler="euler",
                      strength=0.6, init="init.png", steps=8, prompt=PROMPT_XL, seed=604))
    # inpainting (9-channel UNet)
    cases.append(case("sd1_inpaint_euler", "sd1_inpaint", kind="inpaint", sampler="euler",
                      strength=1.0, init="init.png", mask="mask.png", seed=700))
    cases.append(case("sd1_inpaint_ddim_strength", "sd1_inpaint", kind="inpaint", sampler="ddim",
                      strength=0.75, init="init.png", mask="mask.png", steps=8, seed=701))
    # SD-Turbo's scheduler (the model's own: Euler a, trailing): 1 step
    # without guidance, as turbo models are run, and 4 steps at cfg 1
    cases.append(case("turbo_1step_cfg0", TURBO, sampler=None, schedule=None, steps=1, cfg=0.0,
                      seed=800))
    cases.append(case("turbo_4step_cfg1", TURBO, sampler=None, schedule=None, steps=4, cfg=1.0,
                      seed=801))
    return cases


# Bad input: each must fail with a non-zero exit, a message that names the
# problem (every string in "message" appears, case-insensitively, on stderr)
# and write no file into the output folder.  "{tmp}" is the case's own temp
# folder; "model_without" makes {tmp}/model: the named model with one part
# left out (symlinks to the other parts); "write" creates files in {tmp}.
def build_error_cases():
    base = ["--model", f"{MODELS_REL}/sd1", "--prompt", PROMPT, "--steps", "2", "--seed", "1",
            "--rng", "cpu", "--width", "64", "--height", "64"]

    def with_(args, **over):
        a = list(args)
        for flag, val in over.items():
            flag = "--" + flag.replace("_", "-")
            if flag in a:
                i = a.index(flag)
                if val is None:
                    del a[i:i + 2]
                else:
                    a[i + 1] = val
            elif val is not None:
                a += [flag, val]
        return a

    return [
        dict(name="bad_sampler", args=with_(base, sampler="euler_b"), message=["sampler", "euler_b"]),
        dict(name="bad_scheduler", args=with_(base, scheduler="wiggly"), message=["scheduler", "wiggly"]),
        dict(name="bad_width_multiple", args=with_(base, width="100"), message=["width", "100"]),
        dict(name="bad_height_multiple", args=with_(base, height="68"), message=["height", "68"]),
        dict(name="bad_width_small", args=with_(base, width="8"), message=["width", "8"]),
        dict(name="bad_width_large", args=with_(base, width="65536"), message=["width", "65536"]),
        dict(name="bad_width_text", args=with_(base, width="64px"), message=["width"]),
        dict(name="bad_steps_zero", args=with_(base, steps="0"), message=["steps", "0"]),
        dict(name="bad_steps_huge", args=with_(base, steps="10000"), message=["steps", "10000"]),
        dict(name="bad_cfg", args=with_(base, cfg_scale="nan"), message=["cfg"]),
        dict(name="bad_batch", args=with_(base, batch_size="0"), message=["batch"]),
        dict(name="bad_rng", args=with_(base, rng="gpu3"), message=["rng"]),
        dict(name="bad_tokenizer", args=with_(base, tokenizer="slow"), message=["tokenizer", "slow"]),
        dict(name="missing_model_dir", args=with_(base, model="{tmp}/no_such_model"),
             message=["no_such_model"]),
        dict(name="missing_vae", model_without=["sd1", "vae"], args=with_(base, model="{tmp}/model"),
             message=["vae"]),
        dict(name="missing_unet", model_without=["sd1", "unet"], args=with_(base, model="{tmp}/model"),
             message=["unet"]),
        dict(name="missing_text_encoder", model_without=["sd1", "text_encoder"],
             args=with_(base, model="{tmp}/model"), message=["text_encoder"]),
        dict(name="init_missing", args=with_(base, init_image="{tmp}/absent.png", strength="0.5"),
             message=["absent.png"]),
        dict(name="init_not_png", write={"garbage.png": "this is not a PNG file\n"},
             args=with_(base, init_image="{tmp}/garbage.png", strength="0.5"),
             message=["garbage.png"]),
        dict(name="init_truncated", write_truncated={"cut.png": ["tests/data/pipeline/init.png", 100]},
             args=with_(base, init_image="{tmp}/cut.png", strength="0.5"), message=["cut.png"]),
        dict(name="bad_strength", args=with_(base, init_image="tests/data/pipeline/init.png",
                                             strength="1.5"), message=["strength"]),
        dict(name="mask_on_plain_model", args=with_(base, init_image="tests/data/pipeline/init.png",
                                                    strength="0.5", mask="tests/data/pipeline/mask.png"),
             message=["mask"]),
        dict(name="missing_prompt", args=with_(base, prompt=None), message=["prompt"]),
    ]


def make_inputs():
    """A smooth, structured 64x64 RGB init image and a binary-ish mask whose
    edges are odd (so nearest-neighbour downsampling to the latent grid is
    exercised) and which holds 127/128 values (binarisation at 0.5)."""
    y, x = np.mgrid[0:SIZE, 0:SIZE].astype(np.float64)
    r = 128 + 100 * np.sin(x / 9.0) * np.cos(y / 13.0)
    g = 40 + 3 * y
    b = 220 - 2.5 * x
    circle = (x - 40) ** 2 + (y - 24) ** 2 < 14 ** 2
    r[circle], g[circle], b[circle] = 250, 220, 30
    rgb = np.clip(np.stack([r, g, b], -1), 0, 255).round().astype(np.uint8)
    mask = np.zeros((SIZE, SIZE), np.uint8)
    mask[19:51, 13:45] = 255
    mask[5:15, 50:60] = 128   # >= 0.5 after /255: repaint
    mask[40:60, 50:60] = 127  # < 0.5: keep
    return Image.fromarray(rgb, "RGB"), Image.fromarray(mask, "L")


def load_scheduler_config(model):
    with open(os.path.join(ROOT, MODELS_REL, model, "scheduler", "scheduler_config.json")) as f:
        return json.load(f)


def set_scheduler(pipe, c, generator):
    """Mirror Tessera's mapping; returns (class name, options)."""
    pipe.scheduler = pipe._tessera_model_scheduler  # undo the previous case's choice
    if c["sampler"] is None:
        return type(pipe.scheduler).__name__, {}
    cls_name, opts = SAMPLERS[c["sampler"].lower()]
    kw = dict(opts)
    if c["schedule"] == "karras":
        kw["use_karras_sigmas"] = True
    elif c["schedule"] not in ("default", None):
        raise ValueError(c["schedule"])
    if cls_name == "KDiffusionDPMPP2SAncestral":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from make_scheduler_goldens import KDiffusionDPMPP2SAncestral as cls
    else:
        cls = getattr(diffusers, cls_name)
    if cls_name == "KDiffusionDPMPP2SAncestral":
        pipe.scheduler = cls(load_scheduler_config(c["model"]), **kw)
    else:
        pipe.scheduler = cls.from_config(load_scheduler_config(c["model"]), **kw)
    if c["sampler"] == "dpmpp_sde":
        sched = pipe.scheduler
        orig = sched.set_timesteps

        def set_timesteps(*a, **k):
            orig(*a, **k)
            # per image: a standard normal from that image's generator, in
            # the sample's shape (randn_tensor draws row i from generator[i])
            sched.noise_sampler = lambda s0, s1, _g=generator: randn_tensor(
                sched_shape[0], generator=_g, dtype=torch.float32)

        sched_shape = [None]
        orig_step = sched.step

        def step(model_output, timestep, sample, *a, **k):
            sched_shape[0] = tuple(sample.shape)
            return orig_step(model_output, timestep, sample, *a, **k)

        sched.set_timesteps = set_timesteps
        sched.step = step
    return cls_name, kw


PIPE_CLASSES = {
    ("txt2img", False): "StableDiffusionPipeline",
    ("txt2img", True): "StableDiffusionXLPipeline",
    ("img2img", False): "StableDiffusionImg2ImgPipeline",
    ("img2img", True): "StableDiffusionXLImg2ImgPipeline",
    ("inpaint", False): "StableDiffusionInpaintPipeline",
}

_pipes = {}


def get_pipe(model, kind):
    sdxl = model.startswith("sdxl")
    cls_name = PIPE_CLASSES[(kind, sdxl)]
    key = (model, cls_name)
    if key not in _pipes:
        cls = getattr(diffusers, cls_name)
        kw = {} if sdxl else {"safety_checker": None, "requires_safety_checker": False}
        pipe = cls.from_pretrained(os.path.join(ROOT, MODELS_REL, model), torch_dtype=torch.float32,
                                   **kw)
        pipe.set_progress_bar_config(disable=True)
        pipe._tessera_model_scheduler = pipe.scheduler
        _pipes[key] = pipe
    return _pipes[key], cls_name


def tessera_args(c):
    a = ["--model", f"{MODELS_REL}/{c['model']}", "--prompt", c["prompt"]]
    if c["negative"] is not None:
        a += ["--negative-prompt", c["negative"]]
    a += ["--steps", str(c["steps"]), "--cfg-scale", repr(float(c["cfg"]))]
    if c["sampler"] is not None:
        a += ["--sampler", c["sampler"], "--scheduler", c["schedule"]]
    a += ["--seed", str(c["seed"]), "--rng", "cpu", "--width", str(c["width"]),
          "--height", str(c["height"]), "--batch-size", str(c["batch"])]
    if c["init"]:
        a += ["--init-image", f"tests/data/pipeline/{c['init']}", "--strength", repr(c["strength"])]
    if c["mask"]:
        a += ["--mask", f"tests/data/pipeline/{c['mask']}"]
    extra = []
    if c["guidance_rescale"]:
        extra += ["--guidance-rescale", repr(c["guidance_rescale"])]
    return a, extra


def run_case(c, init_img, mask_img):
    pipe, pipe_name = get_pipe(c["model"], c["kind"])
    gens = [torch.Generator("cpu").manual_seed(c["seed"] + i) for i in range(c["batch"])]
    generator = gens if c["batch"] > 1 else gens[0]
    sched_name, sched_kw = set_scheduler(pipe, c, generator)
    kw = dict(prompt=c["prompt"], negative_prompt=c["negative"],
              num_inference_steps=c["steps"], guidance_scale=c["cfg"],
              num_images_per_prompt=c["batch"], generator=generator, output_type="pil")
    if c["guidance_rescale"]:
        kw["guidance_rescale"] = c["guidance_rescale"]
    if c["kind"] == "txt2img":
        kw.update(height=c["height"], width=c["width"])
    elif c["kind"] == "img2img":
        kw.update(image=init_img, strength=c["strength"])
    else:
        kw.update(image=init_img, mask_image=mask_img, strength=c["strength"],
                  height=c["height"], width=c["width"])
    with torch.no_grad():
        images = pipe(**kw).images
    assert len(images) == c["batch"]
    timesteps = [float(t) for t in pipe.scheduler.timesteps]
    if c["kind"] != "txt2img":
        # the pipelines' get_timesteps(): the loop runs timesteps[t_start * order:]
        init_t = min(int(c["steps"] * c["strength"]), c["steps"])
        t_start = max(c["steps"] - init_t, 0)
        timesteps = timesteps[t_start * pipe.scheduler.order:]
    return images, pipe_name, sched_name, sched_kw, timesteps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    only = set(filter(None, args.only.split(",")))
    os.makedirs(OUT, exist_ok=True)
    if not only or any(n.startswith("sharp_") for n in only):
        make_sharp_model()
    make_turbo_model()
    init_img, mask_img = make_inputs()
    init_img.save(os.path.join(OUT, "init.png"))
    mask_img.save(os.path.join(OUT, "mask.png"))

    cases = build_cases()
    names = [c["name"] for c in cases]
    assert len(set(names)) == len(names)
    old = {}
    mpath = os.path.join(OUT, "manifest.json")
    if only and os.path.exists(mpath):
        with open(mpath) as f:
            old = {c["name"]: c for c in json.load(f)["cases"]}

    out_cases = []
    arrays = {}
    for c in cases:
        args_, extra = tessera_args(c)
        outputs = ([f"{c['name']}.png"] if c["batch"] == 1
                   else [f"{c['name']}-{i}.png" for i in range(c["batch"])])
        if only and c["name"] not in only and c["name"] in old:
            out_cases.append(old[c["name"]])
            continue
        images, pipe_name, sched_name, sched_kw, ts = run_case(c, init_img, mask_img)
        for img, fn in zip(images, outputs):
            assert img.mode == "RGB" and img.size == (c["width"], c["height"])
            img.save(os.path.join(OUT, fn))
            arrays[fn] = np.asarray(img).astype(np.int16)
        a0 = np.asarray(images[0]).astype(np.float64)
        print(f"{c['name']:32s} {pipe_name:34s} {sched_name:32s} mean {a0.mean():6.1f} "
              f"std {a0.std():5.1f} sat {np.mean((a0 == 0) | (a0 == 255)):.3f} t={ts}",
              flush=True)
        entry = {
            "name": c["name"],
            "args": args_,
            "extra_args": extra,
            "outputs": outputs,
            "seeds": [c["seed"] + i for i in range(c["batch"])],
            "prompt": c["prompt"],
            "negative_prompt": c["negative"],
            "steps": c["steps"],
            "cfg_scale": c["cfg"],
            "width": c["width"],
            "height": c["height"],
            "sampler": c["sampler"],
            "schedule": c["schedule"],
            "strength": c["strength"],
            "model_name": c["model"],
            "diffusers": {"pipeline": pipe_name, "scheduler": sched_name,
                          "scheduler_options": sched_kw, "timesteps": ts},
        }
        if c["guidance_rescale"]:
            entry["diffusers"]["guidance_rescale"] = c["guidance_rescale"]
        out_cases.append(entry)

    # The references must tell the cases apart, or a test could pass on the
    # wrong sampler: every pair of freshly made images differs by more than
    # the tolerance somewhere.
    keys = sorted(arrays)
    for i in range(len(keys)):
        for j in range(i + 1, len(keys)):
            a, b = arrays[keys[i]], arrays[keys[j]]
            if a.shape == b.shape:
                d = int(np.abs(a - b).max())
                if {keys[i], keys[j]} == {"sd1_ddim.png", "sd1_model_default.png"}:
                    if d != 0:
                        print(f"WARNING: sd1_model_default is not sd1_ddim ({d})", file=sys.stderr)
                elif d <= 4 * TOLERANCE:
                    print(f"WARNING: {keys[i]} and {keys[j]} differ by only {d}", file=sys.stderr)

    manifest = {
        "about": "tessera generate vs diffusers pipelines; made by "
                 "tools/reference/make_pipeline_goldens.py",
        "versions": {"torch": torch.__version__, "diffusers": diffusers.__version__},
        "tolerance": TOLERANCE,
        "paths": "relative to the repository root",
        "cases": out_cases,
        "error_cases": build_error_cases(),
    }
    with open(mpath, "w") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
