/* headwise viewer: which view is on screen. The three tabs (head view, model view, summary),
 * drawing only the visible one and only when what it shows changed, and opening one head in
 * the head view. */

import { $ } from "./dom.js";
import { state } from "./state.js";
import { renderHead } from "./headview.js";
import { renderModelView } from "./modelview.js";
import { renderSummary } from "./summary.js";

// ---------------------------------------------------------------- rendering dispatch
export function markDirty() { state.dirty = { head: true, model: true, summary: true }; }

export function renderActive() {
  if (!state.results.length) return;
  const tab = state.tab;
  if (!state.dirty[tab]) return;
  state.dirty[tab] = false;
  if (tab === "head") renderHead();
  else if (tab === "model") renderModelView();
  else renderSummary();
}

export function rerender() {
  markDirty();
  renderActive();
}

// ---------------------------------------------------------------- tabs
export function selectTab(name, focusPanel) {
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

export function openHead(li, hi) {
  state.layer = li;
  state.heads = new Set([hi]);
  state.heatHead = hi;
  state.mvCursor = { li, hi };
  state.hover = state.focus = null;
  markDirty();
  selectTab("head", true);
  $("#head-caption").scrollIntoView({ block: "nearest" });
}
