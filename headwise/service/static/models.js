/* headwise viewer: the encoder model picker and the facts line of the chosen model.
 * Generative models (decoder, encoder-decoder) have their own panel: generate.js. */

import { $, h } from "./dom.js";
import { ApiError, api } from "./api.js";
import { state } from "./state.js";
import { showError } from "./errors.js";

export const modelId = (m) => m.id || m.name || m.model || "";
export const modelFact = (m, key) => (m[key] ?? (m.manifest && m.manifest[key]) ?? (m.config && m.config[key]));

export async function loadModels() {
  const select = $("#model");
  try {
    const res = await api("/v1/models");
    const all = (res.data || res.models || []).filter((m) => modelId(m));
    // generative models (decoder, encoder-decoder) have their own panel: generate.js
    // classification models (cross-encoders, classifiers) answer /v1/rerank, not /v1/embed: rerank.js;
    // taggers (token classification) answer /v1/tag: tag.js; every other head its own route
    state.models = all.filter((m) => (!m.architecture || m.architecture === "encoder")
      && (!m.task || m.task === "embedding"));
    if (!state.models.length && all.length) {
      $("#run-form").hidden = true;
      select.replaceChildren(h("option", { value: "" }, "no encoder model"));
      $("#status").textContent = "This server has no embedding model; see the panels below.";
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

/** The prompt picked (#prompt) for the chosen model, or undefined: the model's default. */
export function promptName() {
  const v = $("#prompt") && $("#prompt").value;
  return v || undefined;
}

// The prompt picker: the model's sentence-transformers prompts (`prompts` on its card), shown
// only for a model that has some; "" leaves the choice to the server (its default prompt).
function describePrompts(m) {
  const field = $("#field-prompt"), select = $("#prompt");
  if (!field || !select) return;
  const prompts = (m && m.prompts) || {};
  const names = Object.keys(prompts);
  const was = select.value;
  field.hidden = !names.length;
  const fallback = m && m.default_prompt_name ? `default (${m.default_prompt_name})` : "none (the model's default)";
  select.replaceChildren(h("option", { value: "" }, fallback),
    ...names.map((n) => h("option", { value: n, title: JSON.stringify(prompts[n]) }, `${n}: “${prompts[n]}”`)));
  if (names.includes(was)) select.value = was;
}

export function selectedModel() {
  return state.models.find((m) => modelId(m) === $("#model").value) || state.models[0] || null;
}

export function describeModel() {
  const m = selectedModel();
  describePrompts(m);
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
