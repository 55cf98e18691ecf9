#!/usr/bin/env bash
# scripts/setup-comfy-ui.sh - ComfyUI's own web UI for `tessera serve
# --comfy-ui` and its browser test (tests/browser/test_comfy_ui.py, issue 59):
# the frontend as ComfyUI installs it (PyPI's comfyui-frontend-package) and
# the workflow templates of comfyui-workflow-templates 0.10.7, the last
# release with the SD 1.5 text-to-image template (default.json) the test
# loads: its comfyui-workflow-templates-media-image 0.3.157 holds the image
# templates' JSON and thumbnails, its -media-other 0.3.226 the template
# browser's index.  All pinned, downloaded as wheels with pip (no install, no
# dependencies) and unpacked into .cache/comfy-ui/ (ignored by git):
#
#   .cache/comfy-ui/frontend/            the frontend's static folder: --comfy-ui's DIR
#   .cache/comfy-ui/frontend/templates/  the templates there, where ComfyUI serves
#                                        them (/templates/ beside the frontend): the
#                                        index cut to the templates whose JSON is here
#
# Idempotent: a stamp holding this file's hash skips everything when nothing
# changed.  Called by scripts/test.sh; safe by hand.  Without it (no network)
# the browser test skips.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${TESSERA_COMFY_UI_DIR:-.cache/comfy-ui}
FRONTEND=comfyui-frontend-package==1.58.1
IMAGES=comfyui-workflow-templates-media-image==0.3.157
INDEX=comfyui-workflow-templates-media-other==0.3.226
STAMP="$DEST/.tessera-stamp"
want=$(sha256sum "$0" | cut -c1-16)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -f "$DEST/frontend/index.html" ] &&
   [ -f "$DEST/frontend/templates/default.json" ]; then
  exit 0
fi
# pip: the test venv's (scripts/setup-test-venv.sh), else the system's
PIP=(python3 -m pip)
if [ -x .venv-test/bin/python ]; then PIP=(.venv-test/bin/python -m pip); fi
echo "setup-comfy-ui: fetching $FRONTEND, $IMAGES and $INDEX into $DEST" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${PIP[@]}" download -q --disable-pip-version-check --no-deps -d "$tmp/wheels" \
  "$FRONTEND" "$IMAGES" "$INDEX"
mkdir -p "$tmp/out"
python3 - "$tmp/wheels" "$tmp/out" <<'EOF'
import glob, json, os, sys, zipfile
wheels, out = sys.argv[1], os.path.abspath(sys.argv[2])
static = os.path.join(out, "frontend")
tpl = os.path.join(static, "templates")

def put(z, name, dest):
    dest = os.path.abspath(dest)
    if not dest.startswith(out + os.sep):
        raise SystemExit("setup-comfy-ui: odd path in a wheel: %s" % name)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with z.open(name) as src, open(dest, "wb") as dst:
        dst.write(src.read())

index = None
for w in sorted(glob.glob(os.path.join(wheels, "*.whl"))):
    with zipfile.ZipFile(w) as z:
        for n in z.namelist():
            if n.startswith("comfyui_frontend_package/static/") and not n.endswith("/"):
                put(z, n, os.path.join(static, n[len("comfyui_frontend_package/static/"):]))
            elif n.startswith("comfyui_workflow_templates_media_image/templates/"):
                base = n.rsplit("/", 1)[1]
                if base.endswith((".json", ".webp")):  # the templates and their thumbnails
                    put(z, n, os.path.join(tpl, base))
            elif n.startswith("comfyui_workflow_templates_media_other/templates/"):
                rel = n[len("comfyui_workflow_templates_media_other/templates/"):]
                if rel == "index.json":
                    index = json.loads(z.read(n))
                elif rel == "index_logo.json" or rel.startswith("logo/"):
                    put(z, n, os.path.join(tpl, rel))
if index is None or not os.path.isfile(os.path.join(tpl, "default.json")):
    raise SystemExit("setup-comfy-ui: the wheels lack index.json or default.json")
# the browser's index: only the templates whose JSON is here, no empty category
have = {f[:-5] for f in os.listdir(tpl) if f.endswith(".json")}
cut = []
for cat in index:
    kept = [t for t in cat.get("templates", []) if t.get("name") in have]
    if kept:
        cut.append(dict(cat, templates=kept))
with open(os.path.join(tpl, "index.json"), "w") as f:
    json.dump(cut, f)
EOF
rm -rf "$DEST/frontend" "$DEST/templates"
mkdir -p "$DEST"
mv "$tmp/out/frontend" "$DEST/frontend"
test -f "$DEST/frontend/index.html" && test -f "$DEST/frontend/templates/default.json"
echo "$want" > "$STAMP"
