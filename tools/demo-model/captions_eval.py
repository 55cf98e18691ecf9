"""tools/demo-model/captions_eval.py - a second, independent caption template
set, used only for evaluation, and the v2 held-out prompt file it writes
(tools/demo-model/heldout2.json).

Why it is built this way: issue 15's bars ask that the model follow prompts
"phrased any way the captions allow", not only the phrasing dataset.py
trains on.  So these templates are written separately from dataset.caption()
and training never calls them: other word orders (background first, place
first, size after the noun), the vocabulary's synonyms ("upper"/"lower" for
top/bottom, "center"/"centre"/"middle"), the place without a preposition
("upper left"), articles left out or "the" instead of "a", and "two X"
phrased three new ways.  Every word must already be in the demo tokenizer's
vocabulary (checked here against models/demo/tokenizer/vocab.json), because
an unknown word is a different test.

The prompts: the 36 held-out (colour, place, background) triples of
dataset.HELDOUT, which training never draws whatever the shape, each with
three of the six shapes, large (18 per shape); plus 2 per shape on a green
background, the one background colour the held-out triples lack (those are
new phrasings and seeds, not unseen triples: "heldout_triple": false); plus
24 "two X" prompts (4 per shape) on held-out colour/background pairs.  The
scorers (score.py, tests/demo/test_demo_v2.c) read it.

Usage: python tools/demo-model/captions_eval.py [--out tools/demo-model/heldout2.json]
       [--seed N]   (N other than 2027: a validation set, same layout, new draws)
"""

import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dataset  # noqa: E402

SEED = 2027

# Places as the eval set says them, all within the caption vocabulary.
PLACES = {
    "top left": ["top left", "upper left", "the upper left", "the top left corner",
                 "upper left corner"],
    "top right": ["top right", "upper right", "the upper right", "the top right corner",
                  "upper right corner"],
    "bottom left": ["bottom left", "lower left", "the lower left", "the bottom left corner",
                    "lower left corner"],
    "bottom right": ["bottom right", "lower right", "the lower right",
                     "the bottom right corner", "lower right corner"],
    "top": ["the top", "top", "the top of the image"],
    "bottom": ["the bottom", "bottom", "the bottom of the image"],
    "left": ["the left side", "left side", "the left"],
    "right": ["the right side", "right side", "the right"],
    "centre": ["centre", "center", "the middle", "the centre", "the center", "middle"],
}
PREPS = ["in", "at", "near"]


def _a(word, rng, use=None):
    """An article for `word` ("a"/"an"), or none, at random (or as `use`)."""
    if use is None:
        use = rng.random() < 0.5
    return f"{dataset._article(word)} " if use else ""


def _place(region, rng, bare=False):
    if bare:  # "upper left", not "the upper left" without a preposition
        return rng.choice([p for p in PLACES[region] if not p.startswith("the ")])
    return f"{rng.choice(PREPS)} {rng.choice(PLACES[region])}"


def single_prompt(c, shape, region, bg, rng, t):
    """Template t (0..7) for one large shape."""
    np_ = f"large {c} {shape}"
    if t == 0:
        return f"{bg} background, {_a(np_, rng)}{np_} {_place(region, rng)}"
    if t == 1:
        return f"{_place(region, rng)}, {_a(np_, rng)}{np_} on {_a(bg, rng)}{bg} background"
    if t == 2:
        return f"{_a(np_, rng)}{np_} {_place(region, rng)} on the {bg} background"
    if t == 3:
        return f"{_a(c, rng)}{c} {shape}, large, {_place(region, rng)}, {bg} background"
    if t == 4:
        return f"{np_} {_place(region, rng, bare=True)}, plain {bg} background"
    if t == 5:
        return f"{bg} background and {_a(np_, rng)}{np_} {_place(region, rng)}"
    if t == 6:
        return f"there is {_a(np_, rng, True)}{np_} {_place(region, rng)} against {bg}"
    return f"{_a('image', rng)}image of {_a(np_, rng)}{np_} {_place(region, rng)}, {bg} background"


def two_prompt(c, shape, regions, bg, rng, t):
    """Template t (0..2) for "two X" in two places."""
    noun = f"two large {c} {dataset.PLURAL[shape]}"
    r1, r2 = regions
    if t == 0:
        return f"{bg} background with {noun}, {_place(r1, rng)} and {_place(r2, rng)}"
    if t == 1:
        return (f"{noun} on the {bg} background, one {_place(r1, rng, bare=True)} "
                f"and one {_place(r2, rng, bare=True)}")
    return f"{_place(r1, rng)} and {_place(r2, rng)}, {noun}, {bg} background"


def prompts(seed=SEED):
    """The prompt list; `seed` other than SEED gives a validation set with
    the same structure (the same held-out triples and shapes) but other
    phrasings, second places and image seeds, for choosing settings
    without looking at heldout2.json."""
    rng = random.Random(seed)
    items = []
    for i, (c, r, b) in enumerate(dataset.HELDOUT):
        for k in range(3):
            shape = dataset.SHAPES[(i * 3 + k) % len(dataset.SHAPES)]
            items.append({"kind": "single", "colour": c, "region": r, "background": b,
                          "shape": shape, "heldout_triple": True})
    for k in range(2 * len(dataset.SHAPES)):
        c = rng.choice([x for x in dataset.COLOUR_NAMES if x != "green"])
        items.append({"kind": "single", "colour": c, "region": rng.choice(dataset.REGION_NAMES),
                      "background": "green", "shape": dataset.SHAPES[k % len(dataset.SHAPES)],
                      "heldout_triple": False})
    for k in range(24):
        c, r, b = dataset.HELDOUT[(k * 5) % len(dataset.HELDOUT)]
        r2 = rng.choice([x for x in dataset.REGION_NAMES if x != r])
        items.append({"kind": "two", "colour": c, "regions": [r, r2], "background": b,
                      "shape": dataset.SHAPES[k % len(dataset.SHAPES)], "heldout_triple": True})
    for i, it in enumerate(items):
        if it["kind"] == "single":
            t = i % 8
            it["prompt"] = single_prompt(it["colour"], it["shape"], it["region"],
                                         it["background"], rng, t)
        else:
            t = i % 3
            it["prompt"] = two_prompt(it["colour"], it["shape"], it["regions"],
                                      it["background"], rng, t)
        it["template"] = t
        it["size"] = "large"
        it["seed"] = rng.randrange(1 << 31)
    return items


def whole_words(vocab_path):
    """The words a CLIP BPE vocab.json holds as single tokens ("red</w>")."""
    with open(vocab_path) as f:
        return {k[:-4] for k in json.load(f) if k.endswith("</w>")}


def check(items, vocab_path):
    """Every word is in the tokenizer's vocabulary, and no prompt is a caption
    the training templates produce for a sample of 50000 scenes."""
    vocab = whole_words(vocab_path)
    for it in items:
        for w in it["prompt"].replace(",", " , ").split():
            if w not in vocab:
                raise SystemExit(f"captions_eval: {w!r} is not in {vocab_path}: {it['prompt']}")
    rng = random.Random(7)
    train = {dataset.sample_caption_only(i, rng)[1] for i in range(50000)}
    same = [it["prompt"] for it in items if it["prompt"] in train]
    if same:
        raise SystemExit(f"captions_eval: training captions reused: {same[:3]}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(here, "heldout2.json"))
    ap.add_argument("--vocab", default=os.path.join(here, "..", "..", "models", "demo",
                                                    "tokenizer", "vocab.json"))
    ap.add_argument("--seed", type=int, default=SEED,
                    help="another seed writes a validation set (default: the held-out set's)")
    a = ap.parse_args()
    items = prompts(a.seed)
    check(items, a.vocab)
    with open(a.out, "w") as f:
        json.dump({"note": "v2 held-out prompts in a second caption template set that training "
                           "never uses; written by tools/demo-model/captions_eval.py",
                   "image_size": dataset.SIZE,
                   "palette": {c: list(v) for c, v in dataset.COLOURS.items()},
                   "region_centres": {r: list(dataset.region_centre(r))
                                      for r in dataset.REGION_NAMES},
                   "prompts": items}, f, indent=1)
        f.write("\n")
    print(f"{len(items)} prompts -> {a.out}")


if __name__ == "__main__":
    main()
