"""tools/demo-model/vae_pilot.py - a small VAE-only design measurement for
the v2 demo model: can a 16x16x4 latent (f8 at 128 px, today's layout) keep
a star's points and a ring's hole, or does v2 need 32x32x4 (f4)?

Why it is built this way: the v2 shape bar (score.py's geometry scorer) can
only be met if the VAE's round trip keeps the shapes, and that is cheap to
measure without any UNet.  Each variant is today's recipe (train.py's
make_vae layout, init_vae identity start, L1 + MSE + tiny KL on whole
images, 64 px first then 128 px) under the same small CPU-time budget; the
round trip of the clean shape sheet (tests/data/demo/shape_sheet.png) is then
scored with the shape scorer.  It is a pilot, not a recipe: budgets are
minutes, not the ~7 minutes train.sh gives its VAE, so absolute errors are
higher than a full run's; what it compares is the two layouts at equal cost.
The committed model's own VAE is scored too (--committed).

Usage: nice -n 10 python tools/demo-model/vae_pilot.py [--pre-s 100 --full-s 60]
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dataset  # noqa: E402
import score  # noqa: E402
import train  # noqa: E402
from diffusers import AutoencoderKL  # noqa: E402


def make(levels, channels, latent=4):
    return AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=latent,
        down_block_types=("DownEncoderBlock2D",) * levels,
        up_block_types=("UpDecoderBlock2D",) * levels,
        block_out_channels=tuple(channels), layers_per_block=1,
        norm_num_groups=1, sample_size=dataset.SIZE, act_fn="silu")


def edge_weight(x, gain):
    """1 + gain on pixels within one pixel of a colour edge (where a star's
    points and a ring's inner rim are), 1 elsewhere."""
    if gain <= 0:
        return None
    hi = F.max_pool2d(x, 3, 1, 1)
    lo = -F.max_pool2d(-x, 3, 1, 1)
    return 1.0 + gain * ((hi - lo).amax(1, keepdim=True) > 0.1).float()


def fit(vae, imgs, pre_s, full_s, seed=1234, edge=0.0):
    """Today's VAE loss and schedule shape, for pre_s seconds at 64 px then
    full_s seconds at 128 px (time budgets, so both layouts cost the same)."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(vae.parameters(), lr=1e-3, weight_decay=0.0)
    full = train.to_tensor(imgs)
    small = F.avg_pool2d(full, 2)
    vae.train()
    steps = 0
    for x_all, budget in ((small, pre_s), (full, full_s)):
        t0 = time.process_time()
        while time.process_time() - t0 < budget:
            for g in opt.param_groups:
                g["lr"] = 1e-3 * min(1.0, (steps + 1) / 50)
            x = x_all[torch.randint(0, len(x_all), (4,), generator=gen)]
            post = vae.encode(x).latent_dist
            rec = vae.decode(post.mean).sample
            w = edge_weight(x, edge)
            if w is None:
                loss = (rec - x).abs().mean() + F.mse_loss(rec, x)
            else:
                d = rec - x
                loss = ((d.abs() + d * d) * w).mean() / w.mean()
            loss = loss + 1e-6 * post.kl().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
            opt.step()
            steps += 1
    vae.eval()
    return steps


@torch.no_grad()
def judge(vae, name, save=None):
    facts = json.load(open(os.path.join(HERE, "..", "..", "tests", "data", "demo",
                                        "shape_sheet.json")))
    sheet = np.asarray(Image.open(os.path.join(HERE, "..", "..", "tests", "data", "demo",
                                               "shape_sheet.png")).convert("RGB"))
    t, cols = facts["tile"], facts["cols"]
    tiles = np.stack([sheet[(i // cols) * t:(i // cols + 1) * t, (i % cols) * t:(i % cols + 1) * t]
                      for i in range(len(facts["tiles"]))])
    x = train.to_tensor(tiles)
    rec = torch.cat([vae.decode(vae.encode(x[i:i + 20]).latent_dist.mean).sample
                     for i in range(0, len(x), 20)]).clamp(-1, 1)
    rec = ((rec + 1) * 127.5).round().permute(0, 2, 3, 1).numpy().astype(np.uint8)
    err = np.abs(rec.astype(np.float64) - tiles).mean()
    res = {}
    pairs = [0, 0]
    for i, it in enumerate(facts["tiles"]):
        m = score.measure_v2(rec[i], it)
        if len(it["regions"]) == 2:
            pairs[0] += m["regions"] == 2
            pairs[1] += 1
            continue
        k = f"{it['shape']} {it['size']}"
        r = res.setdefault(k, [0, 0])
        r[0] += m["shape"] == it["shape"]
        r[1] += 1
    print(f"{name}: round-trip mean abs error {err:.2f}/255; shape named right: " +
          ", ".join(f"{k} {a}/{n}" for k, (a, n) in res.items()) +
          f"; two X counted {pairs[0]}/{pairs[1]}", flush=True)
    if save:
        Image.fromarray(np.concatenate([np.concatenate(list(rec[r * cols:(r + 1) * cols]), 1)
                                        for r in range(len(rec) // cols)], 0)).save(save)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pre-s", type=float, default=100.0, help="CPU seconds at 64 px")
    ap.add_argument("--full-s", type=float, default=60.0, help="CPU seconds at 128 px")
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--committed", default=os.path.join(HERE, "..", "..", "models", "demo",
                                                         "vae"))
    ap.add_argument("--save", help="folder for the round-trip sheets")
    ap.add_argument("--variants", default="f8c4,f4c4",
                    help="comma list of f<8|4>c<latent channels>[e<edge gain>]")
    ap.add_argument("--skip-committed", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    if a.save:
        os.makedirs(a.save, exist_ok=True)
    sv = (lambda n: os.path.join(a.save, n + ".png")) if a.save else (lambda n: None)
    if not a.skip_committed:
        judge(AutoencoderKL.from_pretrained(a.committed).eval(), "committed f8 VAE",
              sv("committed"))
    imgs, _ = train.make_images(a.images, dataset.SEED)
    for name in a.variants.split(","):
        f = int(name[1:name.index("c")])
        rest = name[name.index("c") + 1:]
        lat, edge = (int(rest.split("e")[0]), float(rest.split("e")[1])) if "e" in rest \
            else (int(rest), 0.0)
        levels, ch = (4, [16, 32, 64, 64]) if f == 8 else (3, [16, 32, 64])
        vae = make(levels, ch, lat)
        train.init_vae(vae)
        t0 = time.process_time()
        steps = fit(vae, imgs, a.pre_s, a.full_s, edge=edge)
        s = 128 // f
        judge(vae, f"pilot {name} {s}x{s}x{lat} edge {edge} ({steps} steps, "
              f"{time.process_time() - t0:.0f} CPU s)", sv(name))


if __name__ == "__main__":
    main()
