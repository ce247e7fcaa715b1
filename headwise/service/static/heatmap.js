/* headwise viewer: the heatmap of one head (rows = queries, columns = keys), its cursor (mouse
 * or arrow keys) and the readout of the weight under it. */

import { $, clamp, h } from "./dom.js";
import { cmapCss } from "./colours.js";
import { current, state } from "./state.js";

let hmGeom = null; // {left, top, cell, T}

export function heatScaleMax(r, li, hi) {
  if (state.scale === "abs") return 1;
  const base = (li * r.H + hi) * r.T * r.T;
  let max = 0;
  for (let n = 0; n < r.T * r.T; n++) max = Math.max(max, r.att[base + n]);
  return max || 1;
}

export function drawHeatmap() {
  const r = current();
  const canvas = $("#heatmap");
  const T = r.T, A = r.att, li = state.layer, hi = state.heatHead;
  const avail = Math.max(200, $("#heatmap-fig").clientWidth - 8);
  const ctx0 = canvas.getContext("2d");
  ctx0.font = "12px system-ui, sans-serif";
  const labelW = Math.min(110, 10 + Math.max(...r.tokens.map((t) => ctx0.measureText(t).width)));
  const cell = clamp(Math.floor(Math.min(avail - labelW - 4, 620) / T), 2, 32);
  const labels = cell >= 9;
  const left = labels ? labelW : 4, top = labels ? labelW : 4;
  const width = left + T * cell + 4, height = top + T * cell + 4;
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, width, height);
  const max = heatScaleMax(r, li, hi);
  const base = (li * r.H + hi) * T * T;
  for (let q = 0; q < T; q++) {
    for (let k = 0; k < T; k++) {
      ctx.fillStyle = cmapCss(A[base + q * T + k] / max);
      ctx.fillRect(left + k * cell, top + q * cell, cell, cell);
    }
  }
  if (cell >= 28) { // big enough to print the values
    ctx.font = "10px system-ui, sans-serif";
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    for (let q = 0; q < T; q++) {
      for (let k = 0; k < T; k++) {
        const v = A[base + q * T + k];
        ctx.fillStyle = v / max > 0.55 ? "#fff" : "#334";
        ctx.fillText(v.toFixed(2).replace(/^0/, ""), left + (k + 0.5) * cell, top + (q + 0.5) * cell);
      }
    }
  }
  if (labels) {
    ctx.font = `${Math.min(12, cell)}px system-ui, sans-serif`;
    ctx.fillStyle = "#222";
    ctx.textBaseline = "middle";
    ctx.textAlign = "right";
    const clip = (t) => { // keep labels inside their margin
      let s = t;
      while (s.length > 1 && ctx.measureText(s).width > labelW - 8) s = s.slice(0, -1);
      return s === t ? t : `${s.slice(0, -1)}…`;
    };
    r.tokens.forEach((t, i) => ctx.fillText(clip(t), left - 4, top + (i + 0.5) * cell));
    ctx.save();
    ctx.translate(left, top - 4);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left";
    r.tokens.forEach((t, i) => ctx.fillText(clip(t), 0, (i + 0.5) * cell));
    ctx.restore();
  }
  hmGeom = { left, top, cell, T, max };
  Object.assign(canvas.dataset, {
    left, top, cell, tokens: T, layer: r.layers[li], head: r.heads[hi], max: max.toPrecision(6),
  });
  canvas.setAttribute("aria-label",
    `Heatmap of layer ${r.layers[li]}, head ${r.heads[hi]}: ${T} query rows × ${T} key columns`);
  drawCursor();
  updateReadout();
}

function drawCursor() {
  if (!hmGeom) return;
  const { left, top, cell } = hmGeom;
  const ctx = $("#heatmap").getContext("2d");
  const { q, k } = state.cursor;
  ctx.save();
  ctx.lineWidth = 2;
  ctx.strokeStyle = "#e4572e";
  ctx.strokeRect(left + k * cell + 1, top + q * cell + 1, Math.max(1, cell - 2), Math.max(1, cell - 2));
  ctx.restore();
}

function redrawCell(q, k) {
  if (!hmGeom) return;
  const r = current();
  const { left, top, cell, T, max } = hmGeom;
  if (q >= T || k >= T) return;
  const ctx = $("#heatmap").getContext("2d");
  const v = r.att[((state.layer * r.H + state.heatHead) * T + q) * T + k];
  ctx.fillStyle = cmapCss(v / max);
  ctx.fillRect(left + k * cell, top + q * cell, cell, cell);
  if (cell >= 28) {
    ctx.font = "10px system-ui, sans-serif";
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    ctx.fillStyle = v / max > 0.55 ? "#fff" : "#334";
    ctx.fillText(v.toFixed(2).replace(/^0/, ""), left + (k + 0.5) * cell, top + (q + 0.5) * cell);
  }
}

function moveCursor(q, k) {
  const T = current().T;
  q = clamp(q, 0, T - 1);
  k = clamp(k, 0, T - 1);
  if (q === state.cursor.q && k === state.cursor.k) return;
  redrawCell(state.cursor.q, state.cursor.k);
  state.cursor = { q, k };
  drawCursor();
  updateReadout();
}

function updateReadout() {
  const r = current();
  const { q, k } = state.cursor;
  const li = state.layer, hi = state.heatHead, T = r.T;
  const v = r.att[((li * r.H + hi) * T + q) * T + k];
  const out = $("#heatmap-readout");
  Object.assign(out.dataset, {
    sentence: r.label, layer: r.layers[li], head: r.heads[hi], query: q, key: k, value: String(v),
  });
  out.replaceChildren(
    `Layer ${r.layers[li]} · head ${r.heads[hi]} · query ${q} `,
    h("code", {}, r.tokens[q]), " → key ", String(k), " ", h("code", {}, r.tokens[k]), ": ",
    h("strong", { class: "value" }, v.toPrecision(5)),
    h("span", { class: "hint" }, ` (${(100 * v).toFixed(2)} % of row ${q})`));
}

export function onHeatmapMove(e) {
  if (!hmGeom) return;
  const rect = e.currentTarget.getBoundingClientRect();
  const x = e.clientX - rect.left - hmGeom.left, y = e.clientY - rect.top - hmGeom.top;
  if (x < 0 || y < 0) return;
  const k = Math.floor(x / hmGeom.cell), q = Math.floor(y / hmGeom.cell);
  if (q >= hmGeom.T || k >= hmGeom.T) return;
  moveCursor(q, k);
}

export function onHeatmapKey(e) {
  const { q, k } = state.cursor;
  const T = current().T;
  const moves = {
    ArrowUp: [q - 1, k], ArrowDown: [q + 1, k], ArrowLeft: [q, k - 1], ArrowRight: [q, k + 1],
    Home: [q, 0], End: [q, T - 1], PageUp: [0, k], PageDown: [T - 1, k],
  };
  if (!moves[e.key]) return;
  e.preventDefault();
  moveCursor(...moves[e.key]);
}
