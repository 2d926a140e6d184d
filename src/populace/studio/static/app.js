// Populace Studio: one page, four views (runs, live run, agent search, one agent).
// Plain DOM and SVG; every piece of text from the server goes in as text, never as HTML.
"use strict";

const STATES = [
  ["idle", "idle", "var(--idle)"],
  ["waiting", "waiting on placeholder", "var(--wait)"],
  ["in_call", "in call", "var(--call)"],
  ["done", "done", "var(--ok)"],
  ["failed", "failed", "var(--bad)"],
];

// -- helpers -----------------------------------------------------------------------------
function h(tag, attrs, ...children) {
  const el = document.createElementNS(
    tag === "svg" || attrs?.svg ? "http://www.w3.org/2000/svg" : "http://www.w3.org/1999/xhtml",
    tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "svg" || v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
const s = (tag, attrs, ...children) => h(tag, { ...attrs, svg: true }, ...children);

async function api(path, options = {}) {
  const init = { headers: { Accept: "application/json" }, ...options };
  if (options.json !== undefined) {
    init.method = init.method || "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(options.json);
    delete init.json;
  }
  const response = await fetch(path, init);
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error || `${response.status} ${response.statusText}`);
  return body;
}

const num = (x) => (x === null || x === undefined ? "–" : Number(x).toLocaleString("en-US"));
const dec = (x, d = 2) => (x === null || x === undefined ? "–" : Number(x).toFixed(d));
const secs = (x) => (x === null || x === undefined ? "–" : x < 1 ? `${(x * 1000).toFixed(0)} ms` : `${Number(x).toFixed(2)} s`);
const when = (t) => (t ? new Date(t * 1000).toLocaleString() : "–");
const enc = encodeURIComponent;

function table(headers, rows, opts = {}) {
  const numeric = opts.numeric || [];
  return h("div", { class: "scroll" }, h("table", { id: opts.id },
    h("thead", null, h("tr", null, headers.map((x, i) =>
      h("th", { class: numeric.includes(i) ? "num" : null }, x)))),
    h("tbody", null, rows.map((r) => {
      const tr = h("tr", { class: r.onclick ? "click" : null, onclick: r.onclick },
        r.cells.map((c, i) => h("td", { class: numeric.includes(i) ? "num" : null }, c)));
      return tr;
    }))));
}

function setView(...nodes) {
  const view = document.getElementById("view");
  view.replaceChildren(...nodes);
}

function crumbs(...items) {
  const nav = document.getElementById("crumbs");
  nav.replaceChildren(...items.flatMap((it, i) => [i ? " / " : "", it]));
}

function setConn(state, text) {
  const el = document.getElementById("conn");
  el.className = `conn ${state}`;
  el.textContent = text;
}

// One live resource per view (an EventSource or a timer); closed when the view changes.
let live = [];
function cleanup() {
  for (const x of live) x();
  live = [];
  setConn("", "");
}

// -- runs --------------------------------------------------------------------------------
async function runsView() {
  crumbs(h("a", { href: "#/" }, "runs"));
  const error = h("p", { class: "error", id: "start-error" });
  const list = h("datalist", { id: "configs" });
  const config = h("input", { id: "config", class: "wide", list: "configs",
                              placeholder: "a run file (.yaml)" });
  const agents = h("input", { id: "agents", type: "number", min: 1, placeholder: "agents" });
  const steps = h("input", { id: "steps", type: "number", min: 1, placeholder: "steps" });
  const workers = h("input", { id: "workers", type: "number", min: 1, placeholder: "workers" });
  const start = h("button", { id: "start", type: "submit" }, "Start run");
  const form = h("form", { class: "row", id: "start-form" },
    config, list, agents, steps, workers, start);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    error.textContent = "";
    start.disabled = true;
    const intOrNull = (el) => (el.value ? parseInt(el.value, 10) : null);
    try {
      const r = await api("/api/runs", { json: {
        config: config.value.trim(), agents: intOrNull(agents), steps: intOrNull(steps),
        workers: intOrNull(workers) } });
      location.hash = `#/run/${enc(r.id)}`;
    } catch (e) {
      error.textContent = e.message;
    } finally {
      start.disabled = false;
    }
  });
  const runsBox = h("div", { id: "runs" }, h("p", { class: "muted" }, "Loading runs…"));
  setView(
    h("section", { class: "card" }, h("h3", null, "Start a run"),
      h("p", { class: "muted" }, "A run file (YAML) under the working directory; the fields " +
        "beside it override agents, steps (rounds, days…) and workers."), form, error),
    h("section", { class: "card" }, h("h3", null, "Runs"), runsBox));
  api("/api/configs").then((files) => {
    list.replaceChildren(...files.map((f) => h("option", { value: f })));
    if (!config.value && files.length) config.placeholder = files[0];
  }).catch(() => {});

  async function refresh() {
    try {
      const runs = await api("/api/runs");
      if (!runs.length) {
        runsBox.replaceChildren(h("p", { class: "muted" }, "No runs yet."));
        return;
      }
      runsBox.replaceChildren(table(
        ["run", "status", "agents", "steps", "wall time", "modified", ""],
        runs.map((r) => ({
          cells: [
            h("a", { href: `#/run/${enc(r.id)}` }, r.name === r.id ? r.id : `${r.name} · ${r.id}`),
            h("span", { class: `badge ${r.status}` }, r.status),
            num(r.agents), `${num(r.steps_done)} / ${num(r.steps_planned)}`,
            r.wall_s ? secs(r.wall_s) : "–", when(r.modified),
            h("span", { class: "row" },
              h("a", { href: `#/run/${enc(r.id)}` }, r.live ? "live" : "view"),
              r.live || (r.tables || []).length ? h("a", { href: `#/run/${enc(r.id)}/agents` }, "agents") : null,
              r.report ? h("a", { href: `/runs/${enc(r.id)}/report/`, target: "_blank" }, "report") : null),
          ],
        })), { id: "runs-table", numeric: [2, 3, 4] }));
    } catch (e) {
      runsBox.replaceChildren(h("p", { class: "error" }, e.message));
    }
  }
  await refresh();
  const timer = setInterval(refresh, 2000);
  live.push(() => clearInterval(timer));
}

// -- live run ----------------------------------------------------------------------------
// Numbers as a person reads them: integers with separators, others with 4 significant digits.
function val(x) {
  if (x === null || x === undefined) return "–";
  if (typeof x === "boolean") return x ? "yes" : "no";
  if (typeof x !== "number") return String(x);
  if (Number.isInteger(x)) return x.toLocaleString("en-US");
  return Math.abs(x) >= 1e5 || (Math.abs(x) < 1e-3 && x !== 0) ? x.toPrecision(4) : String(Number(x.toPrecision(4)));
}

// A histogram over `edges` (one more than `counts`), bars carrying their count.
function histogram(hist, opts = {}) {
  const W = opts.width || 640, H = opts.height || 220, pad = 28, right = 14;
  const counts = hist.counts || [], edges = hist.edges || [];
  const max = Math.max(1, ...counts);
  const n = Math.max(1, counts.length), bw = (W - pad - right) / n;
  const lo = edges.length ? edges[0] : 0, hi = edges.length ? edges[edges.length - 1] : 1;
  const bars = counts.map((c, i) => s("rect", {
    class: "hbar", x: pad + i * bw, width: Math.max(bw - 0.5, 0.5),
    y: H - pad - (c / max) * (H - 2 * pad), height: (c / max) * (H - 2 * pad),
    "data-count": c,
  }, s("title", null, `${val(edges[i])} – ${val(edges[i + 1])}: ${num(c)}`)));
  const label = (x, t) => s("text", { x, y: H - 10, "text-anchor": "middle" }, t);
  const centre = (i) => (edges.length > i + 1 ? (edges[i] + edges[i + 1]) / 2 : lo);
  return s("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", id: opts.id, class: "hist", role: "img",
                    "aria-label": opts.label || "histogram" },
    s("line", { class: "axis", x1: pad, y1: H - pad, x2: W - right, y2: H - pad }),
    s("text", { x: 2, y: pad - 6 }, num(max)), ...bars,
    counts.length ? [label(pad + bw / 2, val(centre(0))),
      label(pad + (W - pad - right) / 2, val((lo + hi) / 2)),
      label(W - right - bw / 2, val(centre(counts.length - 1)))] : []);
}

// One metric over the steps: a small line chart, its last value and its range.
function spark(name, steps, values) {
  const W = 260, H = 64, pad = 4;
  const pts = values.map((v, i) => [steps[i], typeof v === "boolean" ? Number(v) : v])
    .filter(([, v]) => typeof v === "number");
  const last = values.length ? values[values.length - 1] : null;
  const head = h("div", { class: "spark-head" }, h("span", { class: "spark-name" }, name),
    h("b", { class: "spark-value" }, val(last)));
  if (pts.length < 1) return h("div", { class: "spark", "data-metric": name }, head);
  const ys = pts.map(([, v]) => v), xs = pts.map(([t]) => t);
  const ymin = Math.min(...ys), ymax = Math.max(...ys), xmin = Math.min(...xs), xmax = Math.max(...xs);
  const x = (t) => pad + ((t - xmin) / (xmax - xmin || 1)) * (W - 2 * pad);
  const y = (v) => H - pad - ((v - ymin) / (ymax - ymin || 1)) * (H - 2 * pad);
  const d = pts.map(([t, v], i) => `${i ? "L" : "M"}${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
  return h("div", { class: "spark", "data-metric": name }, head,
    s("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img", "aria-label": `${name} per step` },
      s("path", { class: "line", d }),
      pts.length === 1 ? s("circle", { class: "dot", cx: x(pts[0][0]), cy: y(pts[0][1]), r: 2.5 }) : null),
    h("div", { class: "muted spark-range" }, `${val(ymin)} … ${val(ymax)} · steps ${xmin}–${xmax}`));
}

function runView(id) {
  crumbs(h("a", { href: "#/" }, "runs"), h("a", { href: `#/run/${enc(id)}` }, id));
  const el = {};
  const box = (key, title, ...extra) => (el[key] = h("div", { id: key }), h("section", { class: "card", id: `${key}-card` }, h("h3", null, title), ...extra, el[key]));
  el.title = h("h2", { id: "run-title" }, id);
  el.status = h("span", { id: "status", class: "badge" }, "…");
  el.meta = h("div", { class: "muted", id: "run-meta" });
  el.stop = h("button", { id: "stop", class: "danger", hidden: true }, "Stop run");
  el.links = h("span", { class: "row" }, h("a", { href: `#/run/${enc(id)}/agents`, id: "agents-link" }, "Browse agents"));
  el.report = h("a", { href: `/runs/${enc(id)}/report/`, target: "_blank", hidden: true, id: "report-link" }, "Report");
  el.stepText = h("b", { id: "step-text" });
  el.progressText = h("span", { id: "progress-text", class: "muted" });
  el.bar = h("div", { style: "width:0%" });
  el.updates = h("span", { id: "updates", class: "muted", "data-n": 0 });
  el.error = h("p", { class: "error", id: "run-error" });
  el.answersCaption = h("div", { class: "muted", id: "answers-caption" });
  setView(
    h("section", { class: "card" },
      h("div", { class: "row" }, el.title, el.status, h("span", { class: "spacer" }), el.links, el.report, el.stop),
      el.meta, el.error,
      h("div", { class: "row", style: "margin-top:10px" }, el.stepText, el.progressText, h("span", { class: "spacer" }), el.updates),
      h("div", { class: "bar", id: "progress-bar" }, el.bar)),
    h("div", { class: "grid" },
      box("states", "Agents by state"),
      box("answers", "Answers this step", el.answersCaption)),
    box("metrics", "Metrics per step"),
    box("distributions", "Distributions"),
    h("div", { class: "grid" },
      box("llm", "LLM"),
      box("workers", "Workers")),
    box("env", "Environment"));
  el.stop.addEventListener("click", async () => {
    el.stop.disabled = true;
    try {
      await api(`/api/runs/${enc(id)}/stop`, { method: "POST" });
    } catch (e) {
      el.error.textContent = e.message;
      el.stop.disabled = false;
    }
  });

  let n = 0;
  function render(snap) {
    n += 1;
    el.updates.dataset.n = n;
    el.updates.textContent = `${snap.live ? "live" : "from disk"} · update ${n}`;
    el.title.textContent = snap.name || id;
    el.status.className = `badge ${snap.status}`;
    el.status.textContent = snap.status;
    el.meta.textContent = [snap.run_id, `${num(snap.agents)} agents`, snap.backend && `${snap.backend} backend`,
      snap.n_workers && `${snap.n_workers} worker(s)`, (snap.models || []).length && `model ${snap.models.join(", ")}`,
      snap.elapsed_s !== null && snap.elapsed_s !== undefined && `${secs(snap.elapsed_s)} elapsed`].filter(Boolean).join(" · ");
    el.error.textContent = snap.error || "";
    el.stop.hidden = !(snap.live && !snap.finished);
    if (snap.stop_requested) { el.stop.disabled = true; el.stop.textContent = "Stopping…"; }
    el.report.hidden = !snap.report;
    const p = snap.progress || {};
    el.stepText.textContent = snap.step ? `Step ${snap.step} of ${snap.steps_planned ?? "?"}` :
      (snap.status === "starting" ? "Preparing the population and the workers…" : "No step played yet");
    el.progressText.textContent = !snap.live ? `${num(snap.steps_done)} step(s) done` :
      `${num(p.done)} / ${num(p.total)} answered` + (p.failed ? ` · ${num(p.failed)} failed` : "") +
      (snap.finished && p.done < p.total ? " · abandoned when the run stopped; finished steps are kept" : "");
    el.bar.style.width = `${(100 * (snap.live ? p.fraction || 0 : snap.steps_done / (snap.steps_planned || 1))).toFixed(1)}%`;
    renderStates(snap.states || {});
    renderAnswers(snap.answers || {}, snap.live);
    renderMetrics(snap.series || {});
    renderDistributions(snap.distributions || {});
    renderLLM(snap.llm || {});
    renderWorkers(snap);
    const env = Object.entries(snap.environment || {});
    el.env.replaceChildren(env.length ? table(["key", "value"], env.map(([k, v]) => ({ cells: [k, typeof v === "object" ? JSON.stringify(v) : String(v)] })), { id: "env-table" })
      : h("p", { class: "muted" }, "This scenario has no environment monitors."));
  }

  function renderStates(st) {
    const total = STATES.reduce((a, [k]) => a + (st[k] || 0), 0) || 1;
    el.states.replaceChildren(
      h("div", { class: "stack" }, STATES.map(([k, , c]) => h("div", { style: `width:${(100 * (st[k] || 0)) / total}%;background:${c}`, title: k }))),
      h("div", { class: "legend" }, STATES.map(([k, label, c]) => h("span", { style: `--c:${c}`, id: `state-${k}` }, `${label}: ${num(st[k] || 0)}`))));
  }

  function renderAnswers(a, isLive) {
    if (!(a.counts || []).length) {
      el.answers.replaceChildren(h("p", { class: "muted" }, isLive ? "No numeric answers in this step yet." :
        "Answers are shown while a step is collecting them."));
      el.answersCaption.textContent = "";
      return;
    }
    el.answers.replaceChildren(histogram(a, { id: "answers-svg", label: "histogram of this step's answers so far" }));
    el.answersCaption.textContent = `step ${a.step || "–"}: ${num(a.n)} numbers, ${num(a.missing)} other · mean ${val(a.mean)} · std ${val(a.std)}`;
  }

  function renderMetrics(series) {
    const steps = series.steps || [], metrics = Object.entries(series.metrics || {});
    if (!steps.length) {
      el.metrics.replaceChildren(h("p", { class: "muted" }, "No step finished yet."));
      return;
    }
    const rows = steps.map((t, i) => ({ cells: [t, ...metrics.map(([k, v]) => (k === "wall_s" ? secs(v[i]) : val(v[i])))] }));
    el.metrics.replaceChildren(
      h("div", { class: "sparks", id: "metric-charts" }, metrics.map(([k, v]) => spark(k, steps, v))),
      series.omitted ? h("p", { class: "muted" }, `${series.omitted} more metrics not shown`) : "",
      h("div", { class: "steps-table" }, table(["step", ...metrics.map(([k]) => k)], rows,
        { id: "metrics-table", numeric: metrics.map((_, i) => i + 1) })));
  }

  function renderDistributions(dists) {
    const items = Object.entries(dists);
    if (!items.length) {
      el.distributions.replaceChildren(h("p", { class: "muted" }, "This scenario reports no distributions (run.distribution)."));
      return;
    }
    el.distributions.replaceChildren(h("div", { class: "dists" }, items.map(([name, d]) =>
      h("div", { class: "dist", "data-name": name },
        h("div", { class: "spark-head" }, h("span", { class: "spark-name" }, name), h("span", { class: "muted" }, `step ${d.step}`)),
        histogram(d, { width: 420, height: 160, label: `distribution of ${name}` }),
        h("div", { class: "muted" }, `${num(d.n)} values` + (d.missing ? `, ${num(d.missing)} missing` : "") + ` · mean ${val(d.mean)}`)))));
  }

  function renderLLM(llm) {
    const lat = llm.latency_s || {};
    const kv = (label, value) => h("div", null, h("small", null, label), h("b", null, value));
    const parts = [h("div", { class: "kv" },
      kv("requests", num(llm.requests)), kv("requests/s", num(llm.requests_per_s)),
      kv("answers/s", num(llm.answers_per_s)), kv("in flight", num(llm.in_flight)),
      kv("tokens in", num(llm.prompt_tokens)), kv("tokens out", num(llm.completion_tokens)),
      kv("tokens cached", num(llm.cached_tokens)), kv("prefix reused", num(llm.prefix_tokens)),
      kv("retries", num(llm.retries)), kv("failed requests", num(llm.failures)),
      kv("latency p50", secs(lat.p50)), kv("latency p90", secs(lat.p90)), kv("latency p99", secs(lat.p99)))];
    if ((llm.errors || []).length) {
      parts.push(h("div", { class: "msg-label" }, "failed answers by kind"),
        table(["kind", "count"], llm.errors.map(([k, c]) => ({ cells: [k, num(c)] })), { numeric: [1] }));
    }
    if ((llm.models || []).length > 1) {
      parts.push(h("div", { class: "msg-label" }, "per model"),
        table(["model", "requests", "failed", "in flight", "tokens in", "tokens out"], llm.models.map((m) => ({
          cells: [m.model, num(m.requests), num(m.failures), num(m.in_flight), num(m.prompt_tokens), num(m.completion_tokens)] })),
        { numeric: [1, 2, 3, 4, 5] }));
    }
    if ((llm.endpoints || []).length) {
      parts.push(h("div", { class: "msg-label" }, "per endpoint"),
        table(["endpoint", "state", "requests", "failed", "in flight", "limit", "mean latency"], llm.endpoints.map((e) => ({
          cells: [e.url, e.state, num(e.requests), num(e.failures), num(e.in_flight), num(e.limit), secs(e.mean_latency_s)] })),
        { numeric: [2, 3, 4, 5, 6] }));
    }
    parts.push(h("div", { class: "muted", style: "margin-top:6px" }, "latency: per answer, all of its calls and retries · tokens cached: as servers report them · prefix reused: prompt tokens repeating a prefix already sent to the same endpoint · limit: requests an endpoint may have in flight (adaptive)"));
    el.llm.replaceChildren(...parts);
  }

  function renderWorkers(snap) {
    const rows = snap.workers || [];
    if (!rows.length) {
      el.workers.replaceChildren(h("p", { class: "muted" }, snap.live ? "Workers are starting…" : "Worker statistics are shown while a run is live."));
      return;
    }
    const shared = snap.llm && snap.llm.workers_share_memory;
    el.workers.replaceChildren(table(
      ["#", "pid", "node", "agents", "in flight", "waiting", "done", "failed", "LLM calls", shared ? "memory (shared)" : "memory"],
      rows.map((w) => ({ cells: [w.index, w.pid ?? "–", w.node ?? "–", num(w.agents), num(w.in_flight), num(w.waiting),
        num(w.calls_done), num(w.calls_failed), num(w.llm_in_flight), w.rss_mb === null ? "–" : `${num(Math.round(w.rss_mb))} MB`] })),
      { id: "workers-table", numeric: [3, 4, 5, 6, 7, 8, 9] }),
    snap.workers_omitted ? h("p", { class: "muted" }, `${snap.workers_omitted} more workers not shown`) : "");
  }

  const es = new EventSource(`/api/runs/${enc(id)}/events`);
  setConn("", "connecting…");
  es.onmessage = (ev) => { setConn("live", "live"); render(JSON.parse(ev.data)); };
  es.addEventListener("end", () => { es.close(); setConn("", "up to date"); });
  es.onerror = () => {
    if (es.readyState === EventSource.CLOSED) {
      api(`/api/runs/${enc(id)}`).then(render).catch((e) => { el.error.textContent = e.message; });
      setConn("lost", "disconnected");
    } else {
      setConn("lost", "reconnecting…");
    }
  };
  live.push(() => es.close());
}

// -- agents ------------------------------------------------------------------------------
async function agentsView(id, params) {
  crumbs(h("a", { href: "#/" }, "runs"), h("a", { href: `#/run/${enc(id)}` }, id), h("a", { href: `#/run/${enc(id)}/agents` }, "agents"));
  const q = new URLSearchParams(params || "");
  const tableSel = h("select", { id: "f-table" });
  const step = h("input", { id: "f-step", type: "number", min: 0, placeholder: "step", value: q.get("step") || "" });
  const agentId = h("input", { id: "f-id", type: "number", min: 0, placeholder: "agent id", value: q.get("agent_id") || "" });
  const group = h("input", { id: "f-group", type: "number", min: 0, placeholder: "group", value: q.get("group") || "" });
  const attribute = h("select", { id: "f-attr" }, h("option", { value: "" }, "any attribute"));
  const valueBox = h("span", null);
  let value = h("input", { id: "f-value", placeholder: "value contains…", value: q.get("value") || "" });
  valueBox.append(value);
  const error = h("p", { class: "error", id: "agents-error" });
  const note = h("p", { class: "muted", id: "agents-table-note" });
  const results = h("div", { id: "agents-results" });
  const form = h("form", { class: "row", id: "agents-form" }, tableSel, step, agentId, group, attribute, valueBox,
    h("button", { type: "submit" }, "Search"));
  setView(h("section", { class: "card" }, h("h3", null, "Agents"), form, note, error, results));
  let info = null;
  let page = parseInt(q.get("page") || "0", 10);

  function valueInput() {
    const col = (info ? info.columns : []).find((c) => c.name === attribute.value);
    const old = value.value;
    value = col && col.values
      ? h("select", { id: "f-value" }, h("option", { value: "" }, "any value"), col.values.map((v) => h("option", { value: String(v) }, String(v))))
      : h("input", { id: "f-value", placeholder: "value contains…" });
    value.value = old;
    valueBox.replaceChildren(value);
  }

  async function loadColumns(first) {
    const p = new URLSearchParams();
    if (tableSel.value || q.get("table")) p.set("table", tableSel.value || q.get("table"));
    if (step.value) p.set("step", step.value);
    try {
      info = await api(`/api/runs/${enc(id)}/columns?${p}`);
    } catch (e) {
      error.textContent = e.message;
      return false;
    }
    tableSel.replaceChildren(...info.tables.map((t) => h("option", { value: t.name }, t.name)));
    tableSel.value = info.table;
    const chosen = info.tables.find((t) => t.name === info.table) || { steps: [] };
    step.hidden = !chosen.steps.length;
    if (chosen.steps.length) {
      step.min = chosen.steps[0];
      step.max = chosen.steps[chosen.steps.length - 1];
      step.value = info.step;
    }
    note.textContent = chosen.steps.length ? `${info.table}: one row per agent and step (steps ${chosen.steps[0]}–${chosen.steps[chosen.steps.length - 1]}); showing step ${info.step}`
      : `${info.table}: one row per agent`;
    const keep = first ? q.get("attribute") || "" : attribute.value;
    attribute.replaceChildren(h("option", { value: "" }, "any attribute"),
      ...info.columns.filter((c) => c.name !== "agent_id").map((c) => h("option", { value: c.name }, c.name)));
    attribute.value = info.columns.some((c) => c.name === keep) ? keep : "";
    group.hidden = !info.columns.some((c) => c.name === "group");
    valueInput();
    return true;
  }

  async function search() {
    error.textContent = "";
    const params = new URLSearchParams({ page, size: 50, table: info.table });
    if (info.step !== null && info.step !== undefined) params.set("step", info.step);
    if (agentId.value) params.set("agent_id", agentId.value);
    if (group.value && !group.hidden) params.set("group", group.value);
    if (attribute.value) { params.set("attribute", attribute.value); if (value.value) params.set("value", value.value); }
    try {
      const r = await api(`/api/runs/${enc(id)}/agents?${params}`);
      const prev = h("button", { class: "plain", disabled: r.page === 0, onclick: () => { page -= 1; search(); } }, "‹ previous");
      const next = h("button", { class: "plain", disabled: r.page + 1 >= r.pages, onclick: () => { page += 1; search(); } }, "next ›");
      const idIndex = r.columns.indexOf("agent_id");
      results.replaceChildren(
        h("p", { class: "muted", id: "agents-total" }, `${num(r.total)} agents match`),
        table(r.columns, r.rows.map((row) => ({
          cells: row.map((v, i) => (i === idIndex ? h("a", { href: `#/run/${enc(id)}/agent/${v}` }, String(v)) : v === null ? "–" : val(v))),
          onclick: () => { location.hash = `#/run/${enc(id)}/agent/${row[idIndex]}`; },
        })), { id: "agents-table" }),
        h("div", { class: "row pager" }, prev, h("span", { class: "muted" }, `page ${r.page + 1} of ${r.pages}`), next));
    } catch (e) {
      error.textContent = e.message;
    }
  }
  if (!(await loadColumns(true))) return;
  value.value = q.get("value") || "";
  attribute.addEventListener("change", valueInput);
  tableSel.addEventListener("change", async () => { step.value = ""; page = 0; if (await loadColumns(false)) search(); });
  step.addEventListener("change", async () => { page = 0; if (await loadColumns(false)) search(); });
  form.addEventListener("submit", (ev) => { ev.preventDefault(); page = 0; search(); });
  search();
}

// One row of a table, as the agent's page shows it: short values in a grid, long text whole.
function rowView(name, row) {
  const entries = Object.entries(row);
  const long = ([, v]) => typeof v === "string" && (v.length > 60 || v.includes("\n"));
  return h("div", { class: "agent-row", "data-table": name },
    h("div", { class: "kv" }, entries.filter((e) => !long(e)).map(([k, v]) =>
      h("div", { "data-column": k }, h("small", null, k), h("b", null, val(v))))),
    entries.filter(long).map(([k, v]) => [h("div", { class: "msg-label" }, k), h("pre", { "data-column": k }, v)]));
}

async function agentView(id, agentId) {
  crumbs(h("a", { href: "#/" }, "runs"), h("a", { href: `#/run/${enc(id)}` }, id),
    h("a", { href: `#/run/${enc(id)}/agents` }, "agents"), `agent ${agentId}`);
  setView(h("p", { class: "muted" }, "Loading…"));
  let a;
  try {
    a = await api(`/api/runs/${enc(id)}/agents/${enc(agentId)}`);
  } catch (e) {
    setView(h("p", { class: "error" }, e.message));
    return;
  }
  const profile = Object.entries(a.profile);
  const steps = a.steps.map((st) => h("div", { class: "step", "data-step": st.step },
    h("div", { class: "row" }, h("b", null, `Step ${st.step}`)),
    Object.entries(st.rows).map(([name, rows]) => [
      a.tables.length > 1 ? h("div", { class: "msg-label" }, name) : null,
      rows.map((row) => rowView(name, row))]),
    Object.keys(st.metrics).length ? h("div", { class: "step-metrics muted" }, "the run this step: " +
      Object.entries(st.metrics).map(([k, v]) => `${k} ${k === "wall_s" ? secs(v) : val(v)}`).join(" · ")) : null));
  setView(
    h("section", { class: "card" }, h("h2", { id: "agent-title" }, `Agent ${a.agent_id}`),
      table(["attribute", "value"], profile.map(([k, v]) => ({ cells: [k, v === null ? "–" : String(v)] })), { id: "profile-table" })),
    a.background ? h("section", { class: "card" }, h("h3", null, "Background"), h("pre", { id: "background" }, a.background)) : "",
    h("section", { class: "card", id: "steps" }, h("h3", null, `Steps (${a.steps.length})` + (a.tables.length ? ` · ${a.tables.join(", ")}` : "")),
      steps.length ? steps : h("p", { class: "muted" }, "No finished step yet.")));
}

// -- routing -----------------------------------------------------------------------------
function route() {
  cleanup();
  const [path, query] = location.hash.replace(/^#\/?/, "").split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "run" && parts[1]) {
    if (parts[2] === "agents") return agentsView(parts[1], query);
    if (parts[2] === "agent" && parts[3]) return agentView(parts[1], parts[3]);
    return runView(parts[1]);
  }
  return runsView();
}
window.addEventListener("hashchange", route);
route();
