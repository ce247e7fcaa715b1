/* headwise viewer: the head-importance grid, layers (rows) × heads (columns), one button per
 * head. Coloured by the head's effect from POST /v1/head_importance (the effect on the answer
 * of removing that head alone: 1 − cosine of the sentence embeddings), its exact value in
 * data-value and in the tooltip; the heads removed for ablation (ablation.js) marked as such.
 * Before any importance is computed the grid is drawn blank, so that heads can be removed.
 * The `top` heads are listed under it. Clicks and keys are handled by internals.js. */

import { $, $$, clamp, h } from "./dom.js";
import { cmapCss, signedCss } from "./colours.js";
import { isRemoved } from "./ablation.js";

let grid = null; // {L, H, importance: number[][] | null, top, measure, text}

export const gridShape = () => (grid ? [grid.L, grid.H] : null);
export const gridText = () => (grid && grid.importance ? grid.text : null);

/** A blank L × H grid (no importance yet), unless one of that shape is on screen. */
export function ensureGrid(L, H, blank = false) {
  if (!blank && grid && grid.L === L && grid.H === H) { markRemoved(); return; }
  grid = { L, H, importance: null, top: [], measure: null, text: null };
  draw();
}

/** Another model: the importance on screen is no longer its own. */
export function forgetImportance() {
  if (grid) ensureGrid(grid.L, grid.H, true);
}

/** The answer of /v1/head_importance for `text`. */
export function showImportance(res, text) {
  const [L, H] = res.shape;
  grid = { L, H, importance: res.importance, top: res.top || [], measure: res.measure, text };
  draw();
}

function colourOf(imp) {
  let max = 0, negative = false;
  for (const row of imp) for (const v of row) { max = Math.max(max, Math.abs(v)); negative = negative || v < 0; }
  return negative ? (v) => signedCss(v, max) : (v) => cmapCss(max > 0 ? v / max : 0);
}

const effectWord = (measure) => (measure === "score" ? "score with every head − score without it"
  : "1 − cosine between the embedding with every head and without this one");

function draw() {
  const { L, H, importance: imp, measure } = grid;
  const colour = imp ? colourOf(imp) : null;
  const head = h("tr", {}, h("th", { scope: "col", class: "hi-corner" }, "L \\ H"),
    Array.from({ length: H }, (_, hd) => h("th", { scope: "col" }, String(hd))));
  const rows = Array.from({ length: L }, (_, layer) => h("tr", {}, h("th", { scope: "row" }, String(layer)),
    Array.from({ length: H }, (_, hd) => {
      const v = imp ? imp[layer][hd] : null;
      const value = v === null ? "no importance computed yet" : `effect ${v.toPrecision(4)}`;
      const label = `Layer ${layer}, head ${hd}: ${value}`;
      const cell = h("button", {
        type: "button", class: "hi-cell",
        tabindex: layer === 0 && hd === 0 ? "0" : "-1",
        dataset: v === null ? { layer, head: hd, label } : { layer, head: hd, label, value: String(v) },
        title: `Layer ${layer} · head ${hd}: ${value}`,
        "aria-label": label,
        style: colour ? `background:${colour(v)}` : null,
      });
      return h("td", {}, cell);
    })));
  $("#hi-grid").replaceChildren(h("thead", {}, head), h("tbody", {}, rows));
  $("#hi-grid").dataset.shape = `${L},${H}`;
  $("#hi-grid").dataset.computed = imp ? "true" : "false";
  $("#hi-caption").textContent = imp
    ? `Effect of removing each head alone on “${grid.text}” (${effectWord(measure)}); darker is more. `
      + "Hover a head for its value."
    : "Press Head importance to colour each head by its effect; the grid already takes clicks.";
  $("#hi-top").replaceChildren(...grid.top.map((t) => h("li", {},
    h("button", {
      type: "button", class: "hi-pick small",
      dataset: { layer: t.layer, head: t.head, value: String(t.effect) },
      "aria-label": `Layer ${t.layer}, head ${t.head}: effect ${t.effect.toPrecision(4)}`,
    }, `L${t.layer} H${t.head}`), ` ${t.effect.toPrecision(4)}`)));
  $("#hi-top-h").hidden = !grid.top.length;
  markRemoved();
}

/** Mark the heads removed (state.ablate) in the grid and the top list. */
export function markRemoved() {
  $$("#hi-grid .hi-cell, #hi-top .hi-pick").forEach((b) => {
    const on = isRemoved(Number(b.dataset.layer), Number(b.dataset.head));
    b.classList.toggle("removed", on);
    b.dataset.removed = on ? "true" : "false";
    if (!b.classList.contains("hi-cell")) return;
    b.textContent = on ? "×" : "";
    b.setAttribute("aria-label", `${b.dataset.label}${on ? " (removed)" : ""}`);
  });
}

/** Arrow keys, Home and End move between the grid's cells (roving tabindex). */
export function onGridKey(e) {
  const cell = e.target.closest && e.target.closest(".hi-cell");
  if (!cell || !grid) return;
  let layer = Number(cell.dataset.layer), hd = Number(cell.dataset.head);
  switch (e.key) {
    case "ArrowUp": layer--; break;
    case "ArrowDown": layer++; break;
    case "ArrowLeft": hd--; break;
    case "ArrowRight": hd++; break;
    case "Home": hd = 0; break;
    case "End": hd = grid.H - 1; break;
    default: return;
  }
  e.preventDefault();
  layer = clamp(layer, 0, grid.L - 1);
  hd = clamp(hd, 0, grid.H - 1);
  $$("#hi-grid .hi-cell").forEach((c) => { c.tabIndex = -1; });
  const next = $(`#hi-grid .hi-cell[data-layer="${layer}"][data-head="${hd}"]`);
  next.tabIndex = 0;
  next.focus();
}
