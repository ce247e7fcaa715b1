/* headwise attention viewer: the entry module of the encoder views (index.html loads it; the
 * Generate panel is generate.js, a module of its own).
 *
 * Plain JavaScript modules, no framework, no build step, no network beyond this server. This
 * file wires the page's controls to the modules that do the work:
 *   api.js, decode.js            the server's API and its attention arrays
 *   state.js, views.js           the shared state; which view is drawn, the tabs
 *   models.js, embed.js          the model picker; running the model on the sentences
 *   errors.js                    the status line and the error box
 *   tokens.js, headview.js, heatmap.js, modelview.js, summary.js, stats.js   the views
 *   export.js                    Export JSON and Export PNG
 *   dom.js, colours.js           helpers
 */

import { $, $$, clamp } from "./dom.js";
import { decodeAttention } from "./decode.js";
import { api, setApiKey } from "./api.js";
import { current, state } from "./state.js";
import { headStats } from "./stats.js";
import { describeModel, loadModels } from "./models.js";
import { run } from "./embed.js";
import { onTokenEvent, onTokenKey, onTokenLeave } from "./headview.js";
import { onHeatmapKey, onHeatmapMove } from "./heatmap.js";
import { onModelViewKey } from "./modelview.js";
import { renderSummary } from "./summary.js";
import { openHead, rerender, selectTab } from "./views.js";
import { exportJson, exportPng } from "./export.js";

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
  $("#api-key").addEventListener("input", (e) => { setApiKey(e.target.value.trim()); });

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

// For debugging in the console and for tests.
window.headwise = { state, decodeAttention, headStats, api };

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
else init();
