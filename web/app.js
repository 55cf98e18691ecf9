/* web/app.js - the Tessera page: plain JavaScript, no build step, nothing
 * from another host.  Talks to the same server's /v1 API (docs/api.md):
 * POST /v1/jobs, its event stream (queued, step, tiles, image, done...),
 * the tile URLs (immutable JPEGs painted onto one canvas per image),
 * /v1/batches for the batch view.  Job ids are kept in localStorage so the
 * gallery survives a reload (the server is asked for each job again).
 *
 * With keys on (docs/security.md) the first 401 shows a key field; the key
 * stays in sessionStorage (this tab only, gone when it closes) and goes out
 * as `Authorization: Bearer` on every fetch.  EventSource cannot send that
 * header, so event streams are then read with fetch (KeyedEvents, same
 * events and Last-Event-ID resume); images and tiles load in <img> through
 * the signed URLs the server hands out, which need no header.  Without a
 * key the page is what it was: EventSource, no field. */
"use strict";

const $ = (id) => document.getElementById(id);
const STORE_KEY = "tessera.jobs";
const KEY_STORE = "tessera.key";
const FIELDS = ["prompt", "negative_prompt", "width", "height", "steps", "cfg_scale", "sampler",
  "scheduler", "seed", "n"];
let mode = "single";
let current = null; // {id, es, images, steps, t0}

function apiKey() {
  try { return sessionStorage.getItem(KEY_STORE) || ""; } catch (e) { return ""; }
}

function withKey(headers) {
  const k = apiKey();
  if (k) headers["Authorization"] = "Bearer " + k;
  return headers;
}

/* The server wants a key (401): show the field. */
function needKey(message) {
  $("key-form").hidden = false;
  $("key-forget").hidden = !apiKey();
  $("err-key").textContent = apiKey() ? "The key was refused: " + (message || "401")
    : "This server needs an API key.";
}

async function api(method, path, body) {
  const opt = { method, headers: withKey({}) };
  if (body !== undefined) {
    opt.headers["Content-Type"] = "application/json";
    opt.body = JSON.stringify(body);
  }
  const r = await fetch(path, opt);
  let data = null;
  try { data = await r.json(); } catch (e) { data = null; }
  if (r.status === 401) needKey(data && data.error && data.error.message);
  return { status: r.status, ok: r.ok, data };
}

/* An event stream read with fetch, so it can carry the key: EventSource's
 * events (MessageEvent by name, .data) and its resume (Last-Event-ID, again
 * after a second) until close(). */
class KeyedEvents extends EventTarget {
  constructor(path) {
    super();
    this.path = path;
    this.last = null;
    this.closed = false;
    this.ctrl = null;
    this.run();
  }

  close() {
    this.closed = true;
    if (this.ctrl) this.ctrl.abort();
  }

  async run() {
    while (!this.closed) {
      this.ctrl = new AbortController();
      const h = withKey({ Accept: "text/event-stream" });
      if (this.last !== null) h["Last-Event-ID"] = this.last;
      try {
        const r = await fetch(this.path, { headers: h, signal: this.ctrl.signal, cache: "no-store" });
        if (!r.ok) {
          if (r.status === 401) needKey();
          this.dispatchEvent(new Event("error"));
          return;
        }
        await this.read(r.body.getReader());
      } catch (e) {
        if (this.closed) return;
      }
      if (!this.closed) await new Promise((ok) => setTimeout(ok, 1000));
    }
  }

  async read(reader) {
    const dec = new TextDecoder();
    let buf = "", name = "message", data = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done || this.closed) return;
      buf += dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, "");
        buf = buf.slice(nl + 1);
        if (line === "") {
          if (data.length && !this.closed) {
            this.dispatchEvent(new MessageEvent(name, { data: data.join("\n"),
              lastEventId: this.last || "" }));
          }
          name = "message";
          data = [];
          continue;
        }
        if (line[0] === ":") continue;
        const c = line.indexOf(":");
        const field = c < 0 ? line : line.slice(0, c);
        let v = c < 0 ? "" : line.slice(c + 1);
        if (v[0] === " ") v = v.slice(1);
        if (field === "event") name = v;
        else if (field === "data") data.push(v);
        else if (field === "id") this.last = v;
      }
    }
  }
}

function openEvents(path) {
  return apiKey() ? new KeyedEvents(path) : new EventSource(path);
}

/* ---------------------------------------------------------------- form */

function clearErrors() {
  for (const el of document.querySelectorAll(".field-error, .form-error")) el.textContent = "";
  for (const el of document.querySelectorAll(".field.invalid")) el.classList.remove("invalid");
}

/* error.field: "width", "defaults.width", "jobs[3].width" -> the width field */
function showError(err) {
  const field = err && err.field ? String(err.field) : null;
  const name = field ? field.replace(/^defaults\./, "").replace(/^jobs\[\d+\]\./, "") : null;
  const box = name && $("err-" + name);
  const msg = (err && err.message) || "request failed";
  if (box) {
    box.textContent = msg + (field !== name ? " (" + field + ")" : "");
    box.closest(".field").classList.add("invalid");
    const input = $(name);
    if (input) input.focus();
  } else {
    $("err-form").textContent = msg;
  }
}

function readParams() {
  const p = {};
  const num = (id) => { const v = $(id).value.trim(); return v === "" ? undefined : Number(v); };
  p.prompt = $("prompt").value;
  if ($("negative_prompt").value) p.negative_prompt = $("negative_prompt").value;
  for (const k of ["width", "height", "steps", "seed", "n"]) {
    const v = num(k);
    if (v !== undefined) p[k] = v;
  }
  const cfg = num("cfg_scale");
  if (cfg !== undefined) p.cfg_scale = cfg;
  if ($("sampler").value) p.sampler = $("sampler").value;
  if ($("scheduler").value) p.scheduler = $("scheduler").value;
  return p;
}

function applyParams(params, sameSeed) {
  for (const k of FIELDS) {
    if (!(k in params) || params[k] === null || typeof params[k] === "boolean") continue;
    if (k === "seed" && !sameSeed) continue;
    if ($(k)) $(k).value = params[k];
  }
  if (!sameSeed) $("seed").value = -1;
  $("prompt").focus();
}

async function loadLists() {
  const [s, c] = await Promise.all([api("GET", "/v1/samplers"), api("GET", "/v1/schedulers")]);
  if (s.ok) for (const x of s.data.samplers) $("sampler").add(new Option(x.name, x.name));
  if (c.ok) for (const x of c.data.schedulers) $("scheduler").add(new Option(x.name, x.name));
}

/* ------------------------------------------------------------- one job */

function fmtEta(s) {
  if (!isFinite(s)) return "";
  return s < 60 ? s.toFixed(1) + " s" : Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
}

async function submitJob() {
  const params = readParams();
  const r = await api("POST", "/v1/jobs", params);
  if (!r.ok) { showError(r.data && r.data.error); return; }
  rememberJob(r.data.id);
  startRun(r.data, params);
}

function startRun(job, params) {
  const n = job.images || 1;
  const steps = params.steps || 30;
  current = { id: job.id, images: n, steps, done: new Array(n).fill(0), grids: {} };
  $("run").hidden = false;
  $("cancel").disabled = false;
  $("status").textContent = "queued, position " + job.position;
  $("progress").max = n * steps;
  $("progress").value = 0;
  $("progress-text").textContent = "";
  const box = $("canvases");
  box.textContent = "";
  const w = params.width || 128, h = params.height || 128;
  for (let i = 0; i < n; i++) {
    const c = document.createElement("canvas");
    c.width = w; c.height = h;
    c.className = "tile-canvas";
    c.id = "canvas-" + i;
    c.setAttribute("role", "img");
    c.setAttribute("aria-label", "image " + (i + 1) + " of " + n + ", in progress");
    box.appendChild(c);
  }
  const es = openEvents("/v1/jobs/" + job.id + "/events");
  current.es = es;
  const data = (e) => JSON.parse(e.data);
  es.addEventListener("queued", (e) => {
    $("status").textContent = "queued, position " + data(e).position;
  });
  es.addEventListener("started", () => { $("status").textContent = "running"; });
  es.addEventListener("step", (e) => {
    const d = data(e);
    current.done[d.image] = d.step;
    const total = current.done.reduce((a, b) => a + b, 0);
    $("progress").value = total;
    $("progress-text").textContent = "step " + d.step + " / " + d.steps +
      (n > 1 ? " (image " + (d.image + 1) + ")" : "") + ", ETA " + fmtEta(d.eta);
  });
  es.addEventListener("tiles", (e) => paintTiles(job.id, data(e)));
  es.addEventListener("image", (e) => {
    const d = data(e);
    const c = $("canvas-" + d.index);
    if (c) c.setAttribute("aria-label", "image " + (d.index + 1) + " of " + n + ", finished");
  });
  const end = (state) => () => {
    es.close();
    $("cancel").disabled = true;
    document.body.dataset.lastJob = job.id;
    document.body.dataset.lastState = state.split(":")[0];
    $("status").textContent = state;
    if (state === "done") $("progress").value = $("progress").max;
    refreshJob(job.id);
    current = null;
  };
  es.addEventListener("done", end("done"));
  es.addEventListener("failed", (e) => {
    const d = data(e);
    end("failed: " + (d.error && d.error.message))();
  });
  es.addEventListener("cancelled", end("cancelled"));
}

function paintTiles(id, d) {
  if (!current || current.id !== id) return;
  const c = $("canvas-" + d.image);
  if (!c) return;
  const grid = current.grids[d.image];
  const draw = (g) => {
    const ctx = c.getContext("2d");
    const painted = current.painted || (current.painted = {});
    for (const t of d.tiles) {
      const key = d.image + ":" + t.row + "_" + t.col;
      const img = new Image();
      /* tiles load in any order: never paint an older version over a newer */
      img.onload = () => {
        if ((painted[key] || 0) > t.version) return;
        painted[key] = t.version;
        ctx.drawImage(img, t.col * g.tile_size, t.row * g.tile_size);
        c.dataset.paints = String(Number(c.dataset.paints || 0) + 1);
      };
      img.src = t.url;
    }
  };
  if (grid) { draw(grid); return; }
  /* the grid (tile size) once per image, from the manifest (the event's
   * URL: signed with keys on) */
  api("GET", d.manifest || "/v1/jobs/" + id + "/images/" + d.image + "/tiles").then((m) => {
    if (!m.ok) return;
    current && (current.grids[d.image] = m.data);
    draw(m.data);
  });
}

async function cancelJob() {
  if (!current) return;
  const r = await api("DELETE", "/v1/jobs/" + current.id);
  if (!r.ok && r.status !== 409) showError(r.data && r.data.error);
}

/* -------------------------------------------------------------- gallery */

function storedJobs() {
  try { return JSON.parse(localStorage.getItem(STORE_KEY) || "[]"); } catch (e) { return []; }
}

function rememberJob(id) {
  const ids = storedJobs().filter((x) => x !== id);
  ids.unshift(id);
  localStorage.setItem(STORE_KEY, JSON.stringify(ids.slice(0, 200)));
}

function forgetJob(id) {
  localStorage.setItem(STORE_KEY, JSON.stringify(storedJobs().filter((x) => x !== id)));
}

function galleryItem(job, img) {
  const li = document.createElement("li");
  li.className = "gallery-item";
  li.dataset.job = job.id;
  li.dataset.index = img.index;
  const p = job.params || {};
  const pic = document.createElement("img");
  pic.src = img.url;
  pic.alt = p.prompt || "generated image";
  pic.width = p.width || 128;
  pic.height = p.height || 128;
  pic.loading = "lazy";
  li.appendChild(pic);
  const cap = document.createElement("p");
  cap.className = "params";
  cap.textContent = (p.prompt || "") + " | " + p.width + "x" + p.height + ", " + p.steps +
    " steps, cfg " + p.cfg_scale + ", " + (p.sampler || "default") + ", seed " + img.seed;
  li.appendChild(cap);
  const links = document.createElement("div");
  links.className = "links";
  const a = document.createElement("a");
  a.href = img.url;
  a.download = job.id + "-" + img.index + ".png";
  a.textContent = "Download";
  links.appendChild(a);
  const use = document.createElement("button");
  use.type = "button";
  use.textContent = "Use these settings";
  use.className = "use-settings";
  use.addEventListener("click", () => applyParams(p, false));
  links.appendChild(use);
  const same = document.createElement("button");
  same.type = "button";
  same.textContent = "Same seed";
  same.className = "same-seed";
  same.addEventListener("click", () => applyParams(Object.assign({}, p, { seed: img.seed, n: 1 }), true));
  links.appendChild(same);
  li.appendChild(links);
  return li;
}

async function refreshJob(id) {
  const r = await api("GET", "/v1/jobs/" + id);
  if (r.status === 404) { forgetJob(id); return; }
  if (!r.ok) return;
  const job = r.data;
  const list = $("gallery");
  for (const old of list.querySelectorAll('[data-job="' + id + '"]')) old.remove();
  const items = job.images.filter((i) => i.url).map((i) => galleryItem(job, i));
  for (const it of items.reverse()) list.prepend(it);
  $("gallery-empty").hidden = list.children.length > 0;
}

async function loadGallery() {
  const ids = storedJobs();
  for (const id of ids.slice().reverse()) await refreshJob(id);
}

/* ---------------------------------------------------------------- batch */

async function submitBatch() {
  const prompts = $("prompts").value.split("\n").map((s) => s.trim()).filter((s) => s);
  if (!prompts.length) {
    showError({ field: "prompts", message: "write at least one prompt, one per line" });
    return;
  }
  const defaults = readParams();
  delete defaults.prompt;
  delete defaults.n;
  const r = await api("POST", "/v1/batches", { defaults, jobs: prompts.map((p) => ({ prompt: p })) });
  if (!r.ok) { showError(r.data && r.data.error); return; }
  const b = r.data;
  for (const j of b.jobs) rememberJob(j.id);
  $("batch").hidden = false;
  const grid = $("batch-grid");
  grid.textContent = "";
  const cells = {};
  b.jobs.forEach((j, k) => {
    const f = document.createElement("figure");
    f.className = "batch-cell";
    const cap = document.createElement("figcaption");
    cap.textContent = prompts[k];
    f.appendChild(cap);
    grid.appendChild(f);
    cells[j.id] = f;
  });
  let done = 0;
  $("batch-status").textContent = "0 / " + b.count + " done";
  const es = openEvents("/v1/batches/" + b.id + "/events");
  es.addEventListener("image", (e) => {
    const d = JSON.parse(e.data);
    const f = cells[d.job];
    if (!f) return;
    const img = document.createElement("img");
    img.src = d.url;
    img.alt = f.textContent;
    f.prepend(img);
  });
  es.addEventListener("job", (e) => {
    const d = JSON.parse(e.data);
    done++;
    $("batch-status").textContent = done + " / " + b.count + " done";
    refreshJob(d.job);
  });
  es.addEventListener("done", () => { es.close(); $("batch-status").textContent += " (batch finished)"; });
}

/* ----------------------------------------------------------------- wire */

function setMode(m) {
  mode = m;
  $("tab-single").setAttribute("aria-pressed", String(m === "single"));
  $("tab-batch").setAttribute("aria-pressed", String(m === "batch"));
  for (const el of document.querySelectorAll(".batch-only")) el.hidden = m !== "batch";
  for (const el of document.querySelectorAll(".single-only")) el.hidden = m !== "single";
  $("prompt").closest(".field").hidden = m === "batch";
  $("submit").textContent = m === "batch" ? "Submit batch" : "Generate";
}

$("form").addEventListener("submit", (e) => {
  e.preventDefault();
  clearErrors();
  (mode === "batch" ? submitBatch() : submitJob()).catch((err) => {
    $("err-form").textContent = String(err);
  });
});
/* Enter submits from the prompt (Shift+Enter: a new line) */
$("prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    $("form").requestSubmit();
  }
});
$("dice").addEventListener("click", () => {
  $("seed").value = Math.floor(Math.random() * 4294967295);
});
$("cancel").addEventListener("click", () => { cancelJob(); });
$("tab-single").addEventListener("click", () => setMode("single"));
$("tab-batch").addEventListener("click", () => setMode("batch"));

$("key-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const k = $("api-key").value.trim();
  if (!k) return;
  try { sessionStorage.setItem(KEY_STORE, k); } catch (err) { /* private mode: no key kept */ }
  $("api-key").value = "";
  $("err-key").textContent = "";
  $("key-form").hidden = true;
  for (const sel of ["sampler", "scheduler"]) {
    while ($(sel).options.length > 1) $(sel).remove(1);
  }
  loadLists();
  loadGallery();
});
$("key-forget").addEventListener("click", () => {
  try { sessionStorage.removeItem(KEY_STORE); } catch (err) { /* nothing kept */ }
  location.reload();
});

loadLists();
loadGallery();
