/* headwise viewer: downloads. Export JSON (every sentence's attention, layer, head, and the
 * summary) and Export PNG (the view on screen, drawn again at twice its layout size). */

import { $, clamp, h } from "./dom.js";
import { headColour } from "./colours.js";
import { current, state } from "./state.js";
import { isolated, paintLines } from "./headview.js";
import { paintSmall } from "./modelview.js";
import { COLUMNS } from "./summary.js";

function download(blob, filename) {
  const url = URL.createObjectURL(blob);
  const a = h("a", { href: url, download: filename, style: "display:none" });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

const safeName = (s) => String(s || "model").replace(/[^A-Za-z0-9._-]+/g, "-");

export function exportJson() {
  if (!state.results.length) return;
  $("#status").textContent = "Preparing the JSON download…";
  const sentences = state.results.map((r) => {
    const values = [];
    for (let li = 0; li < r.L; li++) {
      const layer = [];
      for (let hi = 0; hi < r.H; hi++) {
        const head = [];
        for (let q = 0; q < r.T; q++) {
          const off = ((li * r.H + hi) * r.T + q) * r.T;
          // 5 significant digits identify every float16 exactly, at half the size of full doubles
          head.push(Array.from(r.att.subarray(off, off + r.T), (v) => Number(v.toPrecision(5))));
        }
        layer.push(head);
      }
      values.push(layer);
    }
    return {
      label: r.label,
      text: r.text,
      tokens: r.tokens,
      offsets: r.offsets,
      attention: { layers: r.layers, heads: r.heads, shape: [r.L, r.H, r.T, r.T], dtype: "float16", data: values },
      summary: r.stats.map(({ li, hi, ...s }) => s),
    };
  });
  const doc = {
    model: state.modelName,
    exported_at: new Date().toISOString(),
    note: "attention data[layer][head][query][key]: the server's float16 weights, written with 5 significant digits (enough to recover each float16 exactly)",
    sentences,
  };
  // with heads removed (ablation.js) the weights are the ablated model's: say which heads
  if (state.results[0] && state.results[0].ablate) doc.ablate = state.results[0].ablate;
  const blob = new Blob([JSON.stringify(doc)], { type: "application/json" });
  download(blob, `headwise-attention-${safeName(state.modelName)}.json`);
  $("#status").textContent = `Downloaded the attention of ${sentences.length} sentence${sentences.length > 1 ? "s" : ""}`
    + ` as JSON (${(blob.size / 1048576).toFixed(1)} MiB).`;
}

const PNG_SCALE = 2; // exported images are drawn at twice their layout size, for crisp text

/** A white canvas of `width` × `height` layout pixels, drawn at PNG_SCALE. */
function pngCanvas(width, height) {
  const c = document.createElement("canvas");
  c.width = Math.ceil(width * PNG_SCALE);
  c.height = Math.ceil(height * PNG_SCALE);
  c.layoutWidth = width;
  c.layoutHeight = height;
  const ctx = c.getContext("2d");
  ctx.scale(PNG_SCALE, PNG_SCALE);
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, width, height);
  return [c, ctx];
}

function headViewPng() {
  const r = current();
  const rowH = 20, pad = 16, colW = 150, mid = 320;
  const titleH = 46;
  const heads = [...state.heads].sort((a, b) => a - b);
  const width = pad * 2 + colW * 2 + mid, height = titleH + pad * 2 + r.T * rowH;
  const [c, ctx] = pngCanvas(width, height);
  ctx.fillStyle = "#222";
  ctx.font = "bold 14px system-ui, sans-serif";
  ctx.textBaseline = "middle";
  ctx.fillText(`${state.modelName} · sentence ${r.label} · layer ${r.layers[state.layer]}`, pad, pad + 6);
  // legend: one colour per head
  ctx.font = "12px system-ui, sans-serif";
  let x = pad;
  ctx.fillText(heads.length ? "heads" : "no heads selected", x, pad + 28);
  x += ctx.measureText("heads").width + 10;
  for (const hi of heads) {
    ctx.fillStyle = headColour(r.heads[hi], r.H);
    ctx.beginPath();
    ctx.arc(x + 5, pad + 28, 5, 0, 2 * Math.PI);
    ctx.fill();
    ctx.fillStyle = "#222";
    ctx.fillText(String(r.heads[hi]), x + 13, pad + 28);
    x += 13 + ctx.measureText(String(r.heads[hi])).width + 10;
  }
  ctx.font = "13px system-ui, sans-serif";
  ctx.save();
  ctx.translate(0, titleH + pad);
  r.tokens.forEach((t, i) => {
    ctx.fillStyle = r.special[i] ? "#777" : "#222";
    ctx.textAlign = "right";
    ctx.fillText(t, pad + colW - 6, i * rowH + rowH / 2);
    ctx.textAlign = "left";
    ctx.fillText(t, pad + colW + mid + 6, i * rowH + rowH / 2);
  });
  paintLines(ctx, pad + colW, mid, rowH, isolated());
  ctx.restore();
  return c;
}

function composeHeadPng() {
  const lines = headViewPng();
  const heat = $("#heatmap");
  const gap = 16;
  const lw = lines.layoutWidth, lh = lines.layoutHeight;
  const hw = heat.clientWidth || heat.width, hh = heat.clientHeight || heat.height; // layout size
  const [c, ctx] = pngCanvas(lw + gap + hw, Math.max(lh, hh + 44));
  ctx.drawImage(lines, 0, 0, lw, lh);
  const r = current();
  ctx.fillStyle = "#222";
  ctx.font = "bold 14px system-ui, sans-serif";
  ctx.textBaseline = "middle";
  ctx.fillText(`heatmap · layer ${r.layers[state.layer]} · head ${r.heads[state.heatHead]}`, lw + gap, 22);
  ctx.drawImage(heat, lw + gap, 44, hw, hh);
  return c;
}

function modelViewPng() {
  const r = current();
  const cell = clamp(Math.round(600 / Math.max(r.L, r.H)), 32, 96), gap = 4, label = 28, titleH = 30;
  const [c, ctx] = pngCanvas(label + r.H * (cell + gap) + 8, titleH + label + r.L * (cell + gap) + 8);
  ctx.fillStyle = "#222";
  ctx.font = "bold 14px system-ui, sans-serif";
  ctx.textBaseline = "middle";
  ctx.fillText(`${state.modelName} · sentence ${r.label} · all layers (rows) × heads (columns)`, 8, 16);
  ctx.font = "12px system-ui, sans-serif";
  ctx.textAlign = "center";
  const small = document.createElement("canvas");
  ctx.imageSmoothingEnabled = false;
  r.heads.forEach((hd, hi) => ctx.fillText(String(hd), label + hi * (cell + gap) + cell / 2, titleH + label / 2));
  for (let li = 0; li < r.L; li++) {
    ctx.fillText(String(r.layers[li]), label / 2, titleH + label + li * (cell + gap) + cell / 2);
    for (let hi = 0; hi < r.H; hi++) {
      paintSmall(small, r, li, hi);
      ctx.drawImage(small, label + hi * (cell + gap), titleH + label + li * (cell + gap), cell, cell);
    }
  }
  return c;
}

function summaryPng() {
  const table = $("#summary");
  const rows = [COLUMNS.map((c) => c.label)];
  for (const tr of table.tBodies[0].rows) rows.push(Array.from(tr.cells).map((td) => td.textContent));
  const colW = 120, rowH = 20;
  const [c, ctx] = pngCanvas(colW * COLUMNS.length + 16, rowH * rows.length + 16);
  ctx.textBaseline = "middle";
  rows.forEach((row, i) => {
    ctx.font = i === 0 ? "bold 12px system-ui, sans-serif" : "12px system-ui, sans-serif";
    ctx.fillStyle = "#222";
    row.forEach((cellText, j) => ctx.fillText(cellText, 8 + j * colW, 8 + i * rowH + rowH / 2));
  });
  return c;
}

export function exportPng() {
  if (!state.results.length) return;
  const r = current();
  let canvas, what;
  if (state.tab === "head") {
    canvas = composeHeadPng();
    const heads = [...state.heads].sort((a, b) => a - b).map((hi) => r.heads[hi]);
    what = `L${r.layers[state.layer]}-${heads.length === r.H ? "all-heads" : `H${heads.join("_")}`}`;
  } else if (state.tab === "model") {
    canvas = modelViewPng();
    what = "model-view";
  } else {
    canvas = summaryPng();
    what = "summary";
  }
  canvas.toBlob((blob) => download(blob, `headwise-${safeName(state.modelName)}-${r.label}-${what}.png`), "image/png");
}
