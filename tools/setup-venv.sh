#!/usr/bin/env bash
# tools/setup-venv.sh - the Python environment for tools only (reference
# generation, benchmarks against PyTorch, demo-model training).  Python never
# runs at serving time and the C test suite does not need it.
#
# Usage: tools/setup-venv.sh            # creates ./.venv (idempotent)
#        . .venv/bin/activate
# Versions are pinned so that committed goldens can be regenerated exactly.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TESSERA_VENV:-.venv}
PY=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
pip install -q --upgrade pip >/dev/null
pip install -q \
  torch==2.9.1 \
  diffusers==0.35.2 \
  transformers==4.57.1 \
  accelerate==1.11.0 \
  safetensors==0.6.2 \
  numpy==2.3.4 \
  ftfy==6.3.1 \
  regex==2026.11.19
# open-clip-torch only for its BPE vocabulary file (bpe_simple_vocab_16e6.txt.gz)
pip install -q --no-deps open-clip-torch==3.2.0
# scheduler goldens: scipy for LMSDiscreteScheduler, torchsde for DPMSolverSDEScheduler
pip install -q scipy==1.16.3 torchsde==0.2.6
# LoRA goldens (tools/reference/make_lora_goldens.py): diffusers' load_lora_weights needs peft
pip install -q peft==0.17.1
python - <<'PY'
import torch, diffusers, transformers
print(f"venv ready: torch {torch.__version__}, diffusers {diffusers.__version__}, transformers {transformers.__version__}")
PY
