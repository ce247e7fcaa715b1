/* headwise viewer: the "Inside the model" panel (index.html loads it as a module of its own).
 * On the sentence the views show (the encoder picker's model):
 *   Head importance     POST /v1/head_importance {input, top_k: 10}: the L × H grid and the top
 *                       heads (headimportance.js)
 *   Removing heads      a click on a head in the grid (with "remove it" picked) toggles it in
 *                       state.ablate and runs the viewer's request again with `ablate`
 *                       (embed.js, ablation.js); Clear puts every head back
 *   Hidden-state norms  POST /v1/embed {hidden_states: {pooling: "none", dtype: "float16",
 *                       encoding: "base64"}} (with the removed heads' `ablate`): hiddennorms.js
 * A model without the `analysis` variant answers 422; the panel shows the error (errors.js).
 * The panel's data-run counts its requests, data-state is busy or ready (for tests and styles). */

import { $, $$ } from "./dom.js";
import { api } from "./api.js";
import { current, state } from "./state.js";
import { run } from "./embed.js";
import { openHead } from "./views.js";
import { panelFailed } from "./errors.js";
import { ablateBody, describeAblation, renderAblation, toggleHead } from "./ablation.js";
import { ensureGrid, forgetImportance, gridText, markRemoved, onGridKey, showImportance } from "./headimportance.js";
import { renderNorms } from "./hiddennorms.js";

const panel = () => $("#in-section");
const model = () => $("#model").value || undefined;
const text = () => (current() ? current().text : $("#text-a").value);
const clickMode = () => ($$("#in-click input").find((i) => i.checked) || { value: "open" }).value;

async function request(what, call) {
  const p = panel();
  p.dataset.state = "busy";
  $("#in-error").hidden = true;
  $("#in-status").textContent = `${what}…`;
  try {
    await call();
    $("#in-status").textContent = "";
    document.body.dataset.inState = "ready";
  } catch (err) {
    panelFailed("in", "inState", err);
  } finally {
    p.dataset.run = String(Number(p.dataset.run || 0) + 1);
    p.dataset.state = "ready";
  }
}

function headImportance() {
  const input = text();
  return request("Removing each head in turn (one forward pass per head)", async () => {
    const res = await api("/v1/head_importance", { model: model(), input, top_k: 10 });
    showImportance(res, input);
    $("#in-status").dataset.passes = String(res.forward_passes);
  });
}

function hiddenNorms() {
  const input = text();
  const ablate = ablateBody();
  return request("Reading the hidden states", async () => {
    const body = { model: model(), inputs: [input],
      hidden_states: { pooling: "none", dtype: "float16", encoding: "base64" } };
    if (ablate) body.ablate = ablate;
    const res = await api("/v1/embed", body);
    $("#hs-fig").hidden = false;
    renderNorms($("#hs-out"), res.data[0], input, ablate ? `heads removed: ${describeAblation(ablate)}` : "");
  });
}

/* Remove (or put back) one head and run the viewer's request again; when that run fails (a
 * model without the analysis variant: 422, shown in the error box) the head goes back. */
async function toggle(layer, head) {
  const before = new Set(state.ablate);
  toggleHead(layer, head);
  markRemoved();
  await rerun(before);
}

async function rerun(before) {
  panel().dataset.ablating = "true";
  const ok = await run();
  if (ok === false) { state.ablate = before; markRemoved(); }
  panel().dataset.ablating = "false";
}

function onPick(e) {
  const cell = e.target.closest && e.target.closest("[data-layer][data-head]");
  if (!cell) return;
  const layer = Number(cell.dataset.layer), head = Number(cell.dataset.head);
  if (clickMode() === "ablate") { toggle(layer, head); return; }
  const r = current();
  if (!r) return;
  const li = r.layers.indexOf(layer), hi = r.heads.indexOf(head);
  if (li >= 0 && hi >= 0) openHead(li, hi);
}

function onResults() {
  const r = current();
  if (!r) return;
  panel().hidden = false;
  ensureGrid(r.L, r.H);
  const t = gridText();
  $("#hi-grid").classList.toggle("stale", t !== null && t !== r.text);
  renderAblation();
}

function wire() {
  $("#hi-run").addEventListener("click", headImportance);
  $("#hs-run").addEventListener("click", hiddenNorms);
  $("#ablate-clear").addEventListener("click", () => {
    if (!state.ablate.size) return;
    const before = new Set(state.ablate);
    state.ablate.clear();
    markRemoved();
    rerun(before);
  });
  $("#hi-grid").addEventListener("click", onPick);
  $("#hi-grid").addEventListener("keydown", onGridKey);
  $("#hi-top").addEventListener("click", onPick);
  // another model has other layers and heads: start again with every head
  $("#model").addEventListener("change", () => { state.ablate.clear(); forgetImportance(); });
  document.addEventListener("headwise:results", onResults);
  $$("#sentence-pick input").forEach((i) => i.addEventListener("change", onResults));
  if (state.results.length) onResults(); // the first run may have ended before this module ran
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", wire);
else wire();
