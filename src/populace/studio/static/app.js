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

// A long name that may break after its underscores (and nowhere else): mean_<wbr>happy.
const breakable = (name) => String(name).split("_").flatMap((part, i, all) => (i < all.length - 1 ? [`${part}_`, h("wbr")] : [part]));

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

// What a run's scenario declares for the panels (read once per run): what its answers are,
// its metrics that are shares of options, example texts, models whose calls are not recorded.
const declared = new Map();
function viewOf(id) {
  if (!declared.has(id)) {
    // A run just started has no config.yaml yet: its scenario is unknown, and asked again.
    declared.set(id, api(`/api/runs/${enc(id)}/view`).catch(() => null).then((v) => {
      if (!v || !v.scenario) declared.delete(id);
      return v;
    }));
  }
  return declared.get(id);
}
const GENERIC = { answers: null, categorical: [], choices: [], metrics: [], unrecorded_models: [],
  examples: { question: "What matters most to you right now, and why?", where: null,
              message: "An announcement for everyone.", changes: "seed=3" } };

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
  const label = (x, t) => s("text", { x, y: H - 10, "text-anchor": "middle", class: "tick" }, t);
  const centre = (i) => (edges.length > i + 1 ? (edges[i] + edges[i + 1]) / 2 : lo);
  // Bins of one integer each are labelled by their integer; others by the range's edges.
  const unit = edges.length > 1 && Math.abs(edges[1] - edges[0] - 1) < 1e-9 && Number.isInteger(centre(0));
  const ticks = !counts.length ? [] : unit
    ? [label(pad + bw / 2, val(centre(0))), label(pad + (W - pad - right) / 2, val(centre(Math.floor(counts.length / 2)))),
       label(W - right - bw / 2, val(centre(counts.length - 1)))]
    : [label(pad + 8, val(lo)), label(pad + (W - pad - right) / 2, val((lo + hi) / 2)), label(W - right - 8, val(hi))];
  return s("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", id: opts.id, class: "hist", role: "img",
                    "aria-label": opts.label || "histogram" },
    s("line", { class: "axis", x1: pad, y1: H - pad, x2: W - right, y2: H - pad }),
    s("text", { x: 2, y: pad - 6 }, num(max)), ...bars, ticks);
}

// One metric over the steps: a small line chart, its last value and its range.
// One metric over the steps, large: axes with the range and the steps, a point per step
// (hover: its value), the fork point or interventions as marks when given.
function metricChart(name, steps, values, marks) {
  const W = 900, H = 240, left = 64, right = 16, top = 14, bottom = 30;
  const pts = values.map((v, i) => [steps[i], typeof v === "boolean" ? Number(v) : v]).filter(([, v]) => typeof v === "number");
  if (!pts.length) return h("p", { class: "muted" }, `${name}: no step reported a number.`);
  const ys = pts.map(([, v]) => v), xs = steps;
  let ymin = Math.min(...ys), ymax = Math.max(...ys);
  if (ymin === ymax) { ymin -= Math.abs(ymin) * 0.1 || 1; ymax += Math.abs(ymax) * 0.1 || 1; }
  const xmin = Math.min(...xs), xmax = Math.max(...xs);
  const x = (t) => left + ((t - xmin) / (xmax - xmin || 1)) * (W - left - right);
  const y = (v) => H - bottom - ((v - ymin) / (ymax - ymin)) * (H - top - bottom);
  const fmt = (v) => (name === "wall_s" ? secs(v) : val(v));
  const d = pts.map(([t, v], i) => `${i ? "L" : "M"}${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
  const ticks = [...new Set([xmin, Math.round((xmin + xmax) / 2), xmax])];
  return s("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", id: "metric-detail-svg", role: "img", "aria-label": `${name} per step` },
    s("line", { class: "axis", x1: left, y1: H - bottom, x2: W - right, y2: H - bottom }),
    s("line", { class: "axis", x1: left, y1: top, x2: left, y2: H - bottom }),
    s("text", { x: left - 6, y: top + 4, "text-anchor": "end" }, fmt(ymax)),
    s("text", { x: left - 6, y: H - bottom, "text-anchor": "end" }, fmt(ymin)),
    ticks.map((t) => s("text", { x: x(t), y: H - 10, "text-anchor": "middle" }, `step ${t}`)),
    [...(marks || new Map()).keys()].filter((t) => t >= xmin && t <= xmax).map((t) =>
      s("line", { class: "fork-at", x1: x(t), x2: x(t), y1: top, y2: H - bottom }, s("title", null, `step ${t}: ${(marks.get(t) || []).join("; ")}`))),
    s("path", { class: "line", d }),
    pts.map(([t, v]) => s("circle", { class: "dot", cx: x(t), cy: y(v), r: pts.length > 60 ? 1.5 : 3, "data-step": t, "data-value": v },
      s("title", null, `step ${t}: ${fmt(v)}`))));
}

function spark(name, steps, values) {
  const W = 260, H = 64, pad = 4;
  const pts = values.map((v, i) => [steps[i], typeof v === "boolean" ? Number(v) : v])
    .filter(([, v]) => typeof v === "number");
  // The latest value reported (a question asked in an earlier wave: its step says so).
  let at = values.length - 1;
  while (at > 0 && (values[at] === null || values[at] === undefined)) at -= 1;
  const last = at >= 0 ? values[at] : null;
  const fmt = (x) => (name === "wall_s" && typeof x === "number" ? secs(x) : val(x));
  const shown = fmt(last);
  const head = h("div", { class: "spark-head" }, h("span", { class: "spark-name", title: name }, name),
    h("b", { class: "spark-value" }, shown,
      at >= 0 && at < values.length - 1 && last !== null ? h("small", { class: "muted spark-at" }, ` step ${steps[at]}`) : null));
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
    h("div", { class: "muted spark-range" }, `${fmt(ymin)} … ${fmt(ymax)} · steps ${xmin}–${xmax}`));
}

function runView(id) {
  crumbs(h("a", { href: "#/" }, "runs"), h("a", { href: `#/run/${enc(id)}` }, id));
  const el = {};
  const box = (key, title, ...extra) => (el[key] = h("div", { id: key }), h("section", { class: "card", id: `${key}-card` }, h("h3", null, title), ...extra, el[key]));
  el.title = h("h2", { id: "run-title" }, id);
  el.status = h("span", { id: "status", class: "badge" }, "…");
  el.meta = h("div", { class: "muted", id: "run-meta" });
  el.stop = h("button", { id: "stop", class: "danger", hidden: true }, "Stop run");
  // Pause holds the run at its next step boundary; Step plays one more step, then holds.
  el.pause = h("button", { id: "pause", class: "plain", hidden: true, title: "Hold the run when the step in progress is written" }, "Pause");
  el.resume = h("button", { id: "resume", hidden: true }, "Resume");
  el.stepOnce = h("button", { id: "step-once", class: "plain", hidden: true, title: "Play one more step, then hold" }, "Step");
  el.pauseState = h("span", { id: "pause-state", class: "marker pending", hidden: true });
  el.links = h("span", { class: "row" }, h("a", { href: `#/run/${enc(id)}/agents`, id: "agents-link" }, "Browse agents"));
  el.report = h("a", { href: `/runs/${enc(id)}/report/`, target: "_blank", hidden: true, id: "report-link" }, "Report");
  el.stepText = h("b", { id: "step-text" });
  el.progressText = h("span", { id: "progress-text", class: "muted" });
  el.bar = h("div", { style: "width:0%" });
  el.updates = h("span", { id: "updates", class: "muted", "data-n": 0 });
  el.error = h("p", { class: "error", id: "run-error" });
  el.fork = h("div", { class: "fork-banner", id: "fork-banner", hidden: true });
  el.answersCaption = h("div", { class: "muted", id: "answers-caption" });
  let view = GENERIC, lastSnap = null;
  // Managing the run: read when the view opens and when a step ends, never streamed.
  let marks = new Map(), lastSeries = null;
  const fork = forkPanel(id);
  const interviews = interviewPanel(id);
  const interventions = intervenePanel(id, (m) => { marks = m; if (lastSeries) renderMetrics(lastSeries); });
  const shares = sharesPanel(id);
  const branch = branchPanel(id);
  const problems = logPanel(id);
  const sampling = samplingPanel(id);
  setView(
    h("section", { class: "card" },
      h("div", { class: "row" }, el.title, el.status, el.pauseState, h("span", { class: "spacer" }), el.links, el.report,
        el.pause, el.stepOnce, el.resume, el.stop),
      el.meta, el.fork, el.error,
      h("div", { class: "row", style: "margin-top:10px" }, el.stepText, el.progressText, h("span", { class: "spacer" }), el.updates),
      h("div", { class: "bar", id: "progress-bar" }, el.bar)),
    h("div", { class: "grid" },
      box("states", "Agents by state"),
      box("answers", "Answers this step", el.answersCaption)),
    box("metrics", "Metrics per step"),
    branch.node,
    h("div", { class: "grid", id: "manage" }, interviews.node, interventions.node),
    shares.node,
    sampling.node,
    box("distributions", "Distributions"),
    h("div", { class: "grid" },
      box("llm", "LLM"),
      box("workers", "Workers")),
    box("env", "Environment"),
    problems.node);
  document.getElementById("metrics-card").append(fork.node);
  let viewKnown = false, viewAsked = 0;
  function readView() {
    viewAsked = Date.now();
    viewOf(id).then((v) => {
      if (viewKnown) return;
      viewKnown = Boolean(v && v.scenario);
      view = v || GENERIC;
      shares.onload = () => { if (lastSnap) renderAnswers(lastSnap.answers || {}, lastSnap.live); };
      for (const panel of [interviews, interventions, fork, shares]) panel.declare(view);
      if (lastSnap) renderAnswers(lastSnap.answers || {}, lastSnap.live);
      if (lastSeries) renderMetrics(lastSeries);
    });
  }
  readView();
  const control = (button, path, body) => button.addEventListener("click", async () => {
    button.disabled = true;
    el.error.textContent = "";
    try {
      await api(`/api/runs/${enc(id)}/${path}`, body ? { json: body } : { method: "POST" });
    } catch (e) {
      el.error.textContent = e.message;
    } finally {
      button.disabled = false;
    }
  });
  control(el.pause, "pause");
  control(el.resume, "resume");
  control(el.stepOnce, "resume", { steps: 1 });
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
    lastSnap = snap;
    if (!viewKnown && Date.now() - viewAsked > 2000) readView();  // its scenario, once known
    el.updates.dataset.n = n;
    el.updates.textContent = `${snap.live ? "live" : "from disk"} · update ${n}`;
    el.title.textContent = snap.name || id;
    el.status.className = `badge ${snap.status}`;
    el.status.textContent = snap.status;
    el.meta.textContent = [snap.run_id, `${num(snap.agents)} agents`, snap.backend && `${snap.backend} backend`,
      snap.n_workers && `${snap.n_workers} worker(s)`, (snap.models || []).length && `model ${snap.models.join(", ")}`,
      snap.elapsed_s !== null && snap.elapsed_s !== undefined && `${secs(snap.elapsed_s)} elapsed`].filter(Boolean).join(" · ");
    el.error.textContent = snap.error || "";
    const origin = snap.forked_from;
    el.fork.hidden = !origin;
    if (origin && el.fork.dataset.run !== origin.run) {
      el.fork.dataset.run = origin.run;
      const changes = Object.entries(origin.set || {});
      el.fork.replaceChildren("A fork of ", h("a", { href: `#/run/${enc(origin.run)}`, id: "fork-source" }, origin.run),
        ` after step ${origin.step ?? "?"}`, ...(changes.length
          ? [" · changed: ", h("span", { id: "fork-changes" }, changes.map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`).join(", "))]
          : [" · no setting changed"]));
    }
    el.stop.hidden = !(snap.live && !snap.finished);
    const pause = snap.finished ? null : snap.paused;
    const waiting = pause && pause.waiting_after !== null && pause.waiting_after !== undefined;
    el.pause.hidden = !pause || pause.requested;
    el.resume.hidden = !pause || !pause.requested;
    el.stepOnce.hidden = !waiting;
    el.pauseState.hidden = !pause || !pause.requested;
    el.pauseState.textContent = waiting ? `paused after step ${pause.waiting_after}` : "pausing when this step is written";
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
    for (const panel of [interviews, interventions, fork, shares, branch, sampling, problems]) panel.update(snap);
    renderLLM(snap.llm || {}, snap.live);
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
    const what = view.answers || "numbers";
    if (view.categorical.length) {  // shares of options: the step's so far, else the last finished step's
      const counts = (lastSnap && lastSnap.choices) || {};
      const live = !lastSnap.finished && Object.keys(counts).length && view.choices.length;
      el.answers.replaceChildren(live ? shares.live(counts, view.choices, lastSnap.step) : shares.latest());
      el.answersCaption.textContent = !isLive || !a.n ? "" :
        `step ${a.step || "–"}: ${num(a.n)} answered` + (lastSnap && lastSnap.finished ? "" : " so far") + (a.missing ? `, ${num(a.missing)} without a number` : "") +
        (a.mean !== null && a.mean !== undefined ? ` · ${what}: mean ${val(a.mean)}` : "");
      return;
    }
    if (!(a.counts || []).length) {
      el.answers.replaceChildren(h("p", { class: "muted" }, isLive ? "No numeric answers in this step yet." :
        "Answers are shown while a step is collecting them."));
      el.answersCaption.textContent = "";
      return;
    }
    el.answers.replaceChildren(histogram(a, { id: "answers-svg", label: "histogram of this step's answers so far" }));
    el.answersCaption.textContent = `step ${a.step || "–"}: ${num(a.n)} ${what}` + (a.missing ? `, ${num(a.missing)} other` : "") +
      (a.std === 0 ? ` · all ${val(a.mean)}` : ` · mean ${val(a.mean)} · std ${val(a.std)}`);
  }

  let metricsKey = "", chosen = null;
  function renderMetrics(series) {
    lastSeries = series;
    const key = JSON.stringify([series, [...marks], view.metrics]);
    if (key === metricsKey) return; // unchanged: the table and its Fork buttons stay put
    metricsKey = key;
    // The scenario's headline metrics first (its terminal line's), then the rest as reported.
    const first = view.metrics || [];
    const rank = (k) => (first.includes(k) ? first.indexOf(k) : first.length);
    const steps = series.steps || [], metrics = Object.entries(series.metrics || {})
      .map((kv, i) => [kv, i]).sort(([[a], i], [[b], j]) => rank(a) - rank(b) || i - j).map(([kv]) => kv);
    if (!steps.length) {
      el.metrics.replaceChildren(h("p", { class: "muted" }, "No step finished yet."));
      return;
    }
    const rows = steps.map((t, i) => ({ cells: [t, ...metrics.map(([k, v]) => (k === "wall_s" ? secs(v[i]) : val(v[i]))),
      stepCell(t, marks, fork)] }));
    const csv = () => {
      const cell = (x) => (x === null || x === undefined ? "" : /[",\n]/.test(String(x)) ? `"${String(x).replace(/"/g, '""')}"` : String(x));
      const lines = [["step", ...metrics.map(([k]) => k)], ...steps.map((t, i) => [t, ...metrics.map(([, v]) => v[i])])];
      return URL.createObjectURL(new Blob([lines.map((l) => l.map(cell).join(",")).join("\n") + "\n"], { type: "text/csv" }));
    };
    const exportLink = h("a", { href: "#", id: "metrics-csv", download: `${id}-steps.csv` }, "Download CSV");
    exportLink.addEventListener("click", () => { exportLink.href = csv(); });
    // A card clicked opens its metric large, below the cards (clicked again: closed).
    const detail = h("div", { id: "metric-detail", hidden: !chosen || !series.metrics[chosen] });
    if (chosen && series.metrics[chosen]) {
      detail.append(h("div", { class: "spark-head" }, h("b", null, chosen), h("span", { class: "muted" }, "per step; ⚑ interventions")),
        metricChart(chosen, steps, series.metrics[chosen], marks));
    }
    const cards = metrics.map(([k, v]) => {
      const card = spark(k, steps, v);
      card.classList.add("click");
      if (k === chosen) card.classList.add("chosen");
      card.addEventListener("click", () => { chosen = chosen === k ? null : k; metricsKey = ""; renderMetrics(series); });
      return card;
    });
    el.metrics.replaceChildren(
      h("div", { class: "row metrics-tools" }, h("span", { class: "muted" }, "Click a metric for its chart."), h("span", { class: "spacer" }), exportLink),
      h("div", { class: "sparks", id: "metric-charts" }, cards), detail,
      series.omitted ? h("p", { class: "muted" }, `${series.omitted} more metrics not shown`) : "",
      h("div", { class: "steps-table" }, table(["step", ...metrics.map(([k]) => breakable(k)), ""], rows,
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

  function renderLLM(llm, isLive) {
    const lat = llm.latency_s || {};
    const kv = (label, value) => h("div", null, h("small", null, label), h("b", null, value));
    const now = (x) => (isLive ? num(x) : "–");  // rates and calls in flight: a live run's
    const parts = [h("div", { class: "kv" },
      kv("requests", num(llm.requests)), kv("requests/s", now(llm.requests_per_s)),
      kv("answers/s", now(llm.answers_per_s)), kv("in flight", now(llm.in_flight)),
      kv("tokens in", num(llm.prompt_tokens)), kv("tokens out", num(llm.completion_tokens)),
      kv("tokens cached", num(llm.cached_tokens)), kv("prefix reused", num(llm.prefix_tokens)),
      kv("retries", num(llm.retries)), kv("failed requests", num(llm.failures)),
      kv("latency p50", secs(lat.p50)), kv("latency p90", secs(lat.p90)), kv("latency p99", secs(lat.p99)))];
    if (!isLive) parts.push(h("div", { class: "muted", id: "llm-from-disk" }, "from the steps' summary: requests and tokens of every model; rates, calls in flight and latencies are measured while a run is live"));
    if (lat.basis === "arrival") parts.push(h("div", { class: "muted", id: "latency-basis" }, "latency: the scenario measures none per answer, so from the start of the step's collection to each answer's arrival"));
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

  const BIG = new Intl.NumberFormat("en-US", { notation: "compact", maximumFractionDigits: 2 });
  function renderWorkers(snap) {
    const rows = snap.workers || [];
    if (!rows.length) {
      el.workers.replaceChildren(h("p", { class: "muted" }, snap.live ? "Workers are starting…" : "Worker statistics are shown while a run is live."));
      return;
    }
    // CPU and memory are each process's own measurement; 100% is one core.
    const cpu = (x) => (x === null || x === undefined ? "–" : `${x < 10 ? Number(x).toFixed(1) : num(Math.round(x))}%`);
    const mb = (x) => (x === null || x === undefined ? "–" : x < 1000 ? `${Math.round(x)} MB` :
      x < 102400 ? `${(x / 1024).toFixed(1)} GB` : `${num(Math.round(x / 1024))} GB`);
    const node = (n) => (n ? h("span", { class: "node", title: n }, n.length > 8 ? `${n.slice(0, 6)}…` : n) : "–");
    // Millions in short (1.2M), exact on hover: the table fits half the page at 1280 px.
    const big = (x) => (x >= 1e6 ? h("span", { title: num(x) }, BIG.format(x)) : num(x));
    const inFlight = (w) => h("span", { title: `${num(w.llm_in_flight)} LLM calls in flight · ${num(w.waiting)} calls waiting on placeholders` }, big(w.in_flight));
    const failed = rows.some((w) => w.calls_failed); // a column only when there are failures
    const list = table(
      ["#", "node", "pid", "status", "agents", "in flight", "done", ...(failed ? ["failed"] : []), "CPU", "memory"],
      rows.map((w) => ({ cells: [w.index, node(w.node), w.pid ?? "–", h("span", { class: `wstatus ${w.status}` }, w.status),
        big(w.agents), inFlight(w), big(w.calls_done), ...(failed ? [h("span", { class: w.calls_failed ? "bad" : null }, big(w.calls_failed))] : []),
        cpu(w.cpu_pct), mb(w.rss_mb)] })),
      { id: "workers-table", numeric: failed ? [4, 5, 6, 7, 8, 9] : [4, 5, 6, 7, 8] });
    // One line per node, broken only between its parts.
    const plural = (k, one, many) => `${num(k)} ${k === 1 ? one : many}`;
    const nodes = (snap.nodes || []).map((n) => h("div", { class: "node-total", "data-node": n.node ?? "" },
      [h("span", null, h("b", null, "node "), node(n.node)),
        plural(n.workers, "worker", "workers") + (n.processes !== n.workers ? ` in ${plural(n.processes, "process", "processes")}` : ""),
        `${num(n.agents)} agents`, `${num(n.in_flight)} in flight`, `CPU ${cpu(n.cpu_pct)}`, `memory ${mb(n.rss_mb)}`]
        .map((part, i) => [i ? " · " : "", h("span", { class: "part" }, part)])));
    const notes = [
      snap.workers_omitted ? `${num(snap.workers_omitted)} more workers not shown (the node totals count them)` : "",
      snap.llm && snap.llm.workers_share_memory ? "Workers sharing a process show its CPU and memory on each row; the totals count it once." : "",
      "CPU: % of one core, as each process measures itself."].filter(Boolean);
    el.workers.replaceChildren(list, h("div", { id: "workers-nodes" }, nodes),
      h("div", { class: "muted", id: "workers-notes" }, notes.join(" ")), history);
    // Each process's CPU and memory over the run: read every few seconds, not streamed.
    const now = Date.now();
    if (now - historyAt > (snap.live && !snap.finished ? 3000 : 60000)) {
      historyAt = now;
      api(`/api/runs/${enc(id)}/workers`).then(drawHistory).catch(() => {});
    }
  }

  const history = h("div", { id: "worker-history", class: "sparks" });
  let historyAt = 0;
  function line(ts, vs, W, H, pad, max) {
    const pts = ts.map((t, i) => [t, vs[i]]).filter(([, v]) => typeof v === "number");
    if (!pts.length) return null;
    const x0 = ts[0], x1 = ts[ts.length - 1] || 1;
    const x = (t) => pad + ((t - x0) / (x1 - x0 || 1)) * (W - 2 * pad);
    const y = (v) => H - pad - (v / (max || 1)) * (H - 2 * pad);
    return pts.map(([t, v], i) => `${i ? "L" : "M"}${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
  }
  function drawHistory(hist) {
    const W = 260, H = 56, pad = 3;
    history.replaceChildren(...(hist.processes || []).map((p) => {
      const n = Math.min(hist.t.length, p.cpu_pct.length, p.rss_mb.length);
      const ts = hist.t.slice(0, n), cpu = p.cpu_pct.slice(0, n), mem = p.rss_mb.slice(0, n);
      const cpuMax = Math.max(100, ...cpu.filter((v) => typeof v === "number"));
      const memMax = Math.max(1, ...mem.filter((v) => typeof v === "number"));
      const lastOf = (vs) => vs.filter((v) => typeof v === "number").pop();
      const cpuLast = lastOf(cpu), memLast = lastOf(mem);
      const who = p.workers.length === 1 ? `worker ${p.workers[0]}` : `workers ${p.workers.join(", ")}`;
      return h("div", { class: "spark proc", "data-pid": p.pid, "data-points": n },
        h("div", { class: "spark-head" }, h("span", { class: "spark-name", title: `process ${p.pid} on ${p.node || "?"}` }, `pid ${p.pid} · ${who}`),
          h("span", { class: "muted" }, `${cpuLast === undefined ? "–" : `${Math.round(cpuLast)}%`} · ${memLast === undefined ? "–" : `${Math.round(memLast)} MB`}`)),
        s("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img", "aria-label": `CPU and memory of process ${p.pid} over the run` },
          s("path", { class: "line cpu", d: line(ts, cpu, W, H, pad, cpuMax) }),
          s("path", { class: "line mem", d: line(ts, mem, W, H, pad, memMax * 1.1) })),
        h("div", { class: "muted spark-range" }, `CPU (blue, up to ${Math.round(cpuMax)}%) and memory (green, up to ${Math.round(memMax)} MB) over ${secs(ts[n - 1] || 0)}`));
    }));
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
      // The same filter, every matching row, as a file (made on the server).
      const all = new URLSearchParams(params);
      all.delete("page");
      all.delete("size");
      const download = (format) => { all.set("format", format); return `/api/runs/${enc(id)}/export?${all}`; };
      results.replaceChildren(
        h("div", { class: "row" }, h("p", { class: "muted", id: "agents-total" }, `${num(r.total)} agents match`),
          h("span", { class: "spacer" }), h("span", { class: "muted" }, "download all of them:"),
          h("a", { href: download("csv"), id: "export-csv", download: "" }, "CSV"),
          h("a", { href: download("parquet"), id: "export-parquet", download: "" }, "Parquet")),
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
  const ask = interviewPanel(id, agentId);
  api(`/api/runs/${enc(id)}`).then(ask.update).catch(() => {});
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
    mindPanel(id, agentId), timelinePanel(id, a), ask.node,
    h("section", { class: "card", id: "steps" }, h("h3", null, `Steps (${a.steps.length})` + (a.tables.length ? ` · ${a.tables.join(", ")}` : "")),
      steps.length ? steps : h("p", { class: "muted" }, "No finished step yet.")));
}

// -- managing a run: interview, intervene, fork; an agent's mind ---------------------------
// Each control shows the server's one-line error beside itself. Nothing here is pushed by
// the live stream: the run view's updates only say when a step has ended, and the panels
// then read their lists again.

// A labelled input.
const field = (label, input, opts = {}) => h("label", { class: `field${opts.wide ? " wide" : ""}` },
  h("span", null, label), input);

// "7, 42 9" → [7, 42, 9]; a word that is not an id is an error the form shows.
function agentIds(text) {
  return text.split(/[\s,]+/).filter(Boolean).map((x) => {
    if (!/^\d+$/.test(x)) throw new Error(`agent ids: ${x.slice(0, 20)} is not an agent id`);
    return Number(x);
  });
}

// A JSON value as typed, else the text itself ("Round 2 was cancelled." needs no quotes).
function jsonOrText(text) {
  const t = text.trim();
  try { return JSON.parse(t); } catch (e) { return t; }
}

// "game.ratio=0.5 seed=3", or one key=value a line (values may then hold spaces).
function parseSets(text) {
  const out = {};
  for (const line of text.split("\n").map((l) => l.trim()).filter(Boolean)) {
    const words = line.split(/\s+/);
    for (const part of words.every((w) => w.includes("=")) ? words : [line]) {
      const at = part.indexOf("=");
      if (at < 1) throw new Error(`changes: ${part.slice(0, 40)} is not key=value (e.g. game.ratio=0.5)`);
      out[part.slice(0, at).trim()] = jsonOrText(part.slice(at + 1));
    }
  }
  return out;
}

// Whom to reach: agent ids, a profile query, a sample of either (or of everyone).
function whom(prefix, everyone) {
  const agents = h("input", { id: `${prefix}-agents`, placeholder: "e.g. 7, 42" });
  const where = h("input", { id: `${prefix}-where`, placeholder: "e.g. a column == \"a value\"" });
  const sample = h("input", { id: `${prefix}-sample`, type: "number", min: 1, placeholder: everyone });
  return {
    nodes: [field("agent ids", agents), field("profile query", where, { wide: true }), field("sample of", sample)],
    declare(v) { if (v.examples.where) where.placeholder = `e.g. ${v.examples.where}`; },
    read() {
      const out = {};
      if (agents.value.trim()) out.agents = agentIds(agents.value);
      if (where.value.trim()) out.where = where.value.trim();
      if (sample.value) out.sample = parseInt(sample.value, 10);
      return out;
    },
  };
}

const tokens = (r) => (r.prompt_tokens === null || r.prompt_tokens === undefined ? "–" : `${num(r.prompt_tokens)} / ${num(r.completion_tokens)}`);
const agentLink = (id, agent) => h("a", { href: `#/run/${enc(id)}/agent/${agent}` }, String(agent));
const answerCell = (r) => (r.error ? h("span", { class: "error-text" }, r.error) : h("div", { class: "answer" }, r.answer ?? "–"));

// Interview: a form, the answers of the last question, the run's earlier interviews. With
// `agent`, the agent page's shortcut: that one agent, and its own earlier answers.
function interviewPanel(id, agent) {
  const p = agent === undefined ? "iv" : "aiv";
  const question = h("textarea", { id: `${p}-question`, rows: 2, maxlength: 2000,
                                   placeholder: `e.g. ${GENERIC.examples.question}` });
  const who = agent === undefined ? whom(p, "all") : null;
  const step = h("input", { id: `${p}-step`, type: "number", min: 0, placeholder: "latest" });
  const stepField = field("at step", step);
  const ask = h("button", { id: `${p}-ask`, type: "submit" }, agent === undefined ? "Ask" : `Ask agent ${agent}`);
  const status = h("span", { class: "muted", id: `${p}-status` });
  const error = h("p", { class: "error", id: `${p}-error` });
  const answers = h("div", { id: `${p}-answers` });
  const history = h("div", { id: `${p}-history` });
  const form = h("form", { class: "manage-form", id: `${p}-form` },
    field("question", question, { wide: true }), who ? who.nodes : null, stepField,
    h("div", { class: "row actions" }, ask, status));
  let isLive = false;
  let shownAbove = null;  // the interview whose answers the table above shows

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    error.textContent = "";
    let body;
    try {
      body = { question: question.value.trim(), ...(who ? who.read() : { agents: [Number(agent)] }) };
      if (step.value && !stepField.hidden) body.step = parseInt(step.value, 10);
    } catch (e) {
      error.textContent = e.message;
      return;
    }
    ask.disabled = true;
    status.textContent = isLive && body.step === undefined ? "asking, after the step in progress…" : "asking, from the checkpoint…";
    try {
      const r = await api(`/api/runs/${enc(id)}/interviews`, { json: body });
      if (r.queued) {
        status.textContent = `queued: the answers come after step ${r.after_step} and appear below`;
      } else {
        status.textContent = `interview ${r.interview}: ${num(r.rows.length)} answer(s)`;
        shownAbove = r.interview;
        answers.replaceChildren(table(["agent", "answer", "step", "source", "tokens in / out", "latency"],
          r.rows.map((x) => ({ cells: [agentLink(id, x.agent_id), answerCell(x), x.step, x.source, tokens(x), secs(x.latency_s)] })),
          { id: `${p}-answers-table`, numeric: [2, 4, 5] }));
      }
    } catch (e) {
      status.textContent = "";
      error.textContent = e.message;
    } finally {
      ask.disabled = false;
    }
    refresh();
  });

  async function refresh() {
    try {
      const r = await api(`/api/runs/${enc(id)}/interviews`);
      const rows = (agent === undefined ? r.rows : r.rows.filter((x) => String(x.agent_id) === String(agent)))
        .filter((x) => x.interview !== shownAbove);  // listed once: those above are not repeated
      history.replaceChildren(...!rows.length ? [h("p", { class: "muted" }, shownAbove !== null ? "No earlier interviews."
        : agent === undefined ? "No interviews yet." : "Not interviewed yet.")] : [
        h("div", { class: "msg-label" }, agent === undefined
          ? `earlier interviews: ${num(r.total - (r.rows.length - rows.length))} answer(s)` + (r.total > r.rows.length ? `, the latest ${num(rows.length)} shown` : "")
          : "earlier answers"),
        h("div", { class: "manage-list" }, table(["#", "step", "agent", "question", "answer", "latency"],
          rows.map((x) => ({ cells: [x.interview, x.step, agentLink(id, x.agent_id), h("div", { class: "answer" }, x.question), answerCell(x), secs(x.latency_s)] })),
          { id: `${p}-history-table`, numeric: [0, 1, 5] }))]);
    } catch (e) {
      history.replaceChildren(h("p", { class: "error" }, e.message));
    }
  }

  // From the run's snapshot: a live run is asked between its steps (no step to choose); a
  // step's end may bring the answers of a queued interview.
  let stepsDone = null;
  function update(snap) {
    isLive = Boolean(snap.live && !snap.finished);
    stepField.hidden = isLive;
    if (stepsDone !== null && snap.steps_done !== stepsDone) refresh();
    stepsDone = snap.steps_done;
  }
  refresh();
  const title = agent === undefined ? "Interview" : "Interview this agent";
  const node = h("section", { class: "card", id: `${p}-card` }, h("h3", null, title),
    h("p", { class: "muted" }, agent === undefined
      ? "Ask agents a question, answered with their own model, persona and memory. A live run is asked between its steps; a finished one from a step's checkpoint. Interviews never change the run."
      : "Answered with its model, persona and memory; never changes the run."),
    form, error, answers, history);
  const declare = (v) => { question.placeholder = `e.g. ${v.examples.question}`; if (who) who.declare(v); };
  if (agent !== undefined) viewOf(id).then((v) => declare(v || GENERIC));
  return { node, update, refresh, declare };
}

// Intervene: schedule a message or an environment change for the next step of a live run,
// and list what was scheduled and carried out. `onMarks(map)`: step → what was done then.
function intervenePanel(id, onMarks) {
  const kind = h("select", { id: "ix-kind" }, h("option", { value: "message" }, "a message to agents"),
    h("option", { value: "environment" }, "an environment change"));
  const text = h("textarea", { id: "ix-text", rows: 2, maxlength: 4000, placeholder: `e.g. ${GENERIC.examples.message}` });
  const who = whom("ix", "all");
  const key = h("input", { id: "ix-key", placeholder: "e.g. announcement" });
  const value = h("input", { id: "ix-value", placeholder: 'JSON, or text: "closed"' });
  const env = h("input", { id: "ix-env", placeholder: "optional" });
  const message = h("div", { class: "fields" }, field("message", text, { wide: true }), who.nodes);
  const change = h("div", { class: "fields", hidden: true }, field("key", key), field("value", value, { wide: true }),
    field("child environment", env));
  kind.addEventListener("change", () => { message.hidden = kind.value !== "message"; change.hidden = kind.value === "message"; });
  const submit = h("button", { id: "ix-submit", type: "submit" }, "Schedule for the next step");
  const status = h("span", { class: "muted", id: "ix-status" });
  const error = h("p", { class: "error", id: "ix-error" });
  const form = h("form", { class: "manage-form", id: "ix-form", hidden: true },
    field("what", kind), message, change, h("div", { class: "row actions" }, submit, status));
  const note = h("p", { class: "muted", id: "ix-note" });
  const list = h("div", { id: "ix-list" });
  let stepsDone = 0, isLive = false, rows = [];

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    error.textContent = "";
    let body;
    try {
      body = kind.value === "message" ? { kind: "message", text: text.value.trim(), ...who.read() }
        : { kind: "environment", key: key.value.trim(), value: jsonOrText(value.value), ...(env.value.trim() ? { env: env.value.trim() } : {}) };
    } catch (e) {
      error.textContent = e.message;
      return;
    }
    submit.disabled = true;
    try {
      const r = await api(`/api/runs/${enc(id)}/interventions`, { json: body });
      status.textContent = `scheduled for step ${r.intervention.step}: ${r.intervention.what}`;
    } catch (e) {
      error.textContent = e.message;
    } finally {
      submit.disabled = false;
    }
    refresh();
  });

  function draw() {
    const state = (x) => (x.pending || (x.pending === undefined && x.step > stepsDone)
      ? h("span", { class: "marker pending" }, isLive ? "scheduled" : "not reached") : h("span", { class: "marker" }, "carried out"));
    list.replaceChildren(!rows.length ? h("p", { class: "muted" }, "No interventions.") :
      h("div", { class: "manage-list" }, table(["step", "kind", "what", ""], rows.map((x) => ({
        cells: [x.step, x.kind, h("div", { class: "answer" }, x.what), state(x)] })), { id: "ix-table", numeric: [0] })));
    const marks = new Map();
    for (const x of rows) {
      if (x.pending || x.step > stepsDone) continue;
      marks.set(x.step, [...(marks.get(x.step) || []), x.what]);
    }
    onMarks(marks);
  }

  async function refresh() {
    try {
      const r = await api(`/api/runs/${enc(id)}/interventions`);
      rows = r.interventions;
      draw();
    } catch (e) {
      list.replaceChildren(h("p", { class: "error" }, e.message));
    }
  }

  function update(snap) {
    const nowLive = Boolean(snap.live && !snap.finished);
    const changed = snap.steps_done !== stepsDone || nowLive !== isLive;
    stepsDone = snap.steps_done || 0;
    isLive = nowLive;
    form.hidden = !isLive;
    // The step the server schedules for now: the one after the step in progress.
    const next = snap.next_step ?? ((snap.step > stepsDone ? snap.step : stepsDone) + 1);
    note.textContent = isLive
      ? `Scheduled now: carried out at the start of step ${next} (the next one to start), before the scenario's step; kept in the run directory, so a resume or a fork does it again.`
      : "Interventions go to the next step of a live run; to change what comes after a finished step, fork it (the steps table).";
    if (changed) refresh(); // what was pending may have been carried out
  }
  refresh();
  const node = h("section", { class: "card", id: "intervene-card" }, h("h3", null, "Intervene"), note, form, error, list);
  const declare = (v) => { text.placeholder = `e.g. ${v.examples.message}`; who.declare(v); };
  return { node, update, refresh, declare };
}

// Shares of options per step, for the metrics a scenario declares categorical (a survey's
// marginals: question → option → share): one stacked bar per step and question, read from
// the run's summary when a step ends (never in the live stream).
const PALETTE = ["#3867d6", "#e58e26", "#2e9d5b", "#9b6dd6", "#d1453b", "#17a2b8", "#b8860b",
                 "#e84393", "#6b7385", "#20bf6b", "#8854d0", "#fa8231"];
function sharesPanel(id) {
  const body = h("div", { id: "shares" });
  const node = h("section", { class: "card", id: "shares-card", hidden: true },
    h("h3", null, "Answer shares per step"), body);
  let names = [], data = {}, stepsDone = null;
  const colour = (i) => PALETTE[i % PALETTE.length];
  const pct = (x) => `${(100 * x).toFixed(x >= 0.1 || x === 0 ? 0 : 1)}%`;
  const bar = (shares, options, cls) => h("div", { class: `stack share-bar ${cls || ""}` }, options.map((o, i) =>
    (shares[o] || 0) > 0 ? h("div", { style: `width:${100 * shares[o]}%;background:${colour(i)}`, title: `${o}: ${pct(shares[o])}`, "data-option": o }) : null));
  const legend = (options) => h("div", { class: "legend" }, options.map((o, i) => h("span", { style: `--c:${colour(i)}` }, o)));
  const optionsOf = (column) => [...new Set(column.filter(Boolean).flatMap((x) => Object.keys(x)))];
  function questions() {
    return names.flatMap((name) => Object.entries((data[name] || {}).questions || {})
      .map(([q, column]) => ({ name, q, column, steps: data[name].steps })));
  }
  function draw() {
    const qs = questions();
    node.hidden = !names.length;
    body.replaceChildren(!qs.length ? h("p", { class: "muted" }, "Shares appear when a step that asks a question ends.")
      : h("div", { class: "shares" }, qs.map(({ name, q, column, steps }) => {
        const options = optionsOf(column);
        return h("div", { class: "share-block", "data-question": q || name },
          h("div", { class: "spark-head" }, h("span", { class: "spark-name" }, q || name), names.length > 1 && q ? h("span", { class: "muted" }, name) : null),
          h("div", { class: "share-rows" }, column.map((x, i) => x ? h("div", { class: "share-row", "data-step": steps[i] },
            h("span", { class: "muted share-step" }, `step ${steps[i]}`), bar(x, options)) : null)),
          legend(options));
      })));
  }
  async function load() {
    try {
      data = await api(`/api/runs/${enc(id)}/shares`);
    } catch (e) {
      body.replaceChildren(h("p", { class: "error" }, e.message));
      return;
    }
    draw();
    if (panel.onload) panel.onload();
  }
  const panel = {
    node,
    declare(v) { names = v.categorical || []; if (names.length) load(); else node.hidden = true; },
    update(snap) {
      if (names.length && stepsDone !== null && snap.steps_done !== stepsDone) load();
      stepsDone = snap.steps_done;
    },
    // The step in progress's choices so far: {question index: [count per option]},
    // labelled by the view.
    live(counts, choices, step) {
      const blocks = choices.map(([q, options], i) => {
        const row = counts[String(i)] || [];
        const n = row.reduce((a, c) => a + c, 0);
        if (!n) return null;
        const shares = Object.fromEntries(options.map((o, k) => [o, (row[k] || 0) / n]));
        return h("div", { class: "share-latest", "data-question": q },
          h("div", { class: "spark-head" }, h("span", { class: "spark-name" }, q), h("span", { class: "muted" }, `step ${step}, so far: ${num(n)}`)),
          bar(shares, options),
          h("div", { class: "share-labels muted" }, options.map((o, k) => h("span", { style: `--c:${colour(k)}` }, `${o} ${pct(shares[o])}`))));
      }).filter(Boolean);
      return h("div", { id: "answers-shares", class: "shares-latest live" }, blocks);
    },
    // Each question's latest shares (the answers panel of a scenario of categorical answers).
    latest() {
      const qs = questions().map((x) => {
        let at = x.column.length - 1;
        while (at >= 0 && !x.column[at]) at -= 1;
        return { ...x, at };
      }).filter((x) => x.at >= 0);
      if (!qs.length) return h("p", { class: "muted", id: "answers-shares" }, "The shares of each answer appear when a step that asks a question ends.");
      return h("div", { id: "answers-shares", class: "shares-latest" }, qs.map(({ name, q, column, steps, at }) => {
        const options = optionsOf(column);
        const shares = column[at];
        return h("div", { class: "share-latest", "data-question": q || name },
          h("div", { class: "spark-head" }, h("span", { class: "spark-name" }, q || name), h("span", { class: "muted" }, `step ${steps[at]}`)),
          bar(shares, options),
          h("div", { class: "share-labels muted" }, options.map((o, i) => h("span", { style: `--c:${colour(i)}` }, `${o} ${pct(shares[o] || 0)}`))));
      }));
    },
  };
  return panel;
}

// A fork beside its source from the fork point: per metric a chart of both (the metrics
// `populace compare` sets side by side, from both summaries) and the table compare writes.
function branchPanel(id) {
  const body = h("div", { id: "branch" });
  const node = h("section", { class: "card", id: "branch-card", hidden: true },
    h("h3", null, "This fork beside its source"), body);
  let stepsDone = null, origin = null;
  function chart(name, steps, m, at) {
    const W = 260, H = 70, pad = 4;
    const all = [...m.source, ...m.branch].filter((v) => typeof v === "number");
    if (!all.length) return null;
    const ymin = Math.min(...all), ymax = Math.max(...all), xmin = steps[0], xmax = steps[steps.length - 1];
    const x = (t) => pad + ((t - xmin) / (xmax - xmin || 1)) * (W - 2 * pad);
    const y = (v) => H - pad - ((v - ymin) / (ymax - ymin || 1)) * (H - 2 * pad);
    const path = (vals, from) => vals.map((v, i) => [steps[i], v]).filter(([t, v]) => typeof v === "number" && t >= from)
      .map(([t, v], i) => `${i ? "L" : "M"}${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    const last = (vals) => { for (let i = vals.length - 1; i >= 0; i -= 1) if (typeof vals[i] === "number") return vals[i]; return null; };
    return h("div", { class: "spark", "data-metric": name },
      h("div", { class: "spark-head" }, h("span", { class: "spark-name", title: name }, name),
        h("span", { class: "branch-values" }, h("span", { class: "muted" }, `${val(last(m.source))} → `), h("b", null, val(last(m.branch))))),
      s("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img", "aria-label": `${name}: the fork and its source` },
        s("line", { class: "fork-at", x1: x(at), x2: x(at), y1: 0, y2: H }),
        s("path", { class: "line source", d: path(m.source, xmin) }),
        s("path", { class: "line", d: path(m.branch, at) })));
  }
  async function load() {
    let b;
    try {
      b = await api(`/api/runs/${enc(id)}/branch`);
    } catch (e) {
      body.replaceChildren(h("p", { class: "error" }, e.message));
      return;
    }
    const names = Object.keys(b.metrics);
    const after = b.steps.map((t, i) => [t, i]).filter(([t]) => t > b.at);
    body.replaceChildren(
      h("p", { class: "muted" }, `Its source (grey) and the fork (blue) from step ${b.at}, where they part; the same numbers as populace compare.`),
      h("div", { class: "sparks", id: "branch-charts" }, names.map((n) => chart(n, b.steps, b.metrics[n], b.at))),
      !after.length ? h("p", { class: "muted" }, "The fork has played no step of its own yet.")
        : h("div", { class: "steps-table" }, table(["step", ...names.flatMap((n) => [[...breakable(n), " (source)"], [...breakable(n), " (fork)"]])],
          after.map(([t, i]) => ({ cells: [t, ...names.flatMap((n) => [b.metrics[n].source[i], b.metrics[n].branch[i]]
            .map((v) => h("span", { "data-value": v ?? "" }, val(v))))] })),
          { id: "branch-table", numeric: names.flatMap((_, k) => [2 * k + 1, 2 * k + 2]) })));
  }
  return {
    node,
    update(snap) {
      origin = snap.forked_from;
      node.hidden = !origin;
      // Keyed on the status too: a step's row can reach the summary after steps_done moved
      // on, and a finished fork must show its last step's numbers.
      const key = `${snap.steps_done}/${snap.status}`;
      if (origin && key !== stepsDone) { stepsDone = key; load(); }
    },
  };
}

// What went wrong, step by step: each step's warnings (run.warn, values outside a
// distribution's range…) and failed answers by kind, a failed step, and error.txt. Read
// from the run's summary when a step ends; hidden while there is nothing to say.
function logPanel(id) {
  const body = h("div", { id: "log" });
  const node = h("section", { class: "card", id: "log-card", hidden: true }, h("h3", null, "Warnings and errors"), body);
  let key = null;
  async function load() {
    let r;
    try {
      r = await api(`/api/runs/${enc(id)}/log`);
    } catch (e) {
      return;
    }
    const rows = r.steps.flatMap((x) => [
      ...x.warnings.map((w) => ({ cells: [x.step, "warning", h("div", { class: "answer" }, w)] })),
      ...(x.failed ? [{ cells: [x.step, "failed", h("div", { class: "answer" },
        `${num(x.failed.answers)} of ${num(x.failed.of)}: ` + Object.entries(x.failed.kinds || {}).map(([k, c]) => `${k} ×${num(c)}`).join(", ") +
        (x.failed.example ? ` — e.g. ${x.failed.example}` : ""))] }] : [])]);
    if (r.failed_step) rows.push({ cells: [r.failed_step.step, "step failed", h("div", { class: "answer" }, "not written; its calls are counted in the summary")] });
    node.hidden = !rows.length && !r.error;
    body.replaceChildren(...[rows.length ? h("div", { class: "manage-list" }, table(["step", "what", ""], rows, { id: "log-table", numeric: [0] })) : null,
      r.error ? [h("div", { class: "msg-label" }, "error.txt"), h("pre", { id: "log-error" }, r.error)] : null].filter(Boolean).flat());
  }
  return {
    node,
    update(snap) {
      const now = `${snap.steps_done}/${snap.status}`;
      if (now !== key) { key = now; load(); }
    },
  };
}

// Fork: the steps table's "Fork" opens this form for its step; it starts a new live run.
// Archetype sampling (a model's sampling:): per step and decision, how far the audited
// agents' own answers are from their archetypes', read when a step ends.
function samplingPanel(id) {
  const body = h("div", { id: "sampling" });
  const node = h("section", { class: "card", id: "sampling-card", hidden: true },
    h("h3", null, "Archetype sampling: the audit"), body);
  let stepsDone = null;
  const fmt = (x) => (x === null || x === undefined ? "–" : Number(x).toFixed(3));
  async function load() {
    let data;
    try {
      data = await api(`/api/runs/${enc(id)}/sampling`);
    } catch (e) {
      body.replaceChildren(h("p", { class: "error" }, e.message));
      return;
    }
    node.hidden = !data.rows.length;
    const steps = new Map();
    for (const r of data.rows) steps.set(`${r.step}/${r.model}`, r);
    body.replaceChildren(
      h("p", { class: "muted" }, "Per step: decisions the archetypes answered, calls made, and what asking every agent would have taken (estimated from the audited agents)."),
      table(["step", "model", "answered by archetypes", "calls", "asking everyone"], [...steps.values()].map((r) => ({
        cells: [r.step, r.model, num(r.shared), num(r.calls), r.individual ? `~${num(r.individual)}` : "–"] })), { numeric: [2, 3, 4] }),
      h("div", { class: "msg-label" }, "the audit: own answers against the archetype's, same agents (95% interval)"),
      table(["step", "decision", "audited", "distance", "interval", ""], data.rows.map((r) => ({
        cells: [r.step, r.decision, num(r.audited), `${r.kind} ${fmt(r.value)}`, `${fmt(r.low)} – ${fmt(r.high)}`, r.fell_back ? "fell back" : ""] })), { numeric: [2] }));
  }
  load();
  return {
    node,
    update(snap) {
      if (stepsDone !== null && snap.steps_done !== stepsDone) load();
      stepsDone = snap.steps_done;
    },
  };
}

function forkPanel(id) {
  const stepText = h("b", { id: "fork-step" });
  const sets = h("textarea", { id: "fork-set", rows: 1, placeholder: `optional changes: ${GENERIC.examples.changes} (one key=value a line when values hold spaces)` });
  const submit = h("button", { id: "fork-submit", type: "submit" }, "Start the fork");
  const cancel = h("button", { type: "button", class: "plain", onclick: () => { form.hidden = true; error.textContent = ""; } }, "Cancel");
  const error = h("p", { class: "error", id: "fork-error" });
  const note = h("p", { class: "muted", id: "fork-note" });
  let step = null;
  const form = h("form", { class: "manage-form fork", id: "fork-form", hidden: true },
    h("div", { class: "row" }, h("span", null, "Fork from step "), stepText),
    field("changes", sets, { wide: true }), h("div", { class: "row actions" }, submit, cancel), note, error);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    error.textContent = "";
    let body;
    try {
      body = { step, set: parseSets(sets.value) };
    } catch (e) {
      error.textContent = e.message;
      return;
    }
    submit.disabled = true;
    try {
      const r = await api(`/api/runs/${enc(id)}/fork`, { json: body });
      location.hash = `#/run/${enc(r.id)}`;
    } catch (e) {
      error.textContent = e.message;
    } finally {
      submit.disabled = false;
    }
  });
  let isLive = false;
  return {
    node: form,
    open(t) {
      step = t;
      stepText.textContent = String(t);
      error.textContent = "";
      note.textContent = "A new run: this one's config with the changes (dotted keys of its config.yaml, values as JSON or text), its agents as they were after this step, then the steps after it." +
        (isLive ? " The studio plays one run at a time: stop this one first." : "");
      form.hidden = false;
      sets.focus();
    },
    update(snap) { isLive = Boolean(snap.live && !snap.finished); },
    declare(v) { sets.placeholder = `optional changes: ${v.examples.changes} (one key=value a line when values hold spaces)`; },
  };
}

// The steps table's last cell: interventions carried out at that step, and "Fork".
function stepCell(t, marks, fork) {
  const done = marks.get(t) || [];
  return h("span", { class: "step-actions" },
    done.length ? h("span", { class: "marker", title: done.join("\n"), "data-step": t }, `⚑ ${done.length}`) : null,
    h("button", { class: "plain small fork-button", type: "button", title: `Fork a new run from step ${t}`,
                  "data-step": t, onclick: () => fork.open(t) }, "Fork"));
}

// An agent's timeline, step by step: the interventions of the run that reached it, the
// messages and observations its memory holds, its decisions, and its rows in the run's tables.
// A message sent to a sample or a query reached it if its memory has it (a persona's); else
// the page says it cannot tell.
function timelinePanel(id, a) {
  const body = h("div", { id: "timeline" }, h("p", { class: "muted" }, "Reading…"));
  const node = h("section", { class: "card", id: "timeline-card" }, h("h3", null, "Timeline"), body);
  const me = Number(a.agent_id);
  const short = (row) => Object.entries(row).filter(([, v]) => v !== null && v !== undefined && String(v).length <= 60)
    .slice(0, 4).map(([k, v]) => `${k} ${val(v)}`).join(" · ");
  Promise.all([api(`/api/runs/${enc(id)}/agents/${enc(a.agent_id)}/mind`).catch(() => null),
               api(`/api/runs/${enc(id)}/interventions`).catch(() => ({ interventions: [] }))]).then(([m, ix]) => {
    const memory = (m && m.persona && m.persona.memory) || [];
    const steps = new Map();
    const at = (t) => { if (!steps.has(t)) steps.set(t, []); return steps.get(t); };
    for (const x of ix.interventions || []) {
      if (x.pending) continue;
      const told = memory.some((e) => e.step === x.step && e.kind === "intervention" && String(e.text).includes(x.text || "\u0000"));
      const everyone = x.kind !== "message" || (!x.agents && !x.where && !x.sample);
      const reached = x.agents && !x.where && !x.sample ? x.agents.includes(me) : everyone || told ? true : m && m.persona ? false : null;
      if (reached === false) continue;
      at(x.step).push(h("li", { class: "tl intervention", "data-kind": "intervention" }, h("span", { class: "tl-kind" }, "⚑ intervention"),
        h("span", null, x.what), reached === null ? h("span", { class: "muted" }, " (to a sample or a query: whether it reached this agent is not recorded)") : null));
    }
    for (const e of memory) {
      if (e.kind === "intervention" || e.kind === "summary") continue;  // listed above; a summary is no event
      at(e.step).push(h("li", { class: `tl ${e.kind}`, "data-kind": e.kind }, h("span", { class: "tl-kind" }, e.kind === "decision" ? "→ decided" : `✉ ${e.kind}`),
        h("span", null, typeof e.text === "string" ? e.text : JSON.stringify(e.text))));
    }
    for (const st of a.steps) {
      for (const [name, rows] of Object.entries(st.rows)) {
        at(st.step).push(h("li", { class: "tl row", "data-kind": "row" }, h("span", { class: "tl-kind" }, `▤ ${name}`),
          h("span", null, rows.length === 1 ? short(rows[0]) : `${num(rows.length)} rows: ` + rows.slice(0, 3).map(short).join(" | ") + (rows.length > 3 ? " …" : ""))));
      }
    }
    const order = [...steps.keys()].sort((x, y) => x - y).slice(-50);
    body.replaceChildren(...[!order.length ? h("p", { class: "muted" }, "Nothing happened to this agent yet.") :
      h("ol", { class: "timeline" }, order.map((t) => h("li", { class: "tl-step", "data-step": t }, h("b", null, `step ${t}`),
        h("ul", null, steps.get(t))))),
      memory.length && m.persona.memory_total > memory.length ? h("p", { class: "muted" }, `its memory's latest ${num(memory.length)} events of ${num(m.persona.memory_total)}`) : null]
      .filter(Boolean));
  });
  return node;
}

// An agent's mind: a persona's text, its memory and state, its last prompt and its LLM calls,
// read when asked (at a step, for a finished run's checkpoints).
function mindPanel(id, agentId) {
  const step = h("input", { id: "mind-step", type: "number", min: 0, placeholder: "latest" });
  const load = h("button", { id: "mind-load", type: "submit" }, "Read");
  const error = h("p", { class: "error", id: "mind-error" });
  const body = h("div", { id: "mind" });
  const form = h("form", { class: "row", id: "mind-form" }, field("at step", step), load);
  form.addEventListener("submit", (ev) => { ev.preventDefault(); read(false); });

  // A state's fields, labelled: scalars as text, a list of records as a table, a mapping
  // as its own fields, a list of scalars inline, long text whole; never one JSON cell.
  const shape = (v, depth = 0) => {
    if (v === null || v === undefined) return h("span", { class: "muted" }, "–");
    if (typeof v !== "object") return typeof v === "string" && (v.length > 80 || v.includes("\n")) ? h("pre", null, v) : String(val(v));
    if (depth > 3) return h("pre", null, JSON.stringify(v, null, 1));
    if (Array.isArray(v)) {
      if (!v.length) return h("span", { class: "muted" }, "none");
      if (v.every((x) => x === null || typeof x !== "object")) return v.map((x) => (x === null ? "–" : String(val(x)))).join(", ");
      const keys = v.every((x) => x && typeof x === "object" && !Array.isArray(x)) ? [...new Set(v.flatMap(Object.keys))] : null;
      if (keys && keys.length <= 6) return table(["#", ...keys], v.map((x, i) => ({ cells: [i + 1, ...keys.map((k) => shape(x[k], depth + 1))] })), { numeric: [0] });
      return h("ol", { class: "state-list" }, v.map((x) => h("li", null, shape(x, depth + 1))));
    }
    return h("dl", { class: "state-fields" }, Object.entries(v).map(([k, x]) => [h("dt", null, k), h("dd", null, shape(x, depth + 1))]));
  };
  const kvTable = (obj, tid) => h("dl", { class: "state-fields", id: tid }, Object.entries(obj || {}).map(([k, v]) =>
    [h("dt", { "data-field": k }, k), h("dd", { "data-field": k }, shape(v))]));
  const message = (m) => h("div", { class: `msg ${m.role || ""}` }, h("div", { class: "msg-label" }, m.role || "message"),
    h("pre", null, typeof m.content === "string" ? m.content : JSON.stringify(m.content, null, 1)));

  let view = GENERIC, retry = null, retries = 0;
  viewOf(id).then((v) => { view = v || GENERIC; });
  async function read(again) {
    error.textContent = "";
    load.disabled = true;
    clearTimeout(retry);
    if (!again) retries = 0;
    try {
      const q = step.value ? `?step=${enc(step.value)}` : "";
      const m = await api(`/api/runs/${enc(id)}/agents/${enc(agentId)}/mind${q}`);
      show(m);
      // Its worker was too busy to answer: read again by itself, a few times.
      if (m.live_busy && retries < 10 && document.body.contains(body)) {
        retries += 1;
        body.prepend(h("p", { class: "muted", id: "mind-busy" }, "The running simulation was busy; reading its state again…"));
        retry = setTimeout(() => read(true), 1500);
      }
    } catch (e) {
      error.textContent = e.message;
    } finally {
      load.disabled = false;
    }
  }

  // A persona's memory: its events oldest first, each with its step and kind; a summary
  // (what the agent's model wrote of older events) stands out.
  const events = (p) => {
    const items = p.memory || [];
    return [h("div", { class: "msg-label" }, `memory: ${num(p.memory_total)} event(s), oldest first` +
      (p.memory_total > items.length ? `, the latest ${num(items.length)}` : "")),
      items.length ? h("ol", { class: "memory events", id: "mind-memory" }, items.map((e) => h("li", { class: `event ${e.kind === "summary" ? "summary" : ""}`, "data-kind": e.kind },
        h("span", { class: "event-step" }, `step ${e.step}`), h("span", { class: `event-kind kind-${e.kind}` }, e.kind === "summary" ? "summary of earlier events" : e.kind),
        h("span", { class: "event-text" }, typeof e.text === "string" ? e.text : JSON.stringify(e.text)))))
        : h("p", { class: "muted" }, "Nothing remembered yet.")];
  };

  // The mind's JSON (AgentBrowser.mind): state (memory, fields), persona (a persona agent's
  // text and memory), calls (oldest first) and conversation (the messages of the latest call).
  // The profile and background are on the agent's page above, not repeated here.
  // Why no call is listed: none has ended yet, or its model's calls are never recorded.
  const noCalls = () => (view.unrecorded_models.length
    ? `No call recorded for this agent (the run's ${view.unrecorded_models.join(", ")} ${view.unrecorded_models.length > 1 ? "are dummy models" : "is a dummy model"}, whose calls are not recorded).`
    : "No call of this agent has been recorded yet (a call is listed once it has ended).");
  function show(m) {
    const st = m.state;
    const p = m.persona;
    const parts = [h("div", { class: "muted", id: "mind-source" }, st
      ? (st.source === "live" ? "as the running simulation holds it" : `from the checkpoint after step ${st.step}`) + (st.group ? ` · ${st.group}` : "")
      : m.state_error || "no state")];
    if (p) {
      parts.push(h("div", { class: "msg-label" }, "persona: what its model is told about itself" +
        (p.source === "rendered" ? " (rendered from its profile and the run's settings.persona)" : "")),
        p.error ? h("p", { class: "muted", id: "mind-persona" }, p.error)
          : p.text ? h("pre", { id: "mind-persona", class: "persona" }, p.text)
            : h("p", { class: "muted", id: "mind-persona" }, "Its model is told no persona (settings.persona shows no column, and it has no background)."));
    }
    const fields = Object.entries((st && st.fields) || {});
    if (fields.length) parts.push(h("div", { class: "msg-label" }, "state"), kvTable(Object.fromEntries(fields), "mind-fields"));
    if (p) {
      parts.push(...events(p));
    } else {
      const memory = (st && st.memory) || [];
      parts.push(h("div", { class: "msg-label" }, `memory (${num(st ? st.memory_total : 0)} item(s)` +
        (st && st.memory_total > memory.length ? `, the latest ${num(memory.length)}` : "") + ")"),
        memory.length ? h("ol", { class: "memory", id: "mind-memory" }, memory.map((x) => h("li", { class: x.role || "" },
          h("small", { class: "muted" }, [x.role, x.sender !== null && x.sender !== undefined ? `from ${x.sender}` : null].filter(Boolean).join(" · ") + " "),
          typeof x.content === "string" ? x.content : JSON.stringify(x.content))))
          : h("p", { class: "muted" }, st ? "Nothing in memory." : ""));
    }
    const convo = m.conversation || [];
    parts.push(h("div", { class: "msg-label" }, "last prompt: the messages of its latest LLM call (interviews aside)"),
      convo.length ? h("div", { class: "conversation", id: "mind-conversation" }, convo.map(message))
        : h("p", { class: "muted", id: "mind-no-calls" }, noCalls()));
    const calls = (m.calls || []).slice().reverse();
    // A call the user opened stays open when the panel is read again (a live run's busy
    // worker is read again by itself, every 1.5 s).
    const callKey = (c) => `${c.time}|${c.model}|${c.prompt_tokens}`;
    const opened = new Set([...body.querySelectorAll("details.call[open]")].map((d) => d.dataset.key));
    parts.push(h("div", { class: "msg-label" }, `LLM calls: ${num(calls.length)}` + (m.more_calls ? ", the latest (more in llm_calls/)" : "") + ", newest first"),
      calls.length ? h("div", { class: "manage-list", id: "mind-calls" }, calls.map((c, i) => h("details", { class: "call", "data-call": i, "data-key": callKey(c), open: opened.has(callKey(c)) },
        h("summary", null, [when(c.time), c.model, `${num(c.prompt_tokens)} in / ${num(c.completion_tokens)} out`, secs(c.latency_s),
          c.retries ? `${num(c.retries)} retries` : null,
          c.error ? h("span", { class: "error-text" }, String(c.error)) : h("span", { class: "call-answer" }, String(c.text ?? "").slice(0, 100))]
          .filter((x) => x !== null && x !== undefined).map((x, k) => [k ? " · " : "", x])),
        h("div", { class: "msg-label" }, "request"), (c.messages || []).map(message),
        c.text !== undefined ? [h("div", { class: "msg-label" }, "answer"), h("pre", null, String(c.text ?? ""))] : null,
        h("div", { class: "muted call-params" }, Object.entries({ ...(c.params || {}), seed: c.seed })
          .filter(([, v]) => v !== null && v !== undefined)
          .map(([k, v]) => `${k} ${typeof v === "object" ? JSON.stringify(v) : v}`).join(" · ") + (c.endpoint ? ` · ${c.endpoint}` : "") + (c.interview ? " · interview" : "")))))
        : h("p", { class: "muted" }, convo.length ? noCalls() : "None."));
    body.replaceChildren(...parts.filter((x) => x !== null));
  }
  read(false);
  live.push(() => clearTimeout(retry));
  return h("section", { class: "card", id: "mind-card" }, h("h3", null, "Mind"),
    h("p", { class: "muted" }, "What the agent holds: in a live run its state now, read from its worker; else after a step (by default the newest checkpoint). A persona's text as its model sees it; its memory and other state; its last prompt and its LLM calls."),
    form, error, body);
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
