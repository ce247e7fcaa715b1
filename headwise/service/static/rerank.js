/* headwise viewer: the Rerank panel, for cross-encoders (classification packages with one label).
 *
 * Plain JavaScript, no network beyond this server:
 *   GET  /v1/models  → the cross-encoders (task "classification", one label)
 *   POST /v1/rerank  → every document's score against the query, best first, and per document
 *                      the attention between the query's and the document's own tokens ([CLS]
 *                      and [SEP] left out): query_to_document [L, H, Tq, Td] and
 *                      document_to_query [L, H, Td, Tq], every layer and head, float16, base64.
 *
 * Heatmap (one document, one layer, one head): rows are the query's tokens and columns the
 * document's (query → document), or the other way round; the colour scale runs from 0 to the
 * block's largest weight. Rows do not sum to 1: the rest of each row's weight goes to the
 * special tokens and to the row's own text.
 */
import { api, modelsWhere } from "./api.js";
import { decodeAttention } from "./decode.js";
import { drawBlock, fillPicker, readout } from "./blockheat.js";
import { $, h } from "./dom.js";
import { panelFailed } from "./errors.js";

const state = { models: [], result: null, pick: 0, layer: 0, head: 0, dir: "qd", run: 0, shown: null };

export const isReranker = (m) => m.task === "classification" && Array.isArray(m.labels) && m.labels.length === 1;

// The block on screen: {rows, cols, R, C, values (Float32Array, [R, C]), layer, head, index}.
function block() {
  const res = state.result;
  if (!res || !res.results.length) return null;
  const r = res.results[state.pick];
  const a = r.attention;
  const qd = state.dir === "qd";
  const m = qd ? a.query_to_document : a.document_to_query;
  const [, H, R, C] = m.shape;
  const all = decodeAttention({ ...m, dtype: a.dtype, encoding: a.encoding, format: a.format }).values;
  const off = (state.layer * H + state.head) * R * C;
  return {
    rows: qd ? a.query.tokens : a.document.tokens, cols: qd ? a.document.tokens : a.query.tokens,
    R, C, values: all.slice(off, off + R * C), layer: a.layers[state.layer], head: a.heads[state.head],
    index: r.index,
  };
}

function draw() {
  const b = block();
  const canvas = $("#rr-heat");
  state.shown = b;  // what the readout reads under the cursor, decoded once per drawing
  if (!b) return;
  drawBlock(canvas, b);
  Object.assign(canvas.dataset, { layer: b.layer, head: b.head, index: b.index, dir: state.dir });
  canvas.setAttribute("aria-label", `${state.dir === "qd" ? "Query → document" : "Document → query"} attention of `
    + `document ${b.index}, layer ${b.layer}, head ${b.head}: ${b.R} rows × ${b.C} columns`);
  $("#rr-caption").textContent = b.R && b.C
    ? `Document ${b.index} · layer ${b.layer} · head ${b.head} · rows: ${state.dir === "qd" ? "query" : "document"} tokens`
    : `Document ${b.index} has no tokens to show`;
}

function renderResults() {
  const list = $("#rr-results");
  list.replaceChildren(...state.result.results.map((r, i) => h("li", { class: i === state.pick ? "picked" : "" },
    h("button", { type: "button", class: "rr-doc", dataset: { rank: i, index: r.index },
      "aria-pressed": i === state.pick ? "true" : "false" },
      h("span", { class: "rr-score" }, r.score.toFixed(4)), " ",
      h("span", { class: "rr-text" }, r.text || "(empty)")))));
}

function pick(i) {
  state.pick = i;
  renderResults();
  draw();
}

function selected() {
  return state.models.find((m) => m.name === $("#rr-model").value) || state.models[0];
}

async function run() {
  const m = selected();
  if (!m) return;
  const seq = ++state.run;
  const texts = $("#rr-docs").value.split("\n").map((t) => t.trim()).filter((t) => t);
  const body = {
    model: m.name, query: $("#rr-query").value, texts, return_text: true,
    attention: { layers: null, heads: null, dtype: "float16", encoding: "base64" },
  };
  document.body.dataset.rrState = "loading";
  $("#rr-run").disabled = true;
  $("#rr-error").hidden = true;
  $("#rr-status").textContent = "Scoring…";
  try {
    const res = await api("/v1/rerank", body);
    if (seq !== state.run) return;
    state.result = res;
    const first = res.results[0] && res.results[0].attention;
    state.layer = fillPicker($("#rr-layer"), first ? first.layers : [], state.layer);
    state.head = fillPicker($("#rr-head"), first ? first.heads : [], state.head);
    state.pick = 0;
    renderResults();
    $("#rr-views").hidden = false;
    draw();
    $("#rr-status").textContent = `${m.name} · ${texts.length} documents · ${res.usage.total_tokens} tokens`;
    document.body.dataset.rrState = "ready";
    document.body.dataset.rrRun = String(seq);
  } catch (err) {
    if (seq !== state.run) return;
    panelFailed("rr", "rrState", err);
  } finally {
    if (seq === state.run) $("#rr-run").disabled = false;
  }
}

async function init() {
  state.models = await modelsWhere(isReranker);
  if (!state.models.length) return;
  $("#rr-model").replaceChildren(...state.models.map((m) => h("option", { value: m.name }, m.name)));
  $("#rr-section").hidden = false;
  $("#rr-form").addEventListener("submit", (e) => { e.preventDefault(); run(); });
  $("#rr-results").addEventListener("click", (e) => {
    const b = e.target.closest("button.rr-doc");
    if (b) pick(Number(b.dataset.rank));
  });
  $("#rr-layer").addEventListener("change", (e) => { state.layer = Number(e.target.value); draw(); });
  $("#rr-head").addEventListener("change", (e) => { state.head = Number(e.target.value); draw(); });
  $("#rr-dir").addEventListener("change", (e) => { state.dir = e.target.value; draw(); });
  $("#rr-heat").addEventListener("mousemove", (e) => readout(e, state.shown, $("#rr-readout")));
  document.body.dataset.rrState = "idle";
}

// For tests and the console: the answer, and the block on screen.
window.headwiseRerank = { state, block };

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
else init();
