/* headwise viewer: the Fill panel, for masked language models (fill-mask packages).
 *
 * Plain JavaScript, no network beyond this server:
 *   GET  /v1/models    → the masked language models (task "fill-mask") and their mask token
 *   POST /v1/tokenize  → the text's tokens, special tokens included (the heatmap's names)
 *   POST /v1/fill_mask → at each mask, the likeliest tokens and their probabilities, and the
 *                        attention over all the text's positions, every layer and head,
 *                        float16, base64: [L, H, T, T].
 *
 * Heatmap (one layer, one head): rows and columns are every token the model read, [CLS] and
 * [SEP] included, so each row sums to 1; the picked mask's row is outlined: what the model
 * looked at to fill it. The colour scale runs from 0 to the block's largest weight.
 */
import { api, modelsWhere } from "./api.js";
import { decodeAttention } from "./decode.js";
import { drawBlock, fillPicker, readout } from "./blockheat.js";
import { $, h } from "./dom.js";
import { panelFailed } from "./errors.js";

const state = { models: [], result: null, tokens: [], mask: 0, layer: 0, head: 0, run: 0, shown: null };

export const isFiller = (m) => m.task === "fill-mask";
const EXAMPLE = "Paris is the [MASK] of France.";

// The block on screen (blockheat.js's, [T, T] over every token), with its layer and head.
function block() {
  const res = state.result;
  if (!res) return null;
  const a = res.data[0].attention;
  const [, H, N] = a.shape;
  const all = decodeAttention(a).values;
  const off = (state.layer * H + state.head) * N * N;
  const tokens = state.tokens.slice(0, N);
  return { rows: tokens, cols: tokens, R: N, C: N, values: all.slice(off, off + N * N), layer: a.layers[state.layer],
    head: a.heads[state.head] };
}

function maskRow() {
  const masks = state.result ? state.result.data[0].masks : [];
  return masks.length ? masks[state.mask].position : -1;
}

function draw() {
  const b = block();
  const canvas = $("#fm-heat");
  state.shown = b;  // what the readout reads under the cursor, decoded once per drawing
  if (!b) return;
  drawBlock(canvas, b, maskRow());
  Object.assign(canvas.dataset, { layer: b.layer, head: b.head, mark: maskRow() });
  canvas.setAttribute("aria-label", `Attention between the text's tokens, layer ${b.layer}, head ${b.head}: `
    + `${b.R} rows × ${b.C} columns; the mask's row outlined`);
  $("#fm-caption").textContent = `Layer ${b.layer} · head ${b.head} · rows attend to columns`;
}

// Each mask with its fills, best first; picking a mask outlines its row in the heatmap.
function renderMasks() {
  const masks = state.result.data[0].masks;
  $("#fm-masks").replaceChildren(...masks.map((m, i) => h("div", {
    class: `fm-mask${i === state.mask ? " picked" : ""}`, dataset: { rank: i, position: m.position },
  }, h("button", { type: "button", class: "fm-pick", dataset: { rank: i }, "aria-pressed": i === state.mask ? "true" : "false" },
    `mask at position ${m.position}`),
  h("ol", { class: "fm-fills" }, ...m.fills.map((f) => h("li", { title: f.sequence, dataset: { token: f.token } },
    h("span", { class: "fm-token" }, f.token_str),
    h("span", { class: "fm-bar", style: `width: ${Math.round(f.score * 100)}%` }),
    h("span", { class: "fm-score" }, f.score.toFixed(4))))))));
}

function pickMask(i) {
  state.mask = i;
  renderMasks();
  draw();
}

function selected() {
  return state.models.find((m) => m.name === $("#fm-model").value) || state.models[0];
}

// The example names the chosen model's own mask token ([MASK], <mask>).
function example() {
  const m = selected();
  const text = $("#fm-text");
  const mask = (m && m.mask_token) || "[MASK]";
  if (!text.value || text.dataset.example === text.value) {
    text.value = EXAMPLE.replace("[MASK]", mask);
    text.dataset.example = text.value;
  }
}

async function run() {
  const m = selected();
  if (!m) return;
  const seq = ++state.run;
  const text = $("#fm-text").value;
  const body = {
    model: m.name, inputs: text, top_k: 5,
    attention: { layers: null, heads: null, dtype: "float16", encoding: "base64" },
  };
  document.body.dataset.fmState = "loading";
  $("#fm-run").disabled = true;
  $("#fm-error").hidden = true;
  $("#fm-status").textContent = "Filling…";
  try {
    const [res, tok] = await Promise.all([api("/v1/fill_mask", body), api("/v1/tokenize", { model: m.name, inputs: text })]);
    if (seq !== state.run) return;
    state.result = res;
    state.tokens = tok.data[0].tokens;
    const a = res.data[0].attention;
    state.layer = fillPicker($("#fm-layer"), a.layers, state.layer);
    state.head = fillPicker($("#fm-head"), a.heads, state.head);
    state.mask = 0;
    renderMasks();
    $("#fm-views").hidden = false;
    draw();
    const n = res.data[0].masks.length;
    $("#fm-status").textContent = `${m.name} · ${n} mask${n === 1 ? "" : "s"} · ${res.usage.total_tokens} tokens read`;
    document.body.dataset.fmState = "ready";
    document.body.dataset.fmRun = String(seq);
  } catch (err) {
    if (seq !== state.run) return;
    panelFailed("fm", "fmState", err);
  } finally {
    if (seq === state.run) $("#fm-run").disabled = false;
  }
}

async function init() {
  state.models = await modelsWhere(isFiller);
  if (!state.models.length) return;
  $("#fm-model").replaceChildren(...state.models.map((m) => h("option", { value: m.name }, m.name)));
  example();
  $("#fm-section").hidden = false;
  $("#fm-model").addEventListener("change", example);
  $("#fm-form").addEventListener("submit", (e) => { e.preventDefault(); run(); });
  $("#fm-masks").addEventListener("click", (e) => {
    const b = e.target.closest("button.fm-pick");
    if (b) pickMask(Number(b.dataset.rank));
  });
  $("#fm-layer").addEventListener("change", (e) => { state.layer = Number(e.target.value); draw(); });
  $("#fm-head").addEventListener("change", (e) => { state.head = Number(e.target.value); draw(); });
  $("#fm-heat").addEventListener("mousemove", (e) => readout(e, state.shown, $("#fm-readout")));
  document.body.dataset.fmState = "idle";
}

// For tests and the console: the answer, the tokens, and the block on screen.
window.headwiseFill = { state, block };

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
else init();
