/* headwise viewer: the analytics views (docs/analytics.md), drawn as tables whose cells carry
 * their exact value in data-value (what the tests compare with the API):
 *   renderRollout     the rollout matrix R [T, T] and each token's importance for the pooled
 *                     embedding: mean pooling → the mean of R's rows; CLS pooling → R's CLS row
 *   renderSimilarity  the score, the [T_source, T_target] contributions, the top pairs
 *   renderOcclusion   each token shaded by its occlusion effect; by word (unit "word"), the
 *                     text itself with each word shaded by its effect
 */

import { h, fmt } from "./dom.js";
import { cmapCss, signedCss } from "./colours.js";

/** Token importance for the pooled embedding from rollout R (rows: queries, columns: keys). */
export function importance(R, pooling) {
  const T = R.length;
  if (pooling === "cls") return R[0].slice();
  const out = new Array(T).fill(0);
  for (const row of R) row.forEach((v, j) => { out[j] += v / T; });
  return out;
}

function matrix(id, rows, cols, values, colour, caption) {
  const head = h("tr", {}, h("th", { scope: "col" }, ""), ...cols.map((c) => h("th", { scope: "col", class: "an-col" }, c)));
  const body = values.map((row, i) => h("tr", {}, h("th", { scope: "row" }, rows[i]),
    ...row.map((v, j) => h("td", {
      class: "an-cell", dataset: { i: String(i), j: String(j), value: String(v) },
      title: `${rows[i]} → ${cols[j]}: ${fmt(v, 5)}`, style: `background:${colour(v)}`,
    }))));
  return h("div", { class: "table-scroll" },
    h("table", { id, class: "an-matrix" }, h("caption", {}, caption), h("thead", {}, head), h("tbody", {}, ...body)));
}

// Tokens shaded by norm(value) in [0, 1], with white text on the dark end of the scale; those
// of the prompt ([start, end) of `promptSpan`, from the answer's prompt_span) marked.
function shadedTokens(id, tokens, values, norm, label, promptSpan) {
  const [p0, p1] = promptSpan || [0, 0];
  return h("p", { id, class: "an-tokens", "aria-label": label },
    ...tokens.map((t, i) => h("span", {
      class: i >= p0 && i < p1 ? "an-token prompt" : "an-token", dataset: { i: String(i), value: String(values[i]) },
      title: `${t}: ${fmt(values[i], 5)}` + (i >= p0 && i < p1 ? " (prompt)" : ""),
      style: `background:${cmapCss(norm(values[i]))}` + (norm(values[i]) > 0.6 ? ";color:#fff" : ""),
    }, t)));
}

export function renderRollout(out, item, pooling) {
  const R = item.attention.data;
  const imp = importance(R, pooling);
  const maxImp = Math.max(...imp);
  const what = pooling === "cls" ? "the [CLS] row of R" : "the mean of R's rows (mean pooling)";
  out.replaceChildren(
    h("h3", {}, "Token importance for the pooled embedding"),
    h("p", { class: "hint" }, `Rollout over layers ${item.attention.layers.join(", ")}, heads averaged; importance is ${what}.`),
    shadedTokens("an-importance", item.tokens, imp, (v) => (maxImp > 0 ? v / maxImp : 0), "token importance",
      item.prompt_span),
    matrix("an-rollout", item.tokens, item.tokens, R, (v) => cmapCss(v),
      "Rollout R: rows are tokens after the last layer, columns the input tokens they draw from"),
  );
}

export function renderSimilarity(out, res) {
  const d = res.data[0];
  const C = d.contributions;
  let max = 0;
  for (const row of C) for (const v of row) max = Math.max(max, Math.abs(v));
  const src = res.source.tokens, tgt = d.tokens;
  out.replaceChildren(
    h("h3", {}, "Similarity ", h("output", { id: "an-score", dataset: { value: String(d.score) } }, fmt(d.score, 4))),
    h("p", { class: "hint" }, "Cosine of the two sentence embeddings, split over token pairs: the cells sum to the score."),
    h("ol", { id: "an-pairs", class: "an-pairs" }, ...d.top_pairs.map((p) => h("li", {
      dataset: { source: String(p.source), target: String(p.target), value: String(p.value) },
    }, `${src[p.source]} ↔ ${tgt[p.target]}: ${fmt(p.value, 4)}`))),
    matrix("an-contrib", src, tgt, C, (v) => signedCss(v, max),
      "Contributions: rows are the first text's tokens, columns the second's (blue adds, red takes away)"),
  );
}

// The text with each unit (a word: {start, end} in code points, effect) shaded by norm(effect).
function shadedWords(id, text, units, norm) {
  const chars = Array.from(text); // the server's offsets count code points, not UTF-16 units
  const parts = [];
  let pos = 0;
  units.forEach((u, i) => {
    const start = Math.max(u.start, pos);
    if (start > pos) parts.push(chars.slice(pos, start).join(""));
    const n = norm(u.effect);
    parts.push(h("span", {
      class: "an-token an-word", dataset: { i: String(i), start: String(u.start), end: String(u.end), value: String(u.effect) },
      title: `${u.text}: ${fmt(u.effect, 5)} (tokens ${u.tokens.join(", ")})`,
      style: `background:${cmapCss(n)}` + (n > 0.6 ? ";color:#fff" : ""),
    }, chars.slice(start, u.end).join("")));
    pos = Math.max(pos, u.end);
  });
  if (pos < chars.length) parts.push(chars.slice(pos).join(""));
  return h("p", { id, class: "an-tokens an-words", "aria-label": "occlusion effect per word" }, parts);
}

export function renderOcclusion(out, res, text) {
  if (res.unit === "word") {
    const max = Math.max(...res.units.map((u) => u.effect), 0);
    out.replaceChildren(
      h("h3", {}, "Occlusion by word"),
      h("p", { class: "hint" }, `1 − cosine between the embedding and the embedding with all of one word's tokens masked out; `
        + `${res.units.length} words, ${res.forward_passes} forward passes. Hover a word for its value.`),
      shadedWords("an-occlusion-words", text, res.units, (v) => (max > 0 ? Math.max(0, v) / max : 0)),
    );
    return;
  }
  const max = Math.max(...res.effects, 0);
  const prompt = res.prompt ? ` The prompt “${res.prompt.name}” came first; its tokens are marked.` : "";
  out.replaceChildren(
    h("h3", {}, "Occlusion"),
    h("p", { class: "hint" }, `1 − cosine between the embedding and the embedding with one token masked out; ${res.forward_passes} forward passes.${prompt}`),
    shadedTokens("an-occlusion", res.tokens, res.effects, (v) => (max > 0 ? Math.max(0, v) / max : 0), "occlusion effect per token",
      res.prompt_span),
  );
}
