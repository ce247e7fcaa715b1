/* headwise viewer: hidden-state norms. From /v1/embed's `hidden_states` (pooling "none",
 * float16, base64: [L + 1, T, d_model]; state 0 is the embeddings' output, state i the output
 * of the i-th layer, the head view's layer i − 1), the L2 norm of each token's state at each layer, drawn two ways:
 *   #hs-chart  one bar per layer: the mean over the tokens of ‖h[l, t]‖₂ (data-value)
 *   #hs-heat   layers (rows) × tokens (columns), each cell ‖h[l, t]‖₂ (data-value)
 * Norms are summed in float64 from the float16 values as received. */

import { h } from "./dom.js";
import { cmapCss } from "./colours.js";
import { decodeHidden } from "./decode.js";

/** {layers, T, D, norms: number[layer][token], means: number[layer]} */
export function tokenNorms(hs) {
  const { shape, values } = decodeHidden(hs);
  const [Lp, T, D] = shape;
  const norms = [], means = [];
  for (let l = 0; l < Lp; l++) {
    const row = [];
    for (let t = 0; t < T; t++) {
      let s = 0;
      const base = (l * T + t) * D;
      for (let d = 0; d < D; d++) s += values[base + d] * values[base + d];
      row.push(Math.sqrt(s));
    }
    norms.push(row);
    means.push(row.reduce((a, b) => a + b, 0) / T);
  }
  return { layers: hs.layers || norms.map((_, l) => l), T, D, norms, means };
}

const layerName = (l) => (l === 0 ? "state 0 (embeddings)" : `state ${l}`);

function barChart(n) {
  const max = Math.max(...n.means, 0);
  const bars = n.means.map((v, i) => {
    const l = n.layers[i];
    return h("li", { class: "hs-col" },
      h("span", { class: "hs-val" }, v.toFixed(2)),
      h("span", {
        class: "hs-bar", dataset: { layer: String(l), value: String(v) },
        title: `${layerName(l)}: mean token norm ${v.toPrecision(6)}`,
        style: `--v:${max > 0 ? (v / max).toFixed(4) : 0}`,
      }),
      h("span", { class: "hs-lab" }, String(l)));
  });
  return h("ol", { id: "hs-chart", class: "hs-chart", "aria-label": "Mean L2 norm of the tokens' hidden states per layer" },
    bars);
}

function heat(n, tokens) {
  let max = 0;
  for (const row of n.norms) for (const v of row) max = Math.max(max, v);
  const head = h("tr", {}, h("th", { scope: "col" }, ""),
    tokens.map((t) => h("th", { scope: "col", class: "an-col" }, t)));
  const body = n.norms.map((row, i) => h("tr", {}, h("th", { scope: "row" }, layerName(n.layers[i])),
    row.map((v, t) => h("td", {
      class: "an-cell", dataset: { layer: String(n.layers[i]), token: String(t), value: String(v) },
      title: `${layerName(n.layers[i])} · ${tokens[t]}: ‖h‖ = ${v.toPrecision(5)}`,
      style: `background:${cmapCss(max > 0 ? v / max : 0)}`,
    }))));
  return h("div", { class: "table-scroll" }, h("table", { id: "hs-heat", class: "an-matrix" },
    h("caption", {}, "‖h[i, token]‖₂: rows are hidden states (0 = the embeddings' output), columns the tokens; "
      + "shaded from 0 to the largest"),
    h("thead", {}, head), h("tbody", {}, body)));
}

/** Draw the norms of one /v1/embed item (with `hidden_states`) into `out`. */
export function renderNorms(out, item, text, note) {
  const n = tokenNorms(item.hidden_states);
  out.replaceChildren(
    h("p", { class: "hint" }, `“${text}” · ${n.T} tokens · d_model ${n.D}. `
      + "Bar i is the mean over the tokens of the L2 norm of each token's hidden state i: 0 is the embeddings' "
      + `output, i the output of the i-th layer (the head view's layer i − 1)${note ? `; ${note}` : ""}.`),
    barChart(n),
    heat(n, item.tokens || []),
  );
  return n;
}
