/* headwise viewer: the encoder views' state, one object shared by every module.
 *
 * Attention of one sentence is kept as a Float32Array `att`, indexed
 * att[((li * H + hi) * T + q) * T + k], where li / hi are positions in the response's
 * `layers` / `heads` lists (the real layer/head numbers are layers[li] / heads[hi]).
 */

export const state = {
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
  lastIso: null, // "hover" | "focus": which of the two isolated a token last
  ablate: new Set(), // heads removed from the model (ablation.js), as "layer:head" keys
};
export const current = () => state.results[state.sentence];
