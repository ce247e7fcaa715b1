/* headwise attention viewer.
 *
 * Plain JavaScript, no framework, no build step, no network beyond this server:
 *   GET  /v1/models  → the model picker
 *   POST /v1/embed   → tokens, character offsets and every layer's attention
 *                      (dense, float16, base64: little-endian, C order, shape [L, H, T, T])
 *
 * Attention of one sentence is kept as a Float32Array `att` (float16 widens to float32 exactly),
 * indexed att[((li * H + hi) * T + q) * T + k], where li / hi are positions in the response's
 * `layers` / `heads` lists (the real layer/head numbers are layers[li] / heads[hi]).
 *
 * Per-head summary (see headStats; the page's help text says the same). For one head with
 * weights A[q, k] (q = query, k = key, T tokens), averaged over all T query rows, float16 weights
 * as received (not renormalised):
 *   entropy        = mean_q  −Σ_k A[q,k]·log2 A[q,k]          (bits; 0·log 0 = 0)
 *   special share  = mean_q   Σ_{k special} A[q,k]             (special: [CLS], [SEP], <s>, </s>)
 *   mean distance  = mean_q   Σ_k A[q,k]·|q − k|               (token positions)
 *   previous share = mean over q = 1..T−1 of A[q, q−1]
 *   next share     = mean over q = 0..T−2 of A[q, q+1]
 */
"use strict";

(() => {
  // ---------------------------------------------------------------- helpers
  const $ = (sel, root = document) => root.querySelector(sel);
  const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else if (key === "style") node.style.cssText = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const clamp = (x, lo, hi) => Math.max(lo, Math.min(hi, x));
  const fmt = (x, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : "—");
  const SPECIAL_TOKENS = new Set(["[CLS]", "[SEP]", "<s>", "</s>"]);
  const LABELS = ["A", "B"];

  // One colour per head: Tableau 10 plus two, then evenly spaced hues for bigger models.
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#ad494a"];
  const headColour = (head, nHeads) =>
    nHeads <= PALETTE.length ? PALETTE[head % PALETTE.length]
      : `hsl(${Math.round((360 * head) / nHeads)} 65% 45%)`;

  // Sequential colour map (white → deep blue), 256 entries of [r, g, b].
  const CMAP = (() => {
    const stops = [[255, 255, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
    const out = [];
    for (let i = 0; i < 256; i++) {
      const t = (i / 255) * (stops.length - 1);
      const j = Math.min(Math.floor(t), stops.length - 2);
      const f = t - j;
      out.push(stops[j].map((c, n) => Math.round(c + (stops[j + 1][n] - c) * f)));
    }
    return out;
  })();
  const CMAP_CSS = CMAP.map((c) => `rgb(${c.join(",")})`);
  const cmapIndex = (v) => (v > 0 ? (v < 1 ? Math.round(v * 255) : 255) : 0);
  const cmap = (v) => CMAP[cmapIndex(v)];
  const cmapCss = (v) => CMAP_CSS[cmapIndex(v)];

  // ---------------------------------------------------------------- decoding
  // float16 bits → value, as a 65536-entry table built on first use.
  let F16 = null;
  function f16Table() {
    if (F16) return F16;
    F16 = new Float32Array(65536);
    for (let bits = 0; bits < 65536; bits++) {
      const sign = bits & 0x8000 ? -1 : 1;
      const exp = (bits >> 10) & 0x1f;
      const frac = bits & 0x3ff;
      let v;
      if (exp === 0) v = sign * frac * 2 ** -24; // subnormal
      else if (exp === 31) v = frac ? NaN : sign * Infinity;
      else v = sign * (1 + frac / 1024) * 2 ** (exp - 15);
      F16[bits] = v;
    }
    return F16;
  }

  function base64Bytes(b64) {
    const bin = atob(b64);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }

  function flatten(nested, out) {
    if (Array.isArray(nested)) for (const x of nested) flatten(x, out);
    else out.push(Number(nested));
    return out;
  }

  /** Decode an `attention` object of the API into {shape, values: Float32Array}. */
  function decodeAttention(a) {
    if (!a || !Array.isArray(a.shape) || a.shape.length !== 4) {
      throw new Error("the server's attention has no 4-d shape [layers, heads, T, T]");
    }
    if (a.format && a.format !== "dense") throw new Error(`attention format "${a.format}" is not dense`);
    const n = a.shape.reduce((x, y) => x * y, 1);
    let values;
    if ((a.encoding || "json") === "base64") {
      const bytes = base64Bytes(a.data);
      const dtype = a.dtype || "float16";
      if (dtype === "float16") {
        const table = f16Table();
        values = new Float32Array(bytes.length >> 1);
        for (let i = 0; i < values.length; i++) values[i] = table[bytes[2 * i] | (bytes[2 * i + 1] << 8)];
      } else if (dtype === "float32") {
        const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
        values = new Float32Array(bytes.length >> 2);
        for (let i = 0; i < values.length; i++) values[i] = view.getFloat32(4 * i, true);
      } else {
        throw new Error(`attention dtype "${dtype}" is not supported`);
      }
    } else {
      values = Float32Array.from(flatten(a.data, []));
    }
    if (values.length !== n) {
      throw new Error(`attention has ${values.length} values, its shape [${a.shape}] needs ${n}`);
    }
    return { shape: a.shape, values };
  }

  // ---------------------------------------------------------------- API
  class ApiError extends Error {
    constructor(message, type, status) {
      super(message);
      this.type = type;
      this.status = status;
    }
  }

  let apiKey = "";

  async function api(path, body) {
    const init = { headers: { accept: "application/json" } };
    if (body !== undefined) {
      init.method = "POST";
      init.headers["content-type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    if (apiKey) init.headers.authorization = `Bearer ${apiKey}`;
    let res;
    try {
      res = await fetch(path, init);
    } catch (e) {
      throw new ApiError(`Could not reach the headwise server (${e.message}). Is it still running?`, "network", 0);
    }
    const text = await res.text();
    let payload = null;
    try { payload = text ? JSON.parse(text) : null; } catch { payload = null; }
    if (!res.ok) {
      const err = payload && payload.error;
      let message = typeof err === "string" ? err : err && err.message;
      if (!message && payload && payload.detail) {
        message = Array.isArray(payload.detail)
          ? payload.detail.map((d) => d.msg || JSON.stringify(d)).join("; ")
          : String(payload.detail);
      }
      throw new ApiError(message || `HTTP ${res.status} ${res.statusText}`,
        (err && err.type) || "http", (err && err.code) || res.status);
    }
    if (payload === null) throw new ApiError(`${path} answered with something that is not JSON`, "bad_response", res.status);
    return payload;
  }

  // ---------------------------------------------------------------- state
  const state = {
    models: [],
    results: [],    // per sentence: {label, text, tokens, offsets, special, L, H, T, layers, heads, att, stats}
    modelName: "",
    sentence: 0,    // index into results
    layer: 0,       // position in layers[]
    heads: new Set([0]), // positions in heads[]
    heatHead: 0,    // position in heads[]
    scale: "head",
    tab: "head",
    hover: null,    // {side: "q" | "k", i}
    focus: null,    // {side: "q" | "k", i}
    cursor: { q: 0, k: 0 },
    mvCursor: { li: 0, hi: 0 },
    sort: { key: null, dir: 1 },
    runSeq: 0,
    dirty: { head: true, model: true, summary: true },
  };
  const current = () => state.results[state.sentence];

  const modelId = (m) => m.id || m.name || m.model || "";
  const modelFact = (m, key) => (m[key] ?? (m.manifest && m.manifest[key]) ?? (m.config && m.config[key]));

  // ---------------------------------------------------------------- status and errors
  function setBusy(busy, message) {
    document.body.dataset.state = busy ? "loading" : document.body.dataset.state;
    $("#run").disabled = busy;
    $("#run").setAttribute("aria-busy", busy ? "true" : "false");
    if (message !== undefined) $("#status").textContent = message;
  }

  const ERROR_TITLES = {
    400: "The request was not accepted",
    401: "This server needs an API key",
    404: "Not found",
    413: "Too large",
    422: "The input was not accepted",
    429: "The server is busy",
    503: "The model is not ready yet",
  };
  // errors found in the page itself (status 0)
  const LOCAL_TITLES = {
    network: "The server could not be reached",
    validation: "Nothing to send",
    no_attention: "This model cannot show attention",
    bad_response: "The server's answer was not understood",
  };

  function showError(err) {
    const box = $("#error");
    const status = err.status || 0;
    let title = (status ? ERROR_TITLES[status] : LOCAL_TITLES[err.type]) || "Something went wrong";
    let hint = "";
    if (status === 413 && /attention/i.test(err.message)) {
      title = "Too long for the attention budget";
      hint = "Attention grows with layers × heads × tokens². Shorten the text, compare one sentence at a time, "
        + "or ask the operator to raise HEADWISE_ATTENTION_BUDGET_BYTES.";
    } else if (status === 413) {
      hint = "Shorten the text: the request is over the server's size limits "
        + "(HEADWISE_MAX_BODY_BYTES, HEADWISE_MAX_CLIENT_BATCH).";
    } else if (status === 401) {
      hint = "Enter the key in the API key field and try again.";
      $("#field-key").hidden = false;
      $("#api-key").focus();
    } else if (status === 429) {
      hint = "Wait a moment and try again.";
    } else if (status === 503) {
      hint = "The server is still loading or warming up the model, or shutting down. Try again shortly.";
    } else if (status === 0 && err.type === "network") {
      hint = "Check that headwise is still running at this address.";
    }
    box.replaceChildren(
      h("strong", { class: "error-title" }, title),
      h("p", { class: "error-message", id: "error-message" }, err.message),
      hint ? h("p", { class: "error-hint" }, hint) : null,
      status ? h("p", { class: "error-code" }, `HTTP ${status}${err.type ? ` · ${err.type}` : ""}`) : null,
    );
    box.dataset.status = String(status);
    box.dataset.type = err.type || "";
    box.hidden = false;
    document.body.dataset.state = "error";
    if (state.results.length) { // keep the last good result on screen, marked as such
      $("#tokens-section").classList.add("stale");
      $("#views").classList.add("stale");
      $("#status").textContent = "Below: the last result that worked, not the text above.";
    }
  }

  function clearError() {
    $("#error").hidden = true;
    $("#error").replaceChildren();
  }

  // ---------------------------------------------------------------- models
  async function loadModels() {
    const select = $("#model");
    try {
      const res = await api("/v1/models");
      const all = (res.data || res.models || []).filter((m) => modelId(m));
      // generative models (decoder, encoder-decoder) have their own panel: generate.js
      state.models = all.filter((m) => !m.architecture || m.architecture === "encoder");
      if (!state.models.length && all.length) {
        $("#run-form").hidden = true;
        select.replaceChildren(h("option", { value: "" }, "no encoder model"));
        $("#status").textContent = "This server has no encoder model to embed with; see Generate below.";
        return false;
      }
      if (!state.models.length) throw new ApiError("The server has no model loaded.", "not_ready", 503);
      select.replaceChildren(...state.models.map((m) => h("option", { value: modelId(m) }, modelId(m))));
      describeModel();
      return true;
    } catch (err) {
      select.replaceChildren(h("option", { value: "" }, "no model"));
      showError(err);
      return false;
    }
  }

  function selectedModel() {
    return state.models.find((m) => modelId(m) === $("#model").value) || state.models[0] || null;
  }

  function describeModel() {
    const m = selectedModel();
    if (!m) { $("#model-facts").textContent = ""; return; }
    const bits = [];
    const L = modelFact(m, "n_layers"), H = modelFact(m, "n_heads"), d = modelFact(m, "d_model"),
      maxLen = modelFact(m, "max_len");
    if (L && H) bits.push(`${L} layers × ${H} heads`);
    if (d) bits.push(`d_model ${d}`);
    if (maxLen) bits.push(`max ${maxLen} tokens`);
    const prov = m.provider || (m.runtime && m.runtime.provider);
    const prec = m.precision || (m.runtime && m.runtime.precision);
    if (prov || prec) bits.push([prov, prec].filter(Boolean).join(" "));
    $("#model-facts").textContent = bits.join(" · ");
  }

  // ---------------------------------------------------------------- run
  async function run() {
    const texts = [$("#text-a").value];
    if ($("#compare").checked) texts.push($("#text-b").value);
    const empty = texts.findIndex((t) => !t.trim());
    if (empty >= 0) {
      showError(new ApiError(`Sentence ${LABELS[empty]} is empty. Type some text first.`, "validation", 0));
      $(empty ? "#text-b" : "#text-a").focus();
      return;
    }
    clearError();
    const seq = ++state.runSeq;
    setBusy(true, "Running the model…");
    const t0 = performance.now();
    try {
      if (!state.models.length && !(await loadModels())) return;
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
      const res = await api("/v1/embed", body);
      if (seq !== state.runSeq) return; // a newer run started meanwhile
      const data = (res.data || []).slice().sort((a, b) => (a.index ?? 0) - (b.index ?? 0));
      if (data.length !== texts.length) throw new ApiError(`asked for ${texts.length} inputs, got ${data.length}`, "bad_response", 0);
      const results = data.map((d, i) => makeResult(d, texts[i], i));
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
        + (truncated ? ` · truncated to the model's ${maxLen}-token limit` : "");
      document.body.dataset.state = "ready";
      document.body.dataset.run = String(seq);
    } catch (err) {
      if (seq !== state.runSeq) return;
      $("#status").textContent = "";
      showError(err instanceof ApiError ? err : new ApiError(err.message, "client", 0));
    } finally {
      if (seq === state.runSeq) {
        $("#run").disabled = false;
        $("#run").setAttribute("aria-busy", "false");
      }
    }
  }

  function makeResult(d, text, i) {
    if (!d.attention) throw new ApiError("the server returned no attention for this input", "bad_response", 0);
    const { shape, values } = decodeAttention(d.attention);
    const [L, H, T, T2] = shape;
    const tokens = d.tokens || [];
    if (T !== T2 || tokens.length !== T) {
      throw new ApiError(`attention shape [${shape}] does not match ${tokens.length} tokens`, "bad_response", 0);
    }
    const r = {
      label: LABELS[i] || String(i + 1),
      text,
      tokens,
      offsets: d.offsets || tokens.map(() => [0, 0]),
      special: tokens.map((t) => SPECIAL_TOKENS.has(t)),
      L, H, T,
      layers: d.attention.layers || Array.from({ length: L }, (_, n) => n),
      heads: d.attention.heads || Array.from({ length: H }, (_, n) => n),
      att: values,
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

  // ---------------------------------------------------------------- tokens
  function renderTokens() {
    const lists = state.results.map((r, si) => {
      // the server's offsets count Unicode code points (Python str indices), not UTF-16 units
      const chars = Array.from(r.text);
      const items = r.tokens.map((tok, i) => {
        const [s, e] = r.offsets[i] || [0, 0];
        const span = chars.slice(s, e).join("");
        return h("li", {
          class: r.special[i] ? "tok special" : "tok",
          dataset: { index: i, token: tok, start: s, end: e },
          title: `#${i} ${tok} · characters ${s}–${e}${span ? ` “${span}”` : " (no text: special token)"}`,
        }, h("span", { class: "tok-i" }, i), h("span", { class: "tok-t" }, tok), h("span", { class: "tok-o" }, `${s}:${e}`));
      });
      return h("div", { class: "token-block" },
        h("h3", { id: `tokens-h-${si}` }, `Sentence ${r.label}`, h("span", { class: "hint" }, ` ${r.T} tokens`)),
        h("ol", { id: `tokens-${si}`, class: "token-list", "aria-labelledby": `tokens-h-${si}` }, items));
    });
    $("#token-lists").replaceChildren(...lists);
  }

  // ---------------------------------------------------------------- head controls
  function buildHeadControls() {
    const r = current();
    const layerSel = $("#layer");
    layerSel.replaceChildren(...r.layers.map((l, li) => h("option", { value: li }, `Layer ${l}`)));
    layerSel.value = String(state.layer);
    const checks = r.heads.map((hd, hi) => {
      const id = `head-${hi}`;
      return h("label", { class: "head-check", for: id, style: `--c:${headColour(hd, r.H)}` },
        h("input", { type: "checkbox", id, value: hi, checked: state.heads.has(hi) }),
        h("span", { class: "swatch", "aria-hidden": "true" }), String(hd));
    });
    $("#head-checks").replaceChildren(...checks);
    $("#head-checks").setAttribute("aria-label", "Heads shown in the line view");
    $("#heat-head").replaceChildren(...r.heads.map((hd, hi) => h("option", { value: hi }, `Head ${hd}`)));
    $("#heat-head").value = String(state.heatHead);
  }

  function syncHeadControls() {
    $("#layer").value = String(state.layer);
    $$("#head-checks input").forEach((c) => { c.checked = state.heads.has(Number(c.value)); });
    $("#heat-head").value = String(state.heatHead);
  }

  // ---------------------------------------------------------------- stats
  function headStats(r, li, hi) {
    const T = r.T, A = r.att, base = (li * r.H + hi) * T * T;
    let ent = 0, special = 0, dist = 0, prev = 0, next = 0;
    for (let q = 0; q < T; q++) {
      const row = base + q * T;
      for (let k = 0; k < T; k++) {
        const w = A[row + k];
        if (w > 0) ent -= w * Math.log2(w);
        if (r.special[k]) special += w;
        dist += w * Math.abs(q - k);
      }
      if (q > 0) prev += A[row + q - 1];
      if (q < T - 1) next += A[row + q + 1];
    }
    return {
      layer: r.layers[li], head: r.heads[hi], li, hi,
      entropy: ent / T,
      special: special / T,
      distance: dist / T,
      prev: T > 1 ? prev / (T - 1) : NaN,
      next: T > 1 ? next / (T - 1) : NaN,
    };
  }

  function allStats(r) {
    const out = [];
    for (let li = 0; li < r.L; li++) for (let hi = 0; hi < r.H; hi++) out.push(headStats(r, li, hi));
    return out;
  }

  // ---------------------------------------------------------------- rendering dispatch
  function markDirty() { state.dirty = { head: true, model: true, summary: true }; }

  function renderActive() {
    if (!state.results.length) return;
    const tab = state.tab;
    if (!state.dirty[tab]) return;
    state.dirty[tab] = false;
    if (tab === "head") renderHead();
    else if (tab === "model") renderModelView();
    else renderSummary();
  }

  function rerender() {
    markDirty();
    renderActive();
  }

  // ---------------------------------------------------------------- head view (lines)
  let hvGeom = null; // {rowH, canvas, width, height}

  function renderHead() {
    const r = current();
    syncHeadControls();
    const layer = r.layers[state.layer];
    const heads = [...state.heads].sort((a, b) => a - b);
    const hv = $("#head-view");
    hv.dataset.layer = String(layer);
    hv.dataset.heads = heads.map((hi) => r.heads[hi]).join(",");
    hv.dataset.sentence = r.label;
    $("#head-caption").replaceChildren(
      `Sentence ${r.label} · `,
      h("strong", { id: "caption-layer" }, `Layer ${layer}`), " · ",
      h("strong", { id: "caption-heads" },
        heads.length === 0 ? "no heads selected"
          : heads.length === r.H ? `all ${r.H} heads`
            : `head${heads.length > 1 ? "s" : ""} ${heads.map((hi) => r.heads[hi]).join(", ")}`),
      ` · heatmap: head ${r.heads[state.heatHead]}`);

    const rowH = r.T > 48 ? 16 : 22;
    hv.style.setProperty("--row", `${rowH}px`);
    hv.classList.toggle("dense", r.T > 48);
    const column = (side) => h("ol", {
      class: `hv-col hv-${side}`,
      "aria-label": side === "q" ? "Query tokens (attending)" : "Key tokens (attended to)",
    }, r.tokens.map((tok, i) => h("li", {},
      h("button", {
        type: "button",
        class: r.special[i] ? "hv-tok special" : "hv-tok",
        tabindex: i === 0 ? "0" : "-1",
        dataset: { side, index: i },
        "aria-label": `${side === "q" ? "query" : "key"} ${i}: ${tok}`,
      }, tok))));
    const canvas = h("canvas", { class: "hv-lines", "aria-hidden": "true" });
    hv.replaceChildren(column("q"), canvas, column("k"));
    hvGeom = { rowH, canvas };
    drawHeadLines();
    drawHeatmap();
  }

  /** The lines of the chosen heads; `iso` = {side, i} keeps only one token's lines. */
  function paintLines(ctx, x0, width, rowH, iso) {
    const r = current();
    const T = r.T, A = r.att;
    const heads = [...state.heads].sort((a, b) => a - b);
    const LEVELS = 32;
    ctx.lineWidth = iso ? 2 : 1.5;
    ctx.lineCap = "round";
    const y = (i) => i * rowH + rowH / 2;
    for (const hi of heads) {
      const base = (state.layer * r.H + hi) * T * T;
      // bucket the lines by opacity so each head needs at most LEVELS strokes
      const buckets = Array.from({ length: LEVELS }, () => []);
      for (let q = 0; q < T; q++) {
        if (iso && iso.side === "q" && iso.i !== q) continue;
        for (let k = 0; k < T; k++) {
          if (iso && iso.side === "k" && iso.i !== k) continue;
          const w = A[base + q * T + k];
          if (w < (iso ? 0.002 : 0.01)) continue;
          buckets[Math.min(LEVELS - 1, Math.floor(w * LEVELS))].push(q, k);
        }
      }
      ctx.strokeStyle = headColour(r.heads[hi], r.H);
      buckets.forEach((pairs, b) => {
        if (!pairs.length) return;
        ctx.globalAlpha = (b + 1) / LEVELS;
        ctx.beginPath();
        for (let n = 0; n < pairs.length; n += 2) {
          ctx.moveTo(x0, y(pairs[n]));
          ctx.lineTo(x0 + width, y(pairs[n + 1]));
        }
        ctx.stroke();
      });
    }
    ctx.globalAlpha = 1;
  }

  /** The token whose lines are isolated: the one last hovered or focused, while it still is. */
  function isolated() {
    return state.lastIso === "focus" ? state.focus || state.hover : state.hover || state.focus;
  }

  function drawHeadLines() {
    if (!hvGeom) return;
    const r = current();
    const { canvas, rowH } = hvGeom;
    const dpr = window.devicePixelRatio || 1;
    const width = Math.max(60, canvas.clientWidth || 200);
    const height = r.T * rowH;
    canvas.style.height = `${height}px`;
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const iso = isolated();
    paintLines(ctx, 4, width - 8, rowH, iso);
    // mark the isolated token and show the weights it gives / receives on the other column
    $$("#head-view .hv-tok").forEach((b) => {
      b.classList.remove("iso");
      b.style.removeProperty("--w");
      b.removeAttribute("title");
    });
    if (iso) {
      const heads = [...state.heads];
      const T = r.T;
      const own = $(`#head-view .hv-${iso.side} .hv-tok[data-index="${iso.i}"]`);
      if (own) own.classList.add("iso");
      const other = iso.side === "q" ? "k" : "q";
      $$(`#head-view .hv-${other} .hv-tok`).forEach((b) => {
        const j = Number(b.dataset.index);
        const q = iso.side === "q" ? iso.i : j, k = iso.side === "q" ? j : iso.i;
        let max = 0;
        const parts = heads.sort((a, c) => a - c).map((hi) => {
          const w = r.att[((state.layer * r.H + hi) * T + q) * T + k];
          max = Math.max(max, w);
          return `head ${r.heads[hi]}: ${w.toFixed(4)}`;
        });
        b.style.setProperty("--w", max.toFixed(3));
        b.title = `${r.tokens[q]} → ${r.tokens[k]}\n${parts.join("\n")}`;
      });
    }
  }

  function onTokenEvent(e) {
    const b = e.target.closest && e.target.closest(".hv-tok");
    if (!b) return;
    const tok = { side: b.dataset.side, i: Number(b.dataset.index) };
    if (e.type === "mouseover") state.hover = tok;
    else if (e.type === "focusin") state.focus = tok;
    state.lastIso = e.type === "focusin" ? "focus" : "hover";
    drawHeadLines();
  }

  function onTokenLeave(e) {
    if (e.type === "mouseout") {
      const to = e.relatedTarget && e.relatedTarget.closest && e.relatedTarget.closest(".hv-tok");
      if (to) return; // mouseover on the next token follows
      state.hover = null;
    } else if (e.type === "focusout") {
      state.focus = null;
    }
    drawHeadLines();
  }

  function onTokenKey(e) {
    const b = e.target.closest && e.target.closest(".hv-tok");
    if (!b) return;
    const T = current().T;
    let side = b.dataset.side, i = Number(b.dataset.index);
    switch (e.key) {
      case "ArrowUp": i = Math.max(0, i - 1); break;
      case "ArrowDown": i = Math.min(T - 1, i + 1); break;
      case "Home": i = 0; break;
      case "End": i = T - 1; break;
      case "ArrowLeft": side = "q"; break;
      case "ArrowRight": side = "k"; break;
      case "Escape": b.blur(); return;
      default: return;
    }
    e.preventDefault();
    const next = $(`#head-view .hv-${side} .hv-tok[data-index="${i}"]`);
    if (!next) return;
    $$(`#head-view .hv-${side} .hv-tok`).forEach((x) => { x.tabIndex = -1; });
    next.tabIndex = 0;
    next.focus();
  }

  // ---------------------------------------------------------------- heatmap
  let hmGeom = null; // {left, top, cell, T}

  function heatScaleMax(r, li, hi) {
    if (state.scale === "abs") return 1;
    const base = (li * r.H + hi) * r.T * r.T;
    let max = 0;
    for (let n = 0; n < r.T * r.T; n++) max = Math.max(max, r.att[base + n]);
    return max || 1;
  }

  function drawHeatmap() {
    const r = current();
    const canvas = $("#heatmap");
    const T = r.T, A = r.att, li = state.layer, hi = state.heatHead;
    const avail = Math.max(200, $("#heatmap-fig").clientWidth - 8);
    const ctx0 = canvas.getContext("2d");
    ctx0.font = "12px system-ui, sans-serif";
    const labelW = Math.min(110, 10 + Math.max(...r.tokens.map((t) => ctx0.measureText(t).width)));
    const cell = clamp(Math.floor(Math.min(avail - labelW - 4, 620) / T), 2, 32);
    const labels = cell >= 9;
    const left = labels ? labelW : 4, top = labels ? labelW : 4;
    const width = left + T * cell + 4, height = top + T * cell + 4;
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    canvas.style.width = `${width}px`;
    canvas.style.height = `${height}px`;
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, width, height);
    const max = heatScaleMax(r, li, hi);
    const base = (li * r.H + hi) * T * T;
    for (let q = 0; q < T; q++) {
      for (let k = 0; k < T; k++) {
        ctx.fillStyle = cmapCss(A[base + q * T + k] / max);
        ctx.fillRect(left + k * cell, top + q * cell, cell, cell);
      }
    }
    if (cell >= 28) { // big enough to print the values
      ctx.font = "10px system-ui, sans-serif";
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      for (let q = 0; q < T; q++) {
        for (let k = 0; k < T; k++) {
          const v = A[base + q * T + k];
          ctx.fillStyle = v / max > 0.55 ? "#fff" : "#334";
          ctx.fillText(v.toFixed(2).replace(/^0/, ""), left + (k + 0.5) * cell, top + (q + 0.5) * cell);
        }
      }
    }
    if (labels) {
      ctx.font = `${Math.min(12, cell)}px system-ui, sans-serif`;
      ctx.fillStyle = "#222";
      ctx.textBaseline = "middle";
      ctx.textAlign = "right";
      const clip = (t) => { // keep labels inside their margin
        let s = t;
        while (s.length > 1 && ctx.measureText(s).width > labelW - 8) s = s.slice(0, -1);
        return s === t ? t : `${s.slice(0, -1)}…`;
      };
      r.tokens.forEach((t, i) => ctx.fillText(clip(t), left - 4, top + (i + 0.5) * cell));
      ctx.save();
      ctx.translate(left, top - 4);
      ctx.rotate(-Math.PI / 2);
      ctx.textAlign = "left";
      r.tokens.forEach((t, i) => ctx.fillText(clip(t), 0, (i + 0.5) * cell));
      ctx.restore();
    }
    hmGeom = { left, top, cell, T, max };
    Object.assign(canvas.dataset, {
      left, top, cell, tokens: T, layer: r.layers[li], head: r.heads[hi], max: max.toPrecision(6),
    });
    canvas.setAttribute("aria-label",
      `Heatmap of layer ${r.layers[li]}, head ${r.heads[hi]}: ${T} query rows × ${T} key columns`);
    drawCursor();
    updateReadout();
  }

  function drawCursor() {
    if (!hmGeom) return;
    const { left, top, cell } = hmGeom;
    const ctx = $("#heatmap").getContext("2d");
    const { q, k } = state.cursor;
    ctx.save();
    ctx.lineWidth = 2;
    ctx.strokeStyle = "#e4572e";
    ctx.strokeRect(left + k * cell + 1, top + q * cell + 1, Math.max(1, cell - 2), Math.max(1, cell - 2));
    ctx.restore();
  }

  function redrawCell(q, k) {
    if (!hmGeom) return;
    const r = current();
    const { left, top, cell, T, max } = hmGeom;
    if (q >= T || k >= T) return;
    const ctx = $("#heatmap").getContext("2d");
    const v = r.att[((state.layer * r.H + state.heatHead) * T + q) * T + k];
    ctx.fillStyle = cmapCss(v / max);
    ctx.fillRect(left + k * cell, top + q * cell, cell, cell);
    if (cell >= 28) {
      ctx.font = "10px system-ui, sans-serif";
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.fillStyle = v / max > 0.55 ? "#fff" : "#334";
      ctx.fillText(v.toFixed(2).replace(/^0/, ""), left + (k + 0.5) * cell, top + (q + 0.5) * cell);
    }
  }

  function moveCursor(q, k) {
    const T = current().T;
    q = clamp(q, 0, T - 1);
    k = clamp(k, 0, T - 1);
    if (q === state.cursor.q && k === state.cursor.k) return;
    redrawCell(state.cursor.q, state.cursor.k);
    state.cursor = { q, k };
    drawCursor();
    updateReadout();
  }

  function updateReadout() {
    const r = current();
    const { q, k } = state.cursor;
    const li = state.layer, hi = state.heatHead, T = r.T;
    const v = r.att[((li * r.H + hi) * T + q) * T + k];
    const out = $("#heatmap-readout");
    Object.assign(out.dataset, {
      sentence: r.label, layer: r.layers[li], head: r.heads[hi], query: q, key: k, value: String(v),
    });
    out.replaceChildren(
      `Layer ${r.layers[li]} · head ${r.heads[hi]} · query ${q} `,
      h("code", {}, r.tokens[q]), " → key ", String(k), " ", h("code", {}, r.tokens[k]), ": ",
      h("strong", { class: "value" }, v.toPrecision(5)),
      h("span", { class: "hint" }, ` (${(100 * v).toFixed(2)} % of row ${q})`));
  }

  function onHeatmapMove(e) {
    if (!hmGeom) return;
    const rect = e.currentTarget.getBoundingClientRect();
    const x = e.clientX - rect.left - hmGeom.left, y = e.clientY - rect.top - hmGeom.top;
    if (x < 0 || y < 0) return;
    const k = Math.floor(x / hmGeom.cell), q = Math.floor(y / hmGeom.cell);
    if (q >= hmGeom.T || k >= hmGeom.T) return;
    moveCursor(q, k);
  }

  function onHeatmapKey(e) {
    const { q, k } = state.cursor;
    const T = current().T;
    const moves = {
      ArrowUp: [q - 1, k], ArrowDown: [q + 1, k], ArrowLeft: [q, k - 1], ArrowRight: [q, k + 1],
      Home: [q, 0], End: [q, T - 1], PageUp: [0, k], PageDown: [T - 1, k],
    };
    if (!moves[e.key]) return;
    e.preventDefault();
    moveCursor(...moves[e.key]);
  }

  // ---------------------------------------------------------------- model view
  function paintSmall(canvas, r, li, hi) {
    const T = r.T;
    canvas.width = T;
    canvas.height = T;
    const ctx = canvas.getContext("2d");
    const img = ctx.createImageData(T, T);
    const base = (li * r.H + hi) * T * T;
    const max = heatScaleMax(r, li, hi);
    for (let n = 0; n < T * T; n++) {
      const [cr, cg, cb] = cmap(r.att[base + n] / max);
      img.data[4 * n] = cr;
      img.data[4 * n + 1] = cg;
      img.data[4 * n + 2] = cb;
      img.data[4 * n + 3] = 255;
    }
    ctx.putImageData(img, 0, 0);
  }

  function renderModelView() {
    const r = current();
    const mv = $("#model-view");
    const avail = Math.max(300, $("#panel-model").clientWidth);
    const size = clamp(Math.floor((avail - 34) / r.H) - 4, 18, 84);
    mv.style.setProperty("--cell", `${size}px`);
    mv.style.setProperty("--cols", r.H);
    const selected = new Set([...state.heads]);
    const rows = [h("div", { role: "row", class: "mv-row mv-head" },
      h("span", { role: "columnheader", class: "mv-corner" }, "L \\ H"),
      r.heads.map((hd) => h("span", { role: "columnheader", class: "mv-label" }, String(hd))))];
    for (let li = 0; li < r.L; li++) {
      const cells = [];
      for (let hi = 0; hi < r.H; hi++) {
        const canvas = h("canvas", { "aria-hidden": "true" });
        paintSmall(canvas, r, li, hi);
        const s = r.stats[li * r.H + hi];
        const isCursor = li === state.mvCursor.li && hi === state.mvCursor.hi;
        const isCurrent = li === state.layer && selected.has(hi);
        cells.push(h("button", {
          type: "button", role: "gridcell",
          class: `mv-cell${isCurrent ? " current" : ""}`,
          tabindex: isCursor ? "0" : "-1",
          dataset: { layer: r.layers[li], head: r.heads[hi], li, hi },
          "aria-label": `Layer ${r.layers[li]}, head ${r.heads[hi]}: entropy ${fmt(s.entropy, 2)} bits, `
            + `mean distance ${fmt(s.distance, 1)}. Open in head view.`,
          title: `Layer ${r.layers[li]} · head ${r.heads[hi]}\nentropy ${fmt(s.entropy, 2)} bits · special ${fmt(s.special, 2)}`
            + ` · distance ${fmt(s.distance, 2)} · prev ${fmt(s.prev, 2)} · next ${fmt(s.next, 2)}`,
          style: `--c:${headColour(r.heads[hi], r.H)}`,
        }, canvas));
      }
      rows.push(h("div", { role: "row", class: "mv-row" },
        h("span", { role: "rowheader", class: "mv-label" }, String(r.layers[li])), cells));
    }
    mv.replaceChildren(...rows);
  }

  function openHead(li, hi) {
    state.layer = li;
    state.heads = new Set([hi]);
    state.heatHead = hi;
    state.mvCursor = { li, hi };
    state.hover = state.focus = null;
    markDirty();
    selectTab("head", true);
    $("#head-caption").scrollIntoView({ block: "nearest" });
  }

  function onModelViewKey(e) {
    const cell = e.target.closest && e.target.closest(".mv-cell");
    if (!cell) return;
    const r = current();
    let li = Number(cell.dataset.li), hi = Number(cell.dataset.hi);
    switch (e.key) {
      case "ArrowUp": li--; break;
      case "ArrowDown": li++; break;
      case "ArrowLeft": hi--; break;
      case "ArrowRight": hi++; break;
      case "Home": hi = 0; break;
      case "End": hi = r.H - 1; break;
      default: return;
    }
    e.preventDefault();
    li = clamp(li, 0, r.L - 1);
    hi = clamp(hi, 0, r.H - 1);
    state.mvCursor = { li, hi };
    $$("#model-view .mv-cell").forEach((c) => { c.tabIndex = -1; });
    const next = $(`#model-view .mv-cell[data-li="${li}"][data-hi="${hi}"]`);
    next.tabIndex = 0;
    next.focus();
  }

  // ---------------------------------------------------------------- summary table
  const COLUMNS = [
    { key: "layer", label: "Layer", num: false },
    { key: "head", label: "Head", num: false },
    { key: "entropy", label: "Entropy (bits)", title: "mean over queries of −Σ A·log₂A", digits: 3 },
    { key: "special", label: "Special share", title: "mean share of attention to [CLS]/[SEP]", digits: 3 },
    { key: "distance", label: "Mean distance", title: "mean over queries of Σ A[q,k]·|q−k|, in tokens", digits: 2 },
    { key: "prev", label: "Prev-token share", title: "mean of A[q,q−1] over q ≥ 1", digits: 3 },
    { key: "next", label: "Next-token share", title: "mean of A[q,q+1] over q ≤ T−2", digits: 3 },
  ];

  function renderSummary() {
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

  // ---------------------------------------------------------------- tabs
  function selectTab(name, focusPanel) {
    state.tab = name;
    for (const t of ["head", "model", "summary"]) {
      const tab = $(`#tab-${t}`);
      const on = t === name;
      tab.setAttribute("aria-selected", on ? "true" : "false");
      tab.tabIndex = on ? 0 : -1;
      $(`#panel-${t}`).hidden = !on;
    }
    renderActive();
    if (focusPanel) {
      const target = name === "head" ? $("#layer") : $(`#tab-${name}`);
      target.focus({ preventScroll: true });
    }
  }

  // ---------------------------------------------------------------- export
  function download(blob, filename) {
    const url = URL.createObjectURL(blob);
    const a = h("a", { href: url, download: filename, style: "display:none" });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  const safeName = (s) => String(s || "model").replace(/[^A-Za-z0-9._-]+/g, "-");

  function exportJson() {
    if (!state.results.length) return;
    $("#status").textContent = "Preparing the JSON download…";
    const sentences = state.results.map((r) => {
      const values = [];
      for (let li = 0; li < r.L; li++) {
        const layer = [];
        for (let hi = 0; hi < r.H; hi++) {
          const head = [];
          for (let q = 0; q < r.T; q++) {
            const off = ((li * r.H + hi) * r.T + q) * r.T;
            // 5 significant digits identify every float16 exactly, at half the size of full doubles
            head.push(Array.from(r.att.subarray(off, off + r.T), (v) => Number(v.toPrecision(5))));
          }
          layer.push(head);
        }
        values.push(layer);
      }
      return {
        label: r.label,
        text: r.text,
        tokens: r.tokens,
        offsets: r.offsets,
        attention: { layers: r.layers, heads: r.heads, shape: [r.L, r.H, r.T, r.T], dtype: "float16", data: values },
        summary: r.stats.map(({ li, hi, ...s }) => s),
      };
    });
    const doc = {
      model: state.modelName,
      exported_at: new Date().toISOString(),
      note: "attention data[layer][head][query][key]: the server's float16 weights, written with 5 significant digits (enough to recover each float16 exactly)",
      sentences,
    };
    const blob = new Blob([JSON.stringify(doc)], { type: "application/json" });
    download(blob, `headwise-attention-${safeName(state.modelName)}.json`);
    $("#status").textContent = `Downloaded the attention of ${sentences.length} sentence${sentences.length > 1 ? "s" : ""}`
      + ` as JSON (${(blob.size / 1048576).toFixed(1)} MiB).`;
  }

  const PNG_SCALE = 2; // exported images are drawn at twice their layout size, for crisp text

  /** A white canvas of `width` × `height` layout pixels, drawn at PNG_SCALE. */
  function pngCanvas(width, height) {
    const c = document.createElement("canvas");
    c.width = Math.ceil(width * PNG_SCALE);
    c.height = Math.ceil(height * PNG_SCALE);
    c.layoutWidth = width;
    c.layoutHeight = height;
    const ctx = c.getContext("2d");
    ctx.scale(PNG_SCALE, PNG_SCALE);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, width, height);
    return [c, ctx];
  }

  function headViewPng() {
    const r = current();
    const rowH = 20, pad = 16, colW = 150, mid = 320;
    const titleH = 46;
    const heads = [...state.heads].sort((a, b) => a - b);
    const width = pad * 2 + colW * 2 + mid, height = titleH + pad * 2 + r.T * rowH;
    const [c, ctx] = pngCanvas(width, height);
    ctx.fillStyle = "#222";
    ctx.font = "bold 14px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    ctx.fillText(`${state.modelName} · sentence ${r.label} · layer ${r.layers[state.layer]}`, pad, pad + 6);
    // legend: one colour per head
    ctx.font = "12px system-ui, sans-serif";
    let x = pad;
    ctx.fillText(heads.length ? "heads" : "no heads selected", x, pad + 28);
    x += ctx.measureText("heads").width + 10;
    for (const hi of heads) {
      ctx.fillStyle = headColour(r.heads[hi], r.H);
      ctx.beginPath();
      ctx.arc(x + 5, pad + 28, 5, 0, 2 * Math.PI);
      ctx.fill();
      ctx.fillStyle = "#222";
      ctx.fillText(String(r.heads[hi]), x + 13, pad + 28);
      x += 13 + ctx.measureText(String(r.heads[hi])).width + 10;
    }
    ctx.font = "13px system-ui, sans-serif";
    ctx.save();
    ctx.translate(0, titleH + pad);
    r.tokens.forEach((t, i) => {
      ctx.fillStyle = r.special[i] ? "#777" : "#222";
      ctx.textAlign = "right";
      ctx.fillText(t, pad + colW - 6, i * rowH + rowH / 2);
      ctx.textAlign = "left";
      ctx.fillText(t, pad + colW + mid + 6, i * rowH + rowH / 2);
    });
    paintLines(ctx, pad + colW, mid, rowH, isolated());
    ctx.restore();
    return c;
  }

  function composeHeadPng() {
    const lines = headViewPng();
    const heat = $("#heatmap");
    const gap = 16;
    const lw = lines.layoutWidth, lh = lines.layoutHeight;
    const hw = heat.clientWidth || heat.width, hh = heat.clientHeight || heat.height; // layout size
    const [c, ctx] = pngCanvas(lw + gap + hw, Math.max(lh, hh + 44));
    ctx.drawImage(lines, 0, 0, lw, lh);
    const r = current();
    ctx.fillStyle = "#222";
    ctx.font = "bold 14px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    ctx.fillText(`heatmap · layer ${r.layers[state.layer]} · head ${r.heads[state.heatHead]}`, lw + gap, 22);
    ctx.drawImage(heat, lw + gap, 44, hw, hh);
    return c;
  }

  function modelViewPng() {
    const r = current();
    const cell = clamp(Math.round(600 / Math.max(r.L, r.H)), 32, 96), gap = 4, label = 28, titleH = 30;
    const [c, ctx] = pngCanvas(label + r.H * (cell + gap) + 8, titleH + label + r.L * (cell + gap) + 8);
    ctx.fillStyle = "#222";
    ctx.font = "bold 14px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    ctx.fillText(`${state.modelName} · sentence ${r.label} · all layers (rows) × heads (columns)`, 8, 16);
    ctx.font = "12px system-ui, sans-serif";
    ctx.textAlign = "center";
    const small = document.createElement("canvas");
    ctx.imageSmoothingEnabled = false;
    r.heads.forEach((hd, hi) => ctx.fillText(String(hd), label + hi * (cell + gap) + cell / 2, titleH + label / 2));
    for (let li = 0; li < r.L; li++) {
      ctx.fillText(String(r.layers[li]), label / 2, titleH + label + li * (cell + gap) + cell / 2);
      for (let hi = 0; hi < r.H; hi++) {
        paintSmall(small, r, li, hi);
        ctx.drawImage(small, label + hi * (cell + gap), titleH + label + li * (cell + gap), cell, cell);
      }
    }
    return c;
  }

  function summaryPng() {
    const table = $("#summary");
    const rows = [COLUMNS.map((c) => c.label)];
    for (const tr of table.tBodies[0].rows) rows.push(Array.from(tr.cells).map((td) => td.textContent));
    const colW = 120, rowH = 20;
    const [c, ctx] = pngCanvas(colW * COLUMNS.length + 16, rowH * rows.length + 16);
    ctx.textBaseline = "middle";
    rows.forEach((row, i) => {
      ctx.font = i === 0 ? "bold 12px system-ui, sans-serif" : "12px system-ui, sans-serif";
      ctx.fillStyle = "#222";
      row.forEach((cellText, j) => ctx.fillText(cellText, 8 + j * colW, 8 + i * rowH + rowH / 2));
    });
    return c;
  }

  function exportPng() {
    if (!state.results.length) return;
    const r = current();
    let canvas, what;
    if (state.tab === "head") {
      canvas = composeHeadPng();
      const heads = [...state.heads].sort((a, b) => a - b).map((hi) => r.heads[hi]);
      what = `L${r.layers[state.layer]}-${heads.length === r.H ? "all-heads" : `H${heads.join("_")}`}`;
    } else if (state.tab === "model") {
      canvas = modelViewPng();
      what = "model-view";
    } else {
      canvas = summaryPng();
      what = "summary";
    }
    canvas.toBlob((blob) => download(blob, `headwise-${safeName(state.modelName)}-${r.label}-${what}.png`), "image/png");
  }

  // ---------------------------------------------------------------- wiring
  function wire() {
    $("#run-form").addEventListener("submit", (e) => { e.preventDefault(); run(); });
    for (const id of ["#text-a", "#text-b"]) {
      $(id).addEventListener("keydown", (e) => {
        if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); run(); }
      });
    }
    $("#compare").addEventListener("change", (e) => {
      $("#field-b").hidden = !e.target.checked;
      if (e.target.checked) $("#text-b").focus();
    });
    $("#model").addEventListener("change", describeModel);
    $("#api-key").addEventListener("input", (e) => { apiKey = e.target.value.trim(); });

    $$("#sentence-pick input").forEach((input) => input.addEventListener("change", () => {
      state.sentence = Number(input.value);
      state.hover = state.focus = null;
      const r = current();
      state.cursor = { q: clamp(state.cursor.q, 0, r.T - 1), k: clamp(state.cursor.k, 0, r.T - 1) };
      rerender();
    }));

    // tabs: click, arrows
    const tabs = ["head", "model", "summary"];
    tabs.forEach((t) => $(`#tab-${t}`).addEventListener("click", () => selectTab(t)));
    $(".tabs").addEventListener("keydown", (e) => {
      const i = tabs.indexOf(state.tab);
      let j = i;
      if (e.key === "ArrowRight") j = (i + 1) % tabs.length;
      else if (e.key === "ArrowLeft") j = (i + tabs.length - 1) % tabs.length;
      else if (e.key === "Home") j = 0;
      else if (e.key === "End") j = tabs.length - 1;
      else return;
      e.preventDefault();
      selectTab(tabs[j]);
      $(`#tab-${tabs[j]}`).focus();
    });

    // head view controls
    $("#layer").addEventListener("change", (e) => { state.layer = Number(e.target.value); rerender(); });
    $("#head-checks").addEventListener("change", (e) => {
      const hi = Number(e.target.value);
      if (e.target.checked) state.heads.add(hi); else state.heads.delete(hi);
      rerender();
    });
    $("#heads-all").addEventListener("click", () => {
      state.heads = new Set(current().heads.map((_, hi) => hi));
      rerender();
    });
    $("#heads-none").addEventListener("click", () => { state.heads = new Set(); rerender(); });
    $("#heat-head").addEventListener("change", (e) => { state.heatHead = Number(e.target.value); rerender(); });
    $("#scale").addEventListener("change", (e) => { state.scale = e.target.value; rerender(); });

    const hv = $("#head-view");
    hv.addEventListener("mouseover", onTokenEvent);
    hv.addEventListener("focusin", onTokenEvent);
    hv.addEventListener("mouseout", onTokenLeave);
    hv.addEventListener("focusout", onTokenLeave);
    hv.addEventListener("keydown", onTokenKey);

    const hm = $("#heatmap");
    hm.addEventListener("mousemove", onHeatmapMove);
    hm.addEventListener("click", onHeatmapMove);
    hm.addEventListener("keydown", onHeatmapKey);

    $("#model-view").addEventListener("click", (e) => {
      const cell = e.target.closest(".mv-cell");
      if (cell) openHead(Number(cell.dataset.li), Number(cell.dataset.hi));
    });
    $("#model-view").addEventListener("keydown", onModelViewKey);

    $("#summary").addEventListener("click", (e) => {
      const sort = e.target.closest("button.sort");
      if (sort) {
        const key = sort.dataset.key;
        state.sort = state.sort.key === key ? { key, dir: -state.sort.dir } : { key, dir: key === "layer" || key === "head" ? 1 : -1 };
        renderSummary();
        $(`#summary button.sort[data-key="${key}"]`).focus();
        return;
      }
      const open = e.target.closest("button.open");
      if (open) openHead(Number(open.dataset.li), Number(open.dataset.hi));
    });

    $("#export-json").addEventListener("click", exportJson);
    $("#export-png").addEventListener("click", exportPng);

    // redraw what depends on the width when the page is resized
    let lastWidth = 0, pending = 0;
    new ResizeObserver((entries) => {
      const w = Math.round(entries[0].contentRect.width);
      if (w === lastWidth) return;
      lastWidth = w;
      cancelAnimationFrame(pending);
      pending = requestAnimationFrame(() => { if (state.results.length) rerender(); });
    }).observe($("#views"));
  }

  async function init() {
    wire();
    const ok = await loadModels();
    if (ok && $("#text-a").value.trim()) run();
  }

  // generate.js (loaded after this file) calls api and decodeAttention; state and headStats are
  // for debugging in the console and for tests.
  window.headwise = { state, decodeAttention, headStats, api };

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
