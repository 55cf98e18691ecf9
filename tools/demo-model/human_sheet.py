"""tools/demo-model/human_sheet.py - generated images labelled by eye, as one
sprite sheet, for testing the shape scorer on what the model actually draws.

Why: the shape scorer (score.py and its C port, tests/demo/demo_shapes.c)
is an instrument; its thresholds come from the renderer's clean images
(shape_sheet.py), but the bar is taken on generated ones, whose edges wobble.
A scorer that misnames what a person sees would make the bar measure the
scorer, not the model.  So a fixed set of generated images is labelled by a
person, and demo_shape_scorer_human holds the C scorer to those labels.

How the set was made (session 21): 48 prompts, 8 per shape, in the caption
vocabulary ("a large {colour} {shape} {place}, {background} background"),
random colours, places and backgrounds (seed 2026) and seeds 700-747, drawn
by the model committed then with `tessera generate` at its defaults.  The
tiles were shown in a shuffled order (seed 99), without their prompts, and
each was labelled with the shape a person sees in the named colour's largest
region, before either scorer rule was run on them.  The label matched the
prompt on all 48.

  --make LABELS   generate the images (--bin, --model), lay them out in the
                  shuffled order and write <out>.png and <out>.json, with
                  LABELS (48 words, one per tile in sheet order, lines from
                  '#' on skipped: human_labels.txt) as each
                  tile's "human" label and score.py's verdict ("python")
  --rescore       score.py's verdicts again on the existing <out>.png
  --from-images LIST
                  a sheet of validation images already generated (validate.py
                  run), with the labels in LIST (session 29's star/cross
                  sheet, tests/data/demo/human_sheet_stars: see the log)

The sheet is lossless RGB: a 256-colour sheet (as shape_sheet_vae.png)
changed 3 of the 48 verdicts, and the labels are of these pixels.

Usage: python tools/demo-model/human_sheet.py --make tools/demo-model/human_labels.txt
           [--bin build/bin/tessera] [--model models/demo]
           [--out tests/data/demo/human_sheet]
       python tools/demo-model/human_sheet.py --rescore
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dataset  # noqa: E402
from shape_sheet import write_verdicts  # noqa: E402

TILE = 128
COLS = 8
PER_SHAPE = 8
COLOURS = ["red", "green", "blue", "yellow", "orange", "purple", "pink", "cyan", "white",
           "black"]
PLACES = ["in the center", "at the top left", "at the top right", "at the bottom left",
          "at the bottom right", "on the left", "on the right", "at the top", "at the bottom"]


def prompts():
    """The 48 (shape, colour, background, prompt, seed), in generation order."""
    rng = random.Random(2026)
    out = []
    for s in dataset.SHAPES:
        for _ in range(PER_SHAPE):
            c = rng.choice(COLOURS)
            b = rng.choice([x for x in COLOURS if x != c])
            p = rng.choice(PLACES)
            out.append({"shape": s, "colour": c, "background": b,
                        "prompt": f"a large {c} {s} {p}, {b} background", "seed": 700 + len(out)})
    return out


def check_labels(labels, what):
    bad = [w for w in labels if w not in dataset.SHAPES]
    if bad:
        sys.exit(f"human_sheet: {what}: unknown labels {bad}")


def build_sheet(pngs):
    """The TILE x TILE images at the paths `pngs` laid out COLS to a row, in
    order; exits on an image of another size."""
    rows = (len(pngs) + COLS - 1) // COLS
    sheet = np.zeros((rows * TILE, COLS * TILE, 3), dtype=np.uint8)
    for pos, png in enumerate(pngs):
        img = np.asarray(Image.open(png).convert("RGB"))
        if img.shape != (TILE, TILE, 3):
            sys.exit(f"human_sheet: {png} is {img.shape}, want {TILE}x{TILE}")
        y, x = divmod(pos, COLS)
        sheet[y * TILE:(y + 1) * TILE, x * TILE:(x + 1) * TILE] = img
    return sheet


def make(a):
    with open(a.make) as f:
        labels = [w for line in f if not line.startswith("#") for w in line.split()]
    items = prompts()
    if len(labels) != len(items):
        sys.exit(f"human_sheet: {a.make} has {len(labels)} labels, want {len(items)}")
    check_labels(labels, a.make)
    order = list(range(len(items)))
    random.Random(99).shuffle(order)
    with tempfile.TemporaryDirectory() as tmp:
        pngs = []
        for i in order:
            it = items[i]
            pngs.append(os.path.join(tmp, f"{i}.png"))
            subprocess.run([a.bin, "generate", "--model", a.model, "--prompt", it["prompt"],
                            "--seed", str(it["seed"]), "--output", pngs[-1]],
                           check=True, capture_output=True)
        sheet = build_sheet(pngs)
    tiles = [dict(items[i], human=labels[pos]) for pos, i in enumerate(order)]
    Image.fromarray(sheet).save(a.out + ".png", optimize=True)
    write(a.out, sheet, tiles, f"{a.model} images, labelled by eye (tools/demo-model/"
          "human_sheet.py says how); written by human_sheet.py --make")


def from_images(a):
    """A sheet of already generated validation images, labelled by eye:
    --from-images LIST (JSON: [{"model", "seed_set", "index", "human"}], in
    sheet order) takes --val-dir's <model>-<seed_set>/<index>.png and the
    prompt facts of val<seed_set>.json (validate.py run writes both)."""
    with open(a.from_images) as f:
        picks = json.load(f)
    check_labels([p["human"] for p in picks], a.from_images)
    pngs, tiles = [], []
    for p in picks:
        with open(os.path.join(a.val_dir, f"val{p['seed_set']}.json")) as f:
            it = json.load(f)["prompts"][p["index"]]
        pngs.append(os.path.join(a.val_dir, f"{p['model']}-{p['seed_set']}",
                                 f"{p['index']:03d}.png"))
        tiles.append({"shape": it["shape"], "colour": it["colour"],
                      "background": it["background"], "prompt": it["prompt"],
                      "seed": it["seed"], "source": f"{p['model']} val{p['seed_set']} "
                      f"{p['index']:03d}", "human": p["human"]})
    sheet = build_sheet(pngs)
    Image.fromarray(sheet).save(a.out + ".png", optimize=True)
    write(a.out, sheet, tiles, a.note)


def write(out, sheet, tiles, note):
    # measure_v2 wants a region; the place is not scored here
    res = write_verdicts(out + ".json", sheet, tiles, TILE, COLS, note,
                         measured=lambda it: dict(it, regions=["centre"]))
    agree = sum(it["python"]["shape"] == it["human"] for it in res)
    print(f"{len(res)} tiles; score.py agrees with the labels on {agree}; "
          f"{os.path.getsize(out + '.png')} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--make", metavar="LABELS")
    ap.add_argument("--rescore", action="store_true")
    ap.add_argument("--bin", default="build/bin/tessera")
    ap.add_argument("--model", default="models/demo")
    ap.add_argument("--out", default="tests/data/demo/human_sheet")
    ap.add_argument("--from-images", metavar="LIST",
                    help="a sheet of validation images already generated (see from_images)")
    ap.add_argument("--val-dir", default="out/val")
    ap.add_argument("--note", default="validation images labelled by eye; written by "
                    "human_sheet.py --from-images")
    a = ap.parse_args()
    if a.make:
        return make(a)
    if a.from_images:
        return from_images(a)
    if a.rescore:
        with open(a.out + ".json") as f:
            facts = json.load(f)
        sheet = np.asarray(Image.open(a.out + ".png").convert("RGB"))
        return write(a.out, sheet, facts["tiles"], facts["note"])
    ap.error("--make LABELS, --from-images LIST or --rescore")


if __name__ == "__main__":
    main()
