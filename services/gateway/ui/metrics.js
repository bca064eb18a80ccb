// metrics.js: the Prometheus text format (0.0.4) that /metrics answers,
// parsed into samples, and the sums the server page charts.

// Returns [{name, labels: {k: v}, value}] for every sample line.
export function parseMetrics(text) {
  const out = [];
  for (const raw of String(text).split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3]) {
      const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
      for (let l; (l = re.exec(m[3]));) labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    }
    const value = m[4] === '+Inf' ? Infinity : m[4] === '-Inf' ? -Infinity : Number(m[4]);
    if (Number.isNaN(value)) continue; // not a sample (or NaN: nothing to chart)
    out.push({ name: m[1], labels, value });
  }
  return out;
}

// The sum of every sample of name whose labels pass keep.
export function total(samples, name, keep = () => true) {
  let s = 0;
  let seen = false;
  for (const x of samples) {
    if (x.name === name && keep(x.labels) && Number.isFinite(x.value)) { s += x.value; seen = true; }
  }
  return seen ? s : null;
}

// Requests the console makes itself while watching (these pages, its
// polling of /metrics and /api/ps) are left out of requests/s.
export function isOwnRoute(route) {
  return route === '/metrics' || route === '/api/ps' || route === '/api/console/status' || (route || '').startsWith('/ui');
}

// One scrape reduced to the counters the charts use.
export function snapshot(samples, atMs) {
  return {
    at: atMs,
    tokens: total(samples, 'corral_completion_tokens_total'),
    requests: total(samples, 'corral_http_requests_total', (l) => !isOwnRoute(l.route)),
    ttftSum: total(samples, 'corral_time_to_first_token_seconds_sum'),
    ttftCount: total(samples, 'corral_time_to_first_token_seconds_count'),
    inFlight: total(samples, 'corral_http_requests_in_flight'),
    loaded: total(samples, 'corral_models_loaded'),
    active: total(samples, 'corral_scheduler_requests_active'),
    queued: total(samples, 'corral_scheduler_queue_depth'),
    schedulerUp: total(samples, 'corral_scheduler_up'),
  };
}

// Rates between two snapshots: tokens/s, requests/s and the mean time to
// first token of the generations that started answering in between
// (null when none did). A counter that went down (a restarted gateway)
// gives null, not a negative rate.
export function rates(a, b) {
  const secs = (b.at - a.at) / 1000;
  const rate = (x, y) => (x === null || y === null || secs <= 0 || y < x ? null : (y - x) / secs);
  const dCount = a.ttftCount === null || b.ttftCount === null ? 0 : b.ttftCount - a.ttftCount;
  return {
    tokens: rate(a.tokens, b.tokens),
    requests: rate(a.requests, b.requests),
    ttft: dCount > 0 ? (b.ttftSum - a.ttftSum) / dCount : null,
  };
}
