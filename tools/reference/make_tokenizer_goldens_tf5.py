#!/usr/bin/env python3
"""Goldens for the default tokenizer mode: transformers 5's CLIPTokenizer
(backed by the `tokenizers` library; no ftfy, no HTML unescaping).

What it does, deterministically:
  1. Builds vocab.json / merges.txt from open-clip-torch's
     bpe_simple_vocab_16e6.txt.gz exactly as make_tokenizer_goldens.py does
     (the same ids as Tessera's embedded vocabulary).
  2. Runs CLIPTokenizer(prompt, padding="max_length", max_length=77,
     truncation=True) on the prompts of tokenizer_prompts.make_prompts()
     (the set the a1111 goldens use, here without the mojibake exclusion:
     transformers 5 does not repair mojibake, and neither does the default
     mode; prompts holding NUL are still left out, for C's JSON strings).
     -> tests/data/text/tok_golden_tf5.json
  3. The A1111-syntax prompts of make_syntax_prompts(), parsed and chunked
     by the reference A1111 transcription with these ids.
     -> tests/data/text/prompt_golden_tf5.json
  4. For each folder layout under tests/data/text/tok_layouts/ (real
     tokenizer_config.json / special_tokens_map.json variants: legacy
     AddedToken objects, added_tokens_decoder, conflicting flags, pad "!",
     added tokens outside the vocabulary as textual inversion adds them, and
     tokenizer.json without vocab.json / merges.txt as transformers 5 saves a
     tokenizer: committed without its vocabulary, filled in here),
     the special-token ids and a set of prompts around special-token text.
     -> tests/data/text/tok_layouts_tf5.json
  5. Compares with the a1111 goldens (tok_golden.json, transformers 4.57.1
     slow + ftfy) and reports how many prompts tokenize differently.

Pinned: transformers 5.24.0, tokenizers 0.23.3, in the venv made by
tools/reference/setup-venv-tf5.sh.  Usage:
    /work/venv-tf5/bin/python tools/reference/make_tokenizer_goldens_tf5.py
"""
import gzip
import importlib.util
import json
import os
import shutil
import sys
import tempfile

import tokenizers
import transformers
from transformers import CLIPTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "text")
LAYOUTS = os.path.join(DATA, "tok_layouts")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_prompts import (SPECIAL, make_prompts, make_syntax_prompts,  # noqa: E402
                               syntax_records)

assert int(transformers.__version__.split(".")[0]) >= 5, transformers.__version__


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def build_vocab(outdir):
    spec = importlib.util.find_spec("open_clip")
    if spec is None:
        sys.exit("open-clip-torch is not installed: run tools/reference/setup-venv-tf5.sh")
    gz = os.path.join(os.path.dirname(spec.origin), "bpe_simple_vocab_16e6.txt.gz")
    lines = gzip.open(gz).read().decode("utf-8").split("\n")
    merges = [tuple(m.split()) for m in lines[1:49152 - 256 - 2 + 1]]
    vocab = list(bytes_to_unicode().values())
    vocab = vocab + [v + "</w>" for v in vocab]
    vocab += ["".join(m) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({v: i for i, v in enumerate(vocab)}, f, ensure_ascii=False)
    with open(os.path.join(outdir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for m in merges:
            f.write(" ".join(m) + "\n")


def fill_tokenizer_json(template, base, d):
    """A layout's tokenizer.json is committed without its vocabulary: fill
    model.vocab and model.merges from the built vocabulary (merges as [a, b]
    pairs, or as "a b" strings when the template's list holds one string),
    and drop vocab.json / merges.txt, as transformers 5 saves a tokenizer."""
    with open(template, encoding="utf-8") as f:
        j = json.load(f)
    with open(os.path.join(base, "vocab.json"), encoding="utf-8") as f:
        j["model"]["vocab"] = json.load(f)
    with open(os.path.join(base, "merges.txt"), encoding="utf-8") as f:
        merges = [line.split() for line in f.read().split("\n")[1:] if line]
    strings = bool(j["model"]["merges"])
    j["model"]["merges"] = [" ".join(m) for m in merges] if strings else merges
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    os.remove(os.path.join(d, "vocab.json"))
    os.remove(os.path.join(d, "merges.txt"))


def golden(tok, prompts):
    ids = []
    for p in prompts:
        enc = tok(p, padding="max_length", max_length=77, truncation=True)["input_ids"]
        assert len(enc) == 77
        end = len(enc)
        while end > 0 and enc[end - 1] == tok.pad_token_id:
            end -= 1
        ids.append(enc[:end])
    return ids


# Prompts around special-token text, for the folder layouts.
LAYOUT_PROMPTS = SPECIAL + [
    "hello!", "a ! b", "!!!", "!", "x <|ENDOFTEXT|> y", "<|endoftext|>!!", "!!<|endoftext|>",
    "Hello<|startoftext|>World", "a  <|endoftext|>  b", "<|EndOfText|>", "ＡＢＣ<|endoftext|>",
    "a\u3000!\u3000b", "<|startoftext|><|endoftext|>", "<|endoftext|>" * 3, "it's!", "(a!:1.2)",
    "café <|endoftext|> cafe\u0301", "<|endoftext|>\u0301", "\u00a0<|endoftext|>\u00a0",
    "a <cat-toy> b", "<CAT-TOY>", "photo of sks dog", "SKS  DOG!", "<cat-toy><cat-toy>",
    "a <tok> b", "<TOK>!",
]


def main():
    meta = {"generator": "tools/reference/make_tokenizer_goldens_tf5.py",
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "padding": "trailing pad ids are dropped; pad back to 77 with 'pad'"}
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "base")
        build_vocab(base)
        tok = CLIPTokenizer.from_pretrained(base)
        assert type(tok).__mro__[1].__name__ == "TokenizersBackend", type(tok).__mro__
        assert len(tok) == 49408 and tok.pad_token_id == 49407

        prompts = [p for p in make_prompts() if "\x00" not in p]
        ids = golden(tok, prompts)
        with open(os.path.join(DATA, "tok_golden_tf5.json"), "w", encoding="utf-8") as f:
            json.dump({"meta": meta, "pad": tok.pad_token_id, "prompts": prompts, "ids": ids},
                      f, ensure_ascii=True, separators=(",", ":"))

        # ---- A1111 syntax, chunked with these ids ----
        sprompts = [p for p in make_syntax_prompts() if "\x00" not in p]
        recs = syntax_records(tok, sprompts)
        with open(os.path.join(DATA, "prompt_golden_tf5.json"), "w", encoding="utf-8") as f:
            json.dump({"meta": meta, "backtrack": 20, "records": recs}, f, ensure_ascii=True,
                      separators=(",", ":"))

        # ---- folder layouts ----
        layouts = {}
        for name in sorted(os.listdir(LAYOUTS)):
            d = os.path.join(tmp, name)
            shutil.copytree(base, d)
            for fn in os.listdir(os.path.join(LAYOUTS, name)):
                if fn == "tokenizer.json":
                    fill_tokenizer_json(os.path.join(LAYOUTS, name, fn), base, d)
                else:
                    shutil.copy(os.path.join(LAYOUTS, name, fn), d)
            t = CLIPTokenizer.from_pretrained(d)
            added = json.loads(t.backend_tokenizer.to_str())["added_tokens"]
            lp = LAYOUT_PROMPTS + prompts[:60]
            layouts[name] = {"bos": t.bos_token_id, "eos": t.eos_token_id, "unk": t.unk_token_id,
                             "pad": t.pad_token_id, "added": added, "prompts": lp,
                             "ids": golden(t, lp)}
            print("layout %-20s pad %s, added %s" % (
                name, t.pad_token_id,
                ["%s%s" % (a["content"], "(n)" if a["normalized"] else "") for a in added]))
        with open(os.path.join(DATA, "tok_layouts_tf5.json"), "w", encoding="utf-8") as f:
            json.dump({"meta": meta, "layouts": layouts}, f, ensure_ascii=True,
                      separators=(",", ":"))

    # ---- the two modes compared ----
    with open(os.path.join(DATA, "tok_golden.json"), encoding="utf-8") as f:
        a1111 = json.load(f)
    with open(os.path.join(DATA, "prompt_golden.json"), encoding="utf-8") as f:
        a1111_recs = {r["p"]: r for r in json.load(f)["records"]}
    sdiff = sum(1 for r in recs if r["p"] in a1111_recs and a1111_recs[r["p"]] != r)
    print("prompt_golden_tf5.json: %d syntax prompts, %d chunk differently from the a1111 "
          "goldens" % (len(recs), sdiff))
    fast = dict(zip(prompts, ids))
    differ = [p for p, i in zip(a1111["prompts"], a1111["ids"]) if fast.get(p) != i]
    print("tok_golden_tf5.json: %d prompts; %d of the %d a1111 golden prompts tokenize "
          "differently in the two modes" % (len(prompts), len(differ), len(a1111["prompts"])))
    for p in differ[:15]:
        print("   ", ascii(p)[:100])


if __name__ == "__main__":
    main()
