#!/usr/bin/env bash
# tools/reference/setup-venv-tf5.sh - a second Python environment with
# transformers 5, for the goldens of the default tokenizer mode and of the
# transformers 5 text-encoder layout.  The main venv (tools/setup-venv.sh)
# pins transformers 4.57.1 (the slow tokenizer with ftfy: the a1111 mode),
# so the two cannot share one environment.  Tools only; the C tests do not
# need it.
#
# Usage: tools/reference/setup-venv-tf5.sh      # creates /work/venv-tf5 (idempotent)
#        TESSERA_VENV_TF5=DIR tools/reference/setup-venv-tf5.sh
# Then:
#   $VENV/bin/python tools/reference/gen_unicode_tables_fast.py      # text/unicode_tables_fast.c
#   $VENV/bin/python tools/reference/make_tokenizer_goldens_tf5.py   # tests/data/text/*tf5*
#   $VENV/bin/python tools/reference/make_tf5_text_encoders.py       # tests/data/textenc/sdxl_tf5
# Versions are pinned so that the committed files can be regenerated exactly.
# Packages come from PyPI by name (torch's PyPI wheel is the large CUDA
# build; only make_tf5_text_encoders.py needs it, so TESSERA_TF5_NO_TORCH=1
# skips it).
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${TESSERA_VENV_TF5:-/work/venv-tf5}
PY=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --upgrade pip >/dev/null
"$VENV/bin/pip" install -q transformers==5.24.0 tokenizers==0.23.3 huggingface_hub==2.4.0 \
  safetensors==0.8.0 numpy==2.4.6
# open-clip-torch only for its BPE vocabulary file (bpe_simple_vocab_16e6.txt.gz)
"$VENV/bin/pip" install -q --no-deps open-clip-torch==3.2.0
if [ "${TESSERA_TF5_NO_TORCH:-0}" != 1 ]; then
  "$VENV/bin/pip" install -q torch==2.9.1
fi
"$VENV/bin/python" - <<'PY'
import tokenizers, transformers
print(f"venv ready: transformers {transformers.__version__}, tokenizers {tokenizers.__version__}")
PY
