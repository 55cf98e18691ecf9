#!/usr/bin/env python3
"""tests/demo/test_data_tools.py - the demo model's data tools (ctest:
demo_data_tools).

The training data, the held-out prompt files and the shape sheet are pure
functions of seeds (tools/demo-model/dataset.py, captions_eval.py,
shape_sheet.py), and the C tests read their committed outputs.  These checks
need only numpy and Pillow (no PyTorch), so they run in CI with
.venv-test/bin/python:

  regenerates      the three scripts write heldout.json, heldout2.json and
                   shape_sheet.{png,json} byte for byte as committed
  validation_set   captions_eval.py --seed N keeps heldout2.json's layout
                   (held-out triples, shapes, kinds) with other phrasings and
                   seeds, and passes its own vocabulary/no-reuse check
  captions_true    under the committed recipe's knobs (free grammar for half,
                   40% pairs, pair_places, single_places) every caption
                   states its facts: background, colours, shapes, places
                   where the facts say so, "two" for pairs, both places for
                   every pair; every word is in the committed tokenizer; no
                   held-out triple is ever drawn; the same index gives the
                   same sample
  single_places    with dataset.SINGLE_PLACES a single shape's caption leaves
                   its place out only in the centre, and no other caption
                   changes
  render_true      the renderer paints the named background and shape colour
  separation       training's captions never come from captions_eval.py or
                   heldout2.json (train.py only logs an accuracy on them)
  validate_tool    validate.py reads score.py --v2's output as score.py
                   counts it (the renderer's own images of a validation
                   set, scored, summed and paired), and its sign test is the
                   exact binomial one

Usage: .venv-test/bin/python tests/demo/test_data_tools.py [case ...]
"""
import ast
import contextlib
import io
import json
import os
import random
import subprocess
import sys
import tempfile

from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
TOOLS = os.path.join(ROOT, "tools", "demo-model")
sys.path.insert(0, TOOLS)
import captions_eval  # noqa: E402
import dataset  # noqa: E402
import score  # noqa: E402
import validate  # noqa: E402

VOCAB = os.path.join(ROOT, "models", "demo", "tokenizer", "vocab.json")
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print(f"  FAIL {what}")
    return cond


def same_bytes(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def run_tool(script, *args):
    subprocess.run([sys.executable, os.path.join(TOOLS, script), *args], check=True,
                   cwd=TOOLS, stdout=subprocess.DEVNULL)


def case_regenerates():
    with tempfile.TemporaryDirectory() as t:
        run_tool("dataset.py", "--heldout", os.path.join(t, "heldout.json"))
        run_tool("captions_eval.py", "--out", os.path.join(t, "heldout2.json"))
        run_tool("shape_sheet.py", "--out", os.path.join(t, "sheet"))
        pairs = [("heldout.json", os.path.join(TOOLS, "heldout.json")),
                 ("heldout2.json", os.path.join(TOOLS, "heldout2.json")),
                 ("sheet.png", os.path.join(ROOT, "tests/data/demo/shape_sheet.png")),
                 ("sheet.json", os.path.join(ROOT, "tests/data/demo/shape_sheet.json"))]
        for mine, committed in pairs:
            check(same_bytes(os.path.join(t, mine), committed),
                  f"{mine} differs from the committed {os.path.relpath(committed, ROOT)}")


def layout(item):
    return (item["kind"], item["colour"], item.get("region"), tuple(item.get("regions", [])),
            item["background"], item["shape"], item["heldout_triple"])


def case_validation_set():
    test = captions_eval.prompts()
    for seed in (11, 12, 13):
        val = captions_eval.prompts(seed)
        check(len(val) == len(test), f"seed {seed}: {len(val)} prompts, not {len(test)}")
        held = [i for i, it in enumerate(test) if it["kind"] == "single" and it["heldout_triple"]]
        check(all(layout(val[i]) == layout(test[i]) for i in held),
              f"seed {seed}: the held-out singles' triples or shapes moved")
        check(all(val[i]["kind"] == test[i]["kind"] and val[i]["shape"] == test[i]["shape"]
                  for i in range(len(test))), f"seed {seed}: kinds or shapes moved")
        new = sum(v["prompt"] != t["prompt"] for v, t in zip(val, test))
        check(new >= len(test) * 0.8, f"seed {seed}: only {new} of {len(test)} prompts new")
        seeds = sum(v["seed"] != t["seed"] for v, t in zip(val, test))
        check(seeds == len(test), f"seed {seed}: {len(test) - seeds} image seeds reused")
        try:
            captions_eval.check(val, VOCAB)
        except SystemExit as e:
            check(False, f"seed {seed}: {e}")


def region_said(text, region):
    words = set(dataset.PLACE_WORDS[region]) | set(dataset.REGION_PHRASES[region])
    return any(w in text for w in words)


def recipe_knobs(name="v2"):
    """dataset's module-level knobs as train.py sets them for RECIPES[name]
    (free_captions, two_share, pair_places, single_places), read from its
    source: importing train.py needs PyTorch, which these tests do without."""
    with open(os.path.join(TOOLS, "train.py")) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "RECIPES"
                                                for t in node.targets):
            recipes = dict(zip((ast.literal_eval(k) for k in node.value.keys),
                               node.value.values))
            kw = {k.arg: ast.literal_eval(k.value) for k in recipes[name].keywords}
            return {"FREE_SHARE": kw["free_captions"], "TWO_SHARE": kw["two_share"],
                    "PAIR_PLACES": bool(kw["pair_places"]),
                    "SINGLE_PLACES": bool(kw["single_places"])}
    raise AssertionError("train.py: no RECIPES assignment")


# the committed recipe's dataset knobs
RECIPE_KNOBS = recipe_knobs()


@contextlib.contextmanager
def knobs(values):
    """dataset's module-level knobs set to `values` for the block, then put back."""
    saved = {k: getattr(dataset, k) for k in values}
    for k, v in values.items():
        setattr(dataset, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(dataset, k, v)


def case_captions_true():
    vocab = captions_eval.whole_words(VOCAB)
    with knobs(RECIPE_KNOBS):
        bad = {"background": 0, "colour": 0, "shape": 0, "region": 0, "two": 0,
               "pair places": 0, "vocabulary": 0, "held-out": 0}
        pairs = sampled_pairs = 0
        n = 3000
        for i in range(n):
            rng = random.Random(dataset.SEED * 1_000_003 + i)
            scene = dataset._scene(rng)
            if not dataset._allowed(scene):
                continue
            facts = {}
            cap = dataset.caption(scene, rng, facts)
            text = f" {cap.replace(',', ' ')} "
            bad["background"] += facts["background"] != scene["background"] or \
                f" {scene['background']} " not in text
            for f, s in zip(facts["shapes"], scene["shapes"]):
                bad["colour"] += f["colour"] != s["colour"] or f" {s['colour']} " not in text
                noun = dataset.PLURAL[s["shape"]] if scene["pair"] else s["shape"]
                bad["shape"] += f["shape"] != s["shape"] or f" {noun} " not in text
                bad["region"] += f["region"] not in (None, s["region"]) or \
                    (f["region"] is not None and not region_said(text, s["region"]))
            if scene["pair"]:
                pairs += 1
                bad["two"] += not facts["two"] or " two " not in text
                bad["pair places"] += any(f["region"] is None for f in facts["shapes"])
            bad["vocabulary"] += any(w not in vocab for w in cap.replace(",", " , ").split())
        for i in range(n):
            _, _, scene = dataset.sample(i)
            bad["held-out"] += not dataset._allowed(scene)
            sampled_pairs += scene["pair"]
        for k, v in bad.items():
            check(v == 0, f"captions: {v} of {n} wrong on {k}")
        check(pairs > n * 0.15 and sampled_pairs > n * 0.15,
              f"captions: only {pairs} pairs in {n} scenes")
        a, b = dataset.sample(17), dataset.sample(17)
        check(a[1] == b[1] and (a[0] == b[0]).all(), "sample(17) differs between two calls")


def case_single_places():
    # dataset.SINGLE_PLACES (train.py --single-places): a single shape's
    # caption leaves its place out only for a shape in the centre, and every
    # other caption is the one drawn without the knob
    with knobs(RECIPE_KNOBS):
        unplaced = centre_unplaced = moved = 0
        for i in range(4000):
            caps = {}
            for knob in (False, True):
                dataset.SINGLE_PLACES = knob
                rng = random.Random(dataset.SEED * 1_000_003 + i)
                scene = dataset._scene(rng)
                facts = {}
                caps[knob] = (dataset.caption(scene, rng, facts), facts)
            single = len(scene["shapes"]) == 1
            off, on = caps[False][1], caps[True][1]
            if not single:
                moved += caps[False] != caps[True]
                continue
            region = scene["shapes"][0]["region"]
            unplaced += off["shapes"][0]["region"] is None
            if on["shapes"][0]["region"] is None:
                check(region == "centre", f"single_places: {caps[True][0]!r} ({region}) "
                      "names no place")
                centre_unplaced += 1
            else:
                check(region_said(f" {caps[True][0].replace(',', ' ')} ", region),
                      f"single_places: {caps[True][0]!r} does not say {region}")
            # the knob's draw is the one that left the place out, so a
            # caption that named its place (or a centre one) is unchanged
            if off["shapes"][0]["region"] is not None or region == "centre":
                moved += caps[False] != caps[True]
        check(moved == 0, f"single_places: {moved} captions changed that should not")
        check(unplaced > 200 and centre_unplaced > 5,
              f"single_places: unplaced single captions {unplaced}, centre {centre_unplaced}")


def case_render_true():
    rng = random.Random(5)
    for c in dataset.COLOUR_NAMES:
        bg = next(x for x in dataset.COLOUR_NAMES if x != c)
        scene = {"background": bg, "pair": False,
                 "shapes": [{"shape": "circle", "colour": c, "size": "large",
                             "region": "centre"}]}
        img = dataset.render(scene, rng).astype(int)
        m = dataset.SIZE // 2
        corner = abs(img[2, 2] - dataset.COLOURS[bg]).max()
        centre = abs(img[m, m] - dataset.COLOURS[c]).max()
        # _jit moves each channel by at most 10
        check(corner <= 10 and centre <= 10,
              f"render: {c} on {bg}: corner off by {corner}, centre by {centre}")


def case_separation():
    # train.py reads heldout2.json only to log the text encoder's accuracy
    # on it (under no_grad); it must never import the phrasing generator,
    # and the training captions' source must not know either file
    with open(os.path.join(TOOLS, "train.py")) as f:
        train = f.read()
    check("import captions_eval" not in train, "train.py imports captions_eval")
    with open(os.path.join(TOOLS, "dataset.py")) as f:
        data = f.read()
    for word in ("import captions_eval", "heldout2"):
        check(word not in data, f"dataset.py mentions {word!r}")


def case_validate_tool():
    with tempfile.TemporaryDirectory() as d:
        # a validation set's first 24 single shapes and 8 pairs, drawn by the
        # renderer (clean images), scored by score.py as `validate.py run` does
        for s in validate.SEEDS:
            items = captions_eval.prompts(s)
            sel = [it for it in items if it["kind"] == "single"][:24] + \
                [it for it in items if it["kind"] == "two"][:8]
            with open(os.path.join(d, f"val{s}.json"), "w") as f:
                json.dump({"prompts": sel}, f)
            img_dir = os.path.join(d, f"clean-{s}")
            os.makedirs(img_dir)
            rng = random.Random(s)
            for i, it in enumerate(sel):
                shapes = [{"shape": it["shape"], "colour": it["colour"], "size": "large",
                           "region": r} for r in (it.get("regions") or [it["region"]])]
                scene = {"background": it["background"], "shapes": shapes,
                         "pair": it["kind"] == "two"}
                Image.fromarray(dataset.render(scene, rng)).save(
                    os.path.join(img_dir, f"{i:03d}.png"))
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                ms = score.score_v2_dir(img_dir, sel)
            with open(os.path.join(d, f"clean-{s}.txt"), "w") as f:
                f.write(out.getvalue())
            got = validate.parse(os.path.join(d, f"clean-{s}.txt"))
            check(len(got) == len(sel), f"validate: parsed {len(got)} of {len(sel)} lines")
            for i, (it, m) in enumerate(zip(sel, ms)):
                r = got.get(i, {})
                want = {"shape": it["shape"], "right": m["shape"] == it["shape"],
                        "place": m["place"], "two": None, "flat": None}
                if it["kind"] == "two":
                    want["two"] = m["regions"] == 2
                else:
                    want["flat"] = bool(m["flat"] < score.FLAT_MAX)
                check(r == want, f"validate: seed {s} line {i}: {r} != {want}")
        recs = validate.load(d, "clean")
        rows = {k: (x, n) for k, x, n in validate.sums(recs, validate.backgrounds(d))}
        check(rows["two X"][1] == 24 and rows["colour/place"][1] == 72,
              f"validate: sums over {rows['two X'][1]} pairs, {rows['colour/place'][1]} singles")
        # the renderer's own images pass (the scorer is ~100% on them)
        check(rows["colour/place"][0] == 72 and rows["flat"][0] == 72,
              f"validate: clean images: {rows}")
        # one model against itself: no discordant prompt; against a copy with
        # one verdict flipped: exactly that one
        check(all(x == y == 0 for _, x, y, _ in validate.pair(recs, recs)),
              "validate: a model differs from itself")
        flip = {k: dict(r) for k, r in recs.items()}
        k0 = next(k for k, r in sorted(flip.items()) if r["place"] is not None)
        flip[k0]["place"] = not flip[k0]["place"]
        rows = {k: (x, y) for k, x, y, _ in validate.pair(recs, flip)}
        check(rows["colour/place"] == (1, 0) and sum(x + y for x, y in rows.values()) == 1,
              f"validate: one flipped place verdict: {rows}")
    # the verdicts at their edges: the flat verdict is score.py's word (a
    # flatness just under 6/255 prints as 6.000), a pair drawn as three
    # regions is not two
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "edge.txt")
        with open(path, "w") as f:
            f.write("default 000 place PASS shape star (star    ) regions 1 flat   6.000 no  a\n"
                    "default 001 place FAIL shape cross (star    ) regions 2 flat   6.000 ok  b\n"
                    "default 002 place -    shape ring (ring    ) regions 3 flat   1.000 ok  c\n"
                    "default 003 place -    shape ring (ring    ) regions 2 flat  30.000 no  d\n"
                    "shape star     1/2 = 0.50\n")
        got = validate.parse(path)
        check([(r["right"], r["place"], r["flat"], r["two"]) for _, r in sorted(got.items())] ==
              [(True, True, False, None), (False, False, True, None),
               (True, None, None, False), (True, None, None, True)],
              f"validate: edge lines parsed as {got}")
    # exact two-sided sign test: 1:7 -> 2 * 9/256; 0:0 -> 1; 8:1 == 1:8
    check(abs(validate.sign_p(1, 7) - 18 / 256) < 1e-12, "sign_p(1, 7)")
    check(validate.sign_p(0, 0) == 1.0 and validate.sign_p(8, 1) == validate.sign_p(1, 8),
          "sign_p symmetry")


CASES = {"regenerates": case_regenerates, "validation_set": case_validation_set,
         "captions_true": case_captions_true, "render_true": case_render_true,
         "single_places": case_single_places, "separation": case_separation,
         "validate_tool": case_validate_tool}


def main():
    names = sys.argv[1:] or list(CASES)
    for name in names:
        if name not in CASES:
            raise SystemExit(f"unknown case {name!r}; cases: {', '.join(CASES)}")
        print(f"[{name}]", flush=True)
        CASES[name]()
    if FAILS:
        print(f"{len(FAILS)} check(s) failed")
        return 1
    print(f"all {len(names)} case(s) pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
