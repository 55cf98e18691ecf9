#!/usr/bin/env bash
# scripts/setup-test-venv.sh - the Python clients that the compatibility and
# load tests drive `tessera serve` with, as their users run them: webuiapi
# (AUTOMATIC1111 API), openai (OpenAI images API), comfy-api-simplified
# (ComfyUI's API, with its websockets and requests), locust (load tests) and
# matplotlib (the load-test chart); with them numpy and pillow, which also
# run the demo model's data tools (tests/demo/test_data_tools.py).  From
# PyPI, pinned, into .venv-test/ (ignored by git).  Idempotent: a stamp
# holding this file's hash skips the install when nothing changed.  Called
# by scripts/test.sh; safe by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TESSERA_TEST_VENV:-.venv-test}
PY=${PYTHON:-python3}
STAMP="$VENV/.tessera-stamp"
want=$(sha256sum "$0" | cut -c1-16)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$VENV/bin/python" ]; then
  exit 0
fi
echo "setup-test-venv: installing the test clients into $VENV" >&2
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check \
  webuiapi==0.9.17 \
  openai==3.57.0 \
  comfy-api-simplified==1.6.0 \
  locust==2.47.0 \
  matplotlib==3.11.2 \
  pyyaml==6.0.3 \
  numpy==2.4.6 \
  pillow==13.0.0
echo "$want" > "$STAMP"
