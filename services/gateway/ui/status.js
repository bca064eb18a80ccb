// status.js: what the server page shows from /api/console/status, as
// plain values (no DOM): where a model runs, how a host's memory divides.
// formatBytes is given by the caller (api.js has it), so node can load
// this file alone (tests/clients/tests/console-status.test.mjs).

// "this host" for the scheduler's own machine, else the node's name.
export function hostLabel(host) {
  return host && !host.local && host.name ? host.name : 'this host';
}

// A memory figure {total, used, free} as three parts that add up to total:
// held by corral's models, taken by anything else (or not available when
// corral started), and left to place models in. Percentages of total.
export function memoryParts(mem) {
  const total = Math.max(0, Number(mem?.total) || 0);
  const used = Math.min(total, Math.max(0, Number(mem?.used) || 0));
  const free = Math.min(total - used, Math.max(0, Number(mem?.free) || 0));
  const other = total - used - free;
  const pct = (x) => (total > 0 ? (100 * x) / total : 0);
  return { total, used, other, free, usedPct: pct(used), otherPct: pct(other), freePct: pct(free) };
}

// Where a loaded model runs: its host, each GPU it has layers on (by the
// host's GPU name when known) and its part on the CPU.
export function placement(model, hosts, formatBytes) {
  const host = (hosts || []).find((h) => (model.host ? h.name === model.host : h.local));
  const parts = [];
  for (const g of model.gpus || []) {
    const info = host?.gpus?.find((x) => x.index === g.index);
    const name = info?.name ? ` ${info.name}` : '';
    parts.push(`GPU ${g.index}${name} (${g.layers} layers, ${formatBytes(g.bytes)})`);
  }
  if (model.size_cpu > 0 || !parts.length) parts.push(`CPU ${formatBytes(model.size_cpu ?? model.size)}`);
  return `${model.host || 'this host'} · ${parts.join(' + ')}`;
}

// "12 s", "3 min 4 s" for a wait in seconds.
export function waited(seconds) {
  const s = Math.max(0, Math.round(Number(seconds) || 0));
  const m = Math.floor(s / 60);
  return `${m ? `${m} min ` : ''}${s % 60} s`;
}
