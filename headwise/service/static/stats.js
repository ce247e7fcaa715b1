/* headwise viewer: the per-head summary numbers (the page's help text says the same).
 *
 * For one head with weights A[q, k] (q = query, k = key, T tokens), averaged over all T query
 * rows, float16 weights as received (not renormalised):
 *   entropy        = mean_q  −Σ_k A[q,k]·log2 A[q,k]          (bits; 0·log 0 = 0)
 *   special share  = mean_q   Σ_{k special} A[q,k]             (special: [CLS], [SEP], <s>, </s>)
 *   mean distance  = mean_q   Σ_k A[q,k]·|q − k|               (token positions)
 *   previous share = mean over q = 1..T−1 of A[q, q−1]
 *   next share     = mean over q = 0..T−2 of A[q, q+1]
 */

export function headStats(r, li, hi) {
  const T = r.T, A = r.att, base = (li * r.H + hi) * T * T;
  let ent = 0, special = 0, dist = 0, prev = 0, next = 0;
  for (let q = 0; q < T; q++) {
    const row = base + q * T;
    for (let k = 0; k < T; k++) {
      const w = A[row + k];
      if (w > 0) ent -= w * Math.log2(w);
      if (r.special[k]) special += w;
      dist += w * Math.abs(q - k);
    }
    if (q > 0) prev += A[row + q - 1];
    if (q < T - 1) next += A[row + q + 1];
  }
  return {
    layer: r.layers[li], head: r.heads[hi], li, hi,
    entropy: ent / T,
    special: special / T,
    distance: dist / T,
    prev: T > 1 ? prev / (T - 1) : NaN,
    next: T > 1 ? next / (T - 1) : NaN,
  };
}

export function allStats(r) {
  const out = [];
  for (let li = 0; li < r.L; li++) for (let hi = 0; hi < r.H; hi++) out.push(headStats(r, li, hi));
  return out;
}
