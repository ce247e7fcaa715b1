/* headwise viewer: decoding the API's attention arrays.
 *
 * An `attention` object of the API is {shape, format, dtype, encoding, data}: dense, either
 * nested JSON numbers or base64 bytes (little-endian, C order) of float16 or float32. Float16
 * widens to float32 exactly, so the page keeps every array as a Float32Array. The same
 * encoding serves `hidden_states` (decodeHidden).
 */

// float16 bits → value, as a 65536-entry table built on first use.
let F16 = null;
function f16Table() {
  if (F16) return F16;
  F16 = new Float32Array(65536);
  for (let bits = 0; bits < 65536; bits++) {
    const sign = bits & 0x8000 ? -1 : 1;
    const exp = (bits >> 10) & 0x1f;
    const frac = bits & 0x3ff;
    let v;
    if (exp === 0) v = sign * frac * 2 ** -24; // subnormal
    else if (exp === 31) v = frac ? NaN : sign * Infinity;
    else v = sign * (1 + frac / 1024) * 2 ** (exp - 15);
    F16[bits] = v;
  }
  return F16;
}

function base64Bytes(b64) {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function flatten(nested, out) {
  if (Array.isArray(nested)) for (const x of nested) flatten(x, out);
  else out.push(Number(nested));
  return out;
}

/** Decode a dense array of the API ({shape, dtype, encoding, data}: `attention`,
 * `hidden_states`) into {shape, values: Float32Array}; `what` names it in errors. */
export function decodeArray(a, what = "array") {
  const n = a.shape.reduce((x, y) => x * y, 1);
  let values;
  if ((a.encoding || "json") === "base64") {
    const bytes = base64Bytes(a.data);
    const dtype = a.dtype || "float16";
    if (dtype === "float16") {
      const table = f16Table();
      values = new Float32Array(bytes.length >> 1);
      for (let i = 0; i < values.length; i++) values[i] = table[bytes[2 * i] | (bytes[2 * i + 1] << 8)];
    } else if (dtype === "float32") {
      const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      values = new Float32Array(bytes.length >> 2);
      for (let i = 0; i < values.length; i++) values[i] = view.getFloat32(4 * i, true);
    } else {
      throw new Error(`${what} dtype "${dtype}" is not supported`);
    }
  } else {
    values = Float32Array.from(flatten(a.data, []));
  }
  if (values.length !== n) {
    throw new Error(`${what} has ${values.length} values, its shape [${a.shape}] needs ${n}`);
  }
  return { shape: a.shape, values };
}

/** Decode an `attention` object of the API into {shape, values: Float32Array}. */
export function decodeAttention(a) {
  if (!a || !Array.isArray(a.shape) || a.shape.length !== 4) {
    throw new Error("the server's attention has no 4-d shape [layers, heads, T, T]");
  }
  if (a.format && a.format !== "dense") throw new Error(`attention format "${a.format}" is not dense`);
  return decodeArray(a, "attention");
}

/** Decode a `hidden_states` object of the API (pooling "none": [L', T, D]). */
export function decodeHidden(hs) {
  if (!hs || !Array.isArray(hs.shape) || hs.shape.length !== 3) {
    throw new Error("the server's hidden states have no 3-d shape [layers, T, d_model]");
  }
  return decodeArray(hs, "hidden_states");
}
