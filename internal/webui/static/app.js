// slicerd's read-only web UI. It calls slicerd's Connect API with JSON, as
// curl does (docs/api.md), from the address that served it, and refreshes
// every 2 seconds. It never calls a procedure that changes state.
"use strict";

const REFRESH_MS = 2000;
const HISTORY_ROWS = 20;
// Decisions read for the heatmap's marks: ten minutes of load decisions
// at the usual pace. The history is read again only when the job's
// generation changes.
const MARK_DECISIONS = 64;
const KEY_SPACE = 1n << 63n;
// Task colours: Okabe–Ito's colour-blind-safe set, then more that are
// distinct from it and from one another. A task's colour comes from a hash
// of its name (colourOf), so it is the same on every refresh and reload.
const PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442",
  "#882255", "#332288", "#999933", "#AA4499", "#888888"];
// Viridis at five stops: perceptually even and readable in grey.
const RAMP = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];

const $ = (id) => document.getElementById(id);

class RPCError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

// rpc calls a procedure with Connect's unary JSON protocol.
async function rpc(procedure, body) {
  let resp;
  try {
    resp = await fetch("/slicer.v1." + procedure, {
      method: "POST",
      headers: { "Content-Type": "application/json", "Connect-Protocol-Version": "1", "Connect-Timeout-Ms": "10000" },
      body: JSON.stringify(body || {}),
    });
  } catch (e) {
    throw new RPCError("unavailable", "slicerd does not answer (" + e.message + "); is it still running?");
  }
  const text = await resp.text();
  let msg = {};
  try {
    msg = text ? JSON.parse(text) : {};
  } catch (e) {
    throw new RPCError("internal", "slicerd answered HTTP " + resp.status + " with a body that is not JSON");
  }
  if (!resp.ok) {
    throw new RPCError(msg.code || "unknown", msg.message || "HTTP " + resp.status);
  }
  return msg;
}

// ---- formatting ----

const big = (s) => BigInt(s || "0");
const frac = (s) => Number((big(s) * 1000000n) / KEY_SPACE) / 1e6;
const hexKey = (s) => "0x" + big(s).toString(16);
const pct = (f) => (100 * f).toFixed(f < 0.1 ? 2 : 1) + "%";

function fmtLoad(x) {
  x = x || 0;
  if (x === 0) return "0";
  const a = Math.abs(x);
  if (a >= 1e9) return (x / 1e9).toFixed(2) + "G";
  if (a >= 1e6) return (x / 1e6).toFixed(2) + "M";
  if (a >= 1e4) return (x / 1e3).toFixed(1) + "k";
  if (a >= 100) return x.toFixed(0);
  if (a >= 1) return x.toFixed(1);
  return x.toPrecision(2);
}

function fmtBytes(b) {
  if (!b) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) {
    b /= 1024;
    i++;
  }
  return b.toFixed(i ? 1 : 0) + " " + units[i];
}

// imbalanceChange prints a decision's imbalance before and after; both 0
// means the deciding Assigner did not have every task's load yet.
function imbalanceChange(d) {
  const before = d.imbalanceBefore || 0, after = d.imbalanceAfter || 0;
  if (before === 0 && after === 0) return "unknown";
  return before.toFixed(3) + " → " + after.toFixed(3);
}

function fmtTime(ns) {
  const d = new Date(Number(big(ns) / 1000000n));
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function fmtAgo(ms) {
  const s = Math.round(ms / 1000);
  return s < 120 ? s + " s" : Math.round(s / 60) + " min";
}

// el builds an element: el("td", {class: "num"}, "text", child, ...).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "style") e.style.cssText = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function svgEl(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

// replaceRows swaps a table body's rows, only when they changed, so that
// screen readers and selections are not disturbed by identical refreshes.
function replaceChildren(parent, children) {
  const probe = document.createElement(parent.tagName);
  probe.append(...children);
  if (probe.innerHTML === parent.innerHTML) return;
  parent.replaceChildren(...children);
}

// ---- task colours: from the task's name, not its place in a list ----

// nameHash is FNV-1a (32-bit) of a name's UTF-16 code units.
function nameHash(name) {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) {
    h ^= name.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

// taskColours holds the palette slot of each task seen while the page is
// open: once a task has a colour it keeps it.
const taskColours = new Map();

// assignColours gives each of the tasks on screen a palette slot: its
// name's hash, or, when a task already shown holds that slot, the next
// free one, so that up to PALETTE.length tasks on screen never share a
// colour. Names are taken in order, so the same tasks get the same colours
// on every load of the page. Tasks no longer shown give their slots back.
function assignColours(names) {
  const shown = [...new Set(names)].sort();
  for (const t of [...taskColours.keys()]) if (!shown.includes(t)) taskColours.delete(t);
  const used = new Set(taskColours.values());
  for (const t of shown) {
    if (taskColours.has(t)) continue;
    let slot = nameHash(t) % PALETTE.length;
    for (let i = 0; i < PALETTE.length && used.has(slot); i++) slot = (slot + 1) % PALETTE.length;
    taskColours.set(t, slot);
    used.add(slot);
  }
}

function colourOf(task) {
  if (!taskColours.has(task)) return PALETTE[nameHash(task) % PALETTE.length];
  return PALETTE[taskColours.get(task)];
}

function rampColour(t) {
  t = Math.min(1, Math.max(0, t));
  const x = t * (RAMP.length - 1);
  const i = Math.min(RAMP.length - 2, Math.floor(x));
  const f = x - i;
  return RAMP[i].map((c, k) => Math.round(c + f * (RAMP[i + 1][k] - c)));
}

// ---- errors and status ----

// showError puts an error in the page's error box. On a job's page, an
// unknown job says so by name; any other error is shown as the API gave
// it, saying whether the figures below are from an earlier refresh.
function showError(err, context) {
  const box = $("error");
  const parts = [];
  if (err.code === "not_found" && context && context.job) {
    parts.push(el("p", { "data-error": "no-job" }, el("strong", {}, "No job named \u201c" + context.job + "\u201d.")));
    parts.push(el("p", {}, "slicerd answered: " + err.message));
  } else if (err.code === "invalid_argument" && context && context.job) {
    parts.push(el("p", { "data-error": "bad-job" }, el("strong", {}, "\u201c" + context.job + "\u201d is not a valid job name.")));
    parts.push(el("p", {}, "slicerd answered: " + err.message));
  } else {
    const what = context && context.job ? "Cannot read job \u201c" + context.job + "\u201d" : "Cannot read the jobs";
    parts.push(el("p", { "data-error": err.code || "unknown" }, el("strong", {}, what + ": "), err.message + " (" + (err.code || "unknown") + ")"));
    if (context && context.job && state.loaded) {
      parts.push(el("p", {}, "The figures below are from the last refresh that worked; the page keeps trying every " + REFRESH_MS / 1000 + " s."));
    } else {
      parts.push(el("p", {}, "The page keeps trying every " + REFRESH_MS / 1000 + " s."));
    }
  }
  if (context && context.job) parts.push(el("p", {}, el("a", { href: "./" }, "← All jobs")));
  const probe = el("div", {}, ...parts);
  if (box.hidden || box.innerHTML !== probe.innerHTML) {
    box.replaceChildren(...parts);
    box.hidden = false;
  }
}

function clearError() {
  const box = $("error");
  if (!box.hidden) {
    box.hidden = true;
    box.replaceChildren();
  }
}

function setStatus(text) {
  if ($("status").textContent !== text) $("status").textContent = text;
}

// ---- the jobs page ----

async function refreshJobs() {
  const resp = await rpc("JobService/ListJobs", {});
  const jobs = resp.jobs || [];
  $("jobs-empty").hidden = jobs.length > 0;
  const rows = jobs.map((j) =>
    el("tr", {},
      el("th", { scope: "row" }, el("a", { href: "?job=" + encodeURIComponent(j.name) }, j.name)),
      el("td", { class: "num" }, j.generation || "0"),
      el("td", { class: "num" }, (j.liveTasks || []).length),
      el("td", { class: "num" }, fmtLoad(j.totalLoad)),
      el("td", { class: "num" }, (j.imbalance || 0).toFixed(3)),
      el("td", {}, j.preferredAssigner || "")));
  replaceChildren($("jobs").tBodies[0], rows);
  setStatus(jobs.length + (jobs.length === 1 ? " job" : " jobs"));
}

// ---- the job page ----

const state = {
  job: "", assignmentProc: "DistributorService/GetAssignment", noAssignment: false, why: null,
  decisions: null, // the newest MARK_DECISIONS decisions, newest first
  loaded: false, // whether the job's page has been drawn once
  drawn: null, // what the heatmap and the strip were last drawn from, to draw them again at a new size
};

async function getAssignment(job) {
  if (state.noAssignment) return null;
  try {
    return (await rpc(state.assignmentProc, { job })).assignment || null;
  } catch (e) {
    if (e.code === "unimplemented" && state.assignmentProc.startsWith("Distributor")) {
      state.assignmentProc = "BackupService/GetAssignment";
      return getAssignment(job);
    }
    if (e.code === "unimplemented") {
      state.noAssignment = true;
      return null;
    }
    if (e.code === "not_found" || e.code === "deadline_exceeded") return null; // no assignment yet
    throw e;
  }
}

async function refreshJob() {
  const job = state.job;
  // GetJob first: an unknown job is reported once, not by every call.
  const info = (await rpc("JobService/GetJob", { job })).job;
  // Decisions only change with the generation: read them again only then.
  const newest = state.decisions && state.decisions.length ? state.decisions[0].generation || "0" : null;
  const stale = state.decisions === null || newest !== (info.generation || "0");
  const [loads, history, assignment] = await Promise.all([
    rpc("JobService/GetLoadHistory", { job }),
    stale ? rpc("JobService/GetJobHistory", { job, limit: MARK_DECISIONS }) : null,
    getAssignment(job),
  ]);
  if (history) state.decisions = history.decisions || [];
  assignColours([
    ...((assignment && assignment.tasks) || []).map((t) => t.name),
    ...(info.liveTasks || []).map((t) => t.name),
    ...(info.taskLoads || []).map((t) => t.task),
  ]);
  renderSummary(info, assignment);
  state.drawn = { loads, info, assignment, decisions: state.decisions };
  drawFigure();
  renderTasks(info, assignment);
  renderHistory(state.decisions.slice(0, HISTORY_ROWS));
  if (state.why) await explain(state.why, true);
  setStatus("generation " + (info.generation || "0") + ", " + (info.liveTasks || []).length + " live tasks");
}

// drawFigure draws the heatmap, its decision marks and the assignment
// strip from the last data read; it runs again when the figure's size
// changes, since the marks and the strip's labels are drawn in pixels.
function drawFigure() {
  const d = state.drawn;
  if (!d) return;
  const axis = renderHeatmap(d.loads, d.info, d.decisions);
  renderMarks(axis, d.decisions);
  renderStrip(d.assignment);
}

function renderSummary(info, assignment) {
  const cfg = info.config || {};
  const items = [
    ["Generation", info.generation || "0"],
    ["Live tasks", (info.liveTasks || []).length],
    ["Load", fmtLoad(info.totalLoad) + "/s"],
    ["Imbalance (max/mean)", (info.imbalance || 0).toFixed(3)],
    ["Tasks reporting load", info.reportingTasks || 0],
    ["Slices", assignment ? (assignment.slices || []).length : "–"],
    ["Redundancy", (cfg.minRedundancy || 1) + "–" + (cfg.maxRedundancy || 1)],
    ["Algorithm", cfg.algorithm || "weighted-move"],
    ["Load balancing", cfg.frozen ? "frozen" : "on"],
    ["Preferred Assigner", info.preferredAssigner || "–"],
  ];
  replaceChildren($("summary"), items.map(([k, v]) => el("div", {}, el("dt", {}, k), el("dd", {}, v))));
}

function bucketRange(i, n) {
  const start = (BigInt(i) * KEY_SPACE) / BigInt(n);
  const end = (BigInt(i + 1) * KEY_SPACE) / BigInt(n);
  return [start, end];
}

function renderHeatmap(resp, info, decisions) {
  const n = resp.bucketCount || 64;
  const interval = resp.intervalMs || 5000;
  const samples = resp.samples || [];
  // The window grows with the record, from two minutes to the ten the
  // Assigner keeps (120 samples at 5 s).
  const cols = Math.min(120, Math.max(24, samples.length));
  const canvas = $("heatmap");
  if (canvas.width !== cols || canvas.height !== n) {
    canvas.width = cols;
    canvas.height = n;
  }
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(cols, n);
  // No sample: a light grey, unlike any load.
  for (let p = 0; p < img.data.length; p += 4) img.data.set([233, 236, 239, 255], p);
  let max = 0;
  for (const s of samples) for (const v of s.bucketLoad || []) max = Math.max(max, v || 0);
  const newest = samples.length ? big(samples[samples.length - 1].timeUnixNano) : 0n;
  for (const s of samples) {
    const age = Number((newest - big(s.timeUnixNano)) / 1000000n);
    const col = cols - 1 - Math.round(age / interval);
    if (col < 0) continue;
    const b = s.bucketLoad || [];
    for (let y = 0; y < n; y++) {
      const [r, g, bl] = rampColour(max > 0 ? (b[y] || 0) / max : 0);
      img.data.set([r, g, bl, 255], 4 * (y * cols + col));
    }
  }
  ctx.putImageData(img, 0, 0);
  $("x-from").textContent = "−" + fmtAgo(cols * interval);
  $("legend-max").textContent = fmtLoad(max) + "/s per 1/" + n + " of the key space";

  // The text alternative: what a sighted reader takes from the picture.
  let summary;
  if (!resp.intervalMs) {
    summary = "This Assigner does not record load over time.";
  } else if (!samples.length) {
    summary = "No load sample yet: samples are taken every " + interval / 1000 + " s once the job's tasks report load" +
      (info.preferredAssigner ? ", by the job's preferred Assigner (" + info.preferredAssigner + ")." : ".");
  } else {
    const last = samples[samples.length - 1].bucketLoad || [];
    const total = last.reduce((a, v) => a + (v || 0), 0);
    let hot = 0;
    for (let i = 1; i < n; i++) if ((last[i] || 0) > (last[hot] || 0)) hot = i;
    const [hs, he] = bucketRange(hot, n);
    const span = Number((newest - big(samples[0].timeUnixNano)) / 1000000n);
    summary = samples.length + (samples.length === 1 ? " sample" : " samples") + ", one every " + interval / 1000 + " s over the last " + fmtAgo(span + interval) +
      ", key space top to bottom, time left to right. In the newest sample the job's load is " + fmtLoad(total) + "/s" +
      (total > 0 ? "; the hottest range, [0x" + hs.toString(16) + ", 0x" + he.toString(16) + "), carries " +
        fmtLoad(last[hot]) + "/s (" + pct(last[hot] / total) + ", where an even spread would be " + pct(1 / n) + ")." : ".") +
      " The brightest cell of the picture is " + fmtLoad(max) + "/s.";
  }
  const axis = samples.length ? { newest, interval, cols } : null;
  summary += marksSummary(axis, decisions);
  if ($("heat-summary").textContent !== summary) $("heat-summary").textContent = summary;

  const last = samples.length ? samples[samples.length - 1].bucketLoad || [] : [];
  const rows = [];
  for (let i = 0; i < (samples.length ? n : 0); i++) {
    const [s, e] = bucketRange(i, n);
    rows.push(el("tr", {}, el("td", { class: "mono" }, "[0x" + s.toString(16) + ", 0x" + e.toString(16) + ")"),
      el("td", { class: "num" }, fmtLoad(last[i]))));
  }
  replaceChildren($("buckets").tBodies[0], rows);
  return axis;
}

// ---- decisions on the heatmap's time axis ----

// MARK_KINDS are the kinds of decision the heatmap marks, each with its
// class in style.css and the words of its legend.
const MARK_KINDS = {
  membership: "membership change",
  load: "load",
  drain: "drain",
  config: "configuration",
  handover: "Assigner takeover",
};

// markKind sorts a decision's cause (docs/operations.md, "job history")
// into the kinds a reader of the heatmap tells apart. An operator decision
// is a drain when its detail names a draining task, and a change of
// configuration (cordon, pin, redundancy...) otherwise.
function markKind(d) {
  switch (d.cause) {
    case "initial":
    case "task-failed":
    case "task-left":
    case "task-joined":
    case "task-moved":
      return "membership";
    case "load":
      return "load";
    case "operator":
      return /\bdraining\b/.test(d.detail || "") ? "drain" : "config";
    default:
      return "handover"; // takeover, make-before-break
  }
}

// markX is where a decision made at time ns falls on the heatmap, in
// columns from its left edge: column c shows the load measured in the
// interval that ends at its sample's time. null when it is older than the
// picture.
function markX(axis, ns) {
  const age = Number((axis.newest - big(ns)) / 1000000n) / axis.interval;
  const x = axis.cols - age;
  if (x < 0) return null;
  return Math.min(axis.cols, x);
}

function marksInView(axis, decisions) {
  if (!axis) return [];
  const out = [];
  for (const d of decisions || []) {
    const x = markX(axis, d.timeUnixNano);
    if (x !== null) out.push({ d, x, kind: markKind(d) });
  }
  return out;
}

function marksSummary(axis, decisions) {
  const marks = marksInView(axis, decisions);
  if (!marks.length) return "";
  const counts = new Map();
  for (const m of marks) counts.set(m.kind, (counts.get(m.kind) || 0) + 1);
  const kinds = Object.keys(MARK_KINDS).filter((k) => counts.has(k)).map((k) => counts.get(k) + " " + MARK_KINDS[k]);
  const notLoad = marks.filter((m) => m.kind !== "load");
  let s = " Marked on its time axis: " + marks.length + (marks.length === 1 ? " decision" : " decisions") + " (" + kinds.join(", ") + ")";
  if (marks.length >= MARK_DECISIONS) s += ", the newest " + MARK_DECISIONS + " (older ones are not marked)";
  if (notLoad.length) {
    const m = notLoad[0];
    s += "; the newest that was not a load decision is generation " + (m.d.generation || "0") + ", " + m.d.cause + ": " + (m.d.detail || "");
  }
  return s + ".";
}

// renderMarks draws a mark above the heatmap for each decision in its
// time window and, for each that was not a load decision, a line through
// it; hovering a mark names the decision.
function renderMarks(axis, decisions) {
  const svg = $("marks");
  const W = svg.clientWidth, H = svg.clientHeight;
  const track = $("heatmap").getBoundingClientRect().top - svg.getBoundingClientRect().top;
  const parts = [];
  // Oldest first, so the newest is drawn on top.
  for (const m of marksInView(axis, decisions).reverse()) {
    // Load decisions come every few seconds: their marks are smaller.
    const t = Math.max(4, track - 1) * (m.kind === "load" ? 0.65 : 1);
    // A mark at either edge is kept whole.
    const x = Math.max(t * 0.6 + 0.5, Math.min(W - t * 0.6 - 0.5, (W * m.x) / axis.cols));
    const g = svgEl("g", { class: "mark-" + m.kind, "data-cause": m.d.cause || "", "data-kind": m.kind, "data-generation": m.d.generation || "0" });
    const title = svgEl("title", {});
    title.textContent = "Generation " + (m.d.generation || "0") + " at " + fmtTime(m.d.timeUnixNano) + ": " + MARK_KINDS[m.kind] +
      " (" + (m.d.cause || "") + ")\n" + (m.d.detail || "") + "\n" + pct(m.d.churn || 0) + " of the key space moved, " +
      movesOf(m.d) + (movesOf(m.d) === 1 ? " move" : " moves") + "; imbalance " +
      imbalanceChange(m.d);
    g.append(title);
    if (m.kind !== "load") {
      g.append(svgEl("line", { class: "halo", x1: x, x2: x, y1: track, y2: H }));
      g.append(svgEl("line", { class: "line", x1: x, x2: x, y1: track, y2: H }));
    }
    g.append(svgEl("path", { class: "tick", d: "M" + (x - t * 0.6).toFixed(1) + " 0.5 L" + (x + t * 0.6).toFixed(1) + " 0.5 L" + x.toFixed(1) + " " + t + " Z" }));
    g.append(svgEl("rect", { class: "hit", x: x - 4, y: 0, width: 8, height: m.kind === "load" ? track : H }));
    parts.push(g);
  }
  const probe = svgEl("svg", {});
  probe.append(...parts);
  if (probe.innerHTML !== svg.innerHTML) svg.replaceChildren(...parts);
}

// runsOf merges neighbouring slices served by the same tasks: one run,
// drawn as one segment, per stretch of the key space that the same tasks
// serve.
function runsOf(assignment) {
  const runs = [];
  for (const s of (assignment && assignment.slices) || []) {
    const key = (s.tasks || []).join(",");
    const prev = runs[runs.length - 1];
    if (prev && prev.key === key) {
      prev.end = s.end;
      prev.slices++;
    } else {
      runs.push({ key, tasks: s.tasks || [], start: s.start, end: s.end, slices: 1 });
    }
  }
  return runs;
}

// textColour is black or white, whichever reads better on colour.
function textColour(colour) {
  const [r, g, b] = [1, 3, 5].map((i) => parseInt(colour.substr(i, 2), 16) / 255)
    .map((c) => (c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4));
  return 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.18 ? "#000000" : "#ffffff";
}

const STRIP_FONT_PX = 11;

// renderStrip draws the assignment beside the heatmap, over the same key
// space: each run of slices in the colour of its tasks, replicas side by
// side, labelled with its task where the segment has room for the name,
// and named with its range, slices and share when hovered. Below the
// figure, a legend gives each task's colour and share of the key space.
function renderStrip(assignment) {
  const svg = $("strip");
  const W = svg.clientWidth, H = svg.clientHeight;
  const parts = [];
  const runs = runsOf(assignment);
  for (const r of runs) {
    const y0 = frac(r.start) * H;
    const h = Math.max(1, frac(r.end) * H - y0);
    const w = W / Math.max(1, r.tasks.length);
    const share = frac(r.end) - frac(r.start);
    r.tasks.forEach((t, k) => {
      const g = svgEl("g", { "data-task": t });
      const rect = svgEl("rect", { x: k * w, y: y0, width: w, height: h, fill: colourOf(t) });
      const title = svgEl("title", {});
      title.textContent = r.tasks.join(", ") + "\n[" + hexKey(r.start) + ", " + hexKey(r.end) + ")\n" +
        r.slices + (r.slices === 1 ? " slice, " : " slices, ") + (share > 0 && share < 0.0001 ? "under 0.01%" : pct(share)) + " of the key space";
      rect.append(title);
      g.append(rect);
      // A label only where it fits: a line of text high, the name wide.
      const fits = h >= STRIP_FONT_PX + 3 && t.length * STRIP_FONT_PX * 0.62 + 4 <= w;
      if (fits) {
        const text = svgEl("text", { x: k * w + w / 2, y: y0 + h / 2, "text-anchor": "middle", "dominant-baseline": "central", fill: textColour(colourOf(t)) });
        text.textContent = t;
        g.append(text);
      }
      parts.push(g);
    });
  }
  const probe = svgEl("svg", {});
  probe.append(...parts);
  if (probe.innerHTML !== svg.innerHTML) svg.replaceChildren(...parts);
  svg.setAttribute("aria-label", assignment
    ? "Current assignment, generation " + (assignment.generation || "0") + ": " + (assignment.slices || []).length + " slices in " +
      runs.length + " runs of neighbouring slices on the same tasks, the key space top to bottom, coloured by task"
    : "No assignment yet");

  // The legend: each task of the assignment, its colour and key share.
  const shares = new Map();
  for (const s of (assignment && assignment.slices) || []) {
    for (const t of s.tasks || []) shares.set(t, (shares.get(t) || 0) + frac(s.end) - frac(s.start));
  }
  const items = [...shares.keys()].sort().map((t) =>
    el("li", { "data-task": t },
      el("span", { class: "swatch", style: "background:" + colourOf(t), "aria-hidden": "true" }),
      t, el("span", { class: "share" }, pct(shares.get(t)))));
  if (items.length) {
    items.push(el("li", { class: "share" }, (assignment.slices || []).length + " slices in " + runs.length +
      (runs.length === 1 ? " segment" : " segments") + "; hover one for its range"));
  }
  replaceChildren($("strip-legend"), items);
}

// taskState words a task's state from what the page knows of it: whether
// gossip reports it live, whether it is draining or cordoned, and whether
// the current assignment gives it keys (known only when the page has the
// assignment). key is for tests and styles, text for people.
function taskState(r, haveAssignment) {
  const keys = !haveAssignment ? null : r.assigned;
  if (!r.live) {
    return keys ? { key: "gone", text: "not live — keeps its keys until the next decision" } : { key: "gone", text: "not live" };
  }
  if (r.live.draining) {
    if (keys === false) return { key: "drained", text: "drained — no keys" };
    return { key: "draining", text: keys ? "draining — its keys are moving off" : "draining" };
  }
  if (r.live.cordoned) {
    if (keys === false) return { key: "cordoned", text: "cordoned — no keys, takes no new ones" };
    return { key: "cordoned", text: keys ? "cordoned — keeps its keys, takes no new ones" : "cordoned" };
  }
  if (keys === false) return { key: "joining", text: "joining — no keys yet" };
  return { key: "live", text: "live" };
}

function renderTasks(info, assignment) {
  const rows = new Map();
  const row = (name) => {
    if (!rows.has(name)) rows.set(name, { name, load: 0, bytes: 0, share: 0, slices: 0, assigned: false, live: null });
    return rows.get(name);
  };
  for (const tl of info.taskLoads || []) Object.assign(row(tl.task), { load: tl.load || 0, bytes: tl.bytes || 0 });
  for (const t of info.liveTasks || []) row(t.name).live = t;
  if (assignment) {
    for (const s of assignment.slices || []) {
      const w = frac(s.end) - frac(s.start);
      for (const t of s.tasks || []) {
        const r = row(t);
        r.share += w;
        r.slices++;
        r.assigned = true;
      }
    }
  }
  const list = [...rows.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const max = Math.max(0, ...list.map((r) => r.load));
  const trs = list.map((r) => {
    const st = taskState(r, !!assignment);
    const width = max > 0 ? (100 * r.load) / max : 0;
    return el("tr", { class: r.live ? null : "gone", "data-task": r.name },
      el("th", { scope: "row" }, el("span", { class: "swatch", style: "background:" + colourOf(r.name), "aria-hidden": "true" }), r.name),
      el("td", {}, el("div", { class: "bar", "aria-hidden": "true" }, el("span", { style: "width:" + width.toFixed(1) + "%" }))),
      el("td", { class: "num" }, fmtLoad(r.load), r.bytes ? el("br") : null, fmtBytes(r.bytes)),
      el("td", { class: "num" }, pct(r.share)),
      el("td", { class: "num" }, r.slices),
      el("td", { "data-state": st.key }, st.text));
  });
  replaceChildren($("tasks").tBodies[0], trs);
}

function movesOf(d) {
  return (d.moves || []).length + (d.movesOmitted || 0);
}

function renderHistory(decisions) {
  const rows = decisions.map((d) =>
    el("tr", { "data-cause": d.cause || "" },
      el("td", { class: "num" }, d.generation || "0"),
      el("td", { class: "mono" }, fmtTime(d.timeUnixNano)),
      el("td", { class: "nowrap" }, d.cause || ""),
      el("td", { class: "num" }, pct(d.churn || 0)),
      el("td", { class: "num" }, imbalanceChange(d)),
      el("td", { class: "num" }, movesOf(d)),
      el("td", {}, d.detail || "")));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 7 }, "No decision recorded yet.")));
  replaceChildren($("history").tBodies[0], rows);
}

// ---- why is this key here? ----

// parseKey turns the form's input into ExplainKey's request, or throws a
// message saying what is wrong with it.
function parseKey(text, enc) {
  if (enc === "hex") {
    const h = text.replace(/^0x/i, "");
    if (h.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(h)) {
      throw new Error("\"" + text + "\" is not valid hex: give the key's bytes as pairs of hex digits, e.g. 6b6579 for \"key\".");
    }
    const bytes = new Uint8Array(h.length / 2);
    for (let i = 0; i < bytes.length; i++) bytes[i] = parseInt(h.substr(2 * i, 2), 16);
    return { key: b64(bytes), shown: "0x" + h.toLowerCase() };
  }
  if (enc === "slice") {
    let k;
    try {
      if (!/^(0x[0-9a-fA-F]+|[0-9]+)$/.test(text.trim())) throw new Error();
      k = BigInt(text.trim());
    } catch (e) {
      throw new Error("\"" + text + "\" is not a slice key: give a number below 2^63, decimal or 0x hex.");
    }
    if (k >= KEY_SPACE) throw new Error("Slice key " + text + " is outside the key space: slice keys are below 2^63 (0x8000000000000000).");
    return { sliceKey: k.toString(), shown: "" };
  }
  if (text === "") throw new Error("Type a key first.");
  return { key: b64(new TextEncoder().encode(text)), shown: JSON.stringify(text) };
}

function b64(bytes) {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s);
}

async function explain(q, refresh) {
  const out = $("why-result");
  let resp;
  try {
    const req = { job: state.job };
    if (q.sliceKey !== undefined) req.sliceKey = q.sliceKey;
    else req.key = q.key;
    resp = await rpc("JobService/ExplainKey", req);
  } catch (e) {
    if (refresh) return; // keep the last answer; the page's error box says what failed
    replaceChildren(out, [el("div", { class: "error", "data-why": "error" }, el("p", {}, "Cannot explain the key: " + e.message))]);
    return;
  }
  replaceChildren(out, [renderWhy(q, resp)]);
}

function renderWhy(q, r) {
  const head = q.shown
    ? "Key " + q.shown + " of job " + state.job + ": slice key " + hexKey(r.sliceKey)
    : "Slice key " + hexKey(r.sliceKey) + " of job " + state.job;
  const box = el("div", { class: "answer", "data-why": "answer" }, el("p", {}, el("strong", {}, head)));
  const s = r.slice;
  if (!s) {
    box.append(el("p", {}, "The job has no assignment yet."));
    return box;
  }
  const tasks = (r.tasks || []).map((t) => t.name + " (" + t.address + ")").join(", ");
  box.append(el("p", {}, "In slice [" + hexKey(s.start) + ", " + hexKey(s.end) + ") of generation " + (r.generation || "0") +
    ", served by ", el("strong", { "data-why": "tasks" }, tasks || "no task"), "."));
  const ds = r.decisions || [];
  if (!ds.length) {
    box.append(el("p", {}, r.oldestRecordedGeneration
      ? "No recorded decision moved it: it has been there since before generation " + r.oldestRecordedGeneration + ", the oldest recorded."
      : "No decision is recorded for the job."));
    return box;
  }
  box.append(el("p", {}, "Decisions that moved it, newest first:"));
  const ul = el("ul", {});
  for (const d of ds) {
    const moves = (d.moves || []).map((m) => {
      const who = m.from && m.to ? m.from + " → " + m.to : m.to ? "+" + m.to : "−" + m.from;
      return (m.phase || "-") + " " + (m.kind || "") + " [" + hexKey(m.start) + ", " + hexKey(m.end) + ") " + who + ": " + (m.reason || "");
    });
    const li = el("li", {}, "Generation " + (d.generation || "0") + " at " + fmtTime(d.timeUnixNano) + ", ",
      el("strong", {}, d.cause || ""), ": " + (d.detail || ""));
    if (moves.length) li.append(el("ul", {}, ...moves.map((m) => el("li", { class: "mono" }, m))));
    ul.append(li);
  }
  box.append(ul);
  return box;
}

function setupWhy() {
  $("why-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const text = $("why-key").value;
    const enc = new FormData(ev.target).get("enc");
    let q;
    try {
      q = parseKey(text, enc);
    } catch (e) {
      state.why = null;
      $("why-key").setAttribute("aria-invalid", "true");
      replaceChildren($("why-result"), [el("div", { class: "error", "data-why": "error" }, el("p", {}, e.message))]);
      return;
    }
    $("why-key").removeAttribute("aria-invalid");
    state.why = q;
    await explain(q, false);
  });
}

// ---- the refresh loop ----

async function tick(refresh, context) {
  try {
    await refresh();
    clearError();
    $("updated").textContent = "Updated " + new Date().toLocaleTimeString() + ".";
    if (context && !state.loaded) {
      state.loaded = true;
      $("job-view").hidden = false;
      drawFigure(); // the marks and the strip need the figure's size
    }
  } catch (e) {
    // An unknown job has nothing to show but the message, and a job page
    // that has never loaded shows no empty heatmap.
    if (context && (e.code === "not_found" || e.code === "invalid_argument")) {
      $("job-view").hidden = true;
      state.loaded = false;
      state.decisions = null;
    }
    showError(e, context);
    setStatus(e.code === "unavailable" ? "slicerd does not answer" : e.code === "not_found" && context ? "no such job" : "error");
  }
}

function loop(refresh, context) {
  let timer = 0;
  let busy = false;
  const run = async () => {
    clearTimeout(timer);
    if (busy) return; // the refresh in flight schedules the next
    busy = true;
    try {
      if (!document.hidden) await tick(refresh, context);
    } finally {
      busy = false;
    }
    timer = setTimeout(run, REFRESH_MS);
  };
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) run();
  });
  run();
}

function main() {
  // The marks and the strip are drawn in pixels: draw them again when the
  // figure's size changes.
  if (window.ResizeObserver) {
    let raf = 0;
    new ResizeObserver(() => {
      cancelAnimationFrame(raf);
      raf = requestAnimationFrame(drawFigure);
    }).observe(document.querySelector(".heat-grid"));
  }
  const job = new URLSearchParams(location.search).get("job");
  if (job === null) {
    $("jobs-view").hidden = false;
    document.title = "Jobs · slicerd";
    loop(refreshJobs, null);
    return;
  }
  state.job = job;
  // The job's view stays hidden until its first refresh succeeds.
  $("job-name").textContent = job;
  $("crumb").replaceChildren(" / ", el("span", { "aria-current": "page" }, "job " + job));
  document.title = job + " · slicerd";
  setupWhy();
  loop(refreshJob, { job });
}

main();
