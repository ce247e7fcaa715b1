/* headwise viewer: colours. One colour per head (the line view, the model view's outlines,
 * the summary), the heatmaps' sequential colour map (white → deep blue), and a diverging one for
 * signed values (blue positive, red negative, white at 0). */

// One colour per head: Tableau 10 plus two, then evenly spaced hues for bigger models.
const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#ad494a"];
export const headColour = (head, nHeads) =>
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
export const cmap = (v) => CMAP[cmapIndex(v)];
export const cmapCss = (v) => CMAP_CSS[cmapIndex(v)];

// Diverging colour for signed values: blue for positive, red for negative, white at 0.
export function signedCss(v, max) {
  const t = max > 0 ? Math.min(1, Math.abs(v) / max) : 0;
  const c = Math.round(255 * (1 - 0.75 * t));
  return v >= 0 ? `rgb(${c},${c},255)` : `rgb(255,${c},${c})`;
}
