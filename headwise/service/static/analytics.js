/* headwise viewer: the Analytics panel (index.html loads it as a module of its own, as it does
 * generate.js). Three buttons, one request each, drawn by analyticsviews.js:
 *   Rollout     POST /v1/embed {attention: {aggregate: "rollout"}} on the first text
 *   Similarity  POST /v1/similarity {source, targets: [second text], explain: true}
 *   Occlusion   POST /v1/occlusion {input: first text}, by token; or {input, unit: "word"}
 *               (the unit picker #an-unit), the words of the text shaded
 * The model is the encoder picker's (#model). Errors are shown in the panel.
 */

import { $ } from "./dom.js";
import { promptName } from "./models.js";
import { api } from "./api.js";
import { renderOcclusion, renderRollout, renderSimilarity } from "./analyticsviews.js";

const panel = () => $("#analytics-section");

function model() {
  const v = $("#model") && $("#model").value;
  return v || undefined;
}

function pooling() {
  const m = (window.headwise && window.headwise.state.models || []).find((x) => (x.name || x.id) === model());
  return (m && m.pooling) || "mean";
}

async function show(kind, request) {
  const out = $("#an-out"), err = $("#an-error");
  const textA = $("#an-text-a").value; // as sent
  panel().dataset.state = "busy";
  err.hidden = true;
  try {
    const res = await request();
    if (kind === "rollout") renderRollout(out, res.data[0], pooling());
    else if (kind === "similarity") renderSimilarity(out, res);
    else renderOcclusion(out, res, (res.prompt ? res.prompt.text : "") + textA); // offsets: of the prompted text
    panel().dataset.view = kind;
  } catch (e) {
    err.textContent = `${e.message} (${e.type}, HTTP ${e.status})`;
    err.hidden = false;
  } finally {
    panel().dataset.run = String(Number(panel().dataset.run || 0) + 1);
    panel().dataset.state = "ready";
  }
}

function wire() {
  const a = () => $("#an-text-a").value, b = () => $("#an-text-b").value;
  const prompt = () => promptName(); // the encoder form's prompt picker (#prompt); undefined: the default
  $("#an-rollout").addEventListener("click", () => show("rollout", () =>
    api("/v1/embed", { model: model(), prompt_name: prompt(), inputs: [a()], attention: { aggregate: "rollout" } })));
  $("#an-similarity").addEventListener("click", () => show("similarity", () =>
    api("/v1/similarity", { model: model(), prompt_name: prompt(), source: a(), targets: [b()], explain: true, top_k: 10 })));
  $("#an-occlusion").addEventListener("click", () => show("occlusion", () =>
    api("/v1/occlusion", $("#an-unit").value === "word"
      ? { model: model(), prompt_name: prompt(), input: a(), unit: "word" }
      : { model: model(), prompt_name: prompt(), input: a() })));
  panel().hidden = false;
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", wire);
else wire();
