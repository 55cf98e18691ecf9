"""tools/demo-model/shape_sheet.py - the training renderer's own clean images,
as one sprite sheet, for testing the shape scorer without Python.

Why it is built this way: the v2 shape scorer (score.py, and its C port in
tests/demo/demo_shapes.c) must first be shown to name the right shape on the
images the model is trained to imitate; a scorer that misreads clean renders
cannot judge a model.  The renderer is Python (dataset.render), but the ctest
that checks the C scorer (demo_shape_scorer_self) must need no Python, so
this script renders a fixed set of scenes once and stores them compactly:
one PNG sheet of 128x128 tiles (flat colours compress to a few hundred KB)
plus a JSON of each tile's facts.  Tiles: every shape at both sizes on
random backgrounds, colours and places, without outlines (an outline is
drawn over the fill's edge and eats a small star's points: 0/25 small
outlined stars keep a star's geometry in the fill colour, measured), and
"two X" pairs for the region counter.  Deterministic (fixed seed).

With --roundtrip VAE_DIR it also sends the sheet through that VAE (encode
mean, decode), quantizes it to 256 colours, and writes <out>_vae.png and
<out>_vae.json, the latter with
score.py's verdict for every tile ("python": shape, region count, bays,
areas, solidity), so that demo_shape_scorer_ports can hold the C port to the
Python one on blurred images, where the thresholds are actually crossed.

With --rescore it only takes score.py's verdicts again on the existing
<out>_vae.png (no VAE, the pixels unchanged): after a change to the scorer.

Usage: python tools/demo-model/shape_sheet.py [--out tests/data/demo/shape_sheet]
       (writes shape_sheet.png and shape_sheet.json)
       python tools/demo-model/shape_sheet.py --roundtrip models/demo/vae
       python tools/demo-model/shape_sheet.py --rescore
"""

import argparse
import json
import os
import random
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dataset  # noqa: E402

COLS = 12
PER_SHAPE = {"large": 10, "small": 6}  # single-shape tiles per shape and size
PAIRS = 24                             # "two X" tiles


def scenes(seed=4321):
    rng = random.Random(seed)
    out = []
    for shape in dataset.SHAPES:
        for size, n in PER_SHAPE.items():
            for _ in range(n):
                bg = rng.choice(dataset.COLOUR_NAMES)
                c = rng.choice([x for x in dataset.COLOUR_NAMES if x != bg])
                r = rng.choice(dataset.REGION_NAMES)
                out.append({"background": bg, "shapes": [
                    {"shape": shape, "colour": c, "size": size, "region": r}]})
    for i in range(PAIRS):
        bg = rng.choice(dataset.COLOUR_NAMES)
        c = rng.choice([x for x in dataset.COLOUR_NAMES if x != bg])
        shape = dataset.SHAPES[i % len(dataset.SHAPES)]
        size = rng.choice(["large", "small"])
        regs = rng.sample(dataset.REGION_NAMES, 2)
        out.append({"background": bg, "shapes": [
            {"shape": shape, "colour": c, "size": size, "region": r} for r in regs]})
    return out, rng


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "data", "demo",
                                                  "shape_sheet"))
    ap.add_argument("--roundtrip", help="a VAE folder: also write <out>_vae.{png,json}")
    ap.add_argument("--rescore", action="store_true",
                    help="score.py's verdicts again on the existing <out>_vae.png")
    a = ap.parse_args()
    if a.rescore:
        return rescore(a.out)
    if a.roundtrip:
        return roundtrip(a.out, a.roundtrip)
    sc, rng = scenes()
    rows = (len(sc) + COLS - 1) // COLS
    t = dataset.SIZE
    sheet = np.zeros((rows * t, COLS * t, 3), dtype=np.uint8)
    tiles = []
    for i, s in enumerate(sc):
        y, x = divmod(i, COLS)
        sheet[y * t:(y + 1) * t, x * t:(x + 1) * t] = dataset.render(s, rng)
        sh = s["shapes"]
        tiles.append({"shape": sh[0]["shape"], "colour": sh[0]["colour"],
                      "size": sh[0]["size"], "background": s["background"],
                      "regions": [x["region"] for x in sh], "count": len(sh)})
    Image.fromarray(sheet).save(a.out + ".png", optimize=True)
    with open(a.out + ".json", "w") as f:
        json.dump({"note": "clean renders of tools/demo-model/dataset.py, written by "
                           "tools/demo-model/shape_sheet.py; tile i is at column i % cols, "
                           "row i / cols",
                   "tile": t, "cols": COLS, "tiles": tiles}, f, indent=0)
        f.write("\n")
    print(f"{len(tiles)} tiles, {os.path.getsize(a.out + '.png')} bytes")


def roundtrip(out, vae_dir):
    import score
    import train
    from diffusers import AutoencoderKL
    with open(out + ".json") as f:
        facts = json.load(f)
    vae = AutoencoderKL.from_pretrained(vae_dir).float().eval()
    _, rec = train.judge_sheet(vae, out + ".png")
    t, cols = facts["tile"], facts["cols"]
    rows = (len(rec) + cols - 1) // cols
    sheet = np.zeros((rows * t, cols * t, 3), dtype=np.uint8)
    for i in range(len(rec)):
        y, x = divmod(i, cols)
        sheet[y * t:(y + 1) * t, x * t:(x + 1) * t] = rec[i]
    # 256 colours (median cut, no dither): a third of the RGB file's size.
    # The verdicts below are taken on the quantized pixels, which are what the
    # C port reads, so the comparison stays exact.
    pal = Image.fromarray(sheet).quantize(256, method=Image.Quantize.MEDIANCUT,
                                          dither=Image.Dither.NONE)
    sheet = np.asarray(pal.convert("RGB"))
    pal.save(out + "_vae.png", optimize=True)
    tiles = write_verdicts(out + "_vae.json", sheet, facts["tiles"], t, cols,
                           f"{vae_dir} round trip of {os.path.basename(out)}.png and score.py's "
                           "verdicts, written by tools/demo-model/shape_sheet.py --roundtrip")
    print(f"{len(tiles)} tiles, {os.path.getsize(out + '_vae.png')} bytes")


def python_verdict(img, it):
    """score.py's verdict on one tile, as the C port's tests compare it."""
    import score
    m = score.measure_v2(img, it)
    f = m["features"] or {"bays": 0, "area": 0, "filled": 0, "solidity": 0.0, "hull_fill": 0.0,
                          "notch": 0.0}
    return {"shape": m["shape"], "regions": m["regions"], "bays": f["bays"], "area": f["area"],
            "filled": f["filled"], "solidity": f["solidity"], "hull_fill": f["hull_fill"],
            "notch": f["notch"]}


def write_verdicts(path, sheet, facts_tiles, t, cols, note, measured=lambda it: it):
    """Each tile's facts with score.py's verdict on its pixels ("python",
    replacing any earlier one) into the JSON `path`; returns the tiles.
    `measured` gives the item score.py measures a tile as."""
    tiles = []
    for i, it in enumerate(facts_tiles):
        y, x = divmod(i, cols)
        it = {k: v for k, v in it.items() if k != "python"}
        tiles.append(dict(it, python=python_verdict(sheet[y * t:(y + 1) * t, x * t:(x + 1) * t],
                                                    measured(it))))
    with open(path, "w") as f:
        json.dump({"note": note, "tile": t, "cols": cols, "tiles": tiles}, f, indent=0)
        f.write("\n")
    return tiles


def rescore(out):
    with open(out + "_vae.json") as f:
        facts = json.load(f)
    sheet = np.asarray(Image.open(out + "_vae.png").convert("RGB"))
    tiles = write_verdicts(out + "_vae.json", sheet, facts["tiles"], facts["tile"], facts["cols"],
                           facts["note"])
    print(f"{len(tiles)} tiles, {os.path.getsize(out + '_vae.png')} bytes")


if __name__ == "__main__":
    main()
