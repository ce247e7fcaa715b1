/* headwise viewer: one block of attention weights as a heatmap, shared by the Rerank and Tag
 * panels: rows attend to columns, each row and column named by its token; the colour scale runs
 * from 0 to the block's largest weight; `readout` names the weight under the cursor.
 *
 * A block is {rows, cols (token strings), R, C, values (Float32Array, [R, C])}.
 */
import { cmapCss } from "./colours.js";
import { h } from "./dom.js";

const LEFT = 100, TOP = 80;

/** Draw `b` on `canvas` (and `mark`, a row to outline, when given); its geometry and largest
 * weight go in the canvas's dataset, for the readout and for tests. */
export function drawBlock(canvas, b, mark = -1) {
  const cell = Math.max(8, Math.min(30, Math.floor(480 / Math.max(b.R, b.C, 1))));
  canvas.width = LEFT + b.C * cell + 4;
  canvas.height = TOP + b.R * cell + 4;
  let max = 0;
  for (const v of b.values) max = Math.max(max, v);
  Object.assign(canvas.dataset, { left: LEFT, top: TOP, cell, rows: b.R, cols: b.C, max: String(max) });
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  for (let r = 0; r < b.R; r++) for (let c = 0; c < b.C; c++) {
    ctx.fillStyle = cmapCss(b.values[r * b.C + c] / (max || 1));
    ctx.fillRect(LEFT + c * cell, TOP + r * cell, cell, cell);
  }
  ctx.strokeStyle = "#d9dde5";
  ctx.strokeRect(LEFT - 0.5, TOP - 0.5, b.C * cell + 1, b.R * cell + 1);
  if (mark >= 0) {
    ctx.strokeStyle = "#e8590c";
    ctx.strokeRect(LEFT - 0.5, TOP + mark * cell - 0.5, b.C * cell + 1, cell + 1);
  }
  ctx.fillStyle = "#1d2330";
  ctx.font = `${Math.min(12, cell)}px system-ui, sans-serif`;
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  b.rows.forEach((t, r) => ctx.fillText(String(t).slice(0, 12), LEFT - 4, TOP + (r + 0.5) * cell));
  ctx.textAlign = "left";
  b.cols.forEach((t, c) => {
    ctx.save();
    ctx.translate(LEFT + (c + 0.5) * cell, TOP - 4);
    ctx.rotate(-Math.PI / 3);
    ctx.fillText(String(t).slice(0, 12), 0, 0);
    ctx.restore();
  });
}

/** The weight under the mouse event `e` on a drawn block `b`, written to the output `out`. */
export function readout(e, b, out) {
  if (!b) return;
  const d = e.currentTarget.dataset, rect = e.currentTarget.getBoundingClientRect();
  const c = Math.floor((e.clientX - rect.left - Number(d.left)) / Number(d.cell));
  const r = Math.floor((e.clientY - rect.top - Number(d.top)) / Number(d.cell));
  if (r < 0 || c < 0 || r >= b.R || c >= b.C) return;
  const v = b.values[r * b.C + c];
  Object.assign(out.dataset, { row: r, col: c, value: String(v) });
  out.textContent = `${b.rows[r]} → ${b.cols[c]}: ${v.toPrecision(5)}`;
}

/** Fill a picker with `items` (shown as they are, valued by index), keeping index `keep`
 * where it still exists; returns the index picked. */
export function fillPicker(select, items, keep) {
  select.replaceChildren(...items.map((n, i) => h("option", { value: String(i) }, String(n))));
  select.value = String(Math.min(keep, Math.max(items.length - 1, 0)));
  return Number(select.value);
}
