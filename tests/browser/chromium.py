"""tests/browser/chromium.py - headless Chromium for the browser tests
(test_browser.py, test_comfy_ui.py): whether selenium and chromedriver are
there, one driver with the options both use, screenshots under
$TSR_ARTIFACTS, and running a test file's cases with one driver and one
server, both closed at the end."""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "service"))
import svc  # noqa: E402

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
except ImportError:
    webdriver = None

ART = os.environ.get("TSR_ARTIFACTS") or os.path.join(svc.ROOT, "build", "browser-artifacts")


def available():
    """selenium (Debian's python3-selenium) and chromedriver are installed
    (scripts/setup.sh); without them a test prints why and exits 77."""
    if webdriver is None or not (shutil.which("chromedriver") or
                                 os.path.exists("/usr/bin/chromedriver")):
        print("selenium or chromedriver missing (scripts/setup.sh): skipped")
        return False
    return True


def browser(window, timeout, log_requests=False):
    """A headless Chromium of window "W,H"; page loads and async scripts
    time out after `timeout` s.  log_requests: keep the browser console and
    the performance (network) log for the test to read."""
    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=" + window, "--disable-extensions", "--no-first-run"):
        opts.add_argument(a)
    opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    if log_requests:
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    drv = webdriver.Chrome(service=Service(shutil.which("chromedriver") or
                                           "/usr/bin/chromedriver"), options=opts)
    drv.set_page_load_timeout(timeout)
    drv.set_script_timeout(timeout)
    return drv


def shot(drv, name):
    os.makedirs(ART, exist_ok=True)
    path = os.path.join(ART, name)
    drv.save_screenshot(path)
    return path


def run(server, tests, open_browser):
    """svc.run_tests(tests) with ctx {"server", "drv"}: the driver from
    open_browser(); the driver and the started server are closed at the end."""
    drv = None
    try:
        drv = open_browser()
        ctx = {"server": server, "drv": drv}
        return svc.run_tests(tests, setup=lambda: ctx)
    finally:
        if drv:
            drv.quit()
        server.stop()
