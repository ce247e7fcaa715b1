/* headwise viewer: the head view. One layer's chosen heads as lines from each query token
 * (left) to each key token (right), opacity = weight, one colour per head; hovering or focusing
 * a token keeps only its lines. Also the layer / head controls above it. */

import { $, $$, h } from "./dom.js";
import { headColour } from "./colours.js";
import { current, state } from "./state.js";
import { drawHeatmap } from "./heatmap.js";

export function buildHeadControls() {
  const r = current();
  const layerSel = $("#layer");
  layerSel.replaceChildren(...r.layers.map((l, li) => h("option", { value: li }, `Layer ${l}`)));
  layerSel.value = String(state.layer);
  const checks = r.heads.map((hd, hi) => {
    const id = `head-${hi}`;
    return h("label", { class: "head-check", for: id, style: `--c:${headColour(hd, r.H)}` },
      h("input", { type: "checkbox", id, value: hi, checked: state.heads.has(hi) }),
      h("span", { class: "swatch", "aria-hidden": "true" }), String(hd));
  });
  $("#head-checks").replaceChildren(...checks);
  $("#head-checks").setAttribute("aria-label", "Heads shown in the line view");
  $("#heat-head").replaceChildren(...r.heads.map((hd, hi) => h("option", { value: hi }, `Head ${hd}`)));
  $("#heat-head").value = String(state.heatHead);
}

export function syncHeadControls() {
  $("#layer").value = String(state.layer);
  $$("#head-checks input").forEach((c) => { c.checked = state.heads.has(Number(c.value)); });
  $("#heat-head").value = String(state.heatHead);
}

let hvGeom = null; // {rowH, canvas, width, height}

export function renderHead() {
  const r = current();
  syncHeadControls();
  const layer = r.layers[state.layer];
  const heads = [...state.heads].sort((a, b) => a - b);
  const hv = $("#head-view");
  hv.dataset.layer = String(layer);
  hv.dataset.heads = heads.map((hi) => r.heads[hi]).join(",");
  hv.dataset.sentence = r.label;
  $("#head-caption").replaceChildren(
    `Sentence ${r.label} · `,
    h("strong", { id: "caption-layer" }, `Layer ${layer}`), " · ",
    h("strong", { id: "caption-heads" },
      heads.length === 0 ? "no heads selected"
        : heads.length === r.H ? `all ${r.H} heads`
          : `head${heads.length > 1 ? "s" : ""} ${heads.map((hi) => r.heads[hi]).join(", ")}`),
    ` · heatmap: head ${r.heads[state.heatHead]}`);

  const rowH = r.T > 48 ? 16 : 22;
  hv.style.setProperty("--row", `${rowH}px`);
  hv.classList.toggle("dense", r.T > 48);
  const column = (side) => h("ol", {
    class: `hv-col hv-${side}`,
    "aria-label": side === "q" ? "Query tokens (attending)" : "Key tokens (attended to)",
  }, r.tokens.map((tok, i) => h("li", {},
    h("button", {
      type: "button",
      class: (r.special[i] ? "hv-tok special" : "hv-tok") + (r.prompt && r.prompt[i] ? " prompt" : ""),
      tabindex: i === 0 ? "0" : "-1",
      dataset: { side, index: i },
      "aria-label": `${side === "q" ? "query" : "key"} ${i}: ${tok}`,
    }, tok))));
  const canvas = h("canvas", { class: "hv-lines", "aria-hidden": "true" });
  hv.replaceChildren(column("q"), canvas, column("k"));
  hvGeom = { rowH, canvas };
  drawHeadLines();
  drawHeatmap();
}

/** The lines of the chosen heads; `iso` = {side, i} keeps only one token's lines. */
export function paintLines(ctx, x0, width, rowH, iso) {
  const r = current();
  const T = r.T, A = r.att;
  const heads = [...state.heads].sort((a, b) => a - b);
  const LEVELS = 32;
  ctx.lineWidth = iso ? 2 : 1.5;
  ctx.lineCap = "round";
  const y = (i) => i * rowH + rowH / 2;
  for (const hi of heads) {
    const base = (state.layer * r.H + hi) * T * T;
    // bucket the lines by opacity so each head needs at most LEVELS strokes
    const buckets = Array.from({ length: LEVELS }, () => []);
    for (let q = 0; q < T; q++) {
      if (iso && iso.side === "q" && iso.i !== q) continue;
      for (let k = 0; k < T; k++) {
        if (iso && iso.side === "k" && iso.i !== k) continue;
        const w = A[base + q * T + k];
        if (w < (iso ? 0.002 : 0.01)) continue;
        buckets[Math.min(LEVELS - 1, Math.floor(w * LEVELS))].push(q, k);
      }
    }
    ctx.strokeStyle = headColour(r.heads[hi], r.H);
    buckets.forEach((pairs, b) => {
      if (!pairs.length) return;
      ctx.globalAlpha = (b + 1) / LEVELS;
      ctx.beginPath();
      for (let n = 0; n < pairs.length; n += 2) {
        ctx.moveTo(x0, y(pairs[n]));
        ctx.lineTo(x0 + width, y(pairs[n + 1]));
      }
      ctx.stroke();
    });
  }
  ctx.globalAlpha = 1;
}

/** The token whose lines are isolated: the one last hovered or focused, while it still is. */
export function isolated() {
  return state.lastIso === "focus" ? state.focus || state.hover : state.hover || state.focus;
}

function drawHeadLines() {
  if (!hvGeom) return;
  const r = current();
  const { canvas, rowH } = hvGeom;
  const dpr = window.devicePixelRatio || 1;
  const width = Math.max(60, canvas.clientWidth || 200);
  const height = r.T * rowH;
  canvas.style.height = `${height}px`;
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, width, height);
  const iso = isolated();
  paintLines(ctx, 4, width - 8, rowH, iso);
  // mark the isolated token and show the weights it gives / receives on the other column
  $$("#head-view .hv-tok").forEach((b) => {
    b.classList.remove("iso");
    b.style.removeProperty("--w");
    b.removeAttribute("title");
  });
  if (iso) {
    const heads = [...state.heads];
    const T = r.T;
    const own = $(`#head-view .hv-${iso.side} .hv-tok[data-index="${iso.i}"]`);
    if (own) own.classList.add("iso");
    const other = iso.side === "q" ? "k" : "q";
    $$(`#head-view .hv-${other} .hv-tok`).forEach((b) => {
      const j = Number(b.dataset.index);
      const q = iso.side === "q" ? iso.i : j, k = iso.side === "q" ? j : iso.i;
      let max = 0;
      const parts = heads.sort((a, c) => a - c).map((hi) => {
        const w = r.att[((state.layer * r.H + hi) * T + q) * T + k];
        max = Math.max(max, w);
        return `head ${r.heads[hi]}: ${w.toFixed(4)}`;
      });
      b.style.setProperty("--w", max.toFixed(3));
      b.title = `${r.tokens[q]} → ${r.tokens[k]}\n${parts.join("\n")}`;
    });
  }
}

export function onTokenEvent(e) {
  const b = e.target.closest && e.target.closest(".hv-tok");
  if (!b) return;
  const tok = { side: b.dataset.side, i: Number(b.dataset.index) };
  if (e.type === "mouseover") state.hover = tok;
  else if (e.type === "focusin") state.focus = tok;
  state.lastIso = e.type === "focusin" ? "focus" : "hover";
  drawHeadLines();
}

export function onTokenLeave(e) {
  if (e.type === "mouseout") {
    const to = e.relatedTarget && e.relatedTarget.closest && e.relatedTarget.closest(".hv-tok");
    if (to) return; // mouseover on the next token follows
    state.hover = null;
  } else if (e.type === "focusout") {
    state.focus = null;
  }
  drawHeadLines();
}

export function onTokenKey(e) {
  const b = e.target.closest && e.target.closest(".hv-tok");
  if (!b) return;
  const T = current().T;
  let side = b.dataset.side, i = Number(b.dataset.index);
  switch (e.key) {
    case "ArrowUp": i = Math.max(0, i - 1); break;
    case "ArrowDown": i = Math.min(T - 1, i + 1); break;
    case "Home": i = 0; break;
    case "End": i = T - 1; break;
    case "ArrowLeft": side = "q"; break;
    case "ArrowRight": side = "k"; break;
    case "Escape": b.blur(); return;
    default: return;
  }
  e.preventDefault();
  const next = $(`#head-view .hv-${side} .hv-tok[data-index="${i}"]`);
  if (!next) return;
  $$(`#head-view .hv-${side} .hv-tok`).forEach((x) => { x.tabIndex = -1; });
  next.tabIndex = 0;
  next.focus();
}
