#!/usr/bin/env python3
"""tests/gpu/torch_bench.py - PyTorch FP16 references for tests/gpu/run.sh (GPU machine).

  rng DIR SEEDS...     torch.randn on a CUDA generator for each seed at latent
                       shapes; compares with tessera's --rng cuda emulation
                       (gpucheck rng dumps DIR/<seed>_<n>_<grid>.f32 written by
                       run.sh first); prints one line per case and exits 1 on
                       a mismatch
  sdpa                 F.scaled_dot_product_attention (FP16) at the SD1.5,
                       SD2.x and SDXL attention shapes: ms per call
  unet DIR SIZE BATCH  the diffusers UNet of DIR in FP16 with SDPA, if
                       diffusers is installed: seconds per call
Prints JSON lines prefixed "torch: ".
"""
import json
import os
import sys
import time

import torch


def emit(d):
    print("torch: " + json.dumps(d), flush=True)


def timed(fn, iters=10):
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / iters


def cmd_rng(d, seeds):
    bad = 0
    for name in sorted(os.listdir(d)):
        if not name.endswith(".f32"):
            continue
        seed, n, grid = (int(v) for v in name[:-4].split("_"))
        g = torch.Generator("cuda").manual_seed(seed)
        want = torch.randn(n, generator=g, device="cuda").float().cpu()
        got = torch.frombuffer(bytearray(open(os.path.join(d, name), "rb").read()),
                               dtype=torch.float32)
        diff = (want - got).abs().max().item()
        ok = diff <= 6e-5
        bad += 0 if ok or grid != 0 or n > 65536 else 1  # large: which grid cap matches is information
        emit({"check": "rng", "seed": seed, "n": n, "grid": grid, "max_abs": diff, "ok": ok})
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    emit({"check": "rng_sms", "sm_count": sms})
    return 1 if bad else 0


def cmd_sdpa():
    import torch.nn.functional as F
    shapes = [("sd15 self 4096 h8 d40", 2, 8, 4096, 4096, 40),
              ("sd15 cross 4096x77 h8 d40", 2, 8, 4096, 77, 40),
              ("sd15 self 1024 h8 d80", 2, 8, 1024, 1024, 80),
              ("sd15 self 256 h8 d160", 2, 8, 256, 256, 160),
              ("sd2 self 4096 h5 d64", 2, 5, 4096, 4096, 64),
              ("sdxl self 4096 h10 d64 (1024px)", 2, 10, 4096, 4096, 64),
              ("sdxl self 1024 h20 d64", 2, 20, 1024, 1024, 64),
              ("sd15 1024px self 16384 h8 d40", 2, 8, 16384, 16384, 40)]
    for name, b, h, lq, lk, d in shapes:
        q = torch.randn(b, h, lq, d, device="cuda", dtype=torch.float16)
        k = torch.randn(b, h, lk, d, device="cuda", dtype=torch.float16)
        v = torch.randn(b, h, lk, d, device="cuda", dtype=torch.float16)
        s = timed(lambda: F.scaled_dot_product_attention(q, k, v))
        emit({"bench": "sdpa", "shape": name, "ms": round(s * 1e3, 3),
              "tflops": round(4 * b * h * lq * lk * d / s / 1e12, 1)})


def cmd_unet(d, size, batch):
    try:
        from diffusers import UNet2DConditionModel
    except ImportError:
        emit({"bench": "unet", "skipped": "diffusers is not installed"})
        return 0
    unet = UNet2DConditionModel.from_pretrained(os.path.join(d, "unet"),
                                                torch_dtype=torch.float16).cuda().eval()
    cfg = unet.config
    lat = size // 8
    x = torch.randn(batch, cfg.in_channels, lat, lat, device="cuda", dtype=torch.float16)
    ctx = torch.randn(batch, 77, cfg.cross_attention_dim, device="cuda", dtype=torch.float16)
    t = torch.full((batch,), 500.0, device="cuda")
    kw = {}
    if cfg.addition_embed_type == "text_time":
        kw["added_cond_kwargs"] = {
            "text_embeds": torch.randn(batch, 1280, device="cuda", dtype=torch.float16),
            "time_ids": torch.tensor([[size, size, 0, 0, size, size]] * batch,
                                     device="cuda", dtype=torch.float16)}
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        s = timed(lambda: unet(x, t, ctx, **kw), iters=3)
    emit({"bench": "unet", "model": d, "size": size, "batch": batch, "s_per_call": round(s, 4),
          "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)})
    return 0


if __name__ == "__main__":
    if not torch.cuda.is_available():
        emit({"skipped": "torch sees no CUDA device"})
        sys.exit(0)
    cmd = sys.argv[1]
    if cmd == "rng":
        sys.exit(cmd_rng(sys.argv[2], sys.argv[3:]))
    if cmd == "sdpa":
        cmd_sdpa()
    elif cmd == "unet":
        sys.exit(cmd_unet(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
