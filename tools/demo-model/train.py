"""tools/demo-model/train.py - trains Tessera's built-in demo model from nothing.

Why it is built this way: Tessera must show real text-to-image generation on a
fresh machine with no checkpoint and no network, so it ships a tiny model in
the *standard* diffusers layout (the same classes and file names a real
Stable Diffusion 1.x checkpoint uses) that the C engine loads like any other.
The whole model is trained here on a 2-core CPU (--recipe v2, the default,
which made the committed models/demo; 54 minutes measured end to end on
session 26's AVX-512 EPYC Zen 4 with its UNet stages under bf16 autocast
(67 in fp32), in fp32 about 52 on session 14's Xeon and 108 on an
AVX2-only EPYC, docs/demo-model.md):

  1. tokenizer  - a CLIP-format byte-level BPE (vocab.json + merges.txt) learnt
                  over the caption vocabulary, loaded by transformers' CLIPTokenizer;
  2. vae        - a small AutoencoderKL, 128x128x3 <-> 32x32x4 (4x down),
                  trained with an edge-weighted loss and judged on the shape
                  sheet's round trip (every shape must survive it);
  3. latents    - the training images encoded once and cached (the encoder is
                  the costly part, so it never runs inside the UNet loop);
  4. text       - a small CLIPTextModel pretrained alone to state its
                  caption's facts (background, each shape's colour, place,
                  kind, size, whether "two" was said) from its pooled
                  output, then frozen;
  5. unet       - a 4-level UNet2DConditionModel (24/32/64/64, cross-attention
                  at 16x16 and 8x8) on the frozen text encoder: epsilon
                  prediction (then converted to v) on a noise schedule
                  shifted to more noise,
                  strong offset noise, min-SNR-gamma 5, a foreground-weighted
                  loss, 10% caption dropout for classifier-free guidance and
                  an EMA of the weights; then five late stages (stages): a
                  low-noise polish, a conversion to v-prediction (flatter
                  backgrounds, fewer extra copies), a loosen stage with
                  a share of mismatched captions, so that guidance matters
                  as it does on web-captioned checkpoints, a guide stage
                  (the loss on a guided prediction), and an interval stage
                  that distils the model so that guidance at the default
                  7.5 acts only at t >= 150, where the layout and the
                  stars' points are decided.  Every "two X" caption names
                  both places (--pair-places, on in v2 since session 25).
                  Off in v2: a first stretch at 64 px (--lowres-steps),
                  the text encoder's per-place facts (--cell-facts) or
                  caption-free padding states (--pad-free), a
                  zero-terminal-SNR schedule (--zero-snr) and more "two X"
                  scenes per batch (--pair-share), each measured in
                  docs/demo-model-log.md;
  6. export     - fp16 safetensors, StableDiffusionPipeline.save_pretrained.

Captions also come from dataset.py's free word-order grammar.  --recipe v1
reproduces the first committed model (8x-down VAE, 3-level UNet, one thread,
2026-11-30).  What each v2 knob does and how it was measured:
docs/demo-model.md, "v2".

Everything is seeded (torch, python random, the data generator), uses two
torch threads in v2 (--threads; with any other job on a core two threads slow
down several times, so v1 used one), and runs in one process.  Data come from
dataset.py, which is a pure function of (seed, index), so nothing but this
script is needed to retrain.

Pinned: torch 2.9.1 (CPU), diffusers 0.35.2, transformers 4.57.1,
safetensors 0.6.2, numpy 2.3.4 (tools/setup-venv.sh).

Usage: tools/demo-model/train.sh   (or python tools/demo-model/train.py --help)
"""

import argparse
import collections
import contextlib
import copy
import hashlib
import json
import math
import os
import random
import re
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dataset  # noqa: E402

from diffusers import (AutoencoderKL, DDIMScheduler, DDPMScheduler,  # noqa: E402
                       StableDiffusionPipeline, UNet2DConditionModel)
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer  # noqa: E402

MAX_LEN = 77  # token context, as in SD 1.x
T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


# ---------------------------------------------------------------- 1. tokenizer

def bytes_to_unicode():
    """GPT-2/CLIP byte -> printable unicode mapping (the byte-level alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def learn_bpe(words):
    """Greedy BPE over `words` (word -> count) until every word is one symbol.

    Returns merges in rank order.  Ties are broken by the pair's text so the
    result is deterministic.  Because merges are learnt greedily by frequency,
    applying them by rank (as CLIPTokenizer does) reproduces whole words."""
    seqs = {w: list(w[:-1]) + [w[-1] + "</w>"] for w in words}
    merges = []
    while True:
        pairs = collections.Counter()
        for w, sym in seqs.items():
            for a, b in zip(sym, sym[1:]):
                pairs[(a, b)] += words[w]
        if not pairs:
            return merges
        best = max(pairs.items(), key=lambda kv: (kv[1], "".join(kv[0])))[0]
        merges.append(best)
        for w, sym in seqs.items():
            out, i = [], 0
            while i < len(sym):
                if i + 1 < len(sym) and (sym[i], sym[i + 1]) == best:
                    out.append(sym[i] + sym[i + 1])
                    i += 2
                else:
                    out.append(sym[i])
                    i += 1
            seqs[w] = out


def build_tokenizer(work):
    """Writes vocab.json + merges.txt in CLIP's format and loads them."""
    counts = collections.Counter()
    rng = random.Random(dataset.SEED + 5)
    for i in range(20000):
        _, cap, _ = dataset.sample_caption_only(i, rng)
        counts.update(cap.replace(",", " , ").split())
    for it in dataset.heldout_prompts():
        counts.update(it["prompt"].split())
    merges = learn_bpe(dict(counts))
    b2u = bytes_to_unicode()
    vocab = list(b2u.values())
    vocab += [v + "</w>" for v in vocab]
    vocab += ["".join(m) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    tdir = os.path.join(work, "tokenizer-src")
    os.makedirs(tdir, exist_ok=True)
    with open(os.path.join(tdir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(vocab)}, f, ensure_ascii=False)
    with open(os.path.join(tdir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")
    tok = CLIPTokenizer(os.path.join(tdir, "vocab.json"), os.path.join(tdir, "merges.txt"),
                        pad_token="<|endoftext|>", model_max_length=MAX_LEN)
    # Every word must be one token, or the BPE is broken.
    for w in counts:
        ids = tok(w, add_special_tokens=False).input_ids
        if len(ids) != 1:
            raise RuntimeError(f"tokenizer: word {w!r} splits into {ids}")
    log(f"tokenizer: {len(counts)} words, {len(merges)} merges, vocab {len(vocab)}")
    return tok


# ---------------------------------------------------------------- data

def make_images(n, seed):
    imgs = np.empty((n, dataset.SIZE, dataset.SIZE, 3), dtype=np.uint8)
    scenes = []
    for i in range(n):
        img, _, scene = dataset.sample(i, seed)
        imgs[i] = img
        scenes.append(scene)
    return imgs, scenes


def data_fingerprint(imgs, scenes):
    """sha256 of the training images and scenes.  Cached latents are only
    valid for the images they were encoded from, and the scenes (which the
    captions describe) depend on dataset.py's knobs (TWO_SHARE moves every
    scene after the first pair): a --phase unet run on latents from other
    knobs would pair images with other scenes' captions and learn nothing."""
    h = hashlib.sha256(np.ascontiguousarray(imgs).tobytes())
    h.update(json.dumps(scenes, sort_keys=True).encode())
    return h.hexdigest()


def to_tensor(imgs):
    return torch.from_numpy(imgs).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)


def box_filter(x, size):
    """[N, 3, S, S] images box-filtered to size x size (S a multiple of size)."""
    return x if size == x.shape[-1] else F.avg_pool2d(x, x.shape[-1] // size)


def adamw(params, lr, weight_decay):
    """The optimizer of every phase: AdamW, fused (one kernel over all the
    tensors).  The per-tensor loop took 20 ms of a step on the v2 UNet's
    364 small tensors, fused 5 ms (session 23); with the EMA's foreach
    update and Tokens' per-word cache, v2's batch-32 UNet step went from
    0.66 to 0.61 s on the 2-core EPYC (old and new interleaved)."""
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)


def set_lr(opt, base, step, total, warmup, floor):
    """Linear warm-up over `warmup` steps, then cosine decay from base to
    floor * base over `total` steps (the schedule every phase uses); sets it
    on `opt` and returns it.  Written so that floor=0.05 gives exactly
    0.05 + 0.95 * 0.5 * (1 + cos), as the committed model was trained with."""
    lr = base * min(1.0, (step + 1) / warmup) * (
        floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * step / total)))
    for g in opt.param_groups:
        g["lr"] = lr
    return lr


# ---------------------------------------------------------------- 2. VAE

def make_vae(a):
    n = len(a.vae_channels)  # n levels: 2**(n-1) down (v2: 3 levels, f4, 32x32 latents)
    return AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=a.latent_channels,
        down_block_types=("DownEncoderBlock2D",) * n,
        up_block_types=("UpDecoderBlock2D",) * n,
        block_out_channels=tuple(a.vae_channels), layers_per_block=1,
        norm_num_groups=a.vae_groups, sample_size=dataset.SIZE, act_fn="silu")


def init_vae(vae):
    """Starts the VAE as a near-identity network (measured to matter a lot).

    With PyTorch's default init every conv shrinks its input (gain about
    1/sqrt(3)), so the only path that carries absolute colour - conv_in,
    the 1x1 shortcuts, down/upsampling, conv_out, which the per-image
    GroupNorms do not rescale - starts with a tiny end-to-end gain, and the
    AutoencoderKL sat on a "global mean colour" plateau (L1 58-63/255 after
    200 steps, >2000 steps to leave it).  So: residual branches and the
    mid-block attention output start at zero (each block is the identity),
    shortcuts and down/upsampling convs start as channel identities, and the
    in/out convs orthogonal.  Measured: L1 17/255 after 200 steps at 64 px."""
    from diffusers.models.attention_processor import Attention
    from diffusers.models.downsampling import Downsample2D
    from diffusers.models.resnet import ResnetBlock2D
    from diffusers.models.upsampling import Upsample2D

    def eye_(w):
        w.zero_()
        c = min(w.shape[0], w.shape[1])
        k = w.shape[2] // 2
        w[torch.arange(c), torch.arange(c), k, k] = 1.0

    with torch.no_grad():
        for m in vae.modules():
            if isinstance(m, ResnetBlock2D):
                m.conv2.weight.zero_()
                m.conv2.bias.zero_()
                if m.conv_shortcut is not None:
                    eye_(m.conv_shortcut.weight)
                    m.conv_shortcut.bias.zero_()
            elif isinstance(m, Attention):
                m.to_out[0].weight.zero_()
                m.to_out[0].bias.zero_()
            elif isinstance(m, (Upsample2D, Downsample2D)) and m.conv is not None:
                eye_(m.conv.weight)
                m.conv.bias.zero_()
        for conv in (vae.encoder.conv_in, vae.encoder.conv_out, vae.decoder.conv_in,
                     vae.decoder.conv_out, vae.quant_conv, vae.post_quant_conv):
            torch.nn.init.orthogonal_(conv.weight.view(conv.weight.shape[0], -1))
            conv.bias.zero_()


def edge_weight(x, gain):
    """1 + gain on pixels within one pixel of a colour edge, 1 elsewhere
    (None when gain is 0)."""
    if gain <= 0:
        return None
    hi = F.max_pool2d(x, 3, 1, 1)
    lo = -F.max_pool2d(-x, 3, 1, 1)
    return 1.0 + gain * ((hi - lo).amax(1, keepdim=True) > 0.1).float()


def train_vae(a, imgs, gen):
    """Trains the AutoencoderKL on whole 128x128 images (L1 + MSE + tiny KL).

    Whole images, not crops: GroupNorm statistics depend on the whole picture,
    and a VAE trained on crops was measured to shift flat colours (white ->
    pink, yellow -> orange).  The KL weight is tiny (1e-6) so the latents keep
    the exact colour; the UNet only needs them to be smooth enough to learn."""
    vae = make_vae(a)
    init_vae(vae)
    log(f"vae: {sum(p.numel() for p in vae.parameters()) / 1e6:.2f}M params")
    opt = adamw(vae.parameters(), a.vae_lr, 0.0)
    n = imgs.shape[0]
    small = None
    if a.vae_pre_steps > 0:
        # Whole images box-filtered to vae_pre_size: the same picture (so the
        # same GroupNorm statistics, unlike crops) at a quarter of the cost,
        # for the long first stretch; the last vae_steps run at full size.
        small = box_filter(to_tensor(imgs), a.vae_pre_size)
    vae.train()
    t_last = time.time()
    total = a.vae_pre_steps + a.vae_steps
    for step in range(total):
        set_lr(opt, a.vae_lr, step, total, warmup=50, floor=0.05)
        idx = torch.randint(0, n, (a.vae_batch,), generator=gen)
        if step < a.vae_pre_steps:
            x = small[idx]
        else:
            x = to_tensor(imgs[idx.numpy()])
        post = vae.encode(x).latent_dist
        # Decode the posterior mean, not a sample: at init the posterior std is
        # ~1 against means of ~0.1, so sampled latents carry no signal and the
        # decoder settles on the mean colour (measured: l1 stuck at 60-70/255
        # after 200 steps).  The UNet is trained on the means anyway.
        z = post.mean
        rec = vae.decode(z).sample
        d = rec - x
        l1 = d.abs().mean()
        mse = (d * d).mean()
        kl = post.kl().mean() / (z[0].numel())
        # v2: edge-weighted L1 + MSE.  A star's points and a ring's inner rim
        # are a few percent of the pixels, so a whole-image loss spends almost
        # nothing on them; weighting pixels within one pixel of a colour edge
        # by 1 + vae_edge kept every large ring, triangle and cross of the
        # shape sheet in the pilot at equal CPU time (docs/demo-model.md).
        w = edge_weight(x, a.vae_edge)
        rec_loss = l1 + mse if w is None else ((d.abs() + d * d) * w).mean() / w.mean()
        loss = rec_loss + a.vae_kl * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
        opt.step()
        if step % a.log_every == 0 or step == total - 1:
            log(f"vae step {step}/{total} ({x.shape[-1]}px) l1 {l1.item() * 127.5:.2f}/255 "
                f"mse {mse.item():.5f} kl {kl.item():.3f} ({time.time() - t_last:.1f}s)")
            t_last = time.time()
    vae.eval()
    pin_logvar(vae)
    return vae


# The encoder's log-variance after pin_logvar(): std exp(-15) ~ 3e-7 against
# latent means of std ~2.5, the lower end of diffusers' clamp [-30, 20].
PINNED_LOGVAR = -30.0


@torch.no_grad()
def pin_logvar(vae):
    """Makes the encoder's posterior a point: the log-variance half of
    quant_conv's output becomes the constant PINNED_LOGVAR.  The VAE trains
    on the posterior mean (train_vae) and the UNet on the means (encode_all),
    so the log-variance learnt nothing but the tiny KL term's pull towards 0,
    i.e. std ~1.0 against means of std ~2.5.  Every img2img and inpaint
    pipeline (diffusers' and Tessera's) encodes by sampling the posterior:
    with std 1 that noise alone turned 14 of 20 clean squares into
    wavy-sided ones on a round trip (session 18).  The means, the decoder
    and so the UNet's training data are unchanged."""
    qc = vae.quant_conv
    c = qc.out_channels // 2
    qc.weight[c:].zero_()
    qc.bias[c:].fill_(PINNED_LOGVAR)


@torch.no_grad()
def check_vae(a, vae):
    """Measures the VAE before any UNet time is spent on its latents.

    Returns (and logs) the mean absolute reconstruction error, in 1/255 units,
    on 64 images the VAE never saw (indices past the training set), and for
    every palette colour the worst channel error of a flat 128x128 image of
    that colour after a round trip, plus whether the decoded mean colour is
    still nearest to its own palette entry."""
    n = 64
    imgs = np.stack([dataset.sample(a.n_images + 100000 + i, a.seed)[0] for i in range(n)])
    errs = []
    for i in range(0, n, 16):
        x = to_tensor(imgs[i:i + 16])
        rec = vae.decode(vae.encode(x).latent_dist.mean).sample.clamp(-1, 1)
        errs.append((rec - x).abs().mean(dim=(1, 2, 3)) * 127.5)
    err = torch.cat(errs)
    names = list(dataset.COLOURS)
    pal = torch.tensor([dataset.COLOURS[c] for c in names], dtype=torch.float32)
    flat = pal[:, :, None, None].expand(-1, -1, dataset.SIZE, dataset.SIZE) / 127.5 - 1.0
    rec = vae.decode(vae.encode(flat).latent_dist.mean).sample.clamp(-1, 1)
    rec = (rec + 1.0) * 127.5
    mean_rgb = rec.mean(dim=(2, 3))
    worst = (rec - pal[:, :, None, None]).abs().amax(dim=(1, 2, 3))
    nearest = ((mean_rgb[:, None, :] - pal[None, :, :]) ** 2).sum(-1).argmin(1)
    report = {"heldout_mean_abs_255": float(err.mean()), "heldout_worst_image_255":
              float(err.max()), "palette": {}}
    for k, c in enumerate(names):
        report["palette"][c] = {"mean_rgb": [round(float(v), 1) for v in mean_rgb[k]],
                                "worst_abs_255": round(float(worst[k]), 1),
                                "kept": bool(int(nearest[k]) == k)}
    log(f"vae check: held-out mean abs error {report['heldout_mean_abs_255']:.2f}/255 "
        f"(worst image {report['heldout_worst_image_255']:.2f}); palette kept "
        f"{sum(v['kept'] for v in report['palette'].values())}/{len(names)}, worst flat "
        f"error {max(v['worst_abs_255'] for v in report['palette'].values()):.1f}/255")
    for c, v in report["palette"].items():
        log(f"  {c:7s} {dataset.COLOURS[c]} -> {v['mean_rgb']} worst {v['worst_abs_255']}")
    return report


@torch.no_grad()
def judge_sheet(vae, sheet_png=None):
    """v2 gate measurement: the clean shape sheet (tests/data/demo/
    shape_sheet.png, the renderer's own images) through a VAE round trip,
    scored by score.py's shape scorer.  A UNet cannot draw a shape the
    decoder cannot, so this is logged before any UNet time is spent.
    Returns (report dict, round-trip tiles uint8)."""
    import score
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    with open(os.path.join(root, "tests", "data", "demo", "shape_sheet.json")) as f:
        facts = json.load(f)
    from PIL import Image
    sheet = np.asarray(Image.open(sheet_png or os.path.join(root, "tests", "data", "demo",
                                                            "shape_sheet.png")).convert("RGB"))
    t, cols = facts["tile"], facts["cols"]
    tiles = np.stack([sheet[(i // cols) * t:(i // cols + 1) * t,
                            (i % cols) * t:(i % cols + 1) * t]
                      for i in range(len(facts["tiles"]))])
    x = to_tensor(tiles)
    rec = torch.cat([vae.decode(vae.encode(x[i:i + 20]).latent_dist.mean).sample
                     for i in range(0, len(x), 20)]).clamp(-1, 1)
    rec = ((rec + 1) * 127.5).round().permute(0, 2, 3, 1).numpy().astype(np.uint8)
    rep = {"mean_abs_255": float(np.abs(rec.astype(np.float64) - tiles).mean()),
           "shapes": {}, "pairs": [0, 0], "flat_max": 0.0}
    for i, it in enumerate(facts["tiles"]):
        m = score.measure_v2(rec[i], it)
        rep["flat_max"] = max(rep["flat_max"], float(m["flat"]))
        if len(it["regions"]) == 2:
            rep["pairs"][0] += int(m["regions"] == 2)
            rep["pairs"][1] += 1
            continue
        r = rep["shapes"].setdefault(f"{it['shape']} {it['size']}", [0, 0])
        r[0] += int(m["shape"] == it["shape"])
        r[1] += 1
    return rep, rec


@torch.no_grad()
def encode_all(vae, imgs, bs=4, size=None):
    """The posterior means of uint8 images, box-filtered to `size` first when given.

    Four images a call: the 128 px activations of a small batch stay in the
    core's cache.  640 images took 6.1-6.6 s at 4 a call against 9.7-11.7 s
    at 64 (session 38, two threads, Xeon); in a full run the 8000 latents
    took 84 s against about 110.  The same bytes at any batch from 2 to 128
    (one image a call takes another kernel and rounds differently), so the
    latents and everything trained on them stay as they were."""
    out = []
    for i in range(0, imgs.shape[0], bs):
        x = to_tensor(imgs[i:i + bs])
        out.append(vae.encode(box_filter(x, size or x.shape[-1])).latent_dist.mean)
    return torch.cat(out)


# ---------------------------------------------------------------- 4. UNet + text encoder

def make_text_encoder(a, tok):
    cfg = CLIPTextConfig(
        vocab_size=len(tok.get_vocab()), hidden_size=a.text_dim,
        intermediate_size=a.text_dim * 4, num_hidden_layers=a.text_layers,
        num_attention_heads=a.text_heads, max_position_embeddings=MAX_LEN,
        hidden_act="quick_gelu", projection_dim=a.text_dim,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id)
    return CLIPTextModel(cfg)


def make_unet(a):
    ch = tuple(a.unet_channels)
    attn = set(a.unet_attn)  # levels with cross-attention (0 = full latent size)
    return UNet2DConditionModel(
        sample_size=dataset.SIZE // 2 ** (len(a.vae_channels) - 1),
        in_channels=a.latent_channels, out_channels=a.latent_channels,
        down_block_types=tuple("CrossAttnDownBlock2D" if i in attn else "DownBlock2D"
                               for i in range(len(ch))),
        up_block_types=tuple("CrossAttnUpBlock2D" if i in attn else "UpBlock2D"
                             for i in reversed(range(len(ch)))),
        block_out_channels=ch, layers_per_block=a.unet_layers,
        cross_attention_dim=a.text_dim, attention_head_dim=a.unet_heads,
        norm_num_groups=a.unet_groups)


def noise_schedule(a, prediction=None):
    """The training noise schedule, also written into the exported
    scheduler (v1: SD's scaled_linear 0.00085..0.012).  On SD's schedule the
    signal keeps sqrt(alphas_cumprod) = 0.068 of its amplitude at t = 999;
    low-passed at a large shape's size, a 32x32 latent's shapes show through
    the noise at 0.097 of its amplitude there (v1's 16x16 about half that),
    and v2's UNet on SD's schedule drew blobs where the start noise put
    them (1/36, 3/36 held-out at steps 1000, 2000).  v2 uses
    scaled_linear 0.00085..0.02 (0.015 left at t = 999, the low-noise end
    unchanged): 0/36, 16/36, 31/36 at steps 1500, 3000, 4500 (session 7,
    docs/demo-model.md "v2").  An earlier linear 1e-4..0.02 run was spoilt
    by stale cached latents, so it says nothing.

    --zero-snr (off in v2) rescales the betas to zero terminal SNR
    (rescale_betas_zero_snr; v-prediction only) and the export samples with
    "trailing" spacing, so that the first step is at t = 999 and sees no
    signal.  Why: 0.015-0.023 of the signal at the first steps is still
    visible over a large shape's 100 latent pixels and 4 channels (a
    patch mean's noise std is 1/20 there, so the shape stands about one
    standard deviation out), and the committed model reads random blobs
    of the start noise as shapes: at DDIM's first step (t = 958) its
    unconditional x0 prediction already holds a shape where the noise put
    one, and for "two X" the guided one holds three or four.  Measured
    (session 24, half-compute main stage): the unconditional prediction at
    t = 999 is then the mean picture, but the conditional one still holds
    the faint extra copy, and two X stays at 0.38 (0.33 without)."""
    out = dict(num_train_timesteps=1000, beta_start=a.beta_start, beta_end=a.beta_end,
               beta_schedule=a.beta_schedule, prediction_type=prediction or a.prediction,
               clip_sample=False)
    if a.zero_snr:
        out["rescale_betas_zero_snr"] = True
    return out


class Tokens:
    """Tokenizes captions into [N, MAX_LEN] ids, as `tok(c, padding=
    "max_length", max_length=MAX_LEN, truncation=True)` does, by the word.

    Why by the word: the slow tokenizer is pure Python (23 ms for a batch
    of 64 fresh captions, a tenth of a low-resolution UNet step), and the
    free grammar makes almost every caption new, so a per-caption cache
    rarely hits, while the vocabulary is a few dozen words.  CLIP's pre-tokenizer never
    joins text across whitespace and its BPE is per pre-token, so a
    caption's ids are BOS, the ids of its whitespace-separated chunks in
    order, EOS, then padding.  The first `check` captions are also
    tokenized the slow way and must agree."""

    def __init__(self, tok, check=200):
        self.tok = tok
        self.words = {}
        self.check = check
        self.bos, self.eos, self.pad = tok.bos_token_id, tok.eos_token_id, tok.pad_token_id

    def ids(self, c):
        body = []
        for w in c.lower().split():
            ids = self.words.get(w)
            if ids is None:
                ids = self.words[w] = self.tok(w, add_special_tokens=False).input_ids
            body += ids
        out = [self.bos] + body[:MAX_LEN - 2] + [self.eos]
        out += [self.pad] * (MAX_LEN - len(out))
        if self.check > 0:
            self.check -= 1
            slow = self.tok(c, padding="max_length", max_length=MAX_LEN,
                            truncation=True).input_ids
            if slow != out:
                raise RuntimeError(f"Tokens: {c!r} gives {out} by the word, {slow} whole")
        return out

    def __call__(self, caps):
        return torch.tensor([self.ids(c) for c in caps], dtype=torch.long)


# What the text-encoder pretraining predicts from a caption: one linear
# classifier per fact (name, classes); -100 = "the caption does not say".
FACTS = [("background", dataset.COLOUR_NAMES)] + [
    (f"{k}{i}", names) for i in range(2) for k, names in
    (("colour", dataset.COLOUR_NAMES + ["none"]), ("region", dataset.REGION_NAMES),
     ("shape", dataset.SHAPES), ("size", ["small", "large"]))]
# v2: also whether the caption says "two X" (a count, not only a second colour).
FACTS_TWO = FACTS + [("two", ["no", "yes"])]
# --cell-facts: the colour in each of the nine places ("none" for an empty
# one), where the caption names every shape's place.  Why: for "two X" the
# UNet's cross-attention reads the caption mostly from the end-of-text and
# padding states (81-98% of the attention at 16x16 over the first ten
# sampling steps, session 24), where per-shape place facts are superposed;
# a per-place code is what each position of the picture can read for itself.
# Measured (session 24): the encoder learns it (1.00 on the held-out pairs),
# and the UNet draws no better with it (two X 0.29 against 0.33).
FACTS_CELLS = [(f"cell {r}", dataset.COLOUR_NAMES + ["none"]) for r in dataset.REGION_NAMES]


def fact_spec(a):
    """The facts the text encoder is pretrained to state, in fact_labels' order."""
    return (FACTS_TWO if a.two_fact else FACTS) + (FACTS_CELLS if a.cell_facts else [])


def fact_labels(facts, two=False, cells=False):
    """A caption's facts (dataset.caption(..., facts)) -> one label per
    fact_spec entry (FACTS, then "two" and the FACTS_CELLS when asked)."""
    out = [dataset.COLOUR_NAMES.index(facts["background"])]
    for i in range(2):
        sh = facts["shapes"][i] if i < len(facts["shapes"]) else None
        for k, names in FACTS[1 + 4 * i:5 + 4 * i]:
            key = k[:-1]
            if sh is None:
                out.append(names.index("none") if key == "colour" else -100)
            else:
                out.append(-100 if sh[key] is None else names.index(sh[key]))
    if two:
        out.append(int(bool(facts.get("two"))))
    if cells:
        placed = facts["shapes"] and all(sh["region"] is not None for sh in facts["shapes"])
        at = {sh["region"]: sh["colour"] for sh in facts["shapes"]} if placed else {}
        names = FACTS_CELLS[0][1]
        out += [names.index(at.get(r, "none")) if placed else -100 for r in dataset.REGION_NAMES]
    return out


def pretrain_text_encoder(a, tok, scenes, seed):
    """Teaches the text encoder what captions say before the UNet uses it.

    Trained jointly with the UNet from scratch, the text encoder was measured
    to stay unused for the first 500+ UNet steps (cfg 7.5 and cfg 1.0 drew the
    same picture, unrelated to the prompt), and a CPU budget cannot wait for
    that.  So it is first trained alone, for a minute or two, to state the
    facts of its caption: linear classifiers on the pooled output (the
    end-of-text state, which sees the whole caption through the causal mask)
    predict the background colour and each shape's colour, place, kind and
    size (where the caption says them; dataset.caption reports what it said).
    A regression onto a coarse picture was tried first and learnt only the
    background (held-out error stuck at the background-only level).  The
    classifiers are thrown away; the UNet then trains against the frozen
    encoder.  Checked on the held-out prompts (combinations never seen)."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    te = make_text_encoder(a, tok)
    spec = fact_spec(a)
    heads = torch.nn.ModuleList(torch.nn.Linear(a.text_dim, len(names)) for _, names in spec)
    params = list(te.parameters()) + list(heads.parameters())
    pad_const = None
    if a.pad_free:
        pad_const = torch.nn.Parameter(torch.zeros(a.text_dim))
        params.append(pad_const)
    opt = adamw(params, a.te_lr, 1e-2)
    tokens = Tokens(tok)

    def pad_mask(ids):
        """[N, L] bool: the positions after each caption's first end-of-text."""
        first = (ids == tok.eos_token_id).int().argmax(1, keepdim=True)
        return torch.arange(ids.shape[1])[None, :] > first

    rng = random.Random(seed + 1)
    items = dataset.heldout_prompts()
    ho_ids = tokens([it["prompt"] for it in items])
    ho_lab = torch.tensor([fact_labels({"background": it["background"], "shapes": [
        {"colour": it["colour"], "shape": it["shape"], "size": it["size"],
         "region": it["region"]}]}, a.two_fact, a.cell_facts) for it in items])
    # v2: also the second, independent phrasing set (captions_eval.py), as a
    # measurement only (it is never trained on).
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "heldout2.json")) as f:
        items2 = json.load(f)["prompts"]

    def facts2(it):
        regs = it["regions"] if it["kind"] == "two" else [it["region"]]
        return {"background": it["background"], "two": it["kind"] == "two", "shapes": [
            {"colour": it["colour"], "shape": it["shape"], "size": it["size"], "region": r}
            for r in regs]}
    ho2_ids = tokens([it["prompt"] for it in items2])
    ho2_lab = torch.tensor([fact_labels(facts2(it), a.two_fact, a.cell_facts)
                           for it in items2])
    # --cell-facts' measure: the cell heads, on the "two X" prompts of heldout2
    cell_ks = [k for k, (name, _) in enumerate(spec) if name.startswith("cell ")]
    two2 = torch.tensor([it["kind"] == "two" for it in items2])
    n = len(scenes)
    t_last = time.time()
    for step in range(a.te_steps):
        set_lr(opt, a.te_lr, step, a.te_steps, warmup=50, floor=0.0)
        idx = torch.randint(0, n, (a.te_batch,), generator=gen)
        caps, labels = [], []
        for i in idx.tolist():
            facts = {}
            caps.append(dataset.caption(scenes[i], rng, facts))
            labels.append(fact_labels(facts, a.two_fact, a.cell_facts))
        labels = torch.tensor(labels)
        ids = tokens(caps)
        out = te(ids)
        pooled = out.pooler_output
        loss = sum(F.cross_entropy(h(pooled), labels[:, k], ignore_index=-100)
                   for k, h in enumerate(heads) if (labels[:, k] >= 0).any())
        if pad_const is not None:
            # --pad-free: the states after end-of-text pulled to one
            # constant, so that the UNet cannot read the caption from them.
            # Measured (session 24): it reads the last words before the
            # background instead (summaries too, under the causal mask),
            # and the layout gets worse (two X 0.12, colour/place 0.60)
            after = pad_mask(ids)
            loss = loss + ((out.last_hidden_state[after] - pad_const) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % a.log_every == 0 or step == a.te_steps - 1:
            with torch.no_grad():
                pooled = te(ho_ids).pooler_output
                acc = {name: (heads[k](pooled).argmax(1) == ho_lab[:, k]).float().mean().item()
                       for k, (name, _) in enumerate(spec) if name in
                       ("background", "colour0", "region0", "shape0", "colour1")}
                out2 = te(ho2_ids)  # one pass: the facts and --pad-free's spread
                pooled = out2.pooler_output
                acc2 = {}
                for k, (name, _) in enumerate(spec):
                    if name in ("background", "colour0", "region0", "shape0", "region1", "two"):
                        ok = ho2_lab[:, k] >= 0
                        acc2[name] = (heads[k](pooled).argmax(1)[ok] == ho2_lab[ok, k]) \
                            .float().mean().item()
                if cell_ks:
                    # all nine places right, on the new phrasings' "two X" prompts
                    right = torch.stack([heads[k](pooled[two2]).argmax(1) == ho2_lab[two2, k]
                                         for k in cell_ks]).all(0)
                    acc2["cells of two X"] = right.float().mean().item()
                if pad_const is not None:
                    h = out2.last_hidden_state[pad_mask(ho2_ids)]
                    acc2["pad spread"] = (h - h.mean(0)).pow(2).mean().sqrt().item()
            log(f"text step {step}/{a.te_steps} loss {loss.item():.3f} held-out accuracy " +
                " ".join(f"{k} {v:.2f}" for k, v in acc.items()) + "; new phrasings " +
                " ".join(f"{k} {v:.2f}" for k, v in acc2.items()) +
                f" ({time.time() - t_last:.1f}s)")
            t_last = time.time()
    te.eval()
    return te


def foreground_masks(imgs, grid):
    """([N, 1, grid, grid], same) float32: the foreground mask, 1 on the latent
    pixels that cover a shape or touch one (a 3x3 dilation), 0 on plain
    background; and the outline mask, 1 on the latent pixels whose image
    block holds both shape and background pixels (not dilated): where a
    square's corners and a triangle's sides are.

    The background is each image's commonest exact RGB value (the renderer
    fills it with one jittered colour, and it covers most of every image);
    a pixel belongs to a shape when any channel differs from it by more than
    24 (the palette's closest pair differs by far more; the box-filtered
    edges by less only at the outermost sub-pixel)."""
    n, h = imgs.shape[0], imgs.shape[1]
    f = h // grid
    packed = (imgs[..., 0].astype(np.int32) << 16) | (imgs[..., 1].astype(np.int32) << 8) | \
        imgs[..., 2].astype(np.int32)
    out = np.empty((n, 1, grid, grid), dtype=np.float32)
    mixed = np.empty((n, 1, grid, grid), dtype=np.float32)
    for i in range(n):
        vals, counts = np.unique(packed[i], return_counts=True)
        v = vals[counts.argmax()]
        bg = np.array([(v >> 16) & 255, (v >> 8) & 255, v & 255], dtype=np.int16)
        px = (np.abs(imgs[i].astype(np.int16) - bg).max(axis=2) > 24).reshape(grid, f, grid, f)
        out[i, 0] = px.any(axis=(1, 3))
        mixed[i, 0] = out[i, 0] * ~px.all(axis=(1, 3))
    fg = torch.nn.functional.max_pool2d(torch.from_numpy(out), 3, stride=1, padding=1)
    return fg, torch.from_numpy(mixed)


def loss_weights(a, imgs, grid):
    """[N, 1, grid, grid] per-latent-pixel weights of the UNet loss, or None
    when both are off: 1 + a.fg_weight on shapes (foreground_masks) +
    a.edge_weight more on their outlines."""
    if a.fg_weight <= 0 and a.edge_weight <= 0:
        return None
    fg, edge = foreground_masks(imgs, grid)
    log(f"loss weights: {fg.mean().item():.3f} of latent pixels are shape (+{a.fg_weight}), "
        f"{edge.mean().item():.3f} outline (+{a.edge_weight} more)")
    return 1.0 + a.fg_weight * fg + a.edge_weight * edge


def caption_for(scenes, i, rng, a, cap_noise):
    """The training caption of scene i: "" with probability a.cond_drop (for
    classifier-free guidance), another scene's caption with probability
    cap_noise (the stage's: --cap-noise in the main stage, --loosen-cap-noise
    in the loosen stage), else a fresh caption of scene i.

    Why a share of mismatched captions (--cap-noise): web captions describe
    their images loosely, which is why real SD checkpoints need guidance;
    the renderer's captions are exact, so a model trained on them alone
    samples the right picture at cfg 1.0 and is over-driven at 7.5 (extra
    copies of the shape, grain: docs/demo-model-log.md, session 10).  With a
    share rho of captions from a random scene, the model learns
    p(x | c) = (1 - rho) q(x | c) + rho p(x): at cfg 1.0 about rho of the
    samples ignore the prompt, and guidance, which divides p(x) back out,
    restores them.  The draw happens only when cap_noise > 0, so that runs
    without it keep their caption stream.  Measured (session 11, 4000-step
    runs at 0.2 and 0.35): the model then learnt neither background nor
    place by step 3000, so it is off in every main stage; the loosen stage
    (Stage) applies it once the layout is learnt."""
    if rng.random() < a.cond_drop:
        return ""
    if cap_noise > 0 and rng.random() < cap_noise:
        i = rng.randrange(len(scenes))
    return dataset.caption(scenes[i], rng)


# One UNet training stage: the main stage from nothing (or from the lowres
# stage's EMA weights), then the late stages on its EMA weights, each with a
# fresh AdamW and its own EMA.
# `size` is the image size whose latents it trains on (0: the data's own,
# dataset.SIZE), `batch` its batch (0: --batch).
Stage = collections.namedtuple(
    "Stage", "name steps lr tmin tmax min_snr cap_noise warmup seed rng_seed prediction guide "
    "interval snr_plus1 size batch", defaults=(0.0, 0.0, False, 0, 0))


def final_prediction(a):
    """What the exported UNet predicts: v once a convert stage has run."""
    return "v_prediction" if a.convert_steps > 0 else a.prediction


def stages(a):
    """The UNet stages of a run, in order (those with steps > 0 run):

    lowres  a.lowres_steps (default 0: off) from nothing on the latents of
            the images box-filtered to a.lowres_size (64: 16x16 latents),
            batch a.lowres_batch, otherwise as main; main then goes on from
            its weights at full size.  Why: on a 2-core AVX2 CPU a sample at
            16x16 costs 5.3 ms against 16-21 ms at 32x32 (forward, backward
            and AdamW, batch 64 against 32), and halving the main stage's
            samples to fit the hour there lost the picture (session 22).
            The UNet is convolutional with no position embedding, so its
            weights carry over; what the caption says about colour, place
            and background is already visible at 64 px;
    main    a.unet_steps (from nothing, or on from lowres), every noise
            level, min-SNR; with
            --min-snr-plus1 (a v main stage) its x0 weight is min(SNR + 1,
            gamma) (session 22: colour/place 0.80 against 0.23 without it).
            Only here and in lowres: the loosen stage's high-noise steps see noisy
            captions, and plain v's weight there lost colour/place (below);
    polish  a.polish_steps at t < a.polish_tmax with plain epsilon MSE.  Why:
            min-SNR-gamma weighs an epsilon-loss step by min(SNR, gamma) /
            SNR: on v2's schedule (gamma 5) 0.05 at t = 10, 0.10 at
            t = 20, 0.27 at t = 50 and 1 from t = 150, so the main stage
            trains the last denoising steps least, and those are the steps
            that clear the speckle off flat backgrounds.  Off in v2 since
            session 35 (the convert stage after it retrains every t): without
            it the recipe's Xeon draw met every bar, and it saves 156 s;
    convert a.convert_steps at every t with plain v MSE: retrains the
            (epsilon) UNet to predict v = sqrt(a) eps - sqrt(1 - a) x0, about
            -x0 at high noise, so that the first sampling steps get a layout
            from the caption rather than an epsilon error amplified ~50x on
            the way to x0.  Measured from session 12's run F (session 13):
            flat backgrounds 30 -> 88 of 120, one region per single shape 56
            -> 78 of 100 (the loosen stage after it gives part back: 63);
            from here on the stages and the export are in v.  With
            --convert-teacher-tmax T (off in the recipe; session 28) the
            target below T is the stage's starting (epsilon) model's own
            prediction, rewritten as v (convert_target()): the same function
            in the other parametrisation there, so that the conversion
            changes only the high-noise steps, where its gains are made,
            and not the low ones, where the stars were lost (session 27:
            0.88 -> 0.72).  Measured at T 400 (session 28): it does not
            keep them (0.63 after the stage), so they go with the change of
            parametrisation itself.  With --convert-high-share S (off in
            the recipe; session 32) a share S of each batch is drawn at t
            >= --convert-high-tmin instead of uniformly: more of the
            stage's samples on the high-noise steps that decide the layout,
            where the extra copies of a shape start (session 14).  Measured
            (session 32, 1500 steps, t >= 500, against the recipe's 1000
            uniform on the same main stage; validation set): S 1/3 flat 343
            -> 347 of 360 (4 prompts flat only without it, 8 only with
            it), two X 0.74 -> 0.78 (within the scatter); S
            1/2 flat 334, two X 0.62 (more copies, not fewer);
    loosen  a.loosen_steps at a.polish_tmax <= t < a.loosen_tmax (the
            noise levels polish leaves alone; the default 1000 includes
            those where the layout is decided), min-SNR, with a share
            a.loosen_cap_noise of the captions taken from another scene
            (caption_for).  Why: the renderer's captions are exact, so a
            model trained on them alone draws the right picture at cfg 1.0
            and guidance only over-drives it, while web-captioned
            checkpoints need guidance because their captions are loose.
            From the start, caption noise kept the model from learning the
            layout at all (session 11), so it comes once the layout is learnt.
            The share trades layout at cfg 7.5 against the cfg 1.0 margin
            (session 15: 0.2 -> 0.15 raised colour/place 0.92 -> 0.96 and
            flat backgrounds 56 -> 71, cost triangles 0.35 -> 0.15; at 0.1
            the held-out margin fell to 0.14, under the 0.25 asked).  Its
            min-SNR weight is --loosen-min-snr (default --min-snr): plain v
            MSE there (0) trained the high-noise steps on the noisy captions
            and lost colour/place 0.92 -> 0.85.  v2 runs 900 steps since
            session 31 (600 before): on three draws of the single-places
            recipe it held or gained every validation measure (flat 5 : 16
            against 600 on the same two-thread main stage), and the two
            one-thread draws drew two X 0.75 on heldout2.json against 0.67;
    guide   a.guide_steps (default 0: off) at a.guide_tmin <= t <
            a.guide_tmax (default 0 and 1000: every t), plain MSE on the
            classifier-free-guided prediction at a.guide_scale (guided()),
            so that cfg s then acts like cfg s / guide_scale did before.
            v2 (session 17) ran 200 steps at 1.5, lr 1e-4, with a share
            a.guide_cap_noise 0.15 of mismatched captions as in loosen (so
            the cfg 1.0 margin stays): flat backgrounds 71 -> 97 of 120,
            triangles 0.15 -> 0.40, held-out drop 0.25 -> 0.39, squares
            0.20 -> 0.00, two X 0.46 -> 0.38.  More steps or a larger
            scale flatten further but lose rings, two X or the margin.
            v2 has no caption noise here since session 35: the mismatched
            captions trained the layout steps towards other scenes' places,
            and the model hedged between places (extra copies): on the
            recipe's Xeon draw flat backgrounds 343 -> 359 of 360 on the
            validation set, copies 19 -> 7.  The cfg 1.0 margin they kept
            now comes from the interval stage's high-noise band;
    interval a.interval_steps (default 0: off): distils the stage before
            into a model whose classifier-free guidance acts only at t >=
            a.interval_tmax when used at the default scale a.interval_scale
            (interval_target()).  Why: the shapes' outlines form at low t,
            where guidance has no layout left to fix and only over-drives
            the geometry (c - u is the named shape minus the unconditional
            round blob, so squares come out pincushioned, triangles as
            tents).  Sampled with guidance 7.5 at t >= 300 and 1.0 below,
            the session-18 model drew squares 0.00 -> 0.50, triangles 0.40
            -> 0.75, colour/place 0.95 -> 0.99, two X 0.38 -> 0.54
            (session 19, docs/demo-model-log.md); baked into the weights,
            every engine's default sampling (diffusers', tessera's) gets it.
            v2 runs 400 steps at lr 3e-4 from the guide stage's model:
            squares 0.00 -> 0.20, triangles 0.40 -> 0.70, colour/place
            0.95 -> 0.97 (the distilled model gets about half of the
            sampling-time gain; 800 steps did no better).  Session 25
            moved the floor from t 300 to 150 (v2 recipe): on a main stage
            whose "two X" captions all name both places, t 300 drew stars
            0.55, t 200 0.80, t 150 0.80 with every other bar kept.
            Since session 35 it also scales the caption branch's guidance at
            t >= a.interval_high_tmin (700) by a.interval_high_k (0.6), so
            that cfg 1.0 there acts as 0.6 of the teacher's and the default
            7.5 as 4.5: demo_heldout's cfg 1.0 score 30/36 -> 21/36 (the
            margin 0.17 -> 0.42) with every default-cfg measure within the
            scatter (interval_target());
    The late stages start from the stage before's EMA weights with a fresh
    AdamW and EMA; each stage has fixed seeds of its own, so adding one leaves
    the others' streams unchanged.  --stage-seed shifts every stage's seeds
    at once (the data, VAE and text encoder keep theirs): another draw of the
    UNet from the same latents."""
    sd = a.seed + a.stage_seed
    return [s for s in (
        Stage("lowres", a.lowres_steps, a.lowres_lr, 0, 1000, a.min_snr, a.cap_noise, 100,
              sd + 23, sd + 47, a.prediction, snr_plus1=bool(a.min_snr_plus1),
              size=a.lowres_size, batch=a.lowres_batch),
        Stage("main", a.unet_steps, a.unet_lr, 0, 1000, a.min_snr, a.cap_noise, 100,
              sd + 2, sd + 17, a.prediction, snr_plus1=bool(a.min_snr_plus1)),
        Stage("polish", a.polish_steps, a.polish_lr, 0, a.polish_tmax, 0.0, 0.0, 10,
              sd + 5, sd + 29, a.prediction),
        Stage("convert", a.convert_steps, a.convert_lr, 0, 1000, 0.0, 0.0, 10,
              sd + 11, sd + 37, "v_prediction"),
        Stage("loosen", a.loosen_steps, a.loosen_lr, a.polish_tmax, a.loosen_tmax,
              a.min_snr if a.loosen_min_snr is None else a.loosen_min_snr,
              a.loosen_cap_noise, 10, sd + 7, sd + 31, final_prediction(a)),
        Stage("guide", a.guide_steps, a.guide_lr, a.guide_tmin, a.guide_tmax, 0.0,
              a.guide_cap_noise, 10, sd + 13, sd + 41, final_prediction(a),
              a.guide_scale),
        Stage("interval", a.interval_steps, a.interval_lr, 0, 1000, 0.0, 0.0, 10,
              sd + 19, sd + 43, final_prediction(a), 0.0, a.interval_scale),
    ) if s.steps > 0]


# --bf16: the UNet's convolutions and matmuls run under bfloat16 autocast
# (weights, optimiser state, loss and every target stay fp32).  Set by main().
BF16 = False


def unet_attention(math_only):
    """The UNet stages' attention kernel (--unet-attn-math).  PyTorch's CPU
    scaled_dot_product_attention picks its flash kernel, whose backward was
    23% of a v2 main-stage step under the profiler (8 ms a call, 14 calls a
    step, at 256 and 64 tokens); the plain matmul-softmax form ("math") made
    the whole step 9-12% faster on the Xeon (session 36: 0.339 -> 0.298 and
    0.286 -> 0.261 s, the two kernels alternated in one process).  Other
    roundings, so other weights: a recipe that turns it on is a new draw.
    Applies to the UNet stages only; the VAE and text encoder keep flash."""
    if not math_only:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel(SDPBackend.MATH)


def cpu_has_bf16():
    """Whether this CPU multiplies bf16 in hardware (AVX512_BF16 or AMX).  Why
    it matters: on them a UNet training step under autocast is 21% (Zen 4)
    to 26% (Xeon) faster than fp32; without them (AVX2) it is not measured,
    so --bf16 auto keeps fp32 there."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f
                          if ln.startswith("flags")), [])
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def unet_out(unet, xt, t, cond):
    """The UNet's prediction for (xt, t, cond), as fp32."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=BF16):
        return unet(xt, t, encoder_hidden_states=cond).sample.float()


def guided(unet, xt, t, pred, caps, empty, scale):
    """The guide stage's prediction and per-sample loss factor.  For the
    captioned samples of the batch the prediction is classifier-free
    guidance's, g = u + scale * (c - u), where c is `pred` and u is the same
    UNet's prediction for the empty caption, without gradient; the loss
    factor 1 / scale**2 makes |g - target|**2 / scale**2 = |c - c*|**2 with
    c* = u + (target - u) / scale, an MSE in the conditional branch's own
    units.  The uncaptioned samples (caption dropout) keep their plain
    prediction and factor 1, so u stays the unconditional model.  `empty` is
    the frozen text encoder's [1, L, D] state for "", computed once per stage.
    Returns (prediction, [N] factors)."""
    keep = torch.tensor([c != "" for c in caps])
    factor = torch.ones(len(caps))
    if scale == 1.0 or not keep.any():  # at scale 1 g is c: a plain stage
        return pred, factor
    with torch.no_grad():
        n = int(keep.sum())
        u = unet_out(unet, xt[keep], t[keep], empty.expand(n, -1, -1))
    out = pred.clone()
    out[keep] = u + scale * (pred[keep] - u)
    factor[keep] = 1.0 / scale ** 2
    return out, factor


@torch.no_grad()
def interval_target(teacher, xt, t, cond, caps, empty, scale, tmax, v, tdata, dscale,
                    keep_words=frozenset(), high_tmin=1000, high_k=1.0):
    """The interval stage's target: what the frozen `teacher` (the UNet the
    stage starts from) predicts, changed so that the student sampled with
    classifier-free guidance at `scale` is guided as the teacher at `scale`
    for t >= tmax and not at all (scale 1) below.  With the teacher's
    unconditional and conditional predictions u and c, the student keeps u
    for the empty caption and learns, for a caption, c' = u + k (c - u),
    k = 1 at t >= tmax and 1 / scale below: then u + scale (c' - u) =
    u + (c - u) = c there.  A closed form of the teacher, so no guided pass
    through the student is needed.  u is held by the caption dropout's
    samples only; training both branches on every sample was measured
    worse (session 19: stars 0.85 -> 0.70, two X 0.42 -> 0.38).  `empty`
    is the frozen text encoder's [1, L, D] state for "".

    With `v` (the batch's data target, v of x0 and the noise; None when
    the data target is off), the caption target at t >= tdata is
    u + (v - u) / dscale instead: the data, reached by guidance at dscale.
    Why: the extra copies of a shape are a layout error of the high-noise
    steps that the teacher passes on; training those steps on the data
    with the right captions removes about half of them (session 20: one
    region for 96 -> 106 of 120 single shapes), and dscale 2 rather than 1
    keeps the cfg 1.0 margin.
    Off in the recipe: it costs triangles, stars and rings (docs/
    demo-model-log.md, session 20).

    Captions holding one of `keep_words` (--interval-keep: shape words) keep
    k = 1 below `tmax` too (the high-noise band below still applies), so
    the student, guided at `scale`, is guided as the teacher there too.
    Why: guidance at low t is a per-shape trade - squares and triangles
    lose their corners to it (pincushions, session 19) while a star's
    points need it down to t ~ 300 - and the student reads the shape
    word, so each shape can be distilled with its own interval.  Off in
    the recipe: with stars kept (session 29, validation set) stars rose
    45 -> 51 of 60 (7 prompts right only with it, 1 only without) but
    colour/place fell 347 -> 341 of 360 (0 against 6), ring prompts
    drawing stars among them; keeping rings too lost more.

    At t >= `high_tmin` (--interval-high-tmin, 1000: off) the caption
    branch is c' = u + high_k (c - u): guidance at any scale s acts there as
    the teacher's at s * high_k.  Why: the cfg 1.0 margin (guidance must
    matter) is set at the layout steps, and the guide stage's mismatched
    captions, which had kept it, teach those steps to hedge between places
    (extra copies; session 34).  A uniform scale moves cfg 1.0 and the
    default together; this moves only the high-noise band (session 35)."""
    n = xt.shape[0]
    both = unet_out(teacher, torch.cat([xt, xt]), torch.cat([t, t]),
                    torch.cat([cond, empty.expand(n, -1, -1)]))
    c, u = both[:n], both[n:]
    # --interval-keep: captions naming one of these words keep the teacher's
    # guidance at every t (k = 1)
    full = torch.tensor([bool(keep_words & set(re.findall(r"[a-z]+", cap))) for cap in caps])
    k = torch.where((t < tmax) & ~full, 1.0 / scale,
                    torch.where(t >= high_tmin, high_k, 1.0))[:, None, None, None]
    keep = torch.tensor([cap != "" for cap in caps])[:, None, None, None]
    cc = u + k * (c - u)
    if v is not None:
        # at t >= tdata the data: guided at dscale, u + dscale (c' - u) = v
        cc = torch.where((t >= tdata)[:, None, None, None], u + (v - u) / dscale, cc)
    return torch.where(keep, cc, u)


@torch.no_grad()
def convert_target(teacher, sched, xt, t, cond, x0, noise, tmax):
    """The convert stage's v target with a teacher: below `tmax` the frozen
    epsilon `teacher`'s prediction eps' rewritten as v (x0' = (xt - s eps')
    / a, v = a eps' - s x0', with a, s the signal and noise amplitudes at
    t), so that the student keeps the teacher's function there; at and above
    `tmax` the data's v, as the plain conversion."""
    target = sched.get_velocity(x0, noise, t)
    low = t < tmax
    if low.any():  # the teacher runs only on the rows whose target it sets
        xl, tl = xt[low], t[low]
        eps = unet_out(teacher, xl, tl, cond[low])
        acp = sched.alphas_cumprod.to(xt.device)[tl].float()[:, None, None, None]
        x0_hat = (xl - (1 - acp).sqrt() * eps) / acp.sqrt()
        target[low] = sched.get_velocity(x0_hat, eps, tl)
    return target


def train_unet(a, tok, latents, scenes, stage, te=None, snapshot=None, wmap=None, init=None):
    """Trains the UNet for one Stage; with `te` (pretrained) the text encoder
    stays frozen, otherwise a fresh one is trained jointly (main stage only).
    `wmap` (loss_weights), when given, weighs the loss per latent pixel.
    `init` (a trained UNet, for the late stages) is the starting point; it is
    copied, not changed."""
    late = init is not None
    steps, base_lr = stage.steps, stage.lr
    batch = stage.batch or a.batch
    seed = stage.seed
    # Its own generator, so this phase does not depend on the VAE phases.
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    unet = copy.deepcopy(init).train() if late else make_unet(a)
    if late:
        # `init` is the stage before's EMA copy, whose parameters were frozen
        # (requires_grad False); its deep copy must train.
        for p in unet.parameters():
            p.requires_grad_(True)
    frozen = te is not None
    assert frozen or not late, "main() checks that late stages have a frozen text encoder"
    if te is None:
        te = make_text_encoder(a, tok)
    log(f"unet: {sum(p.numel() for p in unet.parameters()) / 1e6:.2f}M params, "
        f"text encoder: {sum(p.numel() for p in te.parameters()) / 1e6:.2f}M params")
    sched = DDPMScheduler(**noise_schedule(a))
    acp = sched.alphas_cumprod.float()
    snr = acp / (1 - acp)
    if frozen:
        for p in te.parameters():
            p.requires_grad_(False)
        te.eval()
    params = list(unet.parameters()) + ([] if frozen else list(te.parameters()))
    opt = adamw(params, base_lr, 1e-2)
    ema_u = copy.deepcopy(unet).eval()
    ema_t = te if frozen else copy.deepcopy(te).eval()
    for p in list(ema_u.parameters()) + list(ema_t.parameters()):
        p.requires_grad_(False)
    tokens = Tokens(tok)
    if stage.guide > 0 or stage.interval > 0:
        with torch.no_grad():  # the text encoder is frozen in every late stage
            empty = te(tokens([""])).last_hidden_state
    # the convert stage's teacher below --convert-teacher-tmax
    convert_teacher = stage.name == "convert" and a.convert_teacher_tmax > 0
    if stage.interval > 0 or convert_teacher:
        teacher = copy.deepcopy(init).eval()
    # the interval stage's data target at high t (--interval-data-tmin)
    data = stage.interval > 0 and a.interval_data_tmin < 1000
    # --interval-keep: the caption words (a shape and its plural) whose
    # captions stay guided below --interval-tmax
    keep_words = {w for s in a.interval_keep for w in (s, dataset.PLURAL[s])}
    n = latents.shape[0]
    rng = random.Random(stage.rng_seed)
    # --pair-share: that share of each batch drawn from the "two X" scenes.
    # Measured (session 24, 0.4): two X 0.33 -> 0.42, colour/place 0.80 -> 0.66
    n_pair = round(a.pair_share * batch)
    if n_pair:
        pairs = torch.tensor([i for i, sc in enumerate(scenes) if sc["pair"]])
        n_pair = n_pair if len(pairs) else 0
    # --convert-high-share: that share of each convert batch drawn at
    # t >= --convert-high-tmin (off in the recipe; session 32)
    n_high = round(a.convert_high_share * batch) if stage.name == "convert" else 0
    # the EMA's (target, source) parameter lists, built once: walking the
    # modules for them every step cost ~8 ms, 1.4% of a main-stage step
    # (session 35 profile; the same weights byte for byte)
    ema_pairs = [(list(e.parameters()), list(m.parameters()))
                 for m, e in ((unet, ema_u),) + (() if frozen else ((te, ema_t),))]
    unet.train()
    if not frozen:
        te.train()
    t_last = time.time()
    for step in range(steps):
        lr = set_lr(opt, base_lr, step, steps, warmup=stage.warmup, floor=0.05)
        idx = torch.randint(0, n, (batch,), generator=gen)
        if n_pair:
            idx[:n_pair] = pairs[torch.randint(0, len(pairs), (n_pair,), generator=gen)]
        # A fresh caption per visit: the same scene is described differently each time.
        caps = [caption_for(scenes, i, rng, a, stage.cap_noise) for i in idx.tolist()]
        ids = tokens(caps)
        x0 = latents[idx]
        noise = torch.randn(x0.shape, generator=gen)
        # Offset noise, large on purpose.  On the SD schedule the signal still
        # has sqrt(alphas_cumprod[999]) = 0.068 of its amplitude at t = 999,
        # and a flat background is one DC value per channel, while plain
        # noise's DC over 16x16 pixels has std 1/16: so the background colour
        # leaks through the noise, the UNet learns to read it there instead
        # of from the caption, and at sampling time the random DC of the
        # start noise picks the background.  Measured: at offset 0.05 and
        # 0.15 the backgrounds ignored the prompt (same wrong colour for the
        # same seed across models) while shapes followed it; at 0.3 every
        # background followed the prompt by 500 steps.
        noise = noise + a.offset_noise * torch.randn(x0.shape[0], x0.shape[1], 1, 1,
                                                      generator=gen)
        t = torch.randint(stage.tmin, stage.tmax, (batch,), generator=gen)
        if n_high:
            # --convert-high-share: that share of the batch at the layout steps
            t[:n_high] = torch.randint(a.convert_high_tmin, 1000, (n_high,), generator=gen)
        if stage.interval > 0:
            # half the batch where the target differs from the teacher; the
            # rest over every t keeps the layout steps the teacher's
            t[: batch // 2] = torch.randint(0, a.interval_tmax, (batch // 2,),
                                            generator=gen)
            if data:
                q = batch // 4
                t[batch // 2: batch // 2 + q] = torch.randint(
                    a.interval_data_tmin, 1000, (q,), generator=gen)
                if a.interval_data_mid:
                    m = batch - batch // 2 - q
                    t[batch - m:] = torch.randint(a.interval_tmax, a.interval_data_tmin,
                                                  (m,), generator=gen)
        xt = sched.add_noise(x0, noise, t)
        if frozen:
            with torch.no_grad():
                cond = te(ids).last_hidden_state
        else:
            cond = te(ids).last_hidden_state
        pred = unet_out(unet, xt, t, cond)
        w = torch.ones_like(snr[t])
        if stage.guide > 0:
            pred, factor = guided(unet, xt, t, pred, caps, empty, stage.guide)
            w = w * factor
        if stage.min_snr > 0:
            # min-SNR-gamma: the weight of an x0 error, min(SNR, gamma), over
            # what the target's loss already gives it (SNR for epsilon,
            # SNR + 1 for v).  With the stage's snr_plus1 (v only) the x0
            # weight is min(SNR + 1, gamma): plain v's weight at high noise,
            # where min(SNR, gamma) gives the layout steps almost none
            # (0.0002 at t = 999 on v2's schedule)
            s1 = snr[t] + (stage.prediction != "epsilon")
            w = w * torch.clamp(s1 if stage.snr_plus1 else snr[t], max=stage.min_snr) / s1
        if stage.interval > 0:
            target = interval_target(
                teacher, xt, t, cond, caps, empty, stage.interval, a.interval_tmax,
                sched.get_velocity(x0, noise, t) if data else None,
                a.interval_data_tmin, a.interval_data_scale, keep_words,
                a.interval_high_tmin, a.interval_high_k)
        elif convert_teacher:
            target = convert_target(teacher, sched, xt, t, cond, x0, noise,
                                    a.convert_teacher_tmax)
        elif stage.prediction == "epsilon":
            target = noise
        else:
            target = sched.get_velocity(x0, noise, t)
        err = (pred - target) ** 2
        if wmap is not None:
            # Shapes are ~12% of the latent pixels: under a plain mean the
            # loss spends almost nothing on their geometry (a star's points,
            # a ring's hole), the same reason the VAE got its edge weight.
            # Normalised per image, so min-SNR's per-step weights keep
            # their meaning.
            ws = wmap[idx]
            per = (err * ws).sum(dim=(1, 2, 3)) / (ws.sum(dim=(1, 2, 3)) * err.shape[1])
        else:
            per = err.mean(dim=(1, 2, 3))
        loss = (w * per).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        d = min(a.ema, (1 + step) / (10 + step))
        with torch.no_grad():
            for e, m in ema_pairs:
                torch._foreach_lerp_(e, m, 1 - d)
        if step % a.log_every == 0 or step == steps - 1:
            dt = time.time() - t_last
            t_last = time.time()
            name = "" if stage.name == "main" else stage.name + " "
            log(f"unet {name}step {step}/{steps} loss {loss.item():.4f} lr {lr:.2e} "
                f"({dt:.1f}s)")
        if snapshot and a.snapshot_every and (step + 1) % a.snapshot_every == 0 and \
                step + 1 < steps and not late:
            snapshot(ema_u, ema_t, step + 1)
    return ema_u, ema_t


# ---------------------------------------------------------------- 5. export

def export(a, vae, unet, te, tok, out=None, prediction=None, fp32=False):
    """Writes the diffusers folder (fp16, or fp32 with `fp32`) to `out`
    (default a.out); a folder part-way (a snapshot, a stage's model) says the
    `prediction` it was trained to, the final one final_prediction(a).  The
    stage exports are fp32, so that `--phase late` from one starts from the
    weights the next stage started from in the full run (session 27; fp16
    rounding made every rerun of a late stage a slightly different model)."""
    # set_alpha_to_one: DDIM's last step lands on the data (alpha 1) rather
    # than on alphas_cumprod[0], which leaves sqrt(beta_0) = 0.029 of the
    # predicted noise in the output latents; decoded, that grain alone took
    # two of heldout2.json's pink backgrounds over the 6/255 flatness bar
    # (118 -> 120 of 120 flat with it; session 35).  SD 1.x's own config is
    # False (v1's); both are standard diffusers settings and Tessera reads
    # either.
    scheduler = DDIMScheduler(**noise_schedule(a, prediction or final_prediction(a)),
                              set_alpha_to_one=bool(a.ddim_alpha_one), steps_offset=1,
                              timestep_spacing="trailing" if a.zero_snr else "leading")
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=te, tokenizer=tok, unet=unet,
                                   scheduler=scheduler, safety_checker=None,
                                   feature_extractor=None, requires_safety_checker=False)
    out = out or a.out
    if not fp32:
        # a snapshot or stage export keeps training in fp32: convert a copy
        pipe = copy.deepcopy(pipe) if out != a.out else pipe
        pipe.to(torch.float16)
    pipe.save_pretrained(out, safe_serialization=True)
    total = 0
    for root, _, files in os.walk(out):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    log(f"exported to {out}: {total / 1e6:.2f} MB")


# Recipes: the defaults of the knobs that differ between model versions.
# "v2" (the default) made the committed models/demo (session 12; what each
# knob does and how it was measured: docs/demo-model.md, "v2"): a 4x-down VAE
# with an edge-weighted loss, a 24/32/64/64 UNet with min-SNR 5 and a
# foreground-weighted loss, then the polish, convert (to v-prediction) and
# loosen stages (stages).  It was called "v2-wip" until session 12, without
# the loosen stage; session 12's committed model is --convert-steps 0.  Session
# 25 made every "two X" caption name both places (pair_places) and moved the
# interval stage's guidance floor from t 300 to 150 (interval_tmax); session 26
# runs the UNet stages under bf16 autocast where the CPU has bf16 (bf16 "auto":
# 67 -> 54 minutes on a Zen 4); session 30 left a single shape's place out of
# its caption only when the shape is in the centre (single_places: flat
# backgrounds 318 -> 343 and two X 0.71 -> 0.82 of the validation set); session
# 31 runs the loosen stage 900 steps instead of 600 (two X 0.67 -> 0.75 on
# heldout2.json for the committed one-thread run; see stages()).  Session 35:
# no polish stage, no caption noise in the guide stage, and the interval
# stage's high-noise band (interval_high_*), and the exported DDIM ends at
# alpha 1 (export()): every bar of issue 15 met, 120 of 120 backgrounds flat
# on heldout2.json (see stages() and docs/demo-model.md).
# "v1" made the first committed model (2026-11-30) and is kept to reproduce it.
RECIPES = {
    "v1": dict(threads=1, bf16="0", vae_channels=[16, 32, 64, 64], vae_edge=0.0,
               vae_pre_steps=1000,
               vae_steps=300, te_steps=600, unet_channels=[32, 64, 64], unet_attn=[0, 1],
               unet_steps=4000, beta_schedule="scaled_linear", beta_start=0.00085,
               beta_end=0.012, free_captions=0.0, two_share=0.35, two_fact=0,
               ddim_alpha_one=0),
    "v2": dict(threads=2, vae_channels=[16, 32, 64], vae_edge=4.0, vae_pre_steps=1500,
               vae_steps=600, te_steps=1000, unet_channels=[24, 32, 64, 64],
               unet_attn=[1, 2], unet_steps=5500, beta_schedule="scaled_linear",
               beta_start=0.00085, beta_end=0.02, free_captions=0.5, two_share=0.4,
               two_fact=1, min_snr=5.0, fg_weight=4.0, polish_steps=0,
               convert_steps=1000, loosen_steps=900, loosen_cap_noise=0.15,
               guide_steps=200, guide_scale=1.5, guide_lr=1e-4, guide_cap_noise=0.0,
               interval_steps=400, interval_tmax=150, interval_high_tmin=700,
               interval_high_k=0.6, pair_places=1, single_places=1, bf16="auto",
               ddim_alpha_one=1),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipe", choices=sorted(RECIPES), default="v2",
                    help="defaults for the knobs below that differ between versions")
    ap.add_argument("--out", default="models/demo")
    ap.add_argument("--work", default="out/demo-train", help="cache/scratch folder")
    ap.add_argument("--seed", type=int, default=dataset.SEED)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--n-images", type=int, default=8000)
    ap.add_argument("--vae-channels", type=int, nargs="+",
                    help="one per level; n levels downsample 2**(n-1) (v1: 16 32 64 64, f8)")
    ap.add_argument("--latent-channels", type=int, default=4)
    ap.add_argument("--vae-edge", type=float,
                    help="extra loss weight on pixels at colour edges (0: v1's plain loss)")
    ap.add_argument("--vae-groups", type=int, default=1)
    ap.add_argument("--vae-pre-steps", type=int,
                    help="VAE steps on whole images box-filtered to --vae-pre-size")
    ap.add_argument("--vae-pre-size", type=int, default=64)
    ap.add_argument("--vae-steps", type=int, help="VAE steps at full size")
    ap.add_argument("--vae-batch", type=int, default=4)
    ap.add_argument("--vae-lr", type=float, default=1e-3)
    ap.add_argument("--vae-kl", type=float, default=1e-6)
    ap.add_argument("--text-dim", type=int, default=64)
    ap.add_argument("--text-layers", type=int, default=2)
    ap.add_argument("--text-heads", type=int, default=2)
    ap.add_argument("--te-steps", type=int,
                    help="text-encoder pretraining steps (0: train it jointly with the UNet)")
    ap.add_argument("--te-lr", type=float, default=2e-3)
    ap.add_argument("--te-batch", type=int, default=64)
    ap.add_argument("--unet-channels", type=int, nargs="+")
    ap.add_argument("--unet-attn", type=int, nargs="*",
                    help="levels with cross-attention (v1: 0 1 of 32 64 64)")
    ap.add_argument("--unet-layers", type=int, default=1)
    ap.add_argument("--unet-heads", type=int, default=1)
    ap.add_argument("--unet-groups", type=int, default=8)
    ap.add_argument("--unet-steps", type=int)
    ap.add_argument("--unet-lr", type=float, default=1e-3)
    ap.add_argument("--lowres-steps", type=int, default=0,
                    help="before the main stage, this many steps from nothing on the latents "
                         "of the images box-filtered to --lowres-size (0: none; see stages())")
    ap.add_argument("--lowres-size", type=int, default=64)
    ap.add_argument("--lowres-batch", type=int, default=64)
    ap.add_argument("--lowres-lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--cond-drop", type=float, default=0.1,
                    help="share of empty captions (classifier-free guidance)")
    ap.add_argument("--cap-noise", type=float, default=0.0,
                    help="share of captions taken from another, random scene (see caption_for)")
    ap.add_argument("--prediction", choices=["epsilon", "v_prediction"], default="epsilon",
                    help="what the UNet predicts (written into the exported scheduler)")
    ap.add_argument("--beta-schedule", help="noise schedule (v1: SD's scaled_linear)")
    ap.add_argument("--beta-start", type=float)
    ap.add_argument("--beta-end", type=float)
    ap.add_argument("--free-captions", type=float,
                    help="share of captions from dataset.py's free word-order grammar")
    ap.add_argument("--two-share", type=float, help="share of two-shape scenes")
    ap.add_argument("--shape-weights", type=float, nargs=len(dataset.SHAPES),
                    metavar="W", help="relative frequencies of " + " ".join(dataset.SHAPES) +
                    " in the scenes (default: equal)")
    ap.add_argument("--pad-free", type=int, choices=[0, 1], default=0,
                    help="pretrain the text encoder's states after end-of-text to one "
                         "constant, so that the UNet reads the caption from its words "
                         "(off in v2)")
    ap.add_argument("--pair-places", type=int, choices=[0, 1], default=0,
                    help="every \"two X\" caption names both places (dataset.PAIR_PLACES; "
                         "on in v2 since session 25; off, about half do)")
    ap.add_argument("--single-places", type=int, choices=[0, 1], default=0,
                    help="a single shape's caption names its place unless the shape is in "
                         "the centre (dataset.SINGLE_PLACES; on in v2 since session 30; "
                         "off, 10%% name no place)")
    ap.add_argument("--pair-share", type=float, default=0.0,
                    help="draw this share of every UNet batch from the \"two X\" scenes "
                         "(0: uniform over the data, where they are about a fifth; off in v2)")
    ap.add_argument("--zero-snr", type=int, choices=[0, 1], default=0,
                    help="rescale the noise schedule to zero terminal SNR and sample with "
                         "trailing spacing (noise_schedule; needs v-prediction; off in v2)")
    ap.add_argument("--cell-facts", type=int, choices=[0, 1], default=0,
                    help="also pretrain the text encoder on the colour in each of the nine "
                         "places (FACTS_CELLS; off in v2)")
    ap.add_argument("--two-fact", type=int, choices=[0, 1],
                    help="text-encoder pretraining also states whether \"two X\" was said")
    ap.add_argument("--offset-noise", type=float, default=0.3,
                    help="per-image, per-channel constant added to the noise (see train_unet)")
    ap.add_argument("--min-snr", type=float, default=0.0,
                    help="min-SNR-gamma loss weighting (0: off, plain epsilon MSE)")
    ap.add_argument("--min-snr-plus1", type=int, choices=[0, 1], default=0,
                    help="v target, main and lowres stages only: min-SNR's x0 weight is "
                         "min(SNR + 1, gamma), so the high-noise steps keep plain v's weight "
                         "(train_unet)")
    ap.add_argument("--fg-weight", type=float, default=0.0,
                    help="extra UNet loss weight on the latent pixels of shapes (0: off)")
    ap.add_argument("--edge-weight", type=float, default=0.0,
                    help="and this much more on the latent pixels of their outlines (0: off)")
    ap.add_argument("--loosen-steps", type=int, default=0,
                    help="after the polish stage, this many steps at t >= --polish-tmax "
                         "with a share --loosen-cap-noise of mismatched captions "
                         "(0: none; see stages)")
    ap.add_argument("--loosen-cap-noise", type=float, default=0.0)
    ap.add_argument("--loosen-lr", type=float, default=3e-4)
    ap.add_argument("--loosen-tmax", type=int, default=1000,
                    help="the loosen stage trains t in [--polish-tmax, this)")
    ap.add_argument("--loosen-min-snr", type=float,
                    help="the loosen stage's min-SNR gamma (default --min-snr; 0: plain MSE)")
    ap.add_argument("--polish-steps", type=int, default=0,
                    help="after the UNet's main stage, this many low-noise steps with plain "
                         "epsilon MSE (0: none; see stages)")
    ap.add_argument("--polish-tmax", type=int, default=200,
                    help="polish stage: noise levels t < this (loosen: t >= this)")
    ap.add_argument("--polish-lr", type=float, default=1e-4)
    ap.add_argument("--convert-steps", type=int, default=0,
                    help="after the polish stage, this many steps at every t that retrain an "
                         "epsilon UNet to predict v (0: none; see stages)")
    ap.add_argument("--convert-lr", type=float, default=3e-4)
    ap.add_argument("--convert-high-share", type=float, default=0.0,
                    help="share of each convert batch drawn at t >= --convert-high-tmin "
                         "(0: none, every t uniform; see stages())")
    ap.add_argument("--convert-high-tmin", type=int, default=500)
    ap.add_argument("--convert-teacher-tmax", type=int, default=0,
                    help="convert stage: below this t the v target is the frozen epsilon "
                         "model's own prediction in v, not the data's (0: off; see stages())")
    ap.add_argument("--guide-steps", type=int, default=0,
                    help="after the loosen stage, this many steps at --guide-tmin <= t < "
                         "--guide-tmax whose loss is on the classifier-free-guided prediction "
                         "at --guide-scale (0: none; see stages)")
    ap.add_argument("--guide-scale", type=float, default=2.5)
    ap.add_argument("--guide-lr", type=float, default=3e-4)
    ap.add_argument("--guide-cap-noise", type=float, default=0.0,
                    help="the guide stage's share of captions from another scene "
                         "(as --loosen-cap-noise)")
    ap.add_argument("--guide-tmin", type=int, default=0,
                    help="the guide stage trains t in [this, --guide-tmax)")
    ap.add_argument("--guide-tmax", type=int, default=1000,
                    help="the guide stage trains t in [--guide-tmin, this)")
    ap.add_argument("--interval-steps", type=int, default=0,
                    help="last, this many steps distilling the model before into one whose "
                         "guidance at --interval-scale acts only at t >= --interval-tmax "
                         "(0: off; see stages())")
    ap.add_argument("--interval-scale", type=float, default=7.5,
                    help="the guidance scale the interval stage is distilled for (the "
                         "default cfg of tessera and diffusers)")
    ap.add_argument("--interval-tmax", type=int, default=300,
                    help="below this t the distilled model is not guided at --interval-scale "
                         "(v2: 150 since session 25, 300 before)")
    ap.add_argument("--interval-lr", type=float, default=3e-4)
    ap.add_argument("--interval-keep", nargs="*", default=[], choices=dataset.SHAPES,
                    help="shapes whose captions the interval stage leaves guided at every t "
                         "(the teacher's own guidance below --interval-tmax too)")
    ap.add_argument("--interval-data-tmin", type=int, default=1000,
                    help="at t >= this the interval stage's caption target comes from the "
                         "data instead of the teacher (1000: off; see interval_target())")
    ap.add_argument("--interval-data-scale", type=float, default=2.0,
                    help="with --interval-data-tmin: the scale W at which guidance gives the "
                         "data target (the caption branch learns u + (v - u) / W)")
    ap.add_argument("--interval-data-mid", action="store_true",
                    help="with --interval-data-tmin: the last quarter of each batch at "
                         "--interval-tmax <= t < --interval-data-tmin instead of every t")
    ap.add_argument("--interval-high-tmin", type=int, default=1000,
                    help="at t >= this the interval stage scales the caption branch's "
                         "guidance by --interval-high-k (1000: off; see interval_target())")
    ap.add_argument("--interval-high-k", type=float, default=1.0,
                    help="with --interval-high-tmin: the factor on c - u at those t")
    ap.add_argument("--ddim-alpha-one", type=int, choices=[0, 1],
                    help="the exported DDIM scheduler's set_alpha_to_one (v2: 1, v1: 0; "
                         "see export())")
    ap.add_argument("--init-model", help="--phase late: the exported folder to go on from")
    ap.add_argument("--bf16", choices=["auto", "0", "1"],
                    help="run the UNet stages' forward and backward under bfloat16 "
                         "autocast (fp32 weights, optimiser and loss); auto: when the "
                         "CPU has bf16 dot products (v2), 0: fp32 (v1)")
    ap.add_argument("--unet-attn-math", type=int, choices=[0, 1], default=0,
                    help="the UNet stages' attention as plain matmul-softmax instead of "
                         "PyTorch's CPU flash kernel (9-12%% faster steps on the Xeon, "
                         "other roundings; off in every recipe so far)")
    ap.add_argument("--stage-seed", type=int, default=0,
                    help="added to every UNet stage's seeds (stages()): another draw of "
                         "the UNet on the same data, VAE and text encoder")
    ap.add_argument("--ema", type=float, default=0.995)
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--snapshot-every", type=int, default=0,
                    help="development: also export the EMA weights to work/snapshot-STEP "
                         "every this many UNet steps")
    ap.add_argument("--phase", choices=["all", "vae", "unet", "late"], default="all",
                    help="development: 'vae' stops after the VAE + latents; 'unet' reuses "
                         "work/vae + latents from an earlier 'vae' run; 'late' also "
                         "reuses them and runs only the late stages (polish ... interval) "
                         "on --init-model, keeping its stage exports in "
                         "work/late-<name of --out>")
    ap.set_defaults(**RECIPES[ap.parse_known_args()[0].recipe])
    a = ap.parse_args()
    late = a.loosen_steps + a.polish_steps + a.convert_steps + a.guide_steps + \
        a.interval_steps > 0
    if a.interval_keep and a.interval_steps <= 0:
        ap.error("--interval-keep needs --interval-steps > 0")
    if a.interval_steps > 0:
        if not a.interval_scale > 1.0:
            ap.error(f"--interval-scale {a.interval_scale}: must be > 1")
        if not 0 < a.interval_tmax < 1000:
            ap.error(f"--interval-tmax {a.interval_tmax}: must be in (0, 1000)")
        if not a.interval_tmax <= a.interval_data_tmin <= 1000:
            ap.error(f"--interval-data-tmin {a.interval_data_tmin}: must be in "
                     f"[--interval-tmax, 1000]")
        if not a.interval_data_scale >= 1.0:
            ap.error(f"--interval-data-scale {a.interval_data_scale}: must be >= 1")
        if a.interval_data_mid and not a.interval_tmax < a.interval_data_tmin < 1000:
            ap.error("--interval-data-mid needs --interval-tmax < --interval-data-tmin < 1000")
        if not a.interval_tmax <= a.interval_high_tmin <= 1000:
            ap.error(f"--interval-high-tmin {a.interval_high_tmin}: must be in "
                     f"[--interval-tmax, 1000]")
        if not 0.0 < a.interval_high_k <= 4.0:
            ap.error(f"--interval-high-k {a.interval_high_k}: must be in (0, 4]")
    if not 0 <= a.convert_teacher_tmax <= 1000:
        ap.error(f"--convert-teacher-tmax {a.convert_teacher_tmax}: must be in [0, 1000]")
    if not 0.0 <= a.convert_high_share <= 1.0:
        ap.error(f"--convert-high-share {a.convert_high_share}: must be in [0, 1]")
    if not 0 <= a.convert_high_tmin < 1000:
        ap.error(f"--convert-high-tmin {a.convert_high_tmin}: must be in [0, 1000)")
    for flag, on in (("--convert-teacher-tmax", a.convert_teacher_tmax > 0),
                     ("--convert-high-share", a.convert_high_share > 0)):
        if on and a.convert_steps <= 0:
            ap.error(f"{flag} needs a convert stage (--convert-steps > 0)")
    if a.guide_steps > 0:
        if not a.guide_scale >= 1.0:
            ap.error(f"--guide-scale {a.guide_scale}: must be >= 1")
        if not 0.0 <= a.guide_cap_noise < 1.0:
            ap.error(f"--guide-cap-noise {a.guide_cap_noise}: must be in [0, 1)")
        if not 0 <= a.guide_tmin < a.guide_tmax <= 1000:
            ap.error(f"--guide-tmin {a.guide_tmin}, --guide-tmax {a.guide_tmax}: "
                     "need 0 <= tmin < tmax <= 1000")
    if late and a.te_steps <= 0 and a.phase != "late":
        # checked before any training, not after the main stage has run
        ap.error("the late stages (--polish/--convert/--loosen/--guide-steps) need the "
                 "pretrained, frozen text encoder (--te-steps > 0)")
    if a.loosen_steps > 0 and not a.polish_tmax < a.loosen_tmax <= 1000:
        # checked here, not as torch.randint's error after the earlier stages
        ap.error(f"--loosen-tmax {a.loosen_tmax}: must be in (--polish-tmax "
                 f"{a.polish_tmax}, 1000]")
    if a.phase != "late" and a.unet_steps <= 0:
        ap.error("--unet-steps must be > 0 (or --phase late on --init-model)")
    if a.phase == "late" and (not a.init_model or not late):
        ap.error("--phase late needs --init-model and a late stage "
                 "(--polish/--convert/--loosen/--guide/--interval-steps)")
    if a.lowres_steps > 0:
        f = 2 ** (len(a.vae_channels) - 1)
        if not (0 < a.lowres_size < dataset.SIZE and dataset.SIZE % a.lowres_size == 0
                and a.lowres_size % (f * 8) == 0):
            ap.error(f"--lowres-size {a.lowres_size}: must divide {dataset.SIZE}, be smaller, "
                     f"and give latents the UNet's levels can halve (a multiple of {f * 8})")
        if a.lowres_batch <= 0:
            ap.error(f"--lowres-batch {a.lowres_batch}: must be > 0")
        if a.te_steps <= 0:
            ap.error("--lowres-steps needs the pretrained, frozen text encoder (--te-steps > 0)")
    if not 0.0 <= a.pair_share < 1.0:
        ap.error(f"--pair-share {a.pair_share}: must be in [0, 1)")
    if a.min_snr_plus1 and a.prediction != "v_prediction":
        ap.error("--min-snr-plus1 needs --prediction v_prediction")
    if a.phase == "late":
        # the late stages go on in what --init-model predicts
        try:
            with open(os.path.join(a.init_model, "scheduler", "scheduler_config.json")) as f:
                a.prediction = json.load(f).get("prediction_type", "epsilon")
        except (OSError, ValueError) as e:
            ap.error(f"--init-model {a.init_model}: no readable scheduler config ({e})")
    if a.convert_teacher_tmax > 0 and a.prediction != "epsilon":
        # the teacher's output is read as epsilon (convert_target)
        ap.error("--convert-teacher-tmax needs an epsilon model to convert "
                 f"(this run's UNet predicts {a.prediction})")
    if a.zero_snr and final_prediction(a) != "v_prediction":
        # after --phase late has read what --init-model predicts
        ap.error("--zero-snr needs v-prediction (--prediction v_prediction or a convert stage)")
    dataset.FREE_SHARE = a.free_captions
    dataset.TWO_SHARE = a.two_share
    if a.shape_weights:
        if min(a.shape_weights) <= 0:
            ap.error("--shape-weights: every weight must be positive")
        dataset.SHAPE_WEIGHTS = a.shape_weights

    global BF16
    BF16 = a.bf16 == "1" or (a.bf16 == "auto" and cpu_has_bf16())
    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)  # denormals in flat-colour activations are slow on CPU
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    np.random.seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    os.makedirs(a.work, exist_ok=True)
    log(f"args: {vars(a)}")
    log("UNet stages: " + ("bf16 autocast" if BF16 else "fp32"))

    tok = build_tokenizer(a.work)
    imgs, scenes = make_images(a.n_images, a.seed)
    log(f"data: {a.n_images} images {dataset.SIZE}x{dataset.SIZE}")
    # after the images: dataset.sample draws a caption before it renders, so
    # the knob would move every image's random stream
    dataset.PAIR_PLACES = bool(a.pair_places)
    dataset.SINGLE_PLACES = bool(a.single_places)

    vae_dir = os.path.join(a.work, "vae")
    lat_path = os.path.join(a.work, "latents.pt")
    fp_path = os.path.join(a.work, "latents.json")
    fingerprint = data_fingerprint(imgs, scenes)
    if a.phase in ("unet", "late"):
        try:
            with open(fp_path) as f:
                cached = json.load(f)["data_sha256"]
        except (OSError, ValueError, KeyError) as e:
            raise SystemExit(f"train.py: {fp_path}: no data fingerprint ({e}); "
                             "run --phase vae again")
        if cached != fingerprint:
            raise SystemExit(f"train.py: {lat_path} was encoded from other images or scenes "
                             "(other --n-images, --seed, --two-share or --free-captions); "
                             "run --phase vae with these arguments")
        vae = AutoencoderKL.from_pretrained(vae_dir).eval()
        pin_logvar(vae)  # a work folder written before session 18 has it unpinned
        latents = torch.load(lat_path)
        log("vae + latents reused (data fingerprint matches)")
    else:
        vae = train_vae(a, imgs, gen)
        report = check_vae(a, vae)
        sheet, _ = judge_sheet(vae)
        report["shape_sheet"] = sheet
        log(f"vae shape sheet round trip: error {sheet['mean_abs_255']:.2f}/255, flatness max "
            f"{sheet['flat_max']:.1f}/255, named right: " +
            ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in sheet["shapes"].items()) +
            f"; two X {sheet['pairs'][0]}/{sheet['pairs'][1]}")
        with open(os.path.join(a.work, "vae_check.json"), "w") as f:
            json.dump(report, f, indent=1)
        latents = encode_all(vae, imgs)
        vae.save_pretrained(vae_dir)
        torch.save(latents, lat_path)
        with open(fp_path, "w") as f:
            json.dump({"data_sha256": fingerprint}, f)
        if a.phase == "vae":
            log("vae phase done")
            return
    std = latents.std().item()
    vae.register_to_config(scaling_factor=float(1.0 / std))
    latents = latents / std
    log(f"latents: {tuple(latents.shape)}, std {std:.4f} -> scaling_factor {1 / std:.4f}")

    def snapshot(u, t, step):
        # Development aid: an exported folder part-way, to score while training goes on.
        export(a, vae, u, t, tok, out=os.path.join(a.work, f"snapshot-{step}"),
               prediction=a.prediction)

    run = stages(a)
    # each stage's (latents, loss weights), by the image size it trains at
    data = {dataset.SIZE: (latents, loss_weights(a, imgs, latents.shape[-1]))}
    unet = None
    if a.phase == "late":
        unet = UNet2DConditionModel.from_pretrained(os.path.join(a.init_model, "unet")).float()
        te = CLIPTextModel.from_pretrained(os.path.join(a.init_model, "text_encoder")).float()
        te.eval()
        run = [st for st in run if st.name not in ("lowres", "main")]  # the from-nothing ones
        log(f"late stages on {a.init_model}: " + ", ".join(st.name for st in run))
    else:
        te = pretrain_text_encoder(a, tok, scenes, a.seed + 3) if a.te_steps > 0 else None
    for st in run:
        if st.size and st.size not in data:
            # the same images box-filtered (as the VAE's first stretch saw
            # them), in the same latent units as the full-size ones
            small = encode_all(vae, imgs, size=st.size) / std
            log(f"latents at {st.size}px: {tuple(small.shape)}, std {small.std().item():.4f}")
            data[st.size] = (small, loss_weights(a, imgs, small.shape[-1]))
    for i, st in enumerate(run):
        # unet is None before the first stage; train_unet snapshots only a
        # stage from nothing
        lat, wmap = data[st.size or dataset.SIZE]
        with unet_attention(a.unet_attn_math):
            unet, te = train_unet(a, tok, lat, scenes, st, te, snapshot, wmap, init=unet)
        if i + 1 < len(run):
            # every stage but the last kept in the work folder, so that the
            # stages after it can be run again from there (--phase late); a
            # late run keeps its own in a subfolder named after its output,
            # so that it does not overwrite the full run's it started from
            # (session 27: a late run replaced a full run's stage-guide)
            where = a.work if a.phase != "late" else os.path.join(
                a.work, "late-" + os.path.basename(os.path.normpath(a.out)))
            export(a, vae, unet, te, tok, out=os.path.join(where, f"stage-{st.name}"),
                   prediction=st.prediction, fp32=True)
    export(a, vae, unet, te, tok)
    log("done")


if __name__ == "__main__":
    main()
