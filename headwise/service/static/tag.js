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
import { cmapCss } from "./colours.js";
import { $, h } from "./dom.js";
import { panelFailed } from "./errors.js";

const state = { models: [], result: null, pick: -1, layer: 0, head: 0, run: 0 };

export const isTagger = (m) => m.task === "token-classification";

// The block on screen: {tokens, labels, T, values (Float32Array, [T, T]), layer, head}.
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
  return {
    tokens: d.tokens.map((t) => t.token), labels: d.tokens.map((t) => t.label), T: at.length, values,
    layer: a.layers[state.layer], head: a.heads[state.head],
  };
}

function draw() {
  const b = block();
  const canvas = $("#tg-heat");
  if (!b) return;
  const cell = Math.max(8, Math.min(30, Math.floor(480 / Math.max(b.T, 1))));
  const left = 100, top = 80;
  canvas.width = left + b.T * cell + 4;
  canvas.height = top + b.T * cell + 4;
  let max = 0;
  for (const v of b.values) max = Math.max(max, v);
  Object.assign(canvas.dataset, { left, top, cell, rows: b.T, cols: b.T, layer: b.layer, head: b.head,
    max: String(max) });
  canvas.setAttribute("aria-label", `Attention between the text's tokens, layer ${b.layer}, head ${b.head}: `
    + `${b.T} rows × ${b.T} columns`);
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  for (let r = 0; r < b.T; r++) for (let c = 0; c < b.T; c++) {
    ctx.fillStyle = cmapCss(b.values[r * b.T + c] / (max || 1));
    ctx.fillRect(left + c * cell, top + r * cell, cell, cell);
  }
  ctx.strokeStyle = "#d9dde5";
  ctx.strokeRect(left - 0.5, top - 0.5, b.T * cell + 1, b.T * cell + 1);
  if (state.pick >= 0) {
    ctx.strokeStyle = "#e8590c";
    ctx.strokeRect(left - 0.5, top + state.pick * cell - 0.5, b.T * cell + 1, cell + 1);
  }
  ctx.fillStyle = "#1d2330";
  ctx.font = `${Math.min(12, cell)}px system-ui, sans-serif`;
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  b.tokens.forEach((t, r) => ctx.fillText(String(t).slice(0, 12), left - 4, top + (r + 0.5) * cell));
  ctx.textAlign = "left";
  b.tokens.forEach((t, c) => {
    ctx.save();
    ctx.translate(left + (c + 0.5) * cell, top - 4);
    ctx.rotate(-Math.PI / 3);
    ctx.fillText(String(t).slice(0, 12), 0, 0);
    ctx.restore();
  });
  $("#tg-caption").textContent = b.T ? `Layer ${b.layer} · head ${b.head} · rows attend to columns`
    : "The text has no token to show";
}

function readout(e) {
  const b = block();
  if (!b) return;
  const d = e.currentTarget.dataset, rect = e.currentTarget.getBoundingClientRect();
  const c = Math.floor((e.clientX - rect.left - Number(d.left)) / Number(d.cell));
  const r = Math.floor((e.clientY - rect.top - Number(d.top)) / Number(d.cell));
  if (r < 0 || c < 0 || r >= b.T || c >= b.T) return;
  const v = b.values[r * b.T + c];
  const out = $("#tg-readout");
  Object.assign(out.dataset, { row: r, col: c, value: String(v) });
  out.textContent = `${b.tokens[r]} → ${b.tokens[c]}: ${v.toPrecision(5)}`;
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
    const fill = (sel, items, keep) => {
      sel.replaceChildren(...items.map((n, i) => h("option", { value: String(i) }, String(n))));
      sel.value = String(Math.min(keep, Math.max(items.length - 1, 0)));
      return Number(sel.value);
    };
    state.layer = fill($("#tg-layer"), a.layers, state.layer);
    state.head = fill($("#tg-head"), a.heads, state.head);
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
  $("#tg-heat").addEventListener("mousemove", readout);
  document.body.dataset.tgState = "idle";
}

// For tests and the console: the answer, and the block on screen.
window.headwiseTag = { state, block };

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
else init();
