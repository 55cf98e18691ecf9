#!/usr/bin/env python3
"""tests/load/test_tools.py - the load-test tools that need PyPI packages,
run with .venv-test/bin/python (scripts/setup-test-venv.sh):

  test_chart    tessera-loadtest --csv, then tools/loadtest/plot.py draws the
                PNG chart (matplotlib); a CSV that is not one exits 1
  test_locust   headless locust (tools/loadtest/locustfile.py) against
                `tessera serve`, one 4 s run per task (native, a1111,
                openai): exit 0, the HTML report written, each kind of
                request done at least once with no failure

locust runs as its own process (.venv-test/bin/locust, next to this
interpreter): importing it where ssl was imported first breaks gevent's
monkey patching.
"""
import csv
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "service"))
import svc  # noqa: E402

LOADTEST = os.environ.get("TSR_LOADTEST") or os.path.join(svc.ROOT, "build", "bin",
                                                           "tessera-loadtest")
TOOLS = os.path.join(svc.ROOT, "tools", "loadtest")
LOCUST = os.path.join(os.path.dirname(sys.executable), "locust")


def setup():
    if not os.access(LOADTEST, os.X_OK):
        raise AssertionError("TSR_LOADTEST %s is not an executable" % LOADTEST)
    return svc.Server(name="server").start()


def test_chart(s):
    d = svc.tmpdir()
    cs, png = os.path.join(d, "run.csv"), os.path.join(d, "run.png")
    p = subprocess.run([LOADTEST, "--url", "http://127.0.0.1:%d" % s.port, "--clients", "2",
                        "--jobs", "6", "--profile", os.path.join(TOOLS, "profiles", "small.json"),
                        "--quiet", "--csv", cs], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=120)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    p = subprocess.run([sys.executable, os.path.join(TOOLS, "plot.py"), cs, "-o", png,
                        "--title", "load test"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    with open(png, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10000, len(data)
    w, h = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert w >= 600 and h >= 400, (w, h)
    # not a loadtest CSV: exit 1 with a message
    bad = os.path.join(d, "bad.csv")
    with open(bad, "w") as f:
        f.write("a,b\n1,2\n")
    p = subprocess.run([sys.executable, os.path.join(TOOLS, "plot.py"), bad],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert p.returncode == 1 and b"not a tessera-loadtest CSV" in p.stderr, p


def run_locust(s, d, tag):
    """A headless run of one tagged task for 4 s; the users finish the task
    they are in when the time is up (--stop-timeout), so every started
    request is counted however slow the machine.  Returns (stats rows by
    name, the HTML report's text)."""
    html, prefix = os.path.join(d, tag + ".html"), os.path.join(d, tag)
    p = subprocess.run([LOCUST, "-f", os.path.join(TOOLS, "locustfile.py"), "--headless",
                        "--host", "http://127.0.0.1:%d" % s.port, "-u", "2", "-r", "2",
                        "--run-time", "4s", "--stop-timeout", "60", "--tags", tag,
                        "--steps", "1", "--html", html, "--csv", prefix, "--only-summary"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=180, cwd=d)
    out = p.stdout.decode("utf-8", "replace")
    assert p.returncode == 0, (tag, p.returncode, out[-3000:])
    with open(html, encoding="utf-8") as f:
        page = f.read()
    assert "<html" in page.lower(), page[:300]
    with open(prefix + "_stats.csv", newline="") as f:
        rows = {r["Name"]: r for r in csv.DictReader(f)}
    assert int(rows["Aggregated"]["Failure Count"]) == 0, (tag, rows["Aggregated"], out[-2000:])
    return rows, page


def test_locust(s):
    if not os.access(LOCUST, os.X_OK):
        raise AssertionError("no %s: run scripts/setup-test-venv.sh" % LOCUST)
    d = svc.tmpdir()
    # one run per task (native, a1111, openai): a run of all three picks
    # tasks at random and, on a slow machine, may never pick one of them
    counts = {}
    for tag, names in (("native", ("POST /v1/jobs", "GET /v1/jobs/{id}/events",
                                   "native: submit -> done")),
                       ("a1111", ("POST /sdapi/v1/txt2img",)),
                       ("openai", ("POST /v1/images/generations",))):
        rows, page = run_locust(s, d, tag)
        for name in names:
            assert name in rows and int(rows[name]["Request Count"]) >= 1, (tag, name,
                                                                            rows.keys())
            assert int(rows[name]["Failure Count"]) == 0, rows[name]
        # only the chosen task ran
        others = [k for k in rows if k != "Aggregated" and k not in names and
                  not k.startswith("native: ")]
        assert not others, (tag, others)
        if tag == "native":
            # the stats table is rendered from JSON embedded in the page
            assert any(v in page for v in ("native: submit -> done",
                                           "native: submit -\\u003e done",
                                           "native: submit -&gt; done")), page[:300]
        counts[tag] = (rows[names[-1]]["Request Count"], rows[names[-1]]["Median Response Time"])
    svc.figure("locust, 2 users, 4 s per task: %s native jobs (median %s ms to done), %s A1111 "
               "txt2img (median %s ms), %s OpenAI generations (median %s ms)"
               % (counts["native"] + counts["a1111"] + counts["openai"]))


TESTS = [test_chart, test_locust]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS, setup=setup))
