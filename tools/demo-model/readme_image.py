"""tools/demo-model/readme_image.py - the picture in README.md: what the
built-in demo model draws with `tessera generate`, and a preview strip of one
image forming.

Why it is a script: the README image must come from the C engine and the
committed model, and be remade whenever either changes, by one command.  It
runs `tessera generate` (default settings, one thread) for a few prompts,
one of them with --preview-dir, and lays the results out with Pillow.

Usage: python tools/demo-model/readme_image.py --tessera build/bin/tessera \
           [--model models/demo] [--out docs/images/demo.png]
"""

import argparse
import os
import subprocess
import tempfile

from PIL import Image, ImageDraw

PROMPTS = [
    ("a large red circle in the centre on a white background", 101),
    ("a small yellow star in the top left corner on a blue background", 102),
    ("a green triangle on the right on black", 103),
    ("two purple squares on an orange background", 104),
    ("a large white ring on the left on a purple background", 105),
    ("a small cyan cross at the bottom on a red background", 106),
    ("a large black square at the top on a yellow background", 107),
]
FORMING = ("a large pink square in the bottom right corner on a cyan background", 7)
PREVIEW_STEPS = [1, 4, 8, 12, 18, 30]
CELL = 160  # pixels per image in the figure


def generate(a, prompt, seed, out, preview_dir=None):
    cmd = [a.tessera, "--log-level", "warn", "generate", "--model", a.model,
           "--prompt", prompt, "--seed", str(seed), "--threads", "1", "--quiet",
           "--output", out]
    if preview_dir:
        cmd += ["--preview-dir", preview_dir]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def wrap(text, width=26):
    lines, cur = [], ""
    for w in text.split():
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = (cur + " " + w).strip()
    return lines + [cur]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", default="build/bin/tessera")
    ap.add_argument("--model", default="models/demo")
    ap.add_argument("--out", default="docs/images/demo.png")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tessera-readme-")
    text_h = 52
    cols = max(len(PROMPTS), len(PREVIEW_STEPS) + 1)
    fig = Image.new("RGB", (cols * (CELL + 8) + 8, 2 * (CELL + text_h + 8) + 8), "white")
    d = ImageDraw.Draw(fig)
    for i, (prompt, seed) in enumerate(PROMPTS):
        path = os.path.join(tmp, f"p{i}.png")
        generate(a, prompt, seed, path)
        x = 8 + i * (CELL + 8)
        fig.paste(Image.open(path).convert("RGB").resize((CELL, CELL), Image.NEAREST), (x, 8))
        for k, line in enumerate(wrap(f'"{prompt}"')):
            d.text((x, CELL + 12 + 12 * k), line, fill="black")
    prompt, seed = FORMING
    pdir = os.path.join(tmp, "previews")
    final = os.path.join(tmp, "forming.png")
    generate(a, prompt, seed, final, pdir)
    y = CELL + text_h + 16
    frames = [(os.path.join(pdir, f"image0-step{s:03d}.png"), f"preview, step {s}")
              for s in PREVIEW_STEPS] + [(final, "final image")]
    for i, (path, label) in enumerate(frames):
        x = 8 + i * (CELL + 8)
        fig.paste(Image.open(path).convert("RGB").resize((CELL, CELL), Image.NEAREST), (x, y))
        d.text((x, y + CELL + 4), label, fill="black")
    # The previews are latent-sized: 1/8 of the image for an 8x-down VAE, 1/4
    # for the v2 demo model's 4x-down one; say which, from the files.
    factor = Image.open(final).width // Image.open(frames[0][0]).width
    d.text((8, y + CELL + 20),
           f'forming: "{prompt}" (linear latent previews, 1/{factor} size)', fill="black")
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    fig.save(a.out, optimize=True)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
