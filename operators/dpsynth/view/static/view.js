// dpsynth view: polls /api/state and draws it (heat maps on canvases, the size chart in SVG).
// No framework and nothing fetched from elsewhere; the page only reads.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
// magma-like ramp: dark (no point) to light (the map's maximum)
const RAMP = [[0, 0, 4], [59, 15, 112], [140, 41, 129], [222, 73, 104], [254, 159, 109],
  [252, 253, 191]];
const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b",
  "#e377c2"];
let polls = 0;
let lastOk = 0;

function colour(v) {  // v in [0, 1]
  const x = Math.min(Math.max(v, 0), 1) * (RAMP.length - 1);
  const i = Math.min(Math.floor(x), RAMP.length - 2);
  const f = x - i;
  return RAMP[i].map((c, k) => Math.round(c + f * (RAMP[i + 1][k] - c)));
}

function number(x) {
  if (x === null || x === undefined) return "–";
  if (typeof x !== "number") return String(x);
  if (Number.isInteger(x)) return x.toLocaleString("en-US");
  return Math.abs(x) >= 1000 || Math.abs(x) < 0.01 ? x.toPrecision(4) : String(+x.toFixed(4));
}

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

// One heat map figure, created once per id and updated in place.
function heatFigure(id, merged) {
  let fig = document.getElementById(id);
  if (fig) return fig;
  fig = el("figure", { id, class: "heat" + (merged ? " merged" : "") });
  fig.append(el("figcaption"), el("div", { class: "axis-y" }), el("div", { class: "ticks-y" }),
    el("canvas"), el("div", { class: "ticks-x" }), el("div", { class: "axis-x" }));
  fig.querySelector(".ticks-y").append(el("span", { class: "upper" }), el("span", { class: "lower" }));
  fig.querySelector(".ticks-x").append(el("span", { class: "lower" }), el("span", { class: "upper" }));
  return fig;
}

function drawHeat(fig, state, heat, caption) {
  const [nx, ny] = state.bins;
  const x = state.columns[state.axes[0]];
  const y = state.axes.length > 1 ? state.columns[state.axes[1]] : null;
  fig.querySelector("figcaption").textContent = caption;
  fig.querySelector(".axis-x").textContent = x.name;
  fig.querySelector(".ticks-x .lower").textContent = number(x.lower);
  fig.querySelector(".ticks-x .upper").textContent = number(x.upper);
  fig.querySelector(".axis-y").textContent = y ? y.name : "";
  fig.querySelector(".ticks-y .lower").textContent = y ? number(y.lower) : "";
  fig.querySelector(".ticks-y .upper").textContent = y ? number(y.upper) : "";
  fig.classList.toggle("one-axis", !y);
  const canvas = fig.querySelector("canvas");
  canvas.width = nx;
  canvas.height = ny;
  const ctx = canvas.getContext("2d");
  const image = ctx.createImageData(nx, ny);
  const top = Math.sqrt(Math.max(1, ...heat));
  for (let row = 0; row < ny; row++) {
    for (let col = 0; col < nx; col++) {
      const [r, g, b] = colour(Math.sqrt(heat[row * nx + col]) / top);
      const at = ((ny - 1 - row) * nx + col) * 4;  // row 0 is the lowest y: drawn at the bottom
      image.data.set([r, g, b, 255], at);
    }
  }
  ctx.putImageData(image, 0, 0);
}

function drawMaps(state) {
  const maps = document.getElementById("maps");
  const wanted = ["heat-merged", ...state.partitions.map((p) => "heat-p" + p.partition)];
  for (const fig of [...maps.children]) if (!wanted.includes(fig.id)) fig.remove();
  const merged = heatFigure("heat-merged", true);
  merged.dataset.partition = "merged";
  merged.dataset.t = state.merged.t;
  drawHeat(merged, state, state.merged.heat,
    `merged: ${state.merged.partitions} partition(s), t = ${number(state.merged.t)}`);
  maps.append(merged);
  for (const p of state.partitions) {
    const fig = heatFigure("heat-p" + p.partition, false);
    fig.dataset.partition = String(p.partition);
    fig.dataset.sequence = String(p.sequence);
    fig.dataset.t = String(p.t);
    drawHeat(fig, state, p.heat,
      `partition ${p.partition} · sequence ${p.sequence} · t = ${number(p.t)}`);
    maps.append(fig);
  }
}

function drawSize(state) {
  const width = 720, height = 240, left = 70, right = 110, top = 12, bottom = 40;
  const box = document.getElementById("size");
  const chart = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": "release size t against sequence" });
  const history = state.history;
  const maxSeq = Math.max(1, ...history.map((h) => h.sequence));
  const minSeq = Math.min(maxSeq, ...history.map((h) => h.sequence));
  const maxT = Math.max(1, ...history.map((h) => h.t));
  const sx = (s) => left + (maxSeq === minSeq ? 0.5 : (s - minSeq) / (maxSeq - minSeq))
    * (width - left - right);
  const sy = (t) => height - bottom - (t / maxT) * (height - top - bottom);
  chart.append(svg("line", { x1: left, y1: height - bottom, x2: width - right, y2: height - bottom,
    stroke: "#888" }), svg("line", { x1: left, y1: top, x2: left, y2: height - bottom, stroke: "#888" }));
  chart.append(svg("text", { x: (left + width - right) / 2, y: height - 6, "text-anchor": "middle",
    class: "axis-label" }, "sequence (one release per step)"));
  chart.append(svg("text", { x: 14, y: (top + height - bottom) / 2, "text-anchor": "middle",
    transform: `rotate(-90 14 ${(top + height - bottom) / 2})`, class: "axis-label" }, "t (points)"));
  chart.append(svg("text", { x: left - 6, y: top + 8, "text-anchor": "end" }, number(maxT)),
    svg("text", { x: left - 6, y: height - bottom, "text-anchor": "end" }, "0"),
    svg("text", { x: left, y: height - bottom + 14, "text-anchor": "middle" }, number(minSeq)),
    svg("text", { x: width - right, y: height - bottom + 14, "text-anchor": "middle" }, number(maxSeq)));
  const byPartition = new Map();
  for (const h of history) {
    if (!byPartition.has(h.partition)) byPartition.set(h.partition, []);
    byPartition.get(h.partition).push(h);
  }
  [...byPartition.keys()].sort((a, b) => a - b).forEach((partition, i) => {
    const points = byPartition.get(partition).sort((a, b) => a.sequence - b.sequence);
    const colour = PALETTE[i % PALETTE.length];
    chart.append(svg("polyline", { fill: "none", stroke: colour, "stroke-width": 2,
      "data-partition": partition, "data-releases": points.length,
      points: points.map((h) => `${sx(h.sequence).toFixed(1)},${sy(h.t).toFixed(1)}`).join(" ") }));
    chart.append(svg("text", { x: width - right + 8, y: top + 12 + 14 * i, fill: colour },
      `partition ${partition}`));
  });
  box.replaceChildren(chart);
}

function drawPrivacy(state) {
  const body = document.querySelector("#privacy tbody");
  body.replaceChildren(...state.partitions.map((p) => {
    const row = el("tr", { "data-partition": p.partition });
    const cells = [[p.partition, true], [p.sequence, true], [p.t, true], [p.privacy.epsilon, true],
      [p.privacy.neighbours], [p.privacy.privacy_unit + (p.privacy.max_contributions ?
        ` (k = ${p.privacy.max_contributions})` : "")], [p.privacy.mechanism],
      [p.privacy.key_fingerprint]];
    for (const [value, numeric] of cells) {
      row.append(el("td", numeric ? { class: "num" } : {}, number(value)));
    }
    return row;
  }));
}

function drawSummary(state) {
  const items = [["source", state.source], ["run", state.run_id || "(waiting)"],
    ["partitions", state.partitions.length], ["merged t", state.merged.t],
    ["releases seen", state.history.length], ["refused", state.rejected],
    ["units", state.units ? "the schema's" : "[0,1] (no schema given)"]];
  document.getElementById("summary").replaceChildren(...items.map(([k, v]) => {
    const item = el("div");
    item.append(el("dt", {}, k), el("dd", { "data-key": k }, number(v)));
    return item;
  }));
}

function render(state) {
  drawSummary(state);
  drawMaps(state);
  drawSize(state);
  drawPrivacy(state);
  document.body.dataset.version = String(state.version);
}

function showStatus(error) {
  const status = document.getElementById("status");
  const age = lastOk ? (Date.now() - lastOk) / 1000 : null;
  status.classList.toggle("stale", Boolean(error));
  status.textContent = error ? `not updated for ${age === null ? "–" : age.toFixed(0)} s (${error})`
    : `live: ${polls} polls, updated ${new Date(lastOk).toLocaleTimeString()}`;
}

async function poll() {
  let delay = 1000;
  try {
    const response = await fetch("api/state", { cache: "no-store" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const state = await response.json();
    delay = state.poll_ms;
    render(state);
    lastOk = Date.now();
    showStatus(state.error);
  } catch (error) {
    showStatus(String(error.message || error));
  }
  polls += 1;  // after the render: a test counts the polls a new release needed to show
  document.body.dataset.polls = String(polls);
  setTimeout(poll, delay);
}

poll();
