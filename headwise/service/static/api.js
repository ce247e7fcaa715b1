/* headwise viewer: the client of this server's API (and of no other host).
 *   GET  /v1/models    → the model pickers
 *   POST /v1/embed     → tokens, character offsets and every layer's attention (embed.js)
 *   POST /v1/generate  → generated tokens and every step's attention (generate.js)
 * Errors come back as an ApiError (message, type, status): the server's error body when it sent
 * one, status 0 for errors found in the page itself.
 */

export class ApiError extends Error {
  constructor(message, type, status) {
    super(message);
    this.type = type;
    this.status = status;
  }
}

let apiKey = "";

/** The bearer key sent with every call ("" sends none); kept in this tab's memory only. */
export function setApiKey(key) {
  apiKey = key;
}

export async function api(path, body) {
  const init = { headers: { accept: "application/json" } };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  if (apiKey) init.headers.authorization = `Bearer ${apiKey}`;
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new ApiError(`Could not reach the headwise server (${e.message}). Is it still running?`, "network", 0);
  }
  const text = await res.text();
  let payload = null;
  try { payload = text ? JSON.parse(text) : null; } catch { payload = null; }
  if (!res.ok) {
    const err = payload && payload.error;
    let message = typeof err === "string" ? err : err && err.message;
    if (!message && payload && payload.detail) {
      message = Array.isArray(payload.detail)
        ? payload.detail.map((d) => d.msg || JSON.stringify(d)).join("; ")
        : String(payload.detail);
    }
    const retry = res.status === 429 && res.headers.get("retry-after");
    if (message && retry) message += ` (the server suggests retrying in ${retry} s)`;
    throw new ApiError(message || `HTTP ${res.status} ${res.statusText}`,
      (err && err.type) || "http", (err && err.code) || res.status);
  }
  if (payload === null) throw new ApiError(`${path} answered with something that is not JSON`, "bad_response", res.status);
  return payload;
}

/* The served models a side panel offers: none when /v1/models fails (the encoder panel
 * reports server problems). */
export async function modelsWhere(keep) {
  try {
    const res = await api("/v1/models");
    return (res.data || []).filter(keep);
  } catch {
    return [];
  }
}
