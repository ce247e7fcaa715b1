/* headwise viewer: running the model. POST /v1/embed with every layer's and head's attention
 * (dense, float16, base64) for sentence A (and B), each answer turned into a result (tokens,
 * offsets, the decoded attention, the per-head statistics, the embedding), then the views shown
 * on it. With heads removed (ablation.js) the request carries `ablate`, and the embeddings with
 * every head are fetched beside it (once per model and texts) to say how far the answer moved.
 * A run ends with the event "headwise:results" on document when it showed new results.
 * run() resolves to true (shown), false (failed) or null (a newer run took over). */

import { $, $$, clamp } from "./dom.js";
import { decodeAttention } from "./decode.js";
import { ApiError, api } from "./api.js";
import { current, state } from "./state.js";
import { allStats } from "./stats.js";
import { clearError, setBusy, showError } from "./errors.js";
import { loadModels, modelFact, modelId, promptName, selectedModel } from "./models.js";
import { renderTokens } from "./tokens.js";
import { buildHeadControls } from "./headview.js";
import { markDirty, renderActive } from "./views.js";
import { ablateBody, baselineFor, describeAblation, rememberBaseline } from "./ablation.js";

const SPECIAL_TOKENS = new Set(["[CLS]", "[SEP]", "<s>", "</s>"]);
const LABELS = ["A", "B"];

export async function run() {
  const texts = [$("#text-a").value];
  if ($("#compare").checked) texts.push($("#text-b").value);
  const empty = texts.findIndex((t) => !t.trim());
  if (empty >= 0) {
    showError(new ApiError(`Sentence ${LABELS[empty]} is empty. Type some text first.`, "validation", 0));
    $(empty ? "#text-b" : "#text-a").focus();
    return false;
  }
  clearError();
  const seq = ++state.runSeq;
  setBusy(true, "Running the model…");
  const t0 = performance.now();
  try {
    if (!state.models.length && !(await loadModels())) return false;
    const model = $("#model").value;
    const card = selectedModel();
    if (card && card.attention === false) {
      throw new ApiError(`The model package “${modelId(card)}” has no attention graph (attention.onnx), `
        + "so this page cannot show its attention. Re-export it with headwise export.", "no_attention", 0);
    }
    const body = {
      inputs: texts,
      attention: { layers: null, heads: null, format: "dense", dtype: "float16", encoding: "base64" },
    };
    if (model) body.model = model;
    const prompt = promptName();
    if (prompt) body.prompt_name = prompt;
    const ablate = ablateBody();
    if (ablate) body.ablate = ablate;
    const [res, before] = await Promise.all([api("/v1/embed", body), ablate ? baselineFor(model, texts) : null]);
    if (seq !== state.runSeq) return null; // a newer run started meanwhile
    const data = (res.data || []).slice().sort((a, b) => (a.index ?? 0) - (b.index ?? 0));
    if (data.length !== texts.length) throw new ApiError(`asked for ${texts.length} inputs, got ${data.length}`, "bad_response", 0);
    const results = data.map((d, i) => makeResult(d, texts[i], i, res.prompt));
    if (!ablate) rememberBaseline(model, texts, results.map((r) => r.embedding));
    results.forEach((r, i) => { r.ablate = ablate; r.baseline = before ? before[i] : r.embedding; });
    const ms = performance.now() - t0;
    state.modelName = res.model || model;
    adoptResults(results);
    $("#tokens-section").classList.remove("stale");
    $("#views").classList.remove("stale");
    const m = selectedModel();
    const maxLen = m && modelFact(m, "max_len");
    const truncated = maxLen && results.some((r) => r.T >= maxLen);
    $("#status").textContent = `${state.modelName} · ${results.map((r) => `${r.label}: ${r.T} tokens`).join(", ")}`
      + ` · ${results[0].L} layers × ${results[0].H} heads · ${Math.round(ms)} ms`
      + (truncated ? ` · truncated to the model's ${maxLen}-token limit` : "")
      + (ablate ? ` · heads removed: ${describeAblation(ablate)}` : "");
    $("#views").classList.toggle("ablated", Boolean(ablate));
    document.body.dataset.state = "ready";
    document.body.dataset.run = String(seq);
    document.dispatchEvent(new CustomEvent("headwise:results"));
    return true;
  } catch (err) {
    if (seq !== state.runSeq) return null;
    $("#status").textContent = "";
    showError(err instanceof ApiError ? err : new ApiError(err.message, "client", 0));
    return false;
  } finally {
    if (seq === state.runSeq) {
      $("#run").disabled = false;
      $("#run").setAttribute("aria-busy", "false");
    }
  }
}

// With a prompt (res.prompt: {name, text}), the model read prompt.text + text: offsets count
// from the prompt's start, and d.prompt_span [start, end) says which tokens are the prompt's.
function makeResult(d, text, i, prompt) {
  if (!d.attention) throw new ApiError("the server returned no attention for this input", "bad_response", 0);
  const { shape, values } = decodeAttention(d.attention);
  const [L, H, T, T2] = shape;
  const tokens = d.tokens || [];
  if (T !== T2 || tokens.length !== T) {
    throw new ApiError(`attention shape [${shape}] does not match ${tokens.length} tokens`, "bad_response", 0);
  }
  const span = d.prompt_span || [0, 0];
  const r = {
    label: LABELS[i] || String(i + 1),
    text: (prompt ? prompt.text : "") + text,
    promptName: prompt ? prompt.name : null,
    prompt: tokens.map((_, n) => n >= span[0] && n < span[1]),
    tokens,
    offsets: d.offsets || tokens.map(() => [0, 0]),
    special: tokens.map((t) => SPECIAL_TOKENS.has(t)),
    L, H, T,
    layers: d.attention.layers || Array.from({ length: L }, (_, n) => n),
    heads: d.attention.heads || Array.from({ length: H }, (_, n) => n),
    att: values,
    embedding: d.embedding,
  };
  r.stats = allStats(r);
  return r;
}

function adoptResults(results) {
  const prev = state.results[0];
  state.results = results;
  state.sentence = clamp(state.sentence, 0, results.length - 1);
  const r = current();
  // keep layer/head choices if the model shape is unchanged
  if (!prev || prev.L !== r.L || prev.H !== r.H) {
    state.layer = 0;
    state.heads = new Set(Array.from({ length: r.H }, (_, n) => n));
    state.heatHead = 0;
    state.mvCursor = { li: 0, hi: 0 };
  }
  state.cursor = { q: clamp(state.cursor.q, 0, r.T - 1), k: clamp(state.cursor.k, 0, r.T - 1) };
  state.hover = state.focus = null;
  $("#sentence-pick").hidden = results.length < 2;
  $$("#sentence-pick input").forEach((input) => { input.checked = Number(input.value) === state.sentence; });
  buildHeadControls();
  renderTokens();
  $("#tokens-section").hidden = false;
  $("#views").hidden = false;
  markDirty();
  renderActive();
}
