#!/usr/bin/env python3
"""tools/bench/make_sd15_unet.py - an SD 1.5-shaped UNet with random fp16 weights, no torch.

Why: `tessera bench unet` needs the real shapes (859.5M parameters) to say
anything about speed and memory, and tools/make_fullsize_models.py needs a
torch/diffusers venv that a machine may not have.  This writes the same
tensors (diffusers' names and shapes for the published SD 1.5 UNet config)
with pure Python: small random fp16 values (|w| < 0.06, never inf or NaN),
tiled from one random block, so it takes seconds.  The other components
(text encoder, VAE, tokenizer, scheduler) are copied from the tiny test
model, so the folder opens as a model; only the UNet is full size.

Usage: python3 tools/bench/make_sd15_unet.py OUT_DIR
       build/bin/tessera bench unet --model OUT_DIR --size 256 --threads 1
"""
import json, os, random, shutil, struct, sys
from array import array
out = sys.argv[1]
src = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'tests', 'data', 'models', 'sd1')
if os.path.exists(out): shutil.rmtree(out)
shutil.copytree(src, out)
cfg = json.load(open(f'{src}/unet/config.json'))
cfg.update({"attention_head_dim": 8, "block_out_channels": [320, 640, 1280, 1280], "cross_attention_dim": 768,
            "down_block_types": ["CrossAttnDownBlock2D"] * 3 + ["DownBlock2D"], "up_block_types": ["UpBlock2D"] + ["CrossAttnUpBlock2D"] * 3,
            "layers_per_block": 2, "norm_num_groups": 32, "sample_size": 64})
T = []
def t(name, *shape): T.append((name, shape))
def resnet(p, cin, cout):
    t(p+'norm1.weight', cin); t(p+'norm1.bias', cin); t(p+'conv1.weight', cout, cin, 3, 3); t(p+'conv1.bias', cout)
    t(p+'time_emb_proj.weight', cout, 1280); t(p+'time_emb_proj.bias', cout)
    t(p+'norm2.weight', cout); t(p+'norm2.bias', cout); t(p+'conv2.weight', cout, cout, 3, 3); t(p+'conv2.bias', cout)
    if cin != cout: t(p+'conv_shortcut.weight', cout, cin, 1, 1); t(p+'conv_shortcut.bias', cout)
def attn(p, c):
    t(p+'norm.weight', c); t(p+'norm.bias', c); t(p+'proj_in.weight', c, c, 1, 1); t(p+'proj_in.bias', c)
    b = p + 'transformer_blocks.0.'
    for n in ('norm1', 'norm2', 'norm3'): t(b+n+'.weight', c); t(b+n+'.bias', c)
    for a, kv in (('attn1', c), ('attn2', 768)):
        t(b+a+'.to_q.weight', c, c); t(b+a+'.to_k.weight', c, kv); t(b+a+'.to_v.weight', c, kv)
        t(b+a+'.to_out.0.weight', c, c); t(b+a+'.to_out.0.bias', c)
    t(b+'ff.net.0.proj.weight', 8*c, c); t(b+'ff.net.0.proj.bias', 8*c); t(b+'ff.net.2.weight', c, 4*c); t(b+'ff.net.2.bias', c)
    t(p+'proj_out.weight', c, c, 1, 1); t(p+'proj_out.bias', c)
boc = cfg['block_out_channels']
t('time_embedding.linear_1.weight', 1280, 320); t('time_embedding.linear_1.bias', 1280)
t('time_embedding.linear_2.weight', 1280, 1280); t('time_embedding.linear_2.bias', 1280)
t('conv_in.weight', 320, 4, 3, 3); t('conv_in.bias', 320)
skips = [320]; cur = 320
for i in range(4):
    for j in range(2):
        resnet(f'down_blocks.{i}.resnets.{j}.', cur, boc[i]); cur = boc[i]
        if i < 3: attn(f'down_blocks.{i}.attentions.{j}.', cur)
        skips.append(cur)
    if i < 3:
        t(f'down_blocks.{i}.downsamplers.0.conv.weight', cur, cur, 3, 3); t(f'down_blocks.{i}.downsamplers.0.conv.bias', cur); skips.append(cur)
resnet('mid_block.resnets.0.', cur, 1280); attn('mid_block.attentions.0.', 1280); resnet('mid_block.resnets.1.', 1280, 1280)
for i in range(4):
    co = boc[3 - i]
    for j in range(3):
        cs = skips.pop(); resnet(f'up_blocks.{i}.resnets.{j}.', cur + cs, co); cur = co
        if i > 0: attn(f'up_blocks.{i}.attentions.{j}.', co)
    if i < 3: t(f'up_blocks.{i}.upsamplers.0.conv.weight', co, co, 3, 3); t(f'up_blocks.{i}.upsamplers.0.conv.bias', co)
t('conv_norm_out.weight', 320); t('conv_norm_out.bias', 320); t('conv_out.weight', 4, 320, 3, 3); t('conv_out.bias', 4)
T.sort()
hdr = {}; off = 0
for name, shape in T:
    n = 1
    for d in shape: n *= d
    hdr[name] = {"dtype": "F16", "shape": list(shape), "data_offsets": [off, off + 2 * n]}; off += 2 * n
h = json.dumps(hdr).encode(); h += b' ' * ((8 - len(h) % 8) % 8)
rnd = random.Random(1)
N = 1 << 22
blk = array('H', [(rnd.getrandbits(1) << 15) | (rnd.randint(5, 10) << 10) | rnd.getrandbits(10) for _ in range(N)]).tobytes()
blk2 = blk + blk
with open(f'{out}/unet/diffusion_pytorch_model.safetensors', 'wb') as f:
    f.write(struct.pack('<Q', len(h))); f.write(h)
    pos = 0
    for name, shape in T:
        left = hdr[name]['data_offsets'][1] - hdr[name]['data_offsets'][0]
        while left:
            k = min(left, len(blk) - 2 * 4096)
            s = (pos * 7919 * 2) % len(blk)
            f.write(blk2[s:s + k]); left -= k; pos += 1
json.dump(cfg, open(f'{out}/unet/config.json', 'w'), indent=2)
print(len(T), 'tensors,', off / 2 / 1e6, 'M params')
