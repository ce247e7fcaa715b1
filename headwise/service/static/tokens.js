/* headwise viewer: the tokens card, every token of each sentence with its character offsets. */

import { $, h } from "./dom.js";
import { state } from "./state.js";

export function renderTokens() {
  const lists = state.results.map((r, si) => {
    // the server's offsets count Unicode code points (Python str indices), not UTF-16 units
    const chars = Array.from(r.text);
    const items = r.tokens.map((tok, i) => {
      const [s, e] = r.offsets[i] || [0, 0];
      const span = chars.slice(s, e).join("");
      const prompt = r.prompt && r.prompt[i];
      return h("li", {
        class: (r.special[i] ? "tok special" : "tok") + (prompt ? " prompt" : ""),
        dataset: { index: i, token: tok, start: s, end: e },
        title: `#${i} ${tok} · characters ${s}–${e}${span ? ` “${span}”` : " (no text: special token)"}`
          + (prompt ? ` · the prompt “${r.promptName}”'s` : ""),
      }, h("span", { class: "tok-i" }, i), h("span", { class: "tok-t" }, tok), h("span", { class: "tok-o" }, `${s}:${e}`));
    });
    const n = r.prompt ? r.prompt.filter(Boolean).length : 0;
    const note = n ? ` · ${n} of them the prompt “${r.promptName}” (marked)` : "";
    return h("div", { class: "token-block" },
      h("h3", { id: `tokens-h-${si}` }, `Sentence ${r.label}`, h("span", { class: "hint" }, ` ${r.T} tokens${note}`)),
      h("ol", { id: `tokens-${si}`, class: "token-list", "aria-labelledby": `tokens-h-${si}` }, items));
  });
  $("#token-lists").replaceChildren(...lists);
}
