/* headwise viewer: the summary table, one row per head (stats.js), sortable by any column. */

import { $, clamp, fmt, h } from "./dom.js";
import { headColour } from "./colours.js";
import { current, state } from "./state.js";

export const COLUMNS = [
  { key: "layer", label: "Layer", num: false },
  { key: "head", label: "Head", num: false },
  { key: "entropy", label: "Entropy (bits)", title: "mean over queries of −Σ A·log₂A", digits: 3 },
  { key: "special", label: "Special share", title: "mean share of attention to [CLS]/[SEP]", digits: 3 },
  { key: "distance", label: "Mean distance", title: "mean over queries of Σ A[q,k]·|q−k|, in tokens", digits: 2 },
  { key: "prev", label: "Prev-token share", title: "mean of A[q,q−1] over q ≥ 1", digits: 3 },
  { key: "next", label: "Next-token share", title: "mean of A[q,q+1] over q ≤ T−2", digits: 3 },
];

export function renderSummary() {
  const r = current();
  const table = $("#summary");
  const { key, dir } = state.sort;
  const headRow = COLUMNS.map((c) => h("th", {
    scope: "col",
    "aria-sort": key === c.key ? (dir > 0 ? "ascending" : "descending") : "none",
    title: c.title || null,
  }, h("button", { type: "button", class: "sort", dataset: { key: c.key } }, c.label,
    h("span", { class: "arrow", "aria-hidden": "true" }, key === c.key ? (dir > 0 ? " ▲" : " ▼") : ""))));
  table.tHead.rows[0].replaceChildren(...headRow);
  let rows = r.stats.slice();
  if (key) {
    rows.sort((a, b) => {
      const x = a[key], y = b[key];
      const xn = Number.isFinite(x), yn = Number.isFinite(y);
      if (!xn || !yn) return xn === yn ? 0 : xn ? -1 : 1; // NaN last
      return (x - y) * dir || a.li - b.li || a.hi - b.hi;
    });
  }
  const maxEnt = Math.log2(Math.max(2, r.T));
  const maxDist = Math.max(1, ...r.stats.map((s) => s.distance));
  const scaleOf = { entropy: maxEnt, special: 1, distance: maxDist, prev: 1, next: 1 };
  const body = rows.map((s) => h("tr", { dataset: { layer: s.layer, head: s.head } },
    h("td", {}, String(s.layer)),
    h("td", {}, h("button", {
      type: "button", class: "open", dataset: { li: s.li, hi: s.hi },
      "aria-label": `Open layer ${s.layer}, head ${s.head} in the head view`,
      style: `--c:${headColour(s.head, r.H)}`,
    }, String(s.head))),
    COLUMNS.slice(2).map((c) => h("td", {
      class: "num",
      dataset: { key: c.key, value: String(s[c.key]) },
      style: `--v:${Number.isFinite(s[c.key]) ? clamp(s[c.key] / scaleOf[c.key], 0, 1).toFixed(3) : 0}`,
    }, fmt(s[c.key], c.digits)))));
  table.tBodies[0].replaceChildren(...body);
  table.dataset.sentence = r.label;
}
