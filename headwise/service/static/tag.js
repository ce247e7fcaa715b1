/* headwise viewer: the Tag panel, for token-classification models (NER and PII taggers).
 *
 * Plain JavaScript, no network beyond this server:
 *   GET  /v1/models → the taggers (task "token-classification")
 *   POST /v1/tag    → every token's likeliest label and its score ([CLS] and [SEP] carry none),
 *                     and the attention over all the text's positions, every layer and head,
 *                     float16, base64: [L, H, T, T].
 *
 * Heatmap (one layer, one head): rows and columns are the labelled tokens (the special tokens'
 * rows and columns left out, so a row does not sum to 1); the colour scale runs from 0 to the
 * block's largest weight. Picking a token marks its row.
 */
import { api, modelsWhere } from "./api.js";
import { decodeAttention } from "./decode.js";
import { drawBlock, fillPicker, readout } from "./blockheat.js";
import { $, h } from "./dom.js";
import { panelFailed } from "./errors.js";

const state = { models: [], result: null, pick: -1, layer: 0, head: 0, run: 0, shown: null };

export const isTagger = (m) => m.task === "token-classification";

// The block on screen (blockheat.js's, [T, T] over the labelled tokens), with its layer and head.
function block() {
  const res = state.result;
  if (!res) return null;
  const d = res.data[0], a = d.attention;
  const [, H, N] = a.shape;
  const all = decodeAttention(a).values;
  const at = d.tokens.map((t) => t.index);
  const off = (state.layer * H + state.head) * N * N;
  const values = new Float32Array(at.length * at.length);
  at.forEach((r, i) => at.forEach((c, j) => { values[i * at.length + j] = all[off + r * N + c]; }));
  const tokens = d.tokens.map((t) => t.token);
  return { rows: tokens, cols: tokens, R: at.length, C: at.length, values, layer: a.layers[state.layer],
    head: a.heads[state.head] };
}

function draw() {
  const b = block();
  const canvas = $("#tg-heat");
  state.shown = b;  // what the readout reads under the cursor, decoded once per drawing
  if (!b) return;
  drawBlock(canvas, b, state.pick);
  Object.assign(canvas.dataset, { layer: b.layer, head: b.head });
  canvas.setAttribute("aria-label", `Attention between the text's tokens, layer ${b.layer}, head ${b.head}: `
    + `${b.R} rows × ${b.C} columns`);
  $("#tg-caption").textContent = b.R ? `Layer ${b.layer} · head ${b.head} · rows attend to columns`
    : "The text has no token to show";
}

// Each token with its label and score; a label other than "O" is marked.
function renderTokens() {
  const d = state.result.data[0];
  $("#tg-tokens").replaceChildren(...d.tokens.map((t, i) => h("button", {
    type: "button", class: `tg-token${t.label === "O" ? "" : " tg-entity"}${i === state.pick ? " picked" : ""}`,
    dataset: { rank: i, index: t.index, label: t.label }, "aria-pressed": i === state.pick ? "true" : "false",
    title: `${t.label} · ${t.score.toFixed(4)} · characters ${t.start}–${t.end}`,
  }, h("span", { class: "tg-word" }, t.token), h("span", { class: "tg-label" }, t.label),
  h("span", { class: "tg-score" }, t.score.toFixed(2)))));
}

function pick(i) {
  state.pick = state.pick === i ? -1 : i;
  renderTokens();
  draw();
}

function selected() {
  return state.models.find((m) => m.name === $("#tg-model").value) || state.models[0];
}

async function run() {
  const m = selected();
  if (!m) return;
  const seq = ++state.run;
  const body = {
    model: m.name, inputs: $("#tg-text").value,
    attention: { layers: null, heads: null, dtype: "float16", encoding: "base64" },
  };
  document.body.dataset.tgState = "loading";
  $("#tg-run").disabled = true;
  $("#tg-error").hidden = true;
  $("#tg-status").textContent = "Tagging…";
  try {
    const res = await api("/v1/tag", body);
    if (seq !== state.run) return;
    state.result = res;
    const a = res.data[0].attention;
    state.layer = fillPicker($("#tg-layer"), a.layers, state.layer);
    state.head = fillPicker($("#tg-head"), a.heads, state.head);
    state.pick = -1;
    renderTokens();
    $("#tg-views").hidden = false;
    draw();
    const entities = res.data[0].tokens.filter((t) => t.label !== "O").length;
    $("#tg-status").textContent = `${m.name} · ${res.data[0].tokens.length} tokens, ${entities} not "O" · `
      + `${res.usage.total_tokens} tokens read`;
    document.body.dataset.tgState = "ready";
    document.body.dataset.tgRun = String(seq);
  } catch (err) {
    if (seq !== state.run) return;
    panelFailed("tg", "tgState", err);
  } finally {
    if (seq === state.run) $("#tg-run").disabled = false;
  }
}

async function init() {
  state.models = await modelsWhere(isTagger);
  if (!state.models.length) return;
  $("#tg-model").replaceChildren(...state.models.map((m) => h("option", { value: m.name }, m.name)));
  $("#tg-section").hidden = false;
  $("#tg-form").addEventListener("submit", (e) => { e.preventDefault(); run(); });
  $("#tg-tokens").addEventListener("click", (e) => {
    const b = e.target.closest("button.tg-token");
    if (b) pick(Number(b.dataset.rank));
  });
  $("#tg-layer").addEventListener("change", (e) => { state.layer = Number(e.target.value); draw(); });
  $("#tg-head").addEventListener("change", (e) => { state.head = Number(e.target.value); draw(); });
  $("#tg-heat").addEventListener("mousemove", (e) => readout(e, state.shown, $("#tg-readout")));
  document.body.dataset.tgState = "idle";
}

// For tests and the console: the answer, and the block on screen.
window.headwiseTag = { state, block };

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
else init();
