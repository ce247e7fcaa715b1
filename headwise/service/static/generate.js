/* headwise viewer: the Generate panel, for decoder (GPT-2) and encoder-decoder (Marian) models.
 *
 * Plain JavaScript, no network beyond this server:
 *   GET  /v1/models    → the generative models (architecture "decoder" | "encoder-decoder")
 *   POST /v1/generate  → tokens, and every step's attention (all layers and heads, float32,
 *                        base64: little-endian, C order), docs/generation.md
 *
 * Causal heatmap (one layer, one head): rows are the tokens fed to the model in order (queries),
 * columns the same tokens (keys); row q holds the weights query q gave the tokens up to q, so
 * the matrix is lower-triangular.
 *   decoder:          the prompt's own rows (attention.prompt), then one row per step; the
 *                     last generated token is never fed, so T = prompt + generated − 1.
 *   encoder-decoder:  step i's query is the token fed at step i (decoder start, then each
 *                     generated token but the last), keys the tokens fed so far: T = generated.
 * Alignment (encoder-decoder): row i = the cross-attention while choosing generated token i,
 * over the source tokens.
 */
// api(): the same client as the encoder panel's (its API key field, errors as ApiError with
// message, type and status)
import { api, modelsWhere } from "./api.js";
import { decodeAttention } from "./decode.js";
import { $, h } from "./dom.js";
import { panelFailed } from "./errors.js";

const GEN = new Set(["decoder", "encoder-decoder"]);
const state = { models: [], result: null, causal: null, align: null, layer: 0, head: 0, run: 0 };

// An array {shape: [L, H, R, C], data} as a function (l, h, r, c) → weight.
function tensor(a) {
  const [, H, R, C] = a.shape;
  const v = decodeAttention({ ...a, dtype: "float32", encoding: "base64" }).values;
  return (l, h, r, c) => v[((l * H + h) * R + r) * C + c];
}

const clean = (t) => String(t).replace(/^Ġ/, " ").replace(/^▁/, " ").replace(/Ċ/g, "\\n");

// Build the causal matrices (every layer and head) and the alignment from a result.
function build(res, arch) {
  const att = res.attention;
  const L = att.layers.length, H = att.heads.length;
  const steps = att.steps.map((s) => ({
    self: s.self_attention && { shape: s.self_attention.shape, at: tensor(s.self_attention) },
    cross: s.cross_attention && { shape: s.cross_attention.shape, at: tensor(s.cross_attention) },
  }));
  const N = steps.length;
  let labels, P = 0, prompt = null;
  if (arch === "decoder") {
    P = res.prompt.tokens.length;
    prompt = tensor(att.prompt);
    labels = [...res.prompt.tokens, ...res.tokens.slice(0, N - 1)];
  } else {
    labels = ["<start>", ...res.tokens.slice(0, N - 1)];
  }
  const T = labels.length;
  const causal = new Float32Array(L * H * T * T);
  for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) {
    const base = (l * H + h) * T * T;
    for (let q = 0; q < P; q++) for (let k = 0; k <= q; k++) causal[base + q * T + k] = prompt(l, h, q, k);
    steps.forEach((s, i) => {
      const q = arch === "decoder" ? P - 1 + i : i;
      const width = s.self.shape[3];
      for (let k = 0; k < width; k++) causal[base + q * T + k] = s.self.at(l, h, 0, k);
    });
  }
  state.causal = { L, H, T, rows: labels, cols: labels, values: causal };
  state.align = null;
  if (arch === "encoder-decoder") {
    const S = res.source.tokens.length;
    const align = new Float32Array(L * H * N * S);
    for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) {
      const base = (l * H + h) * N * S;
      steps.forEach((s, i) => { for (let k = 0; k < S; k++) align[base + i * S + k] = s.cross.at(l, h, 0, k); });
    }
    state.align = { L, H, R: N, C: S, rows: res.tokens, cols: res.source.tokens, values: align };
  }
}

// One head's [R, C] slice of a stacked matrix.
function slice(m, R, C) {
  const off = (state.layer * m.H + state.head) * R * C;
  return m.values.subarray(off, off + R * C);
}

function draw(canvas, m, R, C) {
  const vals = slice(m, R, C);
  const cell = Math.max(6, Math.min(28, Math.floor(460 / Math.max(R, C, 1))));
  const left = 96, top = 78;
  canvas.width = left + C * cell + 4;
  canvas.height = top + R * cell + 4;
  Object.assign(canvas.dataset, { left, top, cell, rows: R, cols: C });
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  let max = 0;
  for (const v of vals) max = Math.max(max, v);
  for (let r = 0; r < R; r++) for (let c = 0; c < C; c++) {
    const v = vals[r * C + c];
    if (v <= 0) continue; // zero stays white: masked (future) keys show as blank
    const t = Math.sqrt(v / (max || 1));
    ctx.fillStyle = `rgb(${Math.round(255 - 219 * t)}, ${Math.round(255 - 171 * t)}, ${Math.round(255 - 58 * t)})`;
    ctx.fillRect(left + c * cell, top + r * cell, cell, cell);
  }
  ctx.strokeStyle = "#d9dde5";
  ctx.strokeRect(left - 0.5, top - 0.5, C * cell + 1, R * cell + 1);
  ctx.fillStyle = "#1d2330";
  ctx.font = `${Math.min(12, cell)}px system-ui, sans-serif`;
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  m.rows.slice(0, R).forEach((t, r) => ctx.fillText(clean(t).slice(0, 12), left - 4, top + (r + 0.5) * cell));
  ctx.save();
  ctx.textAlign = "left";
  m.cols.slice(0, C).forEach((t, c) => {
    ctx.save();
    ctx.translate(left + (c + 0.5) * cell, top - 4);
    ctx.rotate(-Math.PI / 3);
    ctx.fillText(clean(t).slice(0, 12), 0, 0);
    ctx.restore();
  });
  ctx.restore();
}

function render() {
  if (!state.causal) return;
  const c = state.causal;
  draw($("#gen-causal"), c, c.T, c.T);
  $("#gen-align-fig").hidden = !state.align;
  if (state.align) draw($("#gen-align"), state.align, state.align.R, state.align.C);
}

function readout(e, which) {
  const canvas = e.currentTarget;
  const m = which === "causal" ? state.causal : state.align;
  if (!m) return;
  const d = canvas.dataset, rect = canvas.getBoundingClientRect();
  const c = Math.floor((e.clientX - rect.left - Number(d.left)) / Number(d.cell));
  const r = Math.floor((e.clientY - rect.top - Number(d.top)) / Number(d.cell));
  const R = Number(d.rows), C = Number(d.cols);
  if (r < 0 || c < 0 || r >= R || c >= C) return;
  const v = slice(m, R, C)[r * C + c];
  $("#gen-readout").textContent = `${clean(m.rows[r])} → ${clean(m.cols[c])}: ${v.toFixed(4)}`;
}

function selected() {
  return state.models.find((m) => m.name === $("#gen-model").value) || state.models[0];
}

function onModel() {
  const m = selected();
  $("#gen-text-label").textContent = m && m.architecture === "encoder-decoder" ? "Source (to translate)" : "Prompt";
}

async function run() {
  const m = selected();
  if (!m) return;
  const seq = ++state.run;
  const field = m.architecture === "encoder-decoder" ? "source" : "prompt";
  const temperature = Number($("#gen-temp").value) || 0;
  const body = {
    model: m.name, [field]: $("#gen-text").value, max_new_tokens: Number($("#gen-max").value) || 12,
    temperature, attention: { layers: null, heads: null, dtype: "float32", encoding: "base64" },
  };
  if (temperature > 0) body.seed = 0;
  document.body.dataset.genState = "loading";
  $("#gen-run").disabled = true;
  $("#gen-error").hidden = true;
  $("#gen-status").textContent = "Generating…";
  const t0 = performance.now();
  try {
    const res = await api("/v1/generate", body);
    if (seq !== state.run) return;
    state.result = res;
    build(res, m.architecture);
    const fillSelect = (sel, items, keep) => {
      sel.replaceChildren(...items.map((n, i) => h("option", { value: String(i) }, String(n))));
      sel.value = String(Math.min(keep, items.length - 1));
    };
    fillSelect($("#gen-layer"), res.attention.layers, state.layer);
    fillSelect($("#gen-head"), res.attention.heads, state.head);
    state.layer = Number($("#gen-layer").value);
    state.head = Number($("#gen-head").value);
    $("#gen-prompt").textContent = field === "prompt" ? body.prompt : `${body.source} → `;
    $("#gen-output").textContent = res.text;
    $("#gen-finish").textContent = ` (${res.usage.completion_tokens} tokens, finish: ${res.finish_reason})`;
    $("#gen-views").hidden = false;
    render();
    $("#gen-status").textContent = `${m.name} · ${m.architecture} · ${Math.round(performance.now() - t0)} ms`;
    document.body.dataset.genState = "ready";
    document.body.dataset.genRun = String(seq);
  } catch (err) {
    if (seq !== state.run) return;
    panelFailed("gen", "genState", err);
  } finally {
    if (seq === state.run) $("#gen-run").disabled = false;
  }
}

async function init() {
  state.models = await modelsWhere((m) => GEN.has(m.architecture));
  if (!state.models.length) return;
  $("#gen-model").replaceChildren(...state.models.map((m) => h("option", { value: m.name }, `${m.name} (${m.architecture})`)));
  $("#gen-section").hidden = false;
  onModel();
  $("#gen-model").addEventListener("change", onModel);
  $("#gen-form").addEventListener("submit", (e) => { e.preventDefault(); run(); });
  $("#gen-layer").addEventListener("change", (e) => { state.layer = Number(e.target.value); render(); });
  $("#gen-head").addEventListener("change", (e) => { state.head = Number(e.target.value); render(); });
  $("#gen-causal").addEventListener("mousemove", (e) => readout(e, "causal"));
  $("#gen-align").addEventListener("mousemove", (e) => readout(e, "align"));
  document.body.dataset.genState = "idle";
}

// For tests and the console: the matrices on screen.
window.headwiseGenerate = { state, slice };

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
else init();
