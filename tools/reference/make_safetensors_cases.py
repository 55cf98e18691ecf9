#!/usr/bin/env python3
"""Make the safetensors test file and the fuzz seed corpus.

Why: the C reader must open files exactly as the reference Python package
writes them (its key order, padding, I64 tensors, 0-d scalars, metadata), so
one small file written by `safetensors` itself is committed as a golden and
checked by tests/safetensors.  The same script writes a handful of valid and
near-valid seeds for fuzz/fuzz_safetensors.c.  Output is deterministic (the
values are aranges, no randomness), so rerunning it reproduces the files.

Pinned versions (tools/setup-venv.sh): safetensors 0.6.2, torch 2.9.1,
numpy 2.3.4.

Usage:  . .venv/bin/activate
        python tools/reference/make_safetensors_cases.py
"""
import json
import os
import struct
import sys

import torch
from safetensors.torch import save, save_file

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, "tests", "data", "safetensors")
CORPUS = os.path.join(ROOT, "fuzz", "corpus", "safetensors")


def python_tensors():
    """The tensors of tests/data/safetensors/python_small.safetensors.

    tests/safetensors/test_safetensors.c checks these exact values.
    """
    return {
        "conv_in.weight": torch.arange(24, dtype=torch.float32).reshape(2, 3, 2, 2) * 0.5,
        "norm.weight": torch.arange(6, dtype=torch.float16) - 2,
        "proj.bf16": torch.arange(4, dtype=torch.bfloat16).reshape(2, 2) + 1,
        "text_model.embeddings.position_ids": torch.arange(77, dtype=torch.int64).reshape(1, 77),
        "logit_scale": torch.tensor(4.6052, dtype=torch.float32),  # a 0-d scalar
        "double": torch.tensor([1.5, -2.25], dtype=torch.float64),
        "mask": torch.tensor([True, False, True]),
        "bytes": torch.arange(5, dtype=torch.uint8),
        "i32": torch.tensor([-7, 0, 7], dtype=torch.int32),
        "empty": torch.zeros((0, 4), dtype=torch.float32),
    }


def raw(header, data=b"", pad=True):
    """A hand-made file: JSON header (maybe unpadded) and a data section."""
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def main():
    os.makedirs(DATA, exist_ok=True)
    os.makedirs(CORPUS, exist_ok=True)
    path = os.path.join(DATA, "python_small.safetensors")
    save_file(python_tensors(), path, metadata={"format": "pt", "note": "tessera test"})
    print(path, os.path.getsize(path), "bytes")

    seeds = {
        "python_small": open(path, "rb").read(),
        "one_f32": save({"w": torch.arange(4, dtype=torch.float32)}),
        "scalar_and_empty": save({"s": torch.tensor(1.0), "e": torch.zeros(0)}),
        "f16_2d": save({"a.weight": torch.ones(3, 5, dtype=torch.float16)}, {"format": "pt"}),
        "header_only": raw({}),
        "unpadded": raw({"x": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]}}, b"abc", pad=False),
        "gap": raw({"x": {"dtype": "U8", "shape": [1], "data_offsets": [2, 3]}}, b"abc"),
        # Near-valid: each breaks exactly one rule.
        "bad_overlap": raw({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                            "b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}}, b"abc"),
        "bad_length": raw({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 8),
        "bad_dtype": raw({"a": {"dtype": "F7", "shape": [1], "data_offsets": [0, 1]}}, b"\0"),
        "bad_meta": raw({"__metadata__": {"k": 1}}),
        "truncated": save({"w": torch.arange(8, dtype=torch.float32)})[:-5],
    }
    for name, blob in seeds.items():
        with open(os.path.join(CORPUS, name + ".safetensors"), "wb") as f:
            f.write(blob)
    print(CORPUS, len(seeds), "seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
