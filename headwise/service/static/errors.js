/* headwise viewer: the status line, the busy state of the run button, and the error box
 * (a title and a hint for each HTTP status, or for each error found in the page itself). */

import { $, h } from "./dom.js";
import { state } from "./state.js";

export function setBusy(busy, message) {
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

export function showError(err) {
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

export function clearError() {
  $("#error").hidden = true;
  $("#error").replaceChildren();
}

/* A side panel's failed run (`prefix`: gen, rr): its status line cleared, the error shown, and
 * its state (data-gen-state, data-rr-state) set for tests and styles. */
export function panelFailed(prefix, stateKey, err) {
  $(`#${prefix}-status`).textContent = "";
  const kind = err.type ? ` (${err.type})` : "";
  $(`#${prefix}-error`).textContent = err.status ? `HTTP ${err.status}${kind}: ${err.message}` : err.message;
  $(`#${prefix}-error`).hidden = false;
  document.body.dataset[stateKey] = "error";
}
