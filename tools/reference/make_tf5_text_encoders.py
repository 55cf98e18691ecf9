#!/usr/bin/env python3
"""tests/data/textenc/sdxl_tf5: SDXL's tiny CLIP-L text encoder in the layout
transformers 5 writes, for the loader's prefix-less tensor names.

transformers 5 saves a CLIPTextModel without the "text_model." level on its
tensor names ("embeddings.token_embedding.weight", ...), where transformers
4 wrote "text_model.embeddings.token_embedding.weight".  This script:

  1. loads tests/data/textenc/sdxl/text_encoder (CLIPTextModel) and
     text_encoder_2 (CLIPTextModelWithProjection) with transformers 5 and
     checks their outputs against the committed transformers 4.57.1
     references (reference_text_encoder*.safetensors), so both versions
     agree on the weights;
  2. builds a CLIPTextModel from that config, copies the weights in and
     saves it with save_pretrained: the file transformers 5 itself writes
     for a model built from scratch (asserted to be prefix-less; one loaded
     from a prefixed file is saved with the prefix again);
  3. checks that transformers 5.24 still writes CLIPTextModelWithProjection
     (text_encoder_2) with the prefix, so a change shows up when
     regenerating.  Its prefix-less spelling is not committed: the C test
     (tests/textenc/test_clip.c, tf5_layout) writes it at run time by
     renaming the keys of ../sdxl/text_encoder_2, which keeps the data small.

Pinned: transformers 5.24.0, torch 2.9.1, safetensors 0.8.0 (the venv of
tools/reference/setup-venv-tf5.sh).  Deterministic (copies trained weights).
Usage: /work/venv-tf5/bin/python tools/reference/make_tf5_text_encoders.py
"""
import json
import os
import shutil

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import CLIPTextModel, CLIPTextModelWithProjection

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "tests", "data", "textenc", "sdxl")
DST = os.path.join(ROOT, "tests", "data", "textenc", "sdxl_tf5")

assert int(transformers.__version__.split(".")[0]) >= 5, transformers.__version__


def keys(path):
    with safe_open(path, "pt") as f:
        return sorted(f.keys())


def check(model, ref_path, projected):
    ref = load_file(ref_path)
    ids = ref["ids"].long()
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
    last = out.last_hidden_state
    assert torch.allclose(last, ref["last_hidden_state"], atol=1e-5, rtol=1e-4)
    if projected:
        assert torch.allclose(out.text_embeds, ref["text_embeds"], atol=1e-5, rtol=1e-4)
    else:
        assert torch.allclose(out.pooler_output, ref["pooled"], atol=1e-5, rtol=1e-4)


def main():
    shutil.rmtree(DST, ignore_errors=True)
    os.makedirs(DST)
    index = json.load(open(os.path.join(SRC, "model_index.json")))
    index.pop("text_encoder_2")
    with open(os.path.join(DST, "model_index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    for sub, cls, projected in (("text_encoder", CLIPTextModel, False),
                                ("text_encoder_2", CLIPTextModelWithProjection, True)):
        loaded = cls.from_pretrained(os.path.join(SRC, sub), torch_dtype=torch.float32).eval()
        check(loaded, os.path.join(SRC, "reference_%s.safetensors" % sub), projected)
        # A model built from its config (as training code does) is saved
        # without the prefix; one loaded from a prefixed file keeps it.
        model = cls(loaded.config).eval()
        model.load_state_dict(loaded.state_dict())
        check(model, os.path.join(SRC, "reference_%s.safetensors" % sub), projected)
        out = os.path.join(DST, sub)
        model.save_pretrained(out)
        path = os.path.join(out, "model.safetensors")
        names = keys(path)
        prefixed = [k for k in names if k.startswith("text_model.")]
        if cls is CLIPTextModel:
            assert not prefixed and "embeddings.token_embedding.weight" in names, names[:5]
        else:
            assert len(prefixed) == len(names) - 1 and "text_projection.weight" in names, names[:5]
            check(cls.from_pretrained(out).eval(),
                  os.path.join(SRC, "reference_%s.safetensors" % sub), projected)
            print("%s: transformers %s keeps the prefix (%s); not committed" % (
                sub, transformers.__version__, names[0]))
            shutil.rmtree(out)
            continue
        # the reloaded folder still gives the reference outputs
        check(cls.from_pretrained(out).eval(), os.path.join(SRC, "reference_%s.safetensors" % sub),
              projected)
        cfg = json.load(open(os.path.join(out, "config.json")))
        print("%s: %d tensors, e.g. %s; transformers_version %s" % (
            sub, len(keys(path)), keys(path)[0], cfg.get("transformers_version")))
    with open(os.path.join(DST, "README.md"), "w") as f:
        f.write("SDXL's tiny CLIP-L text encoder (../sdxl/text_encoder) as transformers %s\n"
                "saves a CLIPTextModel built from its config: tensor names without\n"
                "\"text_model.\".  The prefix-less CLIPTextModelWithProjection is written by\n"
                "the test at run time (transformers %s still saves that class with the\n"
                "prefix).  Made by tools/reference/make_tf5_text_encoders.py; do not edit.\n"
                "The expected outputs are ../sdxl/reference_text_encoder.safetensors.\n"
                % (transformers.__version__, transformers.__version__))


if __name__ == "__main__":
    main()
