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
  for (const c of children.flat()) {
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
                              placeholder: "examples/guess_number.yaml" });
  const agents = h("input", { id: "agents", type: "number", min: 1, placeholder: "agents" });
  const rounds = h("input", { id: "rounds", type: "number", min: 1, placeholder: "rounds" });
  const workers = h("input", { id: "workers", type: "number", min: 1, placeholder: "workers" });
  const start = h("button", { id: "start", type: "submit" }, "Start run");
  const form = h("form", { class: "row", id: "start-form" },
    config, list, agents, rounds, workers, start);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    error.textContent = "";
    start.disabled = true;
    const intOrNull = (el) => (el.value ? parseInt(el.value, 10) : null);
    try {
      const r = await api("/api/runs", { json: {
        config: config.value.trim(), agents: intOrNull(agents), rounds: intOrNull(rounds),
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
        "beside it override agents, rounds and workers."), form, error),
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
        ["run", "status", "agents", "rounds", "wall time", "modified", ""],
        runs.map((r) => ({
          cells: [
            h("a", { href: `#/run/${enc(r.id)}` }, r.name === r.id ? r.id : `${r.name} · ${r.id}`),
            h("span", { class: `badge ${r.status}` }, r.status),
            num(r.agents), `${num(r.rounds_done)} / ${num(r.rounds_planned)}`,
            r.wall_s ? secs(r.wall_s) : "–", when(r.modified),
            h("span", { class: "row" },
              h("a", { href: `#/run/${enc(r.id)}` }, r.live ? "live" : "view"),
              r.profiles ? h("a", { href: `#/run/${enc(r.id)}/agents` }, "agents") : null,
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
function histogram(hist) {
  const W = 640, H = 220, pad = 28, right = 14, counts = hist.counts || [];
  const max = Math.max(1, ...counts);
  const n = Math.max(1, counts.length), bw = (W - pad - right) / n;
  const [lo, hi] = hist.edges || [0, 100];
  const bars = counts.map((c, i) => s("rect", {
    class: "hbar", x: pad + i * bw, width: Math.max(bw - 0.5, 0.5),
    y: H - pad - (c / max) * (H - 2 * pad), height: (c / max) * (H - 2 * pad),
    "data-count": c,
  }, s("title", null, `${c}`)));
  const label = (x, t) => s("text", { x, y: H - 10, "text-anchor": "middle" }, t);
  const fmtEdge = (v) => (Math.abs(v - Math.round(v)) < 0.51 && hi - lo > 20 ? Math.round(v) : dec(v, 1));
  return s("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", id: "hist-svg", role: "img",
                    "aria-label": "histogram of the numbers reported this round" },
    s("line", { class: "axis", x1: pad, y1: H - pad, x2: W - right, y2: H - pad }),
    s("text", { x: 2, y: pad - 6 }, num(max)), ...bars,
    label(pad + bw / 2, fmtEdge(lo + (hi - lo) / n / 2)),
    label(pad + (W - pad - right) / 2, fmtEdge((lo + hi) / 2)),
    label(W - right - bw / 2, fmtEdge(hi - (hi - lo) / n / 2)));
}

function roundsChart(rounds) {
  const W = 640, H = 160, pad = 28;
  const pts = rounds.filter((r) => r.mean !== null && r.mean !== undefined);
  if (pts.length < 2) return null;
  const ys = pts.flatMap((r) => [r.mean, r.target ?? r.mean]);
  const ymax = Math.max(...ys, 1), ymin = Math.min(0, ...ys);
  const x = (i) => pad + (i / (pts.length - 1)) * (W - 2 * pad);
  const y = (v) => H - pad - ((v - ymin) / (ymax - ymin || 1)) * (H - 2 * pad);
  const path = (key) => pts.map((r, i) => `${i ? "L" : "M"}${x(i)},${y(r[key] ?? r.mean)}`).join(" ");
  return s("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img", "aria-label": "mean per round" },
    s("line", { class: "axis", x1: pad, y1: H - pad, x2: W - pad, y2: H - pad }),
    s("path", { class: "mean", d: path("mean") }), s("path", { class: "target", d: path("target") }),
    s("text", { x: 2, y: y(ymax) + 4 }, dec(ymax, 1)), s("text", { x: 2, y: H - pad }, dec(ymin, 1)),
    ...pts.map((r, i) => s("text", { x: x(i), y: H - 8, "text-anchor": "middle" }, r.round)));
}

function runView(id) {
  crumbs(h("a", { href: "#/" }, "runs"), h("a", { href: `#/run/${enc(id)}` }, id));
  const el = {};
  const box = (key, title, ...extra) => (el[key] = h("div", { id: key }), h("section", { class: "card" }, h("h3", null, title), ...extra, el[key]));
  el.title = h("h2", { id: "run-title" }, id);
  el.status = h("span", { id: "status", class: "badge" }, "…");
  el.meta = h("div", { class: "muted", id: "run-meta" });
  el.stop = h("button", { id: "stop", class: "danger", hidden: true }, "Stop run");
  el.links = h("span", { class: "row" }, h("a", { href: `#/run/${enc(id)}/agents`, id: "agents-link" }, "Browse agents"));
  el.report = h("a", { href: `/runs/${enc(id)}/report/`, target: "_blank", hidden: true, id: "report-link" }, "Report");
  el.roundText = h("b", { id: "round-text" });
  el.progressText = h("span", { id: "progress-text", class: "muted" });
  el.bar = h("div", { style: "width:0%" });
  el.updates = h("span", { id: "updates", class: "muted", "data-n": 0 });
  el.error = h("p", { class: "error", id: "run-error" });
  el.histCaption = h("div", { class: "muted", id: "hist-caption" });
  setView(
    h("section", { class: "card" },
      h("div", { class: "row" }, el.title, el.status, h("span", { class: "spacer" }), el.links, el.report, el.stop),
      el.meta, el.error,
      h("div", { class: "row", style: "margin-top:10px" }, el.roundText, el.progressText, h("span", { class: "spacer" }), el.updates),
      h("div", { class: "bar", id: "progress-bar" }, el.bar)),
    h("div", { class: "grid" },
      box("states", "Agents by state"),
      box("hist", "Numbers this round", el.histCaption)),
    h("div", { class: "grid" },
      box("llm", "LLM"),
      box("workers", "Workers")),
    h("div", { class: "grid" },
      box("rounds", "Rounds"),
      box("env", "Environment")));
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
    el.roundText.textContent = p.round ? `Round ${p.round} of ${snap.rounds_planned ?? "?"}` :
      (snap.status === "starting" ? "Preparing the population and the workers…" : "No round played yet");
    el.progressText.textContent = `${num(p.done)} / ${num(p.total)} answered` + (p.failed ? ` · ${num(p.failed)} failed` : "") +
      (snap.finished && p.done < p.total ? " · abandoned when the run stopped; finished rounds are kept" : "");
    el.bar.style.width = `${(100 * (p.fraction || 0)).toFixed(1)}%`;
    renderStates(snap.states || {});
    const hist = snap.histogram || {};
    el.hist.replaceChildren(histogram(hist));
    el.histCaption.textContent = `round ${hist.round || "–"}: ${num(hist.valid)} valid, ${num(hist.invalid)} invalid · mean ${dec(hist.mean)} · std ${dec(hist.std)}`;
    renderLLM(snap.llm || {});
    renderWorkers(snap);
    renderRounds(snap.rounds || []);
    const env = Object.entries(snap.environment || {});
    el.env.replaceChildren(env.length ? table(["key", "value"], env.map(([k, v]) => ({ cells: [k, typeof v === "object" ? JSON.stringify(v) : String(v)] })))
      : h("p", { class: "muted" }, "This scenario has no environment monitors."));
  }

  function renderStates(st) {
    const total = STATES.reduce((a, [k]) => a + (st[k] || 0), 0) || 1;
    el.states.replaceChildren(
      h("div", { class: "stack" }, STATES.map(([k, , c]) => h("div", { style: `width:${(100 * (st[k] || 0)) / total}%;background:${c}`, title: k }))),
      h("div", { class: "legend" }, STATES.map(([k, label, c]) => h("span", { style: `--c:${c}`, id: `state-${k}` }, `${label}: ${num(st[k] || 0)}`))));
  }

  function renderLLM(llm) {
    const lat = llm.latency_s || {};
    const kv = (label, value) => h("div", null, h("small", null, label), h("b", null, value));
    const parts = [h("div", { class: "kv" },
      kv("requests", num(llm.requests)), kv("requests/s", num(llm.requests_per_s)),
      kv("answers/s", num(llm.answers_per_s)), kv("in flight", num(llm.in_flight)),
      kv("tokens in", num(llm.prompt_tokens)), kv("tokens out", num(llm.completion_tokens)),
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
        table(["endpoint", "state", "requests", "failed", "in flight", "mean latency"], llm.endpoints.map((e) => ({
          cells: [e.url, e.state, num(e.requests), num(e.failures), num(e.in_flight), secs(e.mean_latency_s)] })),
        { numeric: [2, 3, 4, 5] }));
    }
    parts.push(h("div", { class: "muted", style: "margin-top:6px" }, "latency: per answer, all of its calls and retries"));
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

  function renderRounds(rounds) {
    if (!rounds.length) {
      el.rounds.replaceChildren(h("p", { class: "muted" }, "No round finished yet."));
      return;
    }
    el.rounds.replaceChildren(roundsChart(rounds) || "", table(
      ["round", "valid", "mean", "median", "std", "target", "winner", "wall"],
      rounds.map((r) => ({ cells: [r.round, `${num(r.n_valid)} / ${num(r.n)}`, dec(r.mean), dec(r.median), dec(r.std), dec(r.target), r.winner_number ?? "–", secs(r.wall_s)] })),
      { id: "rounds-table", numeric: [1, 2, 3, 4, 5, 6, 7] }));
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
  const agentId = h("input", { id: "f-id", type: "number", min: 0, placeholder: "agent id", value: q.get("agent_id") || "" });
  const group = h("input", { id: "f-group", type: "number", min: 0, placeholder: "group", value: q.get("group") || "" });
  const attribute = h("select", { id: "f-attr" }, h("option", { value: "" }, "any attribute"));
  const valueBox = h("span", null);
  let value = h("input", { id: "f-value", placeholder: "value contains…", value: q.get("value") || "" });
  valueBox.append(value);
  const error = h("p", { class: "error", id: "agents-error" });
  const results = h("div", { id: "agents-results" });
  const form = h("form", { class: "row", id: "agents-form" }, agentId, group, attribute, valueBox,
    h("button", { type: "submit" }, "Search"));
  setView(h("section", { class: "card" }, h("h3", null, "Agents"), form, error, results));
  let columns = [];
  try {
    columns = await api(`/api/runs/${enc(id)}/columns`);
  } catch (e) {
    error.textContent = e.message;
    return;
  }
  for (const c of columns) if (c.name !== "agent_id") attribute.append(h("option", { value: c.name }, c.name));
  attribute.value = q.get("attribute") || "";
  function valueInput() {
    const col = columns.find((c) => c.name === attribute.value);
    const old = value.value;
    value = col && col.values
      ? h("select", { id: "f-value" }, h("option", { value: "" }, "any value"), col.values.map((v) => h("option", { value: String(v) }, String(v))))
      : h("input", { id: "f-value", placeholder: "value contains…" });
    value.value = old;
    valueBox.replaceChildren(value);
  }
  attribute.addEventListener("change", valueInput);
  valueInput();
  value.value = q.get("value") || "";
  let page = parseInt(q.get("page") || "0", 10);

  async function search() {
    error.textContent = "";
    const params = new URLSearchParams({ page, size: 50 });
    if (agentId.value) params.set("agent_id", agentId.value);
    if (group.value) params.set("group", group.value);
    if (attribute.value) { params.set("attribute", attribute.value); if (value.value) params.set("value", value.value); }
    try {
      const r = await api(`/api/runs/${enc(id)}/agents?${params}`);
      const prev = h("button", { class: "plain", disabled: r.page === 0, onclick: () => { page -= 1; search(); } }, "‹ previous");
      const next = h("button", { class: "plain", disabled: r.page + 1 >= r.pages, onclick: () => { page += 1; search(); } }, "next ›");
      const idIndex = r.columns.indexOf("agent_id");
      results.replaceChildren(
        h("p", { class: "muted", id: "agents-total" }, `${num(r.total)} agents match`),
        table(r.columns, r.rows.map((row) => ({
          cells: row.map((v, i) => (i === idIndex ? h("a", { href: `#/run/${enc(id)}/agent/${v}` }, String(v)) : v === null ? "–" : String(v))),
          onclick: () => { location.hash = `#/run/${enc(id)}/agent/${row[idIndex]}`; },
        })), { id: "agents-table" }),
        h("div", { class: "row pager" }, prev, h("span", { class: "muted" }, `page ${r.page + 1} of ${r.pages}`), next));
    } catch (e) {
      error.textContent = e.message;
    }
  }
  form.addEventListener("submit", (ev) => { ev.preventDefault(); page = 0; search(); });
  search();
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
  const rounds = a.rounds.map((r) => h("div", { class: `round ${r.valid ? "" : "invalid"}`, "data-round": r.round },
    h("div", { class: "row" }, h("b", null, `Round ${r.round}`), h("span", { class: "muted" }, r.model || ""),
      h("span", null, r.valid ? `reported ${r.number}` : "no valid number"),
      h("span", { class: "muted" }, `${num(r.calls)} call(s) · ${num(r.prompt_tokens)} tokens in · ${num(r.completion_tokens)} out · ${secs(r.latency_s)}` + (r.retries ? ` · ${r.retries} retries` : ""))),
    h("div", { class: "msg-label" }, "agent → moderator: its answer"), h("pre", { class: "raw" }, r.raw ?? "(none)"),
    r.extract_raw !== null && r.extract_raw !== undefined ? [h("div", { class: "msg-label" }, "extraction call: the number it stated"), h("pre", null, r.extract_raw)] : null,
    r.error ? [h("div", { class: "msg-label" }, "error"), h("pre", { class: "error" }, r.error)] : null,
    r.result ? h("div", { class: "msg-label" }, `moderator → everyone: target ${dec(r.result.target)}, winning number ${r.result.winner_number ?? "–"}`) : null));
  setView(
    h("section", { class: "card" }, h("h2", { id: "agent-title" }, `Agent ${a.agent_id}`),
      table(["attribute", "value"], profile.map(([k, v]) => ({ cells: [k, v === null ? "–" : String(v)] })), { id: "profile-table" })),
    a.background ? h("section", { class: "card" }, h("h3", null, "Background"), h("pre", { id: "background" }, a.background)) : "",
    a.prompt ? h("section", { class: "card" }, h("h3", null, "The moderator's question"),
      h("p", { class: "muted" }, "Sent every round: the run's prompt template; {fields} are filled in per round and per agent, and earlier rounds come before it in the conversation."),
      h("pre", { id: "prompt" }, a.prompt)) : "",
    h("section", { class: "card", id: "messages" }, h("h3", null, `Messages (${a.rounds.length} rounds)`),
      rounds.length ? rounds : h("p", { class: "muted" }, "No finished round yet.")));
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
