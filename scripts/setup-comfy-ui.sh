#!/usr/bin/env bash
# scripts/setup-comfy-ui.sh - ComfyUI's own web UI for `tessera serve
# --comfy-ui` and its browser test (tests/browser/test_comfy_ui.py, issue 59):
# the frontend as ComfyUI installs it (PyPI's comfyui-frontend-package) and
# the SD 1.5 text-to-image template the test loads into it (default.json,
# which the comfyui-workflow-templates meta package 0.10.7 takes from its
# comfyui-workflow-templates-media-image 0.3.157; later releases dropped it).
# Both pinned, downloaded as wheels with pip (no install, no dependencies) and
# unpacked into .cache/comfy-ui/ (ignored by git):
#
#   .cache/comfy-ui/frontend/    the frontend's static folder: --comfy-ui's DIR
#   .cache/comfy-ui/templates/   the templates' JSON files (default.json ...)
#
# Idempotent: a stamp holding this file's hash skips everything when nothing
# changed.  Called by scripts/test.sh; safe by hand.  Without it (no network)
# the browser test skips.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${TESSERA_COMFY_UI_DIR:-.cache/comfy-ui}
FRONTEND=comfyui-frontend-package==1.58.1
TEMPLATES=comfyui-workflow-templates-media-image==0.3.157
STAMP="$DEST/.tessera-stamp"
want=$(sha256sum "$0" | cut -c1-16)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -f "$DEST/frontend/index.html" ] &&
   [ -f "$DEST/templates/default.json" ]; then
  exit 0
fi
# pip: the test venv's (scripts/setup-test-venv.sh), else the system's
PIP=(python3 -m pip)
if [ -x .venv-test/bin/python ]; then PIP=(.venv-test/bin/python -m pip); fi
echo "setup-comfy-ui: fetching $FRONTEND and $TEMPLATES into $DEST" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${PIP[@]}" download -q --disable-pip-version-check --no-deps -d "$tmp/wheels" \
  "$FRONTEND" "$TEMPLATES"
mkdir -p "$tmp/unpacked" "$DEST"
python3 - "$tmp/wheels" "$tmp/unpacked" <<'EOF'
import sys, zipfile, glob, os
wheels, out = sys.argv[1], sys.argv[2]
for w in glob.glob(os.path.join(wheels, "*.whl")):
    with zipfile.ZipFile(w) as z:
        for n in z.namelist():
            # the frontend's static folder; the templates' JSON (not the media)
            if "/static/" in n or (n.endswith(".json") and "/templates/" in n):
                p = os.path.abspath(os.path.join(out, n))
                if not p.startswith(os.path.abspath(out) + os.sep):
                    raise SystemExit("setup-comfy-ui: odd path in %s: %s" % (w, n))
                z.extract(n, out)
EOF
rm -rf "$DEST/frontend" "$DEST/templates"
mv "$tmp/unpacked/comfyui_frontend_package/static" "$DEST/frontend"
mv "$tmp/unpacked/comfyui_workflow_templates_media_image/templates" "$DEST/templates"
test -f "$DEST/frontend/index.html" && test -f "$DEST/templates/default.json"
echo "$want" > "$STAMP"
