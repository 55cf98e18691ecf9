"""tools/loadtest/locustfile.py - load `tessera serve` with locust
(https://locust.io, from PyPI), for people who already use it.

Three weighted, tagged tasks, each one image generation:

  native  POST /v1/jobs, then its event stream GET /v1/jobs/{id}/events to
          the end; "SSE native: submit -> done" and "SSE native: submit ->
          first preview" are custom request events (the first `step` or
          `tiles` event; a `failed` event is a failure)
  a1111   POST /sdapi/v1/txt2img {prompt, steps, width, height, seed}
  openai  POST /v1/images/generations {prompt, n, size, response_format: b64_json}

Run (the venv from scripts/setup-test-venv.sh; keep it a process of its own):

  .venv-test/bin/locust -f tools/loadtest/locustfile.py --host http://127.0.0.1:8080 \\
      --headless -u 8 -r 4 --run-time 60s --tags native --html report.html

--tags picks task kinds (native, a1111, openai; the default is all three).
Options of this file (locust --help lists them too): --image-size WxH
(default 64x64), --steps N (default 4), --images-per-request N (default 1,
native `n` and OpenAI `n`), --job-timeout S (default 300), --token TOKEN
(Authorization: Bearer).  Task weights: TESSERA_LOCUST_WEIGHTS="native=3,
a1111=1,openai=1" (the default), read when the file is imported.
"""
import json
import os
import random
import time

from locust import HttpUser, between, events, tag, task


def _weights():
    w = {"native": 3, "a1111": 1, "openai": 1}
    spec = os.environ.get("TESSERA_LOCUST_WEIGHTS", "")
    for part in filter(None, (p.strip() for p in spec.split(","))):
        k, _, v = part.partition("=")
        if k not in w or not v.isdigit():
            raise SystemExit("TESSERA_LOCUST_WEIGHTS: expected native=N,a1111=N,openai=N, got %r"
                             % spec)
        w[k] = int(v)
    return w


WEIGHTS = _weights()
PROMPTS = [
    "a red circle on a blue background",
    "a small yellow star in the top left corner on a blue background",
    "a green triangle on the right on black",
    "two purple squares on an orange background",
]


@events.init_command_line_parser.add_listener
def _options(parser):
    parser.add_argument("--image-size", default="64x64", help="tessera: image size WxH")
    parser.add_argument("--steps", type=int, default=4, help="tessera: steps per image")
    parser.add_argument("--images-per-request", type=int, default=1,
                        help="tessera: images per native job / OpenAI request")
    parser.add_argument("--job-timeout", type=float, default=300,
                        help="tessera: seconds a native job may take")
    parser.add_argument("--token", default="", help="tessera: bearer token")


class TesseraUser(HttpUser):
    wait_time = between(0, 0.1)

    def on_start(self):
        o = self.environment.parsed_options
        w, _, h = o.image_size.partition("x")
        self.width, self.height = int(w), int(h or w)
        self.steps = o.steps
        self.n = o.images_per_request
        self.timeout = o.job_timeout
        if o.token:
            self.client.headers["Authorization"] = "Bearer " + o.token

    def _fire(self, name, t0, length=0, exc=None):
        self.environment.events.request.fire(
            request_type="SSE", name=name, response_time=(time.perf_counter() - t0) * 1000.0,
            response_length=length, exception=exc, context={})

    @tag("native")
    @task(WEIGHTS["native"])
    def native(self):
        body = {"prompt": random.choice(PROMPTS), "width": self.width, "height": self.height,
                "steps": self.steps, "n": self.n, "seed": random.randrange(1 << 32)}
        t0 = time.perf_counter()
        with self.client.post("/v1/jobs", json=body, name="POST /v1/jobs",
                              catch_response=True) as r:
            if r.status_code != 202:
                r.failure("HTTP %d: %s" % (r.status_code, r.text[:200]))
                return
            job = r.json()["id"]
        images, preview, end, length = 0, False, None, 0
        with self.client.get("/v1/jobs/%s/events" % job, name="GET /v1/jobs/{id}/events",
                             stream=True, catch_response=True,
                             headers={"Accept": "text/event-stream"},
                             timeout=self.timeout) as r:
            if r.status_code != 200:
                r.failure("HTTP %d" % r.status_code)
                return
            event = None
            for raw in r.iter_lines():
                line = raw.decode("utf-8", "replace")
                length += len(raw) + 1
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:") and event:
                    if event in ("step", "tiles") and not preview:
                        preview = True
                        self._fire("native: submit -> first preview", t0)
                    elif event == "image":
                        images += 1
                    elif event in ("done", "failed", "cancelled"):
                        end = (event, line[5:].strip())
                        break
                if time.perf_counter() - t0 > self.timeout:
                    end = ("timeout", "")
                    break
            r.success()  # the stream itself worked; the job's outcome is reported below
        if end is None:
            self._fire("native: submit -> done", t0, length,
                       RuntimeError("the event stream ended before the job did"))
        elif end[0] != "done" or images != self.n:
            self._fire("native: submit -> done", t0, length,
                       RuntimeError("job %s: %s %s" % (job, end[0], end[1][:200])))
        else:
            self._fire("native: submit -> done", t0, length)

    @tag("a1111")
    @task(WEIGHTS["a1111"])
    def a1111(self):
        body = {"prompt": random.choice(PROMPTS), "steps": self.steps, "width": self.width,
                "height": self.height, "seed": random.randrange(1 << 32)}
        with self.client.post("/sdapi/v1/txt2img", json=body, name="POST /sdapi/v1/txt2img",
                              catch_response=True, timeout=self.timeout) as r:
            if r.status_code != 200:
                r.failure("HTTP %d: %s" % (r.status_code, r.text[:200]))
                return
            try:
                ok = len(r.json().get("images", [])) >= 1
            except (ValueError, AttributeError):
                ok = False
            if not ok:
                r.failure("no images in the reply")

    @tag("openai")
    @task(WEIGHTS["openai"])
    def openai(self):
        body = {"prompt": random.choice(PROMPTS), "n": self.n,
                "size": "%dx%d" % (self.width, self.height), "response_format": "b64_json"}
        with self.client.post("/v1/images/generations", json=body,
                              name="POST /v1/images/generations", catch_response=True,
                              timeout=self.timeout) as r:
            if r.status_code != 200:
                r.failure("HTTP %d: %s" % (r.status_code, r.text[:200]))
                return
            try:
                data = r.json().get("data", [])
                ok = len(data) == self.n and all(d.get("b64_json") for d in data)
            except (ValueError, AttributeError):
                ok = False
            if not ok:
                r.failure("expected %d b64_json images" % self.n)


if __name__ == "__main__":
    print(json.dumps(WEIGHTS))
