// The fedxab dashboard page: polls /api/state and draws it. No library, nothing from the
// internet. Every value shown comes from the server's snapshot; the elements a test reads carry
// it unrounded in a data-value attribute.
"use strict";

const POLL_MS = 1000;
const COLORS = ["var(--c1)", "var(--c2)", "var(--c3)", "var(--c4)", "var(--c5)"];
// Cumulative regret where the optimum is known, else the best observed value (no optimum
// needed); simple regret is on another scale and is shown as a number on the regret card.
const CURVES = [
  ["cumulative", "global cumulative regret"],
  ["local", "local cumulative regret"],
  ["observed", "best observed (mean)"],
];
const SVG = "http://www.w3.org/2000/svg";
let selected = null;   // the run index the user picked (null: the newest)
let rendered = false;
let lastRun = null;  // the run last drawn
let client = null;   // the client picked below the band chart, with its run id

const $ = (id) => document.getElementById(id);

function fmt(x, digits = 4) {
  if (x === null || x === undefined) return "–";
  if (Number.isInteger(x)) return x.toLocaleString("en-US");
  const a = Math.abs(x);
  if (a !== 0 && (a >= 1e6 || a < 1e-3)) return x.toExponential(2);
  return x.toLocaleString("en-US", { maximumSignificantDigits: digits });
}

function bytes(n) {
  const units = ["B", "kB", "MB", "GB", "TB"];
  let k = 0;
  while (n >= 1000 && k < units.length - 1) { n /= 1000; k += 1; }
  return `${fmt(n, 3)} ${units[k]}`;
}

function duration(s) {
  if (s === null || s === undefined) return "–";
  if (s < 60) return `${fmt(s, 3)} s`;
  const m = Math.floor(s / 60);
  return m < 60 ? `${m} min ${Math.round(s % 60)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
}

function show(id, value, text) {
  const el = $(id);
  el.textContent = text === undefined ? fmt(value) : text;
  el.dataset.value = value === null || value === undefined ? "" : String(value);
}

function el(name, attrs, parent) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

function ticks(lo, hi, n = 4) {
  if (!(hi > lo)) return [lo];
  const step0 = (hi - lo) / n;
  const mag = 10 ** Math.floor(Math.log10(step0));
  const step = [1, 2, 5, 10].map((f) => f * mag).find((s) => s >= step0);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(v);
  return out;
}

// A chart frame in the svg's own pixels: x and y scales, axes with ticks.
function frame(svg, xs, ys) {
  svg.replaceChildren();
  const w = svg.clientWidth || 600, h = svg.clientHeight || 190;
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  const m = { l: 52, r: 22, t: 6, b: 20 };
  const finite = (v) => v !== null && Number.isFinite(v);
  const xv = xs.filter(finite), yv = ys.filter(finite);
  const x0 = Math.min(...xv, 0), x1 = Math.max(...xv, 1);
  let y0 = Math.min(...yv, 0), y1 = Math.max(...yv);
  if (!(y1 > y0)) y1 = y0 + 1;
  const sx = (x) => m.l + ((x - x0) / (x1 - x0 || 1)) * (w - m.l - m.r);
  const sy = (y) => h - m.b - ((y - y0) / (y1 - y0)) * (h - m.t - m.b);
  el("line", { x1: m.l, x2: w - m.r, y1: h - m.b, y2: h - m.b, class: "axis" }, svg);
  el("line", { x1: m.l, x2: m.l, y1: m.t, y2: h - m.b, class: "axis" }, svg);
  for (const v of ticks(y0, y1)) {
    el("line", { x1: m.l, x2: w - m.r, y1: sy(v), y2: sy(v), class: "axis" }, svg);
    el("text", { x: m.l - 4, y: sy(v) + 4, "text-anchor": "end" }, svg).textContent = fmt(v, 3);
  }
  for (const v of ticks(x0, x1, 5)) {
    el("text", { x: sx(v), y: h - 5, "text-anchor": "middle" }, svg).textContent = fmt(v, 3);
  }
  return { sx, sy, finite };
}

function polyline(svg, f, points, color, name) {
  const kept = points.filter(([x, y]) => f.finite(x) && f.finite(y));
  const line = el("polyline", {
    points: kept.map(([x, y]) => `${f.sx(x).toFixed(1)},${f.sy(y).toFixed(1)}`).join(" "),
    stroke: color,
  }, svg);
  line.dataset.series = name;
  line.dataset.points = String(kept.length);
  line.dataset.last = kept.length ? String(kept[kept.length - 1][1]) : "";
  return line;
}

function area(svg, f, xs, lo, hi, opacity) {
  const top = [], bottom = [];
  xs.forEach((x, i) => {
    if (f.finite(lo[i]) && f.finite(hi[i])) {
      top.push(`${f.sx(x).toFixed(1)},${f.sy(hi[i]).toFixed(1)}`);
      bottom.unshift(`${f.sx(x).toFixed(1)},${f.sy(lo[i]).toFixed(1)}`);
    }
  });
  if (top.length) {
    el("polygon", { points: top.concat(bottom).join(" "), fill: "var(--band)",
      "fill-opacity": opacity, stroke: "none" }, svg);
  }
}

function empty(svg, text) {
  svg.replaceChildren();
  const w = svg.clientWidth || 600, h = svg.clientHeight || 190;
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  el("text", { x: w / 2, y: h / 2, "text-anchor": "middle" }, svg).textContent = text;
}

function drawRegret(run) {
  const svg = $("regret-chart"), legend = $("regret-legend");
  legend.replaceChildren();
  const present = CURVES.filter(([key]) => run.curves[key] && run.curves[key].length);
  const regrets = present.filter(([key]) => key !== "observed");
  const shown = regrets.length ? regrets : present;
  $("regret-title").textContent = regrets.length ? "regret" : "best observed value";
  if (!shown.length) { empty(svg, "no curve yet"); return; }
  const all = shown.flatMap(([key]) => run.curves[key]);
  const f = frame(svg, all.map((p) => p[0]), all.map((p) => p[1]));
  shown.forEach(([key, label], i) => {
    polyline(svg, f, run.curves[key], COLORS[i], key);
    const item = document.createElement("span");
    item.innerHTML = `<i style="background:${COLORS[i]}"></i>${label}`;
    legend.appendChild(item);
  });
}

function drawBand(run) {
  const svg = $("band-chart"), band = run.band;
  if (!band) {
    empty(svg, run.status === "running" ? "each client's curve arrives with its outcome at the end"
      : "no client outcomes in this run");
    return;
  }
  const xs = band.rounds;
  const f = frame(svg, xs, band.min.concat(band.max));
  area(svg, f, xs, band.min, band.max, 0.12);
  area(svg, f, xs, band.p10, band.p90, 0.22);
  polyline(svg, f, xs.map((x, i) => [x, band.mean[i]]), COLORS[0], "mean");
  svg.dataset.clients = String(band.clients);
  const o = client && client.run_id === run.info.run_id ? client.outcome : null;
  if (o) polyline(svg, f, o.rounds.map((x, i) => [x, o.best_so_far[i]]), COLORS[1], "client");
}

async function drawClient() {
  const query = selected === null ? "" : `&run=${selected}`;
  const answer = await fetch(`/api/client?id=${$("client-id").value}${query}`);
  const detail = await answer.json();
  if (!answer.ok) { $("client-detail").textContent = detail.error; return; }
  const eps = detail.epsilon === null ? "" : ` · ε ${fmt(detail.epsilon)}`;
  const best = detail.outcome ? ` · best ${fmt(detail.outcome.best_value)}` : "";
  $("client-detail").textContent = `client ${detail.client}${best}${eps}`;
  client = { ...detail, run_id: lastRun.info.run_id };
  drawBand(lastRun);
}

function drawPrivacy(p) {
  const svg = $("eps-hist"), body = $("eps-nearest").tBodies[0];
  body.replaceChildren();
  if (!p) {
    empty(svg, "this run has no privacy accounting");
    show("kpi-epsilon", null);
    $("kpi-budget").textContent = "no privacy accounting";
    $("eps-delta").textContent = "";
    return;
  }
  show("kpi-epsilon", p.max);
  $("kpi-budget").textContent = p.budget === null ? "no budget"
    : `budget ${fmt(p.budget)} · ${fmt(p.over_budget)} over`;
  $("eps-delta").textContent = p.delta === null ? "" : `(δ = ${fmt(p.delta)})`;
  const { edges, counts } = p.histogram;
  const f = frame(svg, [edges[0], edges[edges.length - 1]], counts);
  counts.forEach((c, i) => {
    const x0 = f.sx(edges[i]), x1 = f.sx(edges[i + 1]);
    const bar = el("rect", { x: x0 + 0.5, width: Math.max(x1 - x0 - 1, 1), y: f.sy(c),
      height: f.sy(0) - f.sy(c), fill: "var(--c3)" }, svg);
    bar.dataset.count = String(c);
  });
  if (p.budget !== null) {
    const x = f.sx(p.budget);
    el("line", { x1: x, x2: x, y1: 0, y2: f.sy(0), stroke: "var(--c5)", "stroke-dasharray": "4 3" }, svg);
  }
  svg.dataset.total = String(counts.reduce((a, b) => a + b, 0));
  for (const row of p.nearest) {
    const tr = body.insertRow();
    tr.innerHTML = `<td>${row.client}</td><td class="num">${fmt(row.epsilon)}</td>`
      + `<td class="num">${row.share === null ? "–" : fmt(100 * row.share, 3) + "%"}</td>`
      + `<td>${row.withdrawn ? "withdrawn" : ""}</td>`;
    tr.dataset.client = String(row.client);
    tr.dataset.epsilon = String(row.epsilon);
  }
}

// The data owners' spend over every run of the ledger (a results file read with its ledger).
function drawLifetime(lifetime) {
  const box = $("lifetime"), body = $("lifetime-owners").tBodies[0];
  box.hidden = !lifetime || !lifetime.owners;
  body.replaceChildren();
  if (box.hidden) return;
  $("lifetime-counts").textContent = `(${fmt(lifetime.owners)} owners, `
    + `${fmt(lifetime.over_budget)} over budget)`;
  for (const row of lifetime.nearest) {
    const tr = body.insertRow();
    for (const value of [row.owner, fmt(row.runs), fmt(row.epsilon), fmt(row.budget_epsilon),
      fmt(row.remaining)]) {
      tr.insertCell().textContent = value;
    }
    tr.dataset.owner = row.owner;
    tr.dataset.epsilon = String(row.epsilon);
  }
}

function drawPhases(run) {
  const svg = $("phase-chart"), ph = run.phases;
  if (ph.durations.length) {
    const f = frame(svg, ph.durations.map((p) => p[0]), ph.durations.map((p) => p[1]));
    polyline(svg, f, ph.durations, COLORS[3], "duration");
  } else {
    empty(svg, ph.count ? "durations are measured live only" : "no phase yet");
  }
  table("traffic", [
    ["phases closed", ph.count], ["last phase", ph.last],
    ["messages up", ph.messages_up], ["messages down", ph.messages_down],
    ["bytes up", ph.bytes_up, bytes], ["bytes down", ph.bytes_down, bytes],
  ]);
}

function table(id, rows) {
  const body = $(id).tBodies[0];
  body.replaceChildren();
  for (const [label, value, format] of rows) {
    const tr = body.insertRow();
    tr.insertCell().textContent = label;
    const cell = tr.insertCell();
    cell.className = "num";
    cell.textContent = value === undefined || value === null ? "–" : (format || fmt)(value);
    tr.dataset.value = value === undefined || value === null ? "" : String(value);
  }
  if (!rows.length) body.insertRow().insertCell().textContent = "none";
}

// Who joined, left, was asked and reported in each closed phase (the server's record; the
// newest phase first), and who by id.
function drawPopulation(population) {
  const phases = population ? population.phases : [];
  $("population-panel").hidden = !phases.length;
  if (!phases.length) return;
  $("population-totals").textContent = `(${fmt(population.joined)} joined, ${fmt(population.left)} left)`;
  const body = $("population").tBodies[0];
  body.replaceChildren();
  for (const row of phases.slice().reverse()) {
    const tr = body.insertRow();
    for (const key of ["phase", "joined", "left", "asked", "reported"]) {
      const cell = tr.insertCell();
      cell.className = "num";
      cell.textContent = fmt(row[key]);
      tr.dataset[key] = String(row[key]);
    }
    tr.insertCell().textContent = row.joined_ids || "–";
    tr.insertCell().textContent = row.left_ids || "–";
  }
}

function params(p) {
  if (!p) return "–";
  return Object.entries(p).map(([k, v]) => `${k} = ${typeof v === "number" ? fmt(v) : v}`).join(", ");
}

// The trials of a user's objective this party evaluated (newest first) and the server's
// recommendation, parameters by name in the user's units. A party without the trials (a
// server: they stay at the sites) lists each client's best from the run's outcomes instead.
function drawTrials(run) {
  const trials = run.trials, rec = run.recommendation, outcomes = run.outcome_best;
  $("trials-panel").hidden = !trials && !rec && !outcomes;
  $("recommendation").hidden = !rec;
  if (rec) $("recommendation-params").textContent = rec.params ? params(rec.params) : `[${rec.point.map((v) => fmt(v)).join(", ")}]`;
  $("trials-best").hidden = $("trials-best-title").hidden = !trials && !outcomes;
  $("trials-recent").hidden = $("trials-recent-title").hidden = !trials;
  $("trials-best-count").textContent = trials ? "trials" : "evals";
  const fill = (id, rows, cells) => {
    const body = $(id).tBodies[0];
    body.replaceChildren();
    for (const row of rows) {
      const tr = body.insertRow();
      for (const text of cells(row)) tr.insertCell().textContent = text;
      tr.dataset.value = String(row.value);
    }
  };
  if (!trials) {
    $("trials-counts").textContent = outcomes ? "(each site keeps its own; best per client from the outcomes)" : "";
    fill("trials-best", outcomes || [], (r) => [r.client, fmt(r.evaluations), fmt(r.value), "–", params(r.params)]);
    return;
  }
  $("trials-counts").textContent = `(${fmt(trials.count)} over ${fmt(trials.clients)} client(s); ${trials.direction})`;
  $("trials-counts").dataset.value = String(trials.count);
  fill("trials-best", trials.per_client, (r) => [r.client, fmt(r.count), fmt(r.value), r.number, params(r.params)]);
  fill("trials-recent", trials.recent.slice().reverse(), (r) => [r.client, r.number, fmt(r.value), duration(r.wall_s), params(r.params)]);
}

function render(state) {
  const select = $("run-select");
  const options = state.runs.map((r) => `${r.index}: ${r.run_id || "run"} (${r.status})`);
  if (select.options.length !== options.length
      || [...select.options].some((o, i) => o.textContent !== options[i])) {
    select.replaceChildren(...options.map((text, i) => new Option(text, String(i))));
  }
  const run = state.run;
  if (!run) return;
  lastRun = run;
  select.value = String(state.selected);
  const info = run.info;
  $("run-title").textContent = `${info.run_id || ""} · ${info.algorithm} on ${info.objective}`
    + ` · ${info.transport}`;
  const status = $("status");
  status.textContent = run.status;
  status.className = `badge ${run.status}`;
  show("kpi-clients", run.clients.total);
  show("kpi-active", run.clients.active);
  show("kpi-withdrawn", run.clients.withdrawn);
  show("kpi-round", run.round, `${fmt(run.round)} / ${fmt(info.budget)}`);
  $("kpi-round-bar").style.width = `${Math.min(100, (100 * run.round) / (info.budget || 1))}%`;
  show("kpi-phases", run.phases.count);
  $("kpi-messages").textContent = fmt((run.phases.messages_up || 0) + (run.phases.messages_down || 0));
  $("kpi-bytes").textContent = bytes((run.phases.bytes_up || 0) + (run.phases.bytes_down || 0));
  show("kpi-evaluations", run.evaluations);
  $("kpi-elapsed").textContent = duration(run.elapsed_s);
  const finished = run.status === "finished";
  const newest = (curve) => (curve && curve.length ? curve[curve.length - 1][1] : null);
  if (info.regret_known) {
    $("kpi-regret-label").textContent = "cumulative regret";
    show("kpi-regret", finished ? run.final.cumulative_regret : newest(run.curves.cumulative));
    const simple = finished ? run.final.simple_regret : null;
    $("kpi-regret-note").textContent = "global, mean over clients"
      + (simple === null || simple === undefined ? "" : ` · simple ${fmt(simple, 3)}`);
  } else {
    $("kpi-regret-label").textContent = "best observed";
    // a site's agent has no record of the run: its own live curve's last value
    const final = finished ? run.final.observed_best_mean : undefined;
    show("kpi-regret", final === undefined || final === null ? newest(run.curves.observed) : final);
    $("kpi-regret-note").textContent = "mean over clients (no optimum needed)";
  }
  drawRegret(run);
  drawBand(run);
  drawPrivacy(run.privacy);
  drawLifetime(state.lifetime);
  drawPhases(run);
  drawTrials(run);
  drawPopulation(run.population);
  table("reports", Object.entries(run.reports));
  table("rejected", Object.entries(run.rejected));
  $("config").textContent = JSON.stringify(state.config, null, 2);
  if (!rendered) {
    rendered = true;
    document.body.dataset.renderedMs = String(performance.now());
  }
  document.body.dataset.version = String(state.version);
  document.body.dataset.status = run.status;
}

async function refresh() {
  try {
    const query = selected === null ? "" : `?run=${selected}`;
    const answer = await fetch(`/api/state${query}`, { cache: "no-store" });
    if (answer.ok) render(await answer.json());
  } catch (err) {
    $("status").textContent = "disconnected";
    $("status").className = "badge failed";
  }
}

async function poll() {
  await refresh();
  setTimeout(poll, POLL_MS);
}

$("run-select").addEventListener("change", (e) => {
  selected = Number(e.target.value);
  refresh();
});
$("client-id").addEventListener("change", drawClient);
poll();
