#!/usr/bin/env python3
"""Write the reference goldens for the CPU backend's ops (tests/ops).

Why: the C test suite must not need Python, so every op is evaluated once
here with torch.nn.functional on seeded random inputs and the inputs plus
expected outputs are committed as small safetensors files under
tests/data/ops/<op>.safetensors.  Each file holds several cases; tensors are
named "<case>.<role>" (x, w, b, y, ...) and the file metadata holds
"cases" (comma-separated case names) and per case "<case>" = "key=value ..."
parameters (stride, padding, groups, eps, heads, causal, ...).

Layouts are converted to Tessera's: activations NHWC (torch NCHW), conv
weights OHWI (torch OIHW).  References are computed in float64 from the
float32 inputs (an exact oracle) and stored as float32; the timestep
embedding instead calls diffusers' own get_timestep_embedding in float32,
because the op is defined as "exactly what diffusers computes".

Pinned: torch 2.9.1 (CPU), diffusers 0.35.2 (tools/setup-venv.sh).
Deterministic: fixed seeds.  Run:
    . .venv/bin/activate && python tools/reference/make_op_goldens.py
"""
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "ops")

gen = torch.Generator().manual_seed(1234)


def randn(*shape, scale=1.0, shift=0.0):
    return (torch.randn(*shape, generator=gen, dtype=torch.float32) * scale + shift).contiguous()


class File:
    def __init__(self, op):
        self.op = op
        self.tensors = {}
        self.meta = {}
        self.cases = []

    def case(self, name, params, **tensors):
        self.cases.append(name)
        self.meta[name] = " ".join(f"{k}={v}" for k, v in params.items())
        for role, t in tensors.items():
            if t.dtype == torch.float64:
                t = t.to(torch.float32)
            self.tensors[f"{name}.{role}"] = t.contiguous().clone()

    def write(self):
        self.meta["cases"] = ",".join(self.cases)
        path = os.path.join(OUT, f"{self.op}.safetensors")
        write_safetensors(path, self.tensors, self.meta)
        return os.path.getsize(path)


def write_safetensors(path, tensors, meta):
    """The safetensors format, written by hand so the bytes are reproducible
    (safetensors' own writer emits the metadata map in hash order)."""
    dtypes = {torch.float32: "F32", torch.int32: "I32"}
    header = {"__metadata__": dict(sorted(meta.items()))}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        raw = t.contiguous().numpy().tobytes()
        header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def d(t):
    return t.to(torch.float64)


def nhwc(t):
    return t.permute(0, 2, 3, 1).contiguous()


def nchw(t):
    return t.permute(0, 3, 1, 2).contiguous()


def conv2d():
    f = File("conv2d")
    # (name, N, H, W, Ci, Co, KH, KW, stride_h, stride_w, pad t l b r, bias)
    specs = [
        ("k3s1", 2, 5, 7, 3, 4, 3, 3, 1, 1, (1, 1, 1, 1), True),
        ("k3s2_asym", 1, 9, 8, 8, 6, 3, 3, 2, 2, (0, 0, 1, 1), True),
        ("k1", 1, 4, 3, 16, 5, 1, 1, 1, 1, (0, 0, 0, 0), False),
        ("k1_bias", 2, 8, 8, 32, 64, 1, 1, 1, 1, (0, 0, 0, 0), True),
        ("k3x5_odd", 2, 6, 11, 5, 7, 3, 5, 1, 2, (2, 1, 0, 2), True),
        ("k3_wide", 1, 6, 6, 64, 48, 3, 3, 1, 1, (1, 1, 1, 1), False),
    ]
    for name, n, h, w, ci, co, kh, kw, sh, sw, (pt, pl, pb, pr), has_b in specs:
        x = randn(n, h, w, ci)
        wt = randn(co, kh, kw, ci, scale=1.0 / math.sqrt(kh * kw * ci))
        b = randn(co) if has_b else None
        xp = F.pad(d(nchw(x)), (pl, pr, pt, pb))
        y = F.conv2d(xp, d(nchw(wt)), d(b) if has_b else None, stride=(sh, sw))
        params = dict(stride_h=sh, stride_w=sw, pad_t=pt, pad_l=pl, pad_b=pb, pad_r=pr)
        tensors = dict(x=x, w=wt, y=nhwc(y))
        if has_b:
            tensors["b"] = b
        f.case(name, params, **tensors)
    return f


def linear():
    f = File("linear")
    for name, xs, out, has_b in [("3d_bias", (2, 7, 13), 9, True), ("2d", (5, 16), 3, False),
                                 ("wide", (1, 1, 33), 65, True)]:
        x = randn(*xs)
        w = randn(out, xs[-1], scale=0.2)
        b = randn(out) if has_b else None
        y = F.linear(d(x), d(w), d(b) if has_b else None)
        tensors = dict(x=x, w=w, y=y)
        if has_b:
            tensors["b"] = b
        f.case(name, {}, **tensors)
    return f


def matmul():
    f = File("matmul")
    # (name, a shape, b shape, trans_a, trans_b, alpha)
    for name, sa, sb, ta, tb, alpha in [
        ("batched", (3, 5, 7), (3, 7, 4), 0, 0, 1.0),
        ("trans_a", (2, 7, 5), (2, 7, 3), 1, 0, 1.0),
        ("trans_b_bcast_a", (1, 6, 9), (4, 5, 9), 0, 1, 0.125),
        ("rank2", (6, 8), (8, 3), 0, 0, 0.5),
        ("bcast_b_both_t", (3, 9, 4), (1, 6, 9), 1, 1, 2.0),
    ]:
        a = randn(*sa)
        b = randn(*sb)
        at = d(a).transpose(-1, -2) if ta else d(a)
        bt = d(b).transpose(-1, -2) if tb else d(b)
        y = alpha * torch.matmul(at, bt)
        f.case(name, dict(trans_a=ta, trans_b=tb, alpha=alpha), a=a, b=b, y=y)
    return f


def group_norm():
    f = File("group_norm")
    for name, shape, groups, eps, silu, shift in [
        ("nhwc", (2, 5, 7, 32), 8, 1e-5, 0, 0.0),
        ("nhwc_silu", (2, 4, 3, 64), 32, 1e-6, 1, 3.0),
        ("seq_silu", (1, 13, 48), 4, 1e-5, 1, 0.0),
    ]:
        c = shape[-1]
        x = randn(*shape, scale=2.0, shift=shift)
        gamma = randn(c, scale=0.5, shift=1.0)
        beta = randn(c, scale=0.5)
        # torch wants channels at dim 1
        xt = d(x).movedim(-1, 1)
        y = F.group_norm(xt, groups, d(gamma), d(beta), eps).movedim(1, -1)
        if silu:
            y = F.silu(y)
        f.case(name, dict(groups=groups, eps=eps, silu=silu), x=x, gamma=gamma, beta=beta, y=y)
    return f


def layer_norm():
    f = File("layer_norm")
    for name, shape, eps, has_beta, shift in [("seq", (2, 7, 40), 1e-5, 1, 0.0),
                                              ("nobeta_offset", (3, 33), 1e-6, 0, 4.0)]:
        c = shape[-1]
        x = randn(*shape, scale=1.5, shift=shift)
        gamma = randn(c, scale=0.5, shift=1.0)
        beta = randn(c, scale=0.5) if has_beta else None
        y = F.layer_norm(d(x), (c,), d(gamma), d(beta) if has_beta else None, eps)
        tensors = dict(x=x, gamma=gamma, y=y)
        if has_beta:
            tensors["beta"] = beta
        f.case(name, dict(eps=eps), **tensors)
    return f


def softmax():
    f = File("softmax")
    for name, shape, scale in [("rows", (4, 37), 1.0), ("large", (2, 3, 129), 20.0)]:
        x = randn(*shape, scale=scale)
        f.case(name, {}, x=x, y=F.softmax(d(x), dim=-1))
    return f


def attention():
    f = File("attention")
    # (name, B, Lq, Lk, heads, D, scale (0 = default), causal)
    for name, b, lq, lk, heads, dh, scale, causal in [
        ("self", 2, 17, 17, 2, 8, 0.0, 0),
        ("causal_lq_lt_lk", 1, 5, 9, 3, 4, 0.0, 1),
        ("causal_square", 2, 40, 40, 2, 6, 0.0, 1),
        ("cross_77", 2, 33, 77, 8, 5, 0.0, 0),
        ("scale_blocks", 1, 300, 12, 1, 64, 0.3, 0),
        ("long_keys", 1, 70, 5000, 1, 3, 0.0, 0),
    ]:
        q = randn(b, lq, heads * dh)
        k = randn(b, lk, heads * dh)
        v = randn(b, lk, heads * dh)

        def split(t, L):
            return d(t).view(b, L, heads, dh).transpose(1, 2)

        mask = None
        if causal:
            i = torch.arange(lq)[:, None]
            j = torch.arange(lk)[None, :]
            mask = j <= i + (lk - lq)
        y = F.scaled_dot_product_attention(split(q, lq), split(k, lk), split(v, lk), attn_mask=mask,
                                           scale=scale if scale != 0.0 else None)
        y = y.transpose(1, 2).reshape(b, lq, heads * dh)
        f.case(name, dict(heads=heads, scale=scale, causal=causal), q=q, k=k, v=v, y=y)
    return f


def unary():
    f = File("unary")
    x = randn(3, 1001, scale=4.0)
    x[0, :8] = torch.tensor([-30.0, -10.0, -1e-3, 0.0, 1e-3, 10.0, 30.0, 88.0])
    f.case("silu", dict(kind="silu"), x=x, y=F.silu(d(x)))
    f.case("gelu", dict(kind="gelu"), x=x, y=F.gelu(d(x)))
    f.case("gelu_tanh", dict(kind="gelu_tanh"), x=x, y=F.gelu(d(x), approximate="tanh"))
    f.case("quick_gelu", dict(kind="quick_gelu"), x=x, y=d(x) * torch.sigmoid(1.702 * d(x)))
    return f


def geglu():
    f = File("geglu")
    x = randn(2, 9, 2 * 37, scale=2.0)
    a, g = d(x).chunk(2, dim=-1)
    f.case("seq", {}, x=x, y=a * F.gelu(g))
    return f


def binary():
    f = File("binary")
    for name, op, sa, sb in [
        ("add_bias", "add", (2, 4, 5, 6), (6,)),
        ("add_per_image", "add", (2, 4, 5, 6), (2, 1, 1, 6)),
        ("add_same", "add", (2, 4, 5, 6), (2, 4, 5, 6)),
        ("add_mid", "add", (3, 4, 7), (4, 1)),
        ("mul_scalar", "mul", (3, 7), (1,)),
        ("mul_col", "mul", (3, 7), (3, 1)),
        ("mul_inner", "mul", (2, 3, 5), (3, 5)),
    ]:
        a = randn(*sa)
        b = randn(*sb)
        y = d(a) + d(b) if op == "add" else d(a) * d(b)
        f.case(name, dict(kind=op), a=a, b=b, y=y)
    return f


def scale():
    f = File("scale")
    x = randn(5, 11)
    f.case("vae", dict(s=0.18215), x=x, y=d(x) * 0.18215)
    return f


def concat():
    f = File("concat")
    for name, sa, sb in [("nhwc", (2, 3, 4, 5), (2, 3, 4, 7)), ("cols", (6, 1), (6, 2))]:
        a = randn(*sa)
        b = randn(*sb)
        f.case(name, {}, a=a, b=b, y=torch.cat([a, b], dim=-1))
    return f


def upsample():
    f = File("upsample_nearest2x")
    x = randn(2, 3, 5, 7)
    y = nhwc(F.interpolate(nchw(x), scale_factor=2.0, mode="nearest"))
    f.case("nhwc", {}, x=x, y=y)
    return f


def upsample_size():
    """nearest to an explicit size, as diffusers' UNet upsamples to a skip's
    size after an odd downsample (2H - 1), and a shrink for completeness"""
    f = File("upsample_nearest")
    x = randn(2, 3, 5, 7)
    for name, size in (("odd_skip", (9, 13)), ("mixed", (10, 13)), ("shrink", (3, 4))):
        y = nhwc(F.interpolate(nchw(x), size=size, mode="nearest"))
        f.case(name, {}, x=x, y=y)
    return f


def timestep():
    from diffusers.models.embeddings import get_timestep_embedding

    f = File("timestep_embedding")
    t = torch.tensor([0.0, 1.0, 10.5, 500.0, 999.0], dtype=torch.float32)
    for name, dim, flip, shift in [("sd", 320, 1, 0.0), ("noflip_shift1", 256, 0, 1.0),
                                   ("odd", 33, 1, 0.0)]:
        y = get_timestep_embedding(t, dim, flip_sin_to_cos=bool(flip), downscale_freq_shift=shift)
        f.case(name, dict(dim=dim, flip=flip, shift=shift), t=t, y=y)
    return f


def embedding():
    f = File("embedding")
    table = randn(50, 12)
    ids = torch.randint(0, 50, (2, 7), generator=gen, dtype=torch.int32)
    ids[0, 0] = 0
    ids[1, 6] = 49
    f.case("tokens", {}, ids=ids, table=table, y=F.embedding(ids.long(), table))
    return f


def main():
    torch.manual_seed(0)
    os.makedirs(OUT, exist_ok=True)
    total = 0
    for make in [conv2d, linear, matmul, group_norm, layer_norm, softmax, attention, unary, geglu,
                 binary, scale, concat, upsample, upsample_size, timestep, embedding]:
        f = make()
        size = f.write()
        total += size
        print(f"{f.op:20s} {len(f.cases)} cases {size:8d} bytes")
    print(f"total {total} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
