/* headwise viewer: head ablation (docs/analytics.md, "Head ablation"). The heads the user
 * removed (state.ablate, "layer:head" keys), the `ablate` object that /v1/embed takes, the
 * embeddings of the same texts with every head (the "before", cached per model and texts), and
 * the line that says how far the answer moved: cos(before, after) for each sentence.
 *
 * embed.js sends `ablate` with the viewer's run and keeps, on each result, the ablation it
 * was run with (r.ablate), its embedding (r.embedding) and the "before" one (r.baseline).
 */

import { $, h } from "./dom.js";
import { api } from "./api.js";
import { state } from "./state.js";

const key = (layer, head) => `${layer}:${head}`;

export const isRemoved = (layer, head) => state.ablate.has(key(layer, head));

export function toggleHead(layer, head) {
  const k = key(layer, head);
  if (state.ablate.has(k)) state.ablate.delete(k);
  else state.ablate.add(k);
}

/** The `ablate` field of a request: {"<layer>": [heads, ascending]}, or null when none. */
export function ablateBody() {
  if (!state.ablate.size) return null;
  const out = {};
  for (const k of state.ablate) {
    const [layer, head] = k.split(":").map(Number);
    (out[layer] = out[layer] || []).push(head);
  }
  for (const layer of Object.keys(out)) out[layer].sort((a, b) => a - b);
  return out;
}

/** "layer 0: heads 1, 2 · layer 3: head 4" */
export function describeAblation(ab) {
  return Object.keys(ab).map(Number).sort((a, b) => a - b).map((layer) =>
    `layer ${layer}: head${ab[layer].length > 1 ? "s" : ""} ${ab[layer].join(", ")}`).join(" · ");
}

// ---------------------------------------------------------------- the embeddings before
let baseline = null; // {key, embeddings}
const baseKey = (model, texts) => JSON.stringify([model || "", texts]);

/** Keep the embeddings of a run without ablation: the "before" of the next ablated run. */
export function rememberBaseline(model, texts, embeddings) {
  baseline = { key: baseKey(model, texts), embeddings };
}

/** The embeddings of `texts` with every head. Asked with (one-key) attention, so that they come
 * from the same fp32 graph as the viewer's run, not the served precision's. */
export async function baselineFor(model, texts) {
  const k = baseKey(model, texts);
  if (baseline && baseline.key === k) return baseline.embeddings;
  const body = { inputs: texts, attention: { format: "topk", top_k: 1, dtype: "float16", encoding: "base64" } };
  if (model) body.model = model;
  const res = await api("/v1/embed", body);
  const data = (res.data || []).slice().sort((a, b) => (a.index ?? 0) - (b.index ?? 0));
  const embeddings = data.map((d) => d.embedding);
  baseline = { key: k, embeddings };
  return embeddings;
}

export function cosine(a, b) {
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return na > 0 && nb > 0 ? dot / Math.sqrt(na * nb) : NaN;
}

// ---------------------------------------------------------------- what changed
/** The ablation line under the head-importance grid, for the results on screen. */
export function renderAblation() {
  const out = $("#ablate-out");
  if (!out) return;
  const results = state.results;
  const ab = results.length ? results[0].ablate : null;
  out.dataset.removed = ab ? describeAblation(ab) : "";
  if (!ab) {
    out.replaceChildren(h("p", { class: "hint" },
      "No head removed: the views show the whole model. Pick “remove it” above and click heads in the grid to take them out."));
    return;
  }
  const items = results.map((r, i) => {
    const c = r.embedding && r.baseline ? cosine(r.baseline, r.embedding) : NaN;
    return h("li", { id: `ablate-cos-${i}`, dataset: { sentence: r.label, value: String(c) } },
      `Sentence ${r.label}: cos(before, after) = `, h("strong", {}, Number.isFinite(c) ? c.toFixed(6) : "—"),
      h("span", { class: "hint" }, Number.isFinite(c) ? ` · 1 − cos = ${(1 - c).toExponential(3)}` : ""));
  });
  out.replaceChildren(
    h("p", {}, "Removed: ", h("strong", { id: "ablate-heads" }, describeAblation(ab)), "."),
    h("ul", { id: "ablate-cos", class: "ablate-cos" }, items),
    h("p", { class: "hint" }, "Each removed head's output is zeroed before W_O. The tokens, head view, model view "
      + "and summary above now show the model without these heads: later layers' attention moves, "
      + "the removed heads' own weights do not."),
  );
}
