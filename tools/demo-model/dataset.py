"""tools/demo-model/dataset.py - synthetic captioned shapes for Tessera's demo model.

Why it is built this way: the demo model must be trained here, from nothing,
on a 2-core CPU in under an hour, and its quality must be checkable by a
script without a human looking at images.  So the data is a closed world of
flat-coloured shapes on plain backgrounds, laid out on a 3x3 grid of named
regions, with captions in varied English that name colour, shape, size,
position and background.  Everything a caption says can be measured back from
pixels (score.py), and a set of held-out (colour, region, background) triples
never occurs in training, so the held-out prompts test composition rather than
memory.

Every image is a pure function of (seed, index): `sample(i)` always returns
the same picture and caption, so training is reproducible without storing the
data set.  Images are drawn at 2x and box-filtered down for soft edges.

Pinned: Pillow 12/13, numpy 2.3.4 (see tools/setup-venv.sh).

Usage:
    python tools/demo-model/dataset.py --heldout tools/demo-model/heldout.json
    python tools/demo-model/dataset.py --preview out/demo-preview --count 16
"""

import argparse
import json
import math
import os
import random

import numpy as np
from PIL import Image, ImageDraw

SIZE = 128  # output resolution in pixels
SS = 2      # supersampling factor for anti-aliased edges
SEED = 1234

# Palette: names -> RGB.  Chosen far apart in RGB so that score.py can
# classify each pixel to its nearest palette entry.
COLOURS = {
    "red": (220, 30, 30),
    "green": (30, 170, 50),
    "blue": (35, 70, 225),
    "yellow": (245, 225, 40),
    "orange": (245, 135, 20),
    "purple": (135, 45, 190),
    "pink": (250, 135, 200),
    "cyan": (40, 215, 225),
    "white": (245, 245, 245),
    "black": (15, 15, 15),
}
COLOUR_NAMES = list(COLOURS)
SHAPES = ["circle", "square", "triangle", "star", "ring", "cross"]
PLURAL = {s: s + "s" for s in SHAPES}
PLURAL["cross"] = "crosses"

# 3x3 grid; (col, row) with 0..2.
REGIONS = {
    "top left": (0, 0), "top": (1, 0), "top right": (2, 0),
    "left": (0, 1), "centre": (1, 1), "right": (2, 1),
    "bottom left": (0, 2), "bottom": (1, 2), "bottom right": (2, 2),
}
REGION_NAMES = list(REGIONS)

CELL = SIZE / 3.0
RADIUS = {"large": 19.0, "small": 11.0}  # shape half-extent in pixels

# Recipe knobs (train.py --recipe sets them; the defaults are v1's, so that
# v1's images and captions come out bit for bit): the share of two-shape
# scenes, and the share of captions from the free word-order grammar
# (_caption_free; v1 has none, and then draws no random number for it).
TWO_SHARE = 0.35
FREE_SHARE = 0.0
# Relative frequencies of SHAPES in the scenes, or None for uniform (v1 and
# the v2 recipe until session 27 draw rng.choice(SHAPES); weights draw
# rng.choices, another stream, so they make another data set).
SHAPE_WEIGHTS = None
JITTER = 3.0                             # centre jitter in pixels
# When True, every "two X" caption names both places (the draw that decides
# it still happens, so the other captions are unchanged); off: about half do.
PAIR_PLACES = False
# When True, a single shape's caption leaves its place out only when the
# shape is in the centre (the same draw decides it, so every other caption is
# unchanged): a caption without a place then means the centre, instead of
# "anywhere", which spread the pairs' layout map (docs/demo-model-log.md,
# session 24); off: 10% of single shapes' captions name no place.
SINGLE_PLACES = False

# Ways to say each region in a caption ("... {phrase}").
REGION_PHRASES = {
    "top left": ["in the top left corner", "in the top left", "at the top left",
                 "in the upper left corner"],
    "top right": ["in the top right corner", "in the top right", "at the top right",
                  "in the upper right corner"],
    "bottom left": ["in the bottom left corner", "in the bottom left", "at the bottom left",
                    "in the lower left corner"],
    "bottom right": ["in the bottom right corner", "in the bottom right",
                     "at the bottom right", "in the lower right corner"],
    "top": ["at the top", "at the top of the image", "near the top"],
    "bottom": ["at the bottom", "at the bottom of the image", "near the bottom"],
    "left": ["on the left", "at the left", "on the left side"],
    "right": ["on the right", "at the right", "on the right side"],
    "centre": ["in the centre", "in the center", "in the middle"],
}


def region_centre(region):
    col, row = REGIONS[region]
    return ((col + 0.5) * CELL, (row + 0.5) * CELL)


def heldout_triples(n=36, seed=SEED):
    """(colour, region, background) triples that never appear in training.

    Chosen by a fixed seed so that every colour, region and background is still
    seen many times in training, only never in these exact combinations."""
    rng = random.Random(seed * 7 + 1)
    out = []
    seen = set()
    while len(out) < n:
        c = rng.choice(COLOUR_NAMES)
        b = rng.choice(COLOUR_NAMES)
        r = REGION_NAMES[len(out) % len(REGION_NAMES)]  # every region covered
        if c == b or (c, r, b) in seen:
            continue
        seen.add((c, r, b))
        out.append((c, r, b))
    return out


HELDOUT = heldout_triples()
HELDOUT_SET = set(HELDOUT)


def heldout_prompts():
    """Prompts for score.py: one large solid shape per held-out triple."""
    rng = random.Random(SEED * 11 + 3)
    items = []
    for i, (c, r, b) in enumerate(HELDOUT):
        shape = ["circle", "square"][i % 2]
        phrase = REGION_PHRASES[r][0]
        prompt = f"a large {c} {shape} {phrase} on {_article(b)} {b} background"
        items.append({"prompt": prompt, "colour": c, "region": r, "background": b,
                      "shape": shape, "size": "large", "seed": rng.randrange(1 << 31)})
    return items


# ---------------------------------------------------------------- drawing

def _star_points(cx, cy, r, rot):
    pts = []
    for k in range(10):
        rr = r if k % 2 == 0 else r * 0.45
        a = rot + k * math.pi / 5 - math.pi / 2
        pts.append((cx + rr * math.cos(a), cy + rr * math.sin(a)))
    return pts


def draw_shape(d, shape, cx, cy, r, fill, outline=None):
    """Draws one shape at supersampled coordinates onto ImageDraw `d`."""
    ow = int(round(3 * SS)) if outline is not None else 0
    if shape == "circle":
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill, outline=outline, width=ow)
    elif shape == "square":
        s = r * 0.9
        d.rectangle([cx - s, cy - s, cx + s, cy + s], fill=fill, outline=outline, width=ow)
    elif shape == "triangle":
        pts = [(cx, cy - r), (cx + r * 0.95, cy + r * 0.8), (cx - r * 0.95, cy + r * 0.8)]
        d.polygon(pts, fill=fill, outline=outline, width=ow)
    elif shape == "star":
        d.polygon(_star_points(cx, cy, r * 1.05, 0.0), fill=fill, outline=outline, width=ow)
    elif shape == "ring":
        # Rings are never outlined (the outline would read as a second ring).
        d.ellipse([cx - r, cy - r, cx + r, cy + r], outline=fill, width=max(int(r * 0.38), 2))
    elif shape == "cross":
        t = r * 0.36
        if outline is not None:
            d.rectangle([cx - r - ow, cy - t - ow, cx + r + ow, cy + t + ow], fill=outline)
            d.rectangle([cx - t - ow, cy - r - ow, cx + t + ow, cy + r + ow], fill=outline)
        d.rectangle([cx - r, cy - t, cx + r, cy + t], fill=fill)
        d.rectangle([cx - t, cy - r, cx + t, cy + r], fill=fill)
    else:
        raise ValueError(f"dataset: unknown shape {shape!r}")


def _jit(rgb, rng, amount=10):
    return tuple(int(min(255, max(0, v + rng.randint(-amount, amount)))) for v in rgb)


def render(scene, rng):
    """Renders a scene dict to a SIZE x SIZE RGB uint8 array."""
    big = SIZE * SS
    img = Image.new("RGB", (big, big), _jit(COLOURS[scene["background"]], rng))
    d = ImageDraw.Draw(img)
    for sh in scene["shapes"]:
        cx, cy = region_centre(sh["region"])
        cx += rng.uniform(-JITTER, JITTER)
        cy += rng.uniform(-JITTER, JITTER)
        r = RADIUS[sh["size"]] * rng.uniform(0.92, 1.05)
        outline = _jit(COLOURS[sh["outline"]], rng) if sh.get("outline") else None
        draw_shape(d, sh["shape"], cx * SS, cy * SS, r * SS, _jit(COLOURS[sh["colour"]], rng),
                   outline)
    img = img.resize((SIZE, SIZE), Image.BOX)
    return np.asarray(img, dtype=np.uint8)


# ---------------------------------------------------------------- scenes and captions

def _article(word):
    return "an" if word[0] in "aeiou" else "a"


def _shape(rng):
    if SHAPE_WEIGHTS is None:
        return rng.choice(SHAPES)
    return rng.choices(SHAPES, SHAPE_WEIGHTS)[0]


def _scene(rng):
    bg = rng.choice(COLOUR_NAMES)
    n = 1 if rng.random() < 1.0 - TWO_SHARE else 2
    shapes = []
    if n == 2 and rng.random() < 0.5:
        # "two green stars": same colour, shape and size in two regions.
        c = rng.choice([x for x in COLOUR_NAMES if x != bg])
        s = _shape(rng)
        size = rng.choice(["small", "large"])
        regs = rng.sample(REGION_NAMES, 2)
        for r in regs:
            shapes.append({"shape": s, "colour": c, "size": size, "region": r})
        return {"background": bg, "shapes": shapes, "pair": True}
    regs = rng.sample(REGION_NAMES, n)
    for r in regs:
        c = rng.choice([x for x in COLOUR_NAMES if x != bg])
        sh = {"shape": _shape(rng), "colour": c,
              "size": "large" if rng.random() < 0.6 else "small", "region": r}
        if sh["shape"] != "ring" and rng.random() < 0.12:
            sh["outline"] = rng.choice([x for x in COLOUR_NAMES if x not in (bg, c)])
        shapes.append(sh)
    return {"background": bg, "shapes": shapes, "pair": False}


def _bg_phrase(bg, rng):
    a = _article(bg)
    return rng.choice([f"on {a} {bg} background", f"on {bg}", f"against {a} {bg} background",
                       f"on a plain {bg} background", f"with {a} {bg} background"])


def _shape_phrase(sh, rng, with_size=None, with_region=True, facts=None):
    words = []
    if with_size is None:
        with_size = rng.random() < 0.75
    if with_size:
        words.append(sh["size"])
    words += [sh["colour"], sh["shape"]]
    np_ = " ".join(words)
    np_ = f"{_article(np_)} {np_}"
    if sh.get("outline"):
        np_ += rng.choice([f" with a {sh['outline']} outline", f" outlined in {sh['outline']}"])
    if with_region:
        np_ += " " + rng.choice(REGION_PHRASES[sh["region"]])
    if facts is not None:
        facts["shapes"].append({"colour": sh["colour"], "shape": sh["shape"],
                                "size": sh["size"] if with_size else None,
                                "region": sh["region"] if with_region else None})
    return np_


# v2: a free word-order grammar, used for FREE_SHARE of all captions.
# v1's templates put the shape first, the size before the colour and the
# background last; prompts written any other way lost 27 points of colour
# and place (docs/demo-model.md, "v2").  So clauses are shuffled, articles
# vary (a/an, the, none), the size may follow the noun, and places come with
# their synonyms (upper/lower, center/centre/middle) with or without a
# preposition.  It is written independently of captions_eval.py, which
# training never calls.
PLACE_WORDS = {
    "top left": ["top left", "upper left", "top left corner", "upper left corner"],
    "top right": ["top right", "upper right", "top right corner", "upper right corner"],
    "bottom left": ["bottom left", "lower left", "bottom left corner", "lower left corner"],
    "bottom right": ["bottom right", "lower right", "bottom right corner",
                     "lower right corner"],
    "top": ["top", "top of the image", "top edge", "upper middle"],
    "bottom": ["bottom", "bottom of the image", "bottom edge", "lower middle"],
    "left": ["left", "left side", "left edge", "left of the image"],
    "right": ["right", "right side", "right edge", "right of the image"],
    "centre": ["centre", "center", "middle", "centre of the image", "center of the image",
               "middle of the image"],
}


def _det(word, rng):
    t = rng.random()
    return f"{_article(word)} " if t < 0.5 else ("the " if t < 0.7 else "")


def _place_free(region, rng):
    w = rng.choice(PLACE_WORDS[region])
    t = rng.random()
    if t < 0.2:
        return w  # bare: "upper left"
    prep = rng.choice(["in", "at", "near"] + (["on"] if region in ("left", "right") else []))
    return f"{prep} {'the ' if rng.random() < 0.8 else ''}{w}"


def _bg_free(bg, rng):
    t = rng.randrange(8)
    # a form per t; only the chosen one runs, so the rng is drawn as before
    forms = (lambda: f"{bg} background",
             lambda: f"plain {bg} background",
             lambda: f"on {_det(bg, rng)}{bg} background",
             lambda: f"against {bg}",
             lambda: f"against {_det(bg, rng)}{bg} background",
             lambda: f"with {_det(bg, rng)}{bg} background",
             lambda: f"on {bg}",
             lambda: f"over {_det(bg, rng)}{bg} background")
    return forms[t]()


def _np_free(sh, rng, with_size):
    """"a large red star", "the red star, large," or "red star"."""
    after = with_size and rng.random() < 0.3
    words = ([sh["size"]] if with_size and not after else []) + [sh["colour"], sh["shape"]]
    np_ = " ".join(words)
    np_ = f"{_det(np_, rng)}{np_}"
    return f"{np_}, {sh['size']}," if after else np_


def _join(parts, rng, seps=(", ", " ", ", ")):
    out = parts[0]
    for p in parts[1:]:
        out += rng.choice(seps) + p
    return out.replace(",,", ",").strip(" ,")


def _single_placed(s):
    """Whether SINGLE_PLACES keeps the place of a single shape `s` whose
    caption would leave it out."""
    return SINGLE_PLACES and s["region"] != "centre"


def _caption_free(scene, rng, facts):
    bg = scene["background"]
    sh = scene["shapes"]
    if scene["pair"]:
        s = sh[0]
        with_size = rng.random() < 0.6
        with_region = rng.random() < 0.6 or PAIR_PLACES
        noun = f"two {s['size'] + ' ' if with_size else ''}{s['colour']} {PLURAL[s['shape']]}"
        for x in sh:
            facts["shapes"].append({"colour": x["colour"], "shape": x["shape"],
                                    "size": x["size"] if with_size else None,
                                    "region": x["region"] if with_region else None})
        parts = [noun]
        if with_region:
            p1, p2 = _place_free(sh[0]["region"], rng), _place_free(sh[1]["region"], rng)
            parts.append(rng.choice([f"{p1} and {p2}", f"one {p1} and one {p2}"]))
            if rng.random() < 0.3:
                parts.reverse()
        parts.insert(rng.randrange(len(parts) + 1), _bg_free(bg, rng))
        return _join(parts, rng)
    clauses = []
    for s in sh:
        with_size = rng.random() < 0.75
        with_region = len(sh) == 2 or rng.random() < 0.9 or _single_placed(s)
        facts["shapes"].append({"colour": s["colour"], "shape": s["shape"],
                                "size": s["size"] if with_size else None,
                                "region": s["region"] if with_region else None})
        np_ = _np_free(s, rng, with_size)
        if s.get("outline"):
            np_ += f" outlined in {s['outline']}"
        if with_region:
            place = _place_free(s["region"], rng)
            np_ = f"{place}, {np_}" if rng.random() < 0.25 else f"{np_} {place}"
        clauses.append(np_)
    body = clauses[0] if len(clauses) == 1 else f"{clauses[0]} and {clauses[1]}"
    parts = [body]
    parts.insert(rng.randrange(2), _bg_free(bg, rng))
    if len(sh) == 1 and rng.random() < 0.2:
        # "red background and a blue star at the top": "and" between the
        # background and the shape, not only between two shapes (without it
        # the text encoder read such a caption's place as the centre's)
        cap = _join(parts, rng, seps=(" and ", ", and "))
    else:
        cap = _join(parts, rng)
    t = rng.random() if parts[0] is body and not body.startswith(("at ", "in ", "near ", "on "))\
        else 1.0
    if t < 0.1:
        cap = f"there is {cap}"
    elif t < 0.2:
        cap = f"{rng.choice(['an image of', 'image of', 'a picture of'])} {cap}"
    return cap


def caption(scene, rng, facts=None, free=None):
    """A fresh English caption for `scene`.  If `facts` is a dict, it is
    filled with what the caption actually says: {"background": name,
    "shapes": [{"colour", "shape", "size" or None, "region" or None}, ...]}
    (size/region None where the caption leaves them out), and "two": whether
    it says "two X".  FREE_SHARE of all captions (or as `free` says) use the
    free word-order grammar."""
    bg = scene["background"]
    sh = scene["shapes"]
    if facts is None:
        facts = {}
    facts.clear()
    facts.update({"background": bg, "shapes": [], "two": bool(scene["pair"])})
    if free is None:
        free = FREE_SHARE > 0 and rng.random() < FREE_SHARE
    if free:
        return _caption_free(scene, rng, facts)
    if scene["pair"]:
        s = sh[0]
        with_size = rng.random() < 0.5
        size = (s["size"] + " ") if with_size else ""
        noun = f"two {size}{s['colour']} {PLURAL[s['shape']]}"
        with_region = rng.random() >= 0.5 or PAIR_PLACES
        for x in sh:
            facts["shapes"].append({"colour": x["colour"], "shape": x["shape"],
                                    "size": x["size"] if with_size else None,
                                    "region": x["region"] if with_region else None})
        if not with_region:
            return f"{noun} {_bg_phrase(bg, rng)}"
        return (f"{noun}, one {rng.choice(REGION_PHRASES[s['region']])} and one "
                f"{rng.choice(REGION_PHRASES[sh[1]['region']])}, {_bg_phrase(bg, rng)}")
    if len(sh) == 1:
        s = sh[0]
        t = rng.random()
        if t < 0.45:
            return f"{_shape_phrase(s, rng, facts=facts)} {_bg_phrase(bg, rng)}"
        if t < 0.65:
            return f"{_shape_phrase(s, rng, facts=facts)}, {bg} background"
        if t < 0.8:
            return f"there is {_shape_phrase(s, rng, facts=facts)} {_bg_phrase(bg, rng)}"
        if t < 0.9:
            return f"{bg} background with {_shape_phrase(s, rng, facts=facts)}"
        return (f"{_shape_phrase(s, rng, with_region=_single_placed(s), facts=facts)} "
                f"{_bg_phrase(bg, rng)}")
    a, b = sh
    join = rng.choice([" and ", ", and "])
    first = _shape_phrase(a, rng, facts=facts)
    return f"{first}{join}{_shape_phrase(b, rng, facts=facts)} {_bg_phrase(bg, rng)}"


def _allowed(scene):
    return all((s["colour"], s["region"], scene["background"]) not in HELDOUT_SET
               for s in scene["shapes"])


def sample(index, seed=SEED):
    """Returns (image uint8 HxWx3, caption str, scene dict) for `index`.

    The caption is drawn before the render from the same stream, so any
    change to the caption grammar moves the render's jitter too (kept so
    that v1's images stay bit-identical); train.py's data fingerprint then
    refuses latents cached before the change."""
    rng = random.Random(seed * 1_000_003 + index)
    while True:
        scene = _scene(rng)
        if _allowed(scene):
            break
    cap = caption(scene, rng)
    img = render(scene, rng)
    return img, cap, scene


def vocabulary():
    """Every word any caption or held-out prompt can use (for the tokenizer)."""
    words = set()
    rng = random.Random(99)
    for i in range(4000):
        _, cap, _ = sample_caption_only(i, rng)
        words.update(cap.replace(",", " , ").split())
    for it in heldout_prompts():
        words.update(it["prompt"].split())
    return sorted(words)


def sample_caption_only(index, rng):
    scene = _scene(rng)
    return None, caption(scene, rng), scene


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heldout", help="write held-out prompts JSON here")
    ap.add_argument("--preview", help="write example PNGs + captions.txt into this folder")
    ap.add_argument("--count", type=int, default=16)
    a = ap.parse_args()
    if a.heldout:
        with open(a.heldout, "w") as f:
            json.dump({"note": "held-out (colour, region, background) triples never seen in "
                               "training; written by tools/demo-model/dataset.py",
                       "image_size": SIZE,
                       "palette": {c: list(v) for c, v in COLOURS.items()},
                       "region_centres": {r: list(region_centre(r)) for r in REGION_NAMES},
                       "prompts": heldout_prompts()}, f, indent=1)
            f.write("\n")
    if a.preview:
        os.makedirs(a.preview, exist_ok=True)
        with open(os.path.join(a.preview, "captions.txt"), "w") as f:
            for i in range(a.count):
                img, cap, _ = sample(i)
                Image.fromarray(img).save(os.path.join(a.preview, f"{i:03d}.png"))
                f.write(f"{i:03d}.png\t{cap}\n")


if __name__ == "__main__":
    main()
