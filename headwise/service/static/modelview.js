/* headwise viewer: the model view, every layer (rows) × head (columns) as a small heatmap, and
 * its arrow-key navigation (a click or Enter opens one in the head view: views.openHead). */

import { $, $$, clamp, fmt, h } from "./dom.js";
import { cmap, headColour } from "./colours.js";
import { current, state } from "./state.js";
import { heatScaleMax } from "./heatmap.js";

export function paintSmall(canvas, r, li, hi) {
  const T = r.T;
  canvas.width = T;
  canvas.height = T;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(T, T);
  const base = (li * r.H + hi) * T * T;
  const max = heatScaleMax(r, li, hi);
  for (let n = 0; n < T * T; n++) {
    const [cr, cg, cb] = cmap(r.att[base + n] / max);
    img.data[4 * n] = cr;
    img.data[4 * n + 1] = cg;
    img.data[4 * n + 2] = cb;
    img.data[4 * n + 3] = 255;
  }
  ctx.putImageData(img, 0, 0);
}

export function renderModelView() {
  const r = current();
  const mv = $("#model-view");
  const avail = Math.max(300, $("#panel-model").clientWidth);
  const size = clamp(Math.floor((avail - 34) / r.H) - 4, 18, 84);
  mv.style.setProperty("--cell", `${size}px`);
  mv.style.setProperty("--cols", r.H);
  const selected = new Set([...state.heads]);
  const rows = [h("div", { role: "row", class: "mv-row mv-head" },
    h("span", { role: "columnheader", class: "mv-corner" }, "L \\ H"),
    r.heads.map((hd) => h("span", { role: "columnheader", class: "mv-label" }, String(hd))))];
  for (let li = 0; li < r.L; li++) {
    const cells = [];
    for (let hi = 0; hi < r.H; hi++) {
      const canvas = h("canvas", { "aria-hidden": "true" });
      paintSmall(canvas, r, li, hi);
      const s = r.stats[li * r.H + hi];
      const isCursor = li === state.mvCursor.li && hi === state.mvCursor.hi;
      const isCurrent = li === state.layer && selected.has(hi);
      const removed = Boolean(r.ablate && (r.ablate[r.layers[li]] || []).includes(r.heads[hi])); // embed.js
      cells.push(h("button", {
        type: "button", role: "gridcell",
        class: `mv-cell${isCurrent ? " current" : ""}${removed ? " removed" : ""}`,
        tabindex: isCursor ? "0" : "-1",
        dataset: { layer: r.layers[li], head: r.heads[hi], li, hi },
        "aria-label": `Layer ${r.layers[li]}, head ${r.heads[hi]}${removed ? " (removed)" : ""}: entropy ${fmt(s.entropy, 2)} bits, `
          + `mean distance ${fmt(s.distance, 1)}. Open in head view.`,
        title: `Layer ${r.layers[li]} · head ${r.heads[hi]}\nentropy ${fmt(s.entropy, 2)} bits · special ${fmt(s.special, 2)}`
          + ` · distance ${fmt(s.distance, 2)} · prev ${fmt(s.prev, 2)} · next ${fmt(s.next, 2)}`,
        style: `--c:${headColour(r.heads[hi], r.H)}`,
      }, canvas));
    }
    rows.push(h("div", { role: "row", class: "mv-row" },
      h("span", { role: "rowheader", class: "mv-label" }, String(r.layers[li])), cells));
  }
  mv.replaceChildren(...rows);
}

export function onModelViewKey(e) {
  const cell = e.target.closest && e.target.closest(".mv-cell");
  if (!cell) return;
  const r = current();
  let li = Number(cell.dataset.li), hi = Number(cell.dataset.hi);
  switch (e.key) {
    case "ArrowUp": li--; break;
    case "ArrowDown": li++; break;
    case "ArrowLeft": hi--; break;
    case "ArrowRight": hi++; break;
    case "Home": hi = 0; break;
    case "End": hi = r.H - 1; break;
    default: return;
  }
  e.preventDefault();
  li = clamp(li, 0, r.L - 1);
  hi = clamp(hi, 0, r.H - 1);
  state.mvCursor = { li, hi };
  $$("#model-view .mv-cell").forEach((c) => { c.tabIndex = -1; });
  const next = $(`#model-view .mv-cell[data-li="${li}"][data-hi="${hi}"]`);
  next.tabIndex = 0;
  next.focus();
}
