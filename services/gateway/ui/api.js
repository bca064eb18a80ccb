// api.js: same-origin requests to the gateway, with the API key when one
// is set (kept in sessionStorage: this tab only, gone when it closes).
const KEY = 'corral.apiKey';

export function apiKey() { return sessionStorage.getItem(KEY) || ''; }
export function setApiKey(k) {
  if (k) sessionStorage.setItem(KEY, k); else sessionStorage.removeItem(KEY);
}

// Called with no argument when the server answers 401 (app.js shows the
// key panel).
let onUnauthorized = () => {};
export function whenUnauthorized(fn) { onUnauthorized = fn; }

export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

function headers(json) {
  const h = {};
  if (json) h['Content-Type'] = 'application/json';
  const k = apiKey();
  if (k) h.Authorization = `Bearer ${k}`;
  return h;
}

async function fail(res) {
  let text = `${res.status} ${res.statusText}`;
  try {
    const body = await res.text();
    try { text = JSON.parse(body).error || text; } catch { if (body) text = body; }
  } catch { /* no body */ }
  if (res.status === 401) onUnauthorized();
  throw new ApiError(res.status, text);
}

// One request; JSON in and out (text for /metrics).
export async function api(method, path, body, { text = false, signal } = {}) {
  const res = await fetch(path, {
    method, signal, headers: headers(body !== undefined),
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'omit', cache: 'no-store',
  });
  if (!res.ok) await fail(res);
  if (text) return res.text();
  const t = await res.text();
  return t ? JSON.parse(t) : null;
}

// A streaming request: calls onObject with each NDJSON line's object as
// it arrives. Rejects with an AbortError when signal is aborted.
export async function stream(path, body, onObject, signal) {
  const res = await fetch(path, {
    method: 'POST', signal, headers: headers(true), body: JSON.stringify(body),
    credentials: 'omit', cache: 'no-store',
  });
  if (!res.ok) await fail(res);
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (line) onObject(JSON.parse(line));
    }
  }
  if (buf.trim()) onObject(JSON.parse(buf));
}

// Small DOM helper: el('div', {class: 'x'}, child, 'text'). Strings become
// text nodes, never markup.
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
  }
  return e;
}

export function formatBytes(n) {
  if (!Number.isFinite(n) || n < 0) return '';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return `${n >= 100 || i === 0 ? n.toFixed(0) : n.toFixed(1)} ${units[i]}`;
}

export function notice(text) {
  document.getElementById('notice').textContent = text || '';
}
