#!/usr/bin/env python3
"""tests/browser/test_browser.py - the page in headless Chromium against a
real `tessera serve` on the demo model (ctest browser_page, label browser).

Types a prompt, presses Enter, watches the canvas change at least three
times before the job ends (canvas pixels sampled through JavaScript), sees
the final image and its gallery entry (also after a reload: localStorage +
the server), cancels a second job, and checks that an invalid width shows
the API's error next to the width field.  Then the same first steps through
deploy/nginx/tessera.conf when nginx is installed.  Then with keys on
(test_keys): the page asks for a key after the first 401, keeps it in
sessionStorage, follows the job's events with fetch (EventSource cannot send
the key), paints tiles and shows the gallery image through the signed URLs
the server hands out (an <img> sends no key), directly and through nginx
checking the signatures at the edge.  Screenshots are saved under
$TSR_ARTIFACTS (the build dir).  Exit 77 (skipped) without Chromium,
chromedriver or selenium."""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "service"))
sys.path.insert(0, os.path.join(HERE, "..", "cdn"))
import svc  # noqa: E402
import nginx_proxy  # noqa: E402

from chromium import shot  # noqa: E402
import chromium  # noqa: E402

try:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
except ImportError:
    pass
PROMPT = "a red circle in the top left on a blue background"

# a hash of the canvas pixels (JS), so "changed" means the pixels changed
CANVAS_HASH = """
const c = document.getElementById('canvas-0');
if (!c) return null;
const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
let h = 0, nz = 0;
for (let i = 0; i < d.length; i += 1) { h = (h * 31 + d[i]) | 0; if (d[i]) nz++; }
return [h, nz];
"""


def browser():
    return chromium.browser("420,1400", 30)


def wait(fn, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out after %ds waiting for %s" % (timeout, what))


# Enough steps that the job outlasts several canvas polls on a fast CPU: at
# 30 steps an AVX-512 core finished the demo job in ~0.5 s and the third
# canvas change came with the final image (CI, 2026-12-01).
STEPS = 150


def enter_key(drv, key):
    """Keys on: the page shows its key field after the first 401."""
    form = wait(lambda: [f for f in drv.find_elements(By.ID, "key-form") if f.is_displayed()], 20,
                "the key field after a 401")[0]
    assert "needs an API key" in form.text, form.text
    assert len(drv.find_elements(By.CSS_SELECTOR, "#sampler option")) == 1
    drv.find_element(By.ID, "api-key").send_keys(key)
    drv.find_element(By.ID, "key-use").click()
    wait(lambda: not drv.find_element(By.ID, "key-form").is_displayed(), 10, "the key accepted")


def run_page(drv, port, tag, steps=STEPS, key=None):
    base = "http://127.0.0.1:%d" % port
    drv.get(base + "/")
    if key:
        enter_key(drv, key)
    wait(lambda: len(drv.find_elements(By.CSS_SELECTOR, "#sampler option")) > 1, 20,
         "the sampler list from /v1/samplers")
    drv.execute_script("localStorage.clear();")
    drv.get(base + "/")
    wait(lambda: len(drv.find_elements(By.CSS_SELECTOR, "#sampler option")) > 1, 20, "samplers")
    for fid, val in (("steps", str(steps)), ("seed", "42"), ("width", "128"), ("height", "128")):
        el = drv.find_element(By.ID, fid)
        el.clear()
        el.send_keys(val)
    p = drv.find_element(By.ID, "prompt")
    p.send_keys(PROMPT)
    p.send_keys(Keys.ENTER)  # Enter submits
    wait(lambda: drv.find_elements(By.ID, "canvas-0"), 20, "the canvas")
    hashes, mid = [], None
    t_end = time.time() + 240
    while time.time() < t_end:
        h = drv.execute_script(CANVAS_HASH)
        state = drv.execute_script("return document.body.dataset.lastState || null;")
        if h and h[1] > 0 and (not hashes or hashes[-1] != h[0]):
            hashes.append(h[0])
            if len(hashes) >= 2 and mid is None and not state:
                mid = shot(drv, "%s-mid.png" % tag)
        if state:
            break
        time.sleep(0.03)
    assert state == "done", state
    changes = len(hashes)
    svc.figure("browser %s: the canvas changed %d times before the job ended" % (tag, changes))
    assert changes >= 3, hashes
    assert mid, "no mid-generation screenshot"
    text = drv.find_element(By.ID, "progress-text").text
    assert "step" in text, text
    # the final image and its gallery entry
    item = wait(lambda: drv.find_elements(By.CSS_SELECTOR, "#gallery .gallery-item"), 20,
                "the gallery entry")[0]
    img = item.find_element(By.TAG_NAME, "img")
    wait(lambda: drv.execute_script("return arguments[0].complete && arguments[0].naturalWidth",
                                    img), 20, "the gallery image")
    assert "seed 42" in item.text and "Download" in item.text, item.text
    src = img.get_attribute("src")
    assert ("?md5=" in src) == bool(key), src  # signed with keys on, bare without
    done = shot(drv, "%s-done.png" % tag)
    return mid, done


def test_page(ctx):
    s, drv = ctx["server"], ctx["drv"]
    mid, done = run_page(drv, s.port, "direct")
    ctx["shots"] = (mid, done)
    base = "http://127.0.0.1:%d" % s.port
    # the gallery survives a reload (job ids in localStorage, asked again)
    drv.get(base + "/")
    wait(lambda: drv.find_elements(By.CSS_SELECTOR, "#gallery .gallery-item"), 20,
         "the gallery after a reload")
    # "same seed" fills the form
    drv.find_element(By.CSS_SELECTOR, "#gallery .same-seed").click()
    assert drv.find_element(By.ID, "seed").get_attribute("value") == "42"
    # cancel a second job
    st = drv.find_element(By.ID, "steps")
    st.clear()
    st.send_keys("400")
    drv.find_element(By.ID, "submit").click()
    wait(lambda: drv.find_element(By.ID, "cancel").is_enabled(), 20, "Cancel enabled")
    wait(lambda: (drv.execute_script(CANVAS_HASH) or [0, 0])[1] > 0, 60, "the second job running")
    drv.find_element(By.ID, "cancel").click()
    wait(lambda: drv.execute_script("return document.body.dataset.lastState") == "cancelled",
         30, "the cancelled state")
    jid = drv.execute_script("return document.body.dataset.lastJob")
    assert s.job(jid)["state"] == "cancelled"
    shot(drv, "direct-cancelled.png")
    # an invalid width: the API's error next to the width field
    w = drv.find_element(By.ID, "width")
    w.clear()
    w.send_keys("100")
    drv.find_element(By.ID, "submit").click()
    err = wait(lambda: drv.find_element(By.ID, "err-width").text, 20, "the width error")
    assert "width" in drv.find_element(By.CSS_SELECTOR, ".field.invalid").get_attribute(
        "data-field"), err
    svc.figure("browser: width 100 -> %r shown next to the width field" % err)
    shot(drv, "direct-field-error.png")


def test_through_nginx(ctx):
    if not nginx_proxy.find_nginx():
        svc.note("nginx not installed", "skipped")
        return
    ng = nginx_proxy.Nginx(ctx["server"].port).start()
    try:
        run_page(ctx["drv"], ng.port, "nginx")
        log = ng.access_log()
        assert "/tiles/" in log, "no tile went through nginx"
    finally:
        ng.stop()


def test_keys(ctx):
    """Keys on: key field, fetch-read events, signed <img> URLs; the key stays
    in sessionStorage, never in localStorage."""
    drv = ctx["drv"]
    d = svc.tmpdir("tsr-browser-keys-")
    keys = os.path.join(d, "keys")
    key = svc.new_key(keys, "web")
    s = svc.Server(["--tile-size", "32", "--max-batch", "2", "--keys", keys],
                   name="browser-keys").start()
    try:
        run_page(drv, s.port, "keys", key=key)
        stored = drv.execute_script("return [sessionStorage.getItem('tessera.key'), "
                                    "JSON.stringify(localStorage)];")
        assert stored[0] == key and key not in stored[1], "the key is kept in sessionStorage only"
        # tiles came through signed URLs: the server saw no 401 for a tile
        log = s.all_output()
        assert "/tiles/" in log and " 401 " not in "\n".join(
            ln for ln in log.splitlines() if "/tiles/" in ln), "a tile was refused"
        if nginx_proxy.find_nginx():
            snippet = os.path.join(s.data_dir, "url-secret.nginx")
            ng = nginx_proxy.Nginx(s.port, secret_snippet=snippet).start()
            try:
                run_page(drv, ng.port, "keys-nginx", key=key)
                alog = ng.access_log()
                assert "/tiles/" in alog and "md5=" in alog, "no signed tile went through nginx"
            finally:
                ng.stop()
        else:
            svc.note("nginx not installed", "keys through nginx skipped")
    finally:
        s.stop()


def main():
    if not chromium.available():
        return 77
    s = svc.Server(["--tile-size", "32", "--max-batch", "2"], name="browser-tessera").start()
    return chromium.run(s, [test_page, test_through_nginx, test_keys], browser)


if __name__ == "__main__":
    raise SystemExit(main())
