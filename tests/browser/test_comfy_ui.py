#!/usr/bin/env python3
"""tests/browser/test_comfy_ui.py - ComfyUI's own web UI on `tessera serve
--comfy-ui` in headless Chromium (issue 59; ctest browser_comfy_ui, labels
browser and compat; docs/compat-comfyui.md "The web UI").

The frontend is PyPI's comfyui-frontend-package and the workflow the SD 1.5
text-to-image template of comfyui-workflow-templates, both unpacked by
scripts/setup-comfy-ui.sh into .cache/comfy-ui/frontend (pinned there; the
templates in its templates/, where ComfyUI serves them).  One server
on the demo model, one browser:

1. the UI loads from /comfy/ (its app object up, no request to the server
   answered 4xx/5xx but those a fresh ComfyUI answers so too: absent user
   data files and folders), its template browser shows the SD 1.5
   template's card (index and thumbnail from /comfy/templates/), and its
   settings reach the server: the setting
   "Live preview method" set to auto through the UI's settings store is in
   GET /api/settings;
2. the template (default.json, UI format) is loaded through the frontend
   (app.loadGraphData), changed ONLY in the checkpoint name (the one
   /api/models/checkpoints lists);
3. it is queued the way the Run button does (app.queuePrompt);
4. the UI gets preview frames over the websocket and shows them on a node
   (an image from a blob: URL, sampled while the job runs), then shows the
   final image in the SaveImage node (an <img> loaded from /comfy/api/view,
   512x512), which is the PNG /view serves and equals `tessera generate`'s
   with the mapped settings (euler + normal = euler + comfy_normal);
5. the UI's workflow files live in the server's user data: saved as
   workflows/<name>.json with the Save command and its name dialog (the file
   on disk holds the graph), listed again after a reload, renamed and
   deleted through the UI's workflow store;
6. with keys on (a second server, `--keys`): /comfy/ redirects to the
   sign-in page /comfy/login, the key typed there and Enter sign in (the
   session cookie, which the page's scripts cannot read), the UI loads,
   and the template queued from it (at 128x128) shows its image.

Screenshots go to $TSR_ARTIFACTS.  Exit 77 (skipped) without Chromium,
chromedriver, selenium or the unpacked frontend.
"""
import json
import os
import sys
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "service"))
import svc  # noqa: E402

from chromium import shot  # noqa: E402
import chromium  # noqa: E402

try:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
except ImportError:
    pass
CACHE = os.environ.get("TSR_COMFY_UI_CACHE") or os.path.join(svc.ROOT, ".cache", "comfy-ui")
FRONTEND = os.path.join(CACHE, "frontend")
TEMPLATE = os.path.join(FRONTEND, "templates", "default.json")

# what a fresh ComfyUI also answers 404 (user data not written yet)
FRESH_404 = ("/comfy/user.css", "/comfy/api/userdata/user.css",
             "/comfy/api/userdata/comfy.templates.json", "/comfy/api/userdata?dir=")


def browser():
    return chromium.browser("1600,1000", 60, log_requests=True)


def js_await(drv, expr, *args):
    """The value of a promise-valued JS expression (arguments as args[i])."""
    return drv.execute_async_script(
        "const done = arguments[arguments.length - 1]; const args = arguments;"
        "Promise.resolve().then(() => " + expr + ").then((v) => done({ok: v === undefined || "
        "(v !== null && typeof v === 'object') ? null : v}),"
        "(e) => done({err: String(e && e.stack || e)}));", *args)


def awaited(drv, expr, *args):
    r = js_await(drv, expr, *args)
    assert "err" not in r, "%s failed in the page: %s" % (expr, r["err"])
    return r["ok"]


def get_json(s, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (s.port, path), timeout=30) as r:
        return json.loads(r.read())


def get_bytes(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read()


def responses(drv):
    """[(status, method, url)] of the page's requests so far (performance log)."""
    sent, out = {}, []
    for e in drv.get_log("performance"):
        m = json.loads(e["message"])["message"]
        p = m.get("params", {})
        if m["method"] == "Network.requestWillBeSent":
            sent[p["requestId"]] = (p["request"]["method"], p["request"]["url"])
        elif m["method"] == "Network.responseReceived" and p["requestId"] in sent:
            out.append((p["response"]["status"],) + sent[p["requestId"]])
    return out


def test_load(ctx):
    """1. The UI loads at /comfy/ and its settings are the server's."""
    s, drv = ctx["server"], ctx["drv"]
    drv.get("http://127.0.0.1:%d/comfy/" % s.port)
    svc.wait_until(lambda: drv.execute_script(
        "return !!(window.app && window.app.graph && window.app.api && window.app.api.socket "
        "&& window.app.api.socket.readyState === 1 && window.app.extensionManager "
        "&& window.app.extensionManager.setting)"), 90, "ComfyUI's app with its websocket open")
    # the node definitions came from /object_info: the template's classes exist
    types = drv.execute_script("return Object.keys(LiteGraph.registered_node_types)")
    for cls in ("CheckpointLoaderSimple", "KSampler", "CLIPTextEncode", "EmptyLatentImage",
                "VAEDecode", "SaveImage"):
        assert cls in types, "%s is not a node type of the UI (object_info)" % cls
    # a setting set in the UI is stored by the server (POST /settings/{id},
    # sent as text/plain with Comfy-User)
    awaited(drv, "window.app.extensionManager.setting.set('Comfy.Execution.PreviewMethod', "
                 "'auto')")
    svc.wait_until(lambda: get_json(s, "/api/settings").get("Comfy.Execution.PreviewMethod")
                   == "auto", 10, "the preview setting in GET /api/settings")
    # a fresh UI opens its template browser, which lists the templates of
    # /comfy/templates/index.json, the SD 1.5 one ("default") among them
    def dialogs():
        return drv.execute_script("return Array.from(document.querySelectorAll("
                                  "'[role=dialog]')).map((d) => d.innerText).join('\\n')")
    svc.wait_until(lambda: "Getting Started" in dialogs(), 60,
                   "the template browser's categories")
    drv.execute_script(  # the category's entry in the dialog's side bar
        "const all = Array.from(document.querySelectorAll('[role=dialog] *'))"
        "  .filter((e) => e.children.length === 0 && e.textContent.trim() === 'Getting Started');"
        "(all[0].closest('button, a, li, [role=button], [role=option]') || all[0]).click();")
    svc.wait_until(lambda: "Image Generation" in dialogs(), 30,
                   "the SD 1.5 template (Image Generation) in the template browser")
    shot(drv, "comfy_ui_templates.png")
    # close it as a user would (Escape)
    time.sleep(1.0)  # let the start-up requests finish
    ActionChains(drv).send_keys(Keys.ESCAPE).perform()
    svc.wait_until(lambda: not drv.execute_script(
        "return Array.from(document.querySelectorAll('[role=dialog]'))"
        ".some((d) => d.offsetParent !== null)"), 10, "the template dialog closed")
    base = "http://127.0.0.1:%d" % s.port
    bad = [(st, m, u) for st, m, u in responses(drv)
           if u.startswith(base + "/") and st >= 400 and
           not any(u[len(base):].startswith(p) for p in FRESH_404)]
    ctx["unanswered"] = bad
    assert not bad, "the UI's requests the server failed: %s" % bad
    shot(drv, "comfy_ui_loaded.png")


def test_template_run(ctx):
    """2-4. The SD 1.5 template, changed only in its checkpoint, queued from the
    UI: previews on a node while it runs, then the final image in SaveImage."""
    s, drv = ctx["server"], ctx["drv"]
    with open(TEMPLATE) as f:
        wf = json.load(f)
    ckpts = get_json(s, "/api/models/checkpoints")
    assert len(ckpts) == 1, ckpts
    loaders = [n for n in wf["nodes"] if n["type"] == "CheckpointLoaderSimple"]
    assert len(loaders) == 1, "the template has %d checkpoint loaders" % len(loaders)
    loaders[0]["widgets_values"][0] = ckpts[0]  # the only change
    awaited(drv, "window.app.loadGraphData(args[0])", wf)
    types = drv.execute_script("return window.app.graph._nodes.map((n) => n.type)")
    for cls in ("CheckpointLoaderSimple", "KSampler", "SaveImage", "EmptyLatentImage"):
        assert cls in types, "the template in the UI lacks %s: %s" % (cls, types)
    drv.execute_script("""
        const api = window.app.api, ev = window.__tsr = {previews: 0, shown: [], executed: [],
                                                       errors: [], success: 0};
        api.addEventListener('b_preview', () => { ev.previews++; });
        api.addEventListener('executed', (e) => { ev.executed.push(e.detail); });
        api.addEventListener('execution_error', (e) => { ev.errors.push(e.detail); });
        api.addEventListener('execution_success', () => { ev.success++; });
        const save = window.app.graph._nodes.find((n) => n.type === 'SaveImage');
        window.app.canvas.ds.scale = 1;
        window.app.canvas.centerOnNode(save);
        window.app.canvas.setDirty(true, true);""")
    t0 = time.time()
    queued = awaited(drv, "window.app.queuePrompt(0, 1)")
    assert queued is not False, "queuePrompt refused the graph"
    # while it runs: a node shows a preview from a blob: URL (a binary frame)
    seen_preview = None
    while time.time() - t0 < 240:
        ev = drv.execute_script(
            "const ev = window.__tsr; const blobs = [];"
            "for (const n of window.app.graph._nodes) for (const i of (n.imgs || []))"
            "  if (i && i.src && i.src.startsWith('blob:')) blobs.push(n.type);"
            "return {previews: ev.previews, blobs: blobs, success: ev.success,"
            "        errors: ev.errors, executed: ev.executed.length};")
        if ev["blobs"] and not seen_preview:
            seen_preview = ev["blobs"]
            shot(drv, "comfy_ui_preview.png")
        if ev["success"] or ev["errors"]:
            break
        time.sleep(0.1)
    took = time.time() - t0
    ev = drv.execute_script("return window.__tsr")
    assert not ev["errors"], "execution_error: %s" % ev["errors"]
    assert ev["success"] == 1, "no execution_success in %.0fs: %s" % (took, ev)
    assert ev["previews"] >= 1, "no preview frame reached the UI: %s" % ev
    assert seen_preview, "no node showed a preview image while the prompt ran (%d frames)" % \
        ev["previews"]
    svc.note("template 512x512, 20 steps, from queue to execution_success", "%.1f s" % took)
    # the final image: in SaveImage's node, an <img> from /comfy/api/view, loaded
    out = ev["executed"][-1]["output"]["images"]
    assert len(out) == 1 and out[0]["type"] == "output", out
    img = svc.wait_until(lambda: drv.execute_script(
        "const n = window.app.graph._nodes.find((n) => n.type === 'SaveImage');"
        "const i = n && n.imgs && n.imgs[0];"
        "return i && i.complete && i.naturalWidth ? [i.src, i.naturalWidth, i.naturalHeight]"
        " : null;"), 30, "SaveImage's image loaded in the UI")
    src, w, h = img
    assert "/comfy/api/view?" in src and out[0]["filename"] in urllib.parse.unquote(src), src
    assert (w, h) == (512, 512), (w, h)
    drv.execute_script("window.app.canvas.setDirty(true, true)")
    time.sleep(0.5)
    shot(drv, "comfy_ui_done.png")
    png = get_bytes(src)
    # the prompt the UI sent: the template's settings, the seed it had
    pid = ev["executed"][-1]["prompt_id"]
    hist = get_json(s, "/api/history/" + pid)[pid]
    prompt = hist["prompt"][2]
    ks = [n["inputs"] for n in prompt.values() if n["class_type"] == "KSampler"][0]
    latent = [n["inputs"] for n in prompt.values() if n["class_type"] == "EmptyLatentImage"][0]
    texts = {k: n["inputs"]["text"] for k, n in prompt.items()
             if n["class_type"] == "CLIPTextEncode"}
    ck = [n["inputs"]["ckpt_name"] for n in prompt.values()
          if n["class_type"] == "CheckpointLoaderSimple"]
    assert ck == ckpts, ck
    assert (ks["sampler_name"], ks["scheduler"], ks["denoise"]) == ("euler", "normal", 1), ks
    svc.assert_same_image(png, dict(prompt=texts[ks["positive"][0]],
                                    negative_prompt=texts[ks["negative"][0]],
                                    width=latent["width"], height=latent["height"],
                                    steps=ks["steps"], seed=ks["seed"], cfg_scale=ks["cfg"],
                                    sampler="euler", scheduler="comfy_normal"),
                          "the UI's image")


def test_workflow_files(ctx):
    """The UI's own workflow files on the server's user data: save the graph
    with the Save command and its name dialog (POST /userdata), see it listed
    after a reload (GET /userdata?dir=workflows), rename it (POST
    .../move/...) and delete it (DELETE) through the UI's workflow store."""
    s, drv = ctx["server"], ctx["drv"]
    user = os.path.join(s.data_dir, "comfy", "user", "default", "workflows")
    # Save (Ctrl+S's command): the UI asks for a name in a dialog
    drv.execute_script("window.app.extensionManager.command.execute('Comfy.SaveWorkflow')")
    box = svc.wait_until(lambda: [e for e in drv.find_elements(By.CSS_SELECTOR,
                                                               "[role=dialog] input")
                                  if e.is_displayed()], 20, "the save dialog's name field")[0]
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys("tessera sd15", Keys.ENTER)
    svc.wait_until(lambda: os.path.isfile(os.path.join(user, "tessera sd15.json")), 20,
                   "workflows/tessera sd15.json in the user's folder")
    with open(os.path.join(user, "tessera sd15.json")) as f:
        saved = json.load(f)
    shown = drv.execute_script(
        "return window.app.graph._nodes.map((n) => [String(n.id), n.type])")
    in_file = [[str(n["id"]), n["type"]] for n in saved["nodes"]]
    assert sorted(in_file) == sorted(shown), (in_file, shown)
    drv.refresh()
    svc.wait_until(lambda: drv.execute_script(
        "return !!(window.app && window.app.extensionManager && "
        "window.app.extensionManager.workflow)"), 90, "the UI again")
    awaited(drv, "window.app.extensionManager.workflow.syncWorkflows()")
    listed = drv.execute_script(
        "return window.app.extensionManager.workflow.persistedWorkflows.map((w) => w.path)")
    assert "workflows/tessera sd15.json" in listed, listed
    awaited(drv, "(async () => { const s = window.app.extensionManager.workflow;"
                 "await s.renameWorkflow(s.getWorkflowByPath('workflows/tessera sd15.json'),"
                 "'workflows/renamed.json'); })()")
    assert sorted(os.listdir(user)) == ["renamed.json"], os.listdir(user)
    awaited(drv, "(async () => { const s = window.app.extensionManager.workflow;"
                 "await s.deleteWorkflow(s.getWorkflowByPath('workflows/renamed.json'), true);"
                 "})()")
    assert os.listdir(user) == [], os.listdir(user)


def test_keys_login(ctx):
    """6. With --keys: the sign-in page, then the UI and a prompt on the cookie."""
    drv = ctx["drv"]
    d = svc.tmpdir("tsr-comfy-ui-keys-")
    path = os.path.join(d, "keys")
    key = svc.new_key(path, "ui")
    s = svc.Server(["--comfy-ui", FRONTEND, "--keys", path], name="comfy-ui-keys").start()
    try:
        base = "http://127.0.0.1:%d" % s.port
        drv.get(base + "/comfy/")
        svc.wait_until(lambda: drv.current_url == base + "/comfy/login", 20,
                       "the redirect to the sign-in page")
        box = svc.wait_until(lambda: drv.find_elements(By.ID, "key"), 20, "the key field")[0]
        box.send_keys(key, Keys.ENTER)
        svc.wait_until(lambda: drv.execute_script(
            "return !!(window.app && window.app.graph && window.app.api && window.app.api.socket"
            " && window.app.api.socket.readyState === 1)"), 90,
            "the UI after signing in, its websocket open")
        assert drv.current_url == base + "/comfy/", drv.current_url
        assert "tessera_comfy" not in drv.execute_script("return document.cookie")
        shot(drv, "comfy_ui_keys_signed_in.png")
        req = urllib.request.Request(base + "/api/models/checkpoints",
                                     headers={"Authorization": "Bearer " + key})
        with urllib.request.urlopen(req, timeout=30) as r:
            ckpts = json.loads(r.read())
        with open(TEMPLATE) as f:
            wf = json.load(f)
        for n in wf["nodes"]:
            if n["type"] == "CheckpointLoaderSimple":
                n["widgets_values"][0] = ckpts[0]
            if n["type"] == "EmptyLatentImage":
                n["widgets_values"][0:2] = [128, 128]
        awaited(drv, "window.app.loadGraphData(args[0])", wf)
        assert awaited(drv, "window.app.queuePrompt(0, 1)") is not False
        img = svc.wait_until(lambda: drv.execute_script(
            "const n = window.app.graph._nodes.find((n) => n.type === 'SaveImage');"
            "const i = n && n.imgs && n.imgs[0];"
            "return i && i.complete && i.naturalWidth ? [i.src, i.naturalWidth] : null;"), 180,
            "the image in SaveImage, loaded on the session cookie")
        assert "/comfy/api/view?" in img[0] and img[1] == 128, img
        # every call the UI made on the cookie was answered (no 401 among them)
        bad = [(st, m, u) for st, m, u in responses(drv)
               if u.startswith(base + "/") and st >= 400 and
               not any(u[len(base):].startswith(p) for p in FRESH_404)]
        assert not bad, "the signed-in UI's requests the server failed: %s" % bad
        ActionChains(drv).send_keys(Keys.ESCAPE).perform()  # the template browser
        time.sleep(0.5)
        shot(drv, "comfy_ui_keys_done.png")
    finally:
        s.stop()


def main():
    if not chromium.available():
        return 77
    if not os.path.isfile(os.path.join(FRONTEND, "index.html")) or not os.path.isfile(TEMPLATE):
        print("ComfyUI's frontend is not unpacked in %s (scripts/setup-comfy-ui.sh): skipped"
              % CACHE)
        return 77
    s = svc.Server(["--comfy-ui", FRONTEND], name="comfy-ui-tessera").start()
    return chromium.run(s, [test_load, test_template_run, test_workflow_files, test_keys_login],
                        browser)


if __name__ == "__main__":
    raise SystemExit(main())
