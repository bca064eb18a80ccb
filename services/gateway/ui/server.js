// server.js: the server page, from /api/console/status: each host's
// memory and GPUs, the loaded models with where they run, their expiry
// countdown and unload (keep_alive 0), the queue; and live charts of the
// gateway's /metrics, polled every POLL_MS while the console is open.
import { api, el, formatBytes, notice } from './api.js';
import { parseMetrics, snapshot, rates } from './metrics.js';
import { drawChart } from './chart.js';
import { hostLabel, memoryParts, placement, waited } from './status.js';

const $ = (id) => document.getElementById(id);
const POLL_MS = 2000;
const KEEP_MS = 10 * 60 * 1000;
let previous = null;
const series = { tokens: [], requests: [], ttft: [] };

let status = { models: [], hosts: [], queue: [] };
function countdown(m) {
  if (m.loading) return 'loading';
  if (!m.expires_at) return '';
  const t = Date.parse(m.expires_at);
  if (!Number.isFinite(t)) return '';
  const left = Math.round((t - Date.now()) / 1000);
  // Ollama writes a far-off date for keep_alive < 0 (never).
  if (left > 365 * 24 * 3600) return 'never';
  if (left <= 0) return 'now';
  const mm = Math.floor(left / 60);
  return `${mm ? `${mm} min ` : ''}${left % 60} s`;
}

async function unload(name) {
  try {
    await api('POST', '/api/generate', { model: name, keep_alive: 0 });
    notice('');
  } catch (e) { notice(`unload ${name}: ${e.message}`); }
  await refreshStatus();
}

// A bar of three parts (models, other, free) with its figures as text.
function memoryBar(label, mem, attrs) {
  const p = memoryParts(mem);
  const seg = (cls, pct, what) => el('div', { class: cls, title: what, 'data-pct': pct.toFixed(1) });
  const bar = el('div', { class: 'membar' },
    seg('used', p.usedPct, 'held by models'), seg('other', p.otherPct, 'taken by others'), seg('free', p.freePct, 'free'));
  return el('div', { class: 'mem', ...attrs, 'data-total': p.total, 'data-used': p.used, 'data-free': p.free },
    el('div', { class: 'mem-label' }, label),
    bar,
    el('div', { class: 'mem-text' }, `${formatBytes(p.used)} models · ${formatBytes(p.free)} free · ${formatBytes(p.total)} total`));
}

function renderHosts() {
  $('hosts').replaceChildren(...status.hosts.map((h) => el('div', {
    class: 'host', 'data-host': h.local ? '' : h.name,
  },
  el('h3', {}, hostLabel(h), h.described ? el('span', { class: 'muted' }, ' (described inventory: runners use the CPU)') : null),
  memoryBar('System memory', h.ram, { 'data-device': 'cpu' }),
  ...(h.gpus || []).map((g) => memoryBar(`GPU ${g.index} · ${g.name || 'unnamed'}`, g, { 'data-device': `gpu${g.index}` })),
  )));
  // Widths by CSSOM: the CSP allows no inline style attribute.
  for (const s of document.querySelectorAll('#hosts .membar > div')) s.style.width = `${s.dataset.pct}%`;
}

function renderPs() {
  const loaded = status.models;
  $('ps-body').replaceChildren(...loaded.map((m) => el('tr', { 'data-model': m.name },
    el('td', {}, m.name),
    el('td', {}, placement(m, status.hosts, formatBytes)),
    el('td', {}, formatBytes(m.size)),
    el('td', {}, formatBytes(m.size_vram || 0)),
    el('td', {}, m.context_length ? String(m.context_length) : ''),
    el('td', {}, String(m.active ?? '')),
    el('td', {}, String(m.queued ?? '')),
    el('td', { class: 'expires' }, countdown(m)),
    el('td', {}, el('button', { type: 'button', onclick: () => unload(m.name) }, 'Unload')))));
  $('ps-empty').classList.toggle('hidden', loaded.length > 0);
}

function renderQueue() {
  $('queue-body').replaceChildren(...status.queue.map((q) => el('tr', { 'data-model': q.model },
    el('td', {}, q.model), el('td', {}, String(q.waiting)), el('td', {}, waited(q.oldest_seconds)))));
  $('queue-empty').classList.toggle('hidden', status.queue.length > 0);
  $('queue-depth').textContent = String(status.queue_depth ?? 0);
}

export async function refreshStatus() {
  try { status = await api('GET', '/api/console/status'); } catch (e) { notice(`status: ${e.message}`); return; }
  renderHosts();
  renderPs();
  renderQueue();
}

function gauge(label, value) {
  return el('div', {}, el('b', {}, value === null || value === undefined ? '–' : String(value)), label);
}

async function scrape() {
  let text;
  try { text = await api('GET', '/metrics', undefined, { text: true }); } catch { return; }
  const now = snapshot(parseMetrics(text), Date.now());
  if (previous) {
    const r = rates(previous, now);
    series.tokens.push({ t: now.at, v: r.tokens });
    series.requests.push({ t: now.at, v: r.requests });
    series.ttft.push({ t: now.at, v: r.ttft });
    for (const s of Object.values(series)) while (s.length && s[0].t < now.at - KEEP_MS) s.shift();
  }
  previous = now;
  $('gauges').replaceChildren(
    gauge('scheduler', now.schedulerUp === null ? null : now.schedulerUp ? 'up' : 'down'),
    gauge('models loaded', now.loaded),
    gauge('requests running', now.active),
    gauge('queued', now.queued),
    gauge('HTTP in flight', now.inFlight),
    gauge('tokens generated', now.tokens));
  draw();
}

function draw() {
  if ($('page-server').classList.contains('hidden')) return;
  drawChart($('chart-tokens'), series.tokens);
  drawChart($('chart-requests'), series.requests);
  drawChart($('chart-ttft'), series.ttft, { unit: ' s' });
}

export function showServer() { refreshStatus(); draw(); }

export function initServer() {
  scrape();
  setInterval(scrape, POLL_MS);
  setInterval(() => {
    if ($('page-server').classList.contains('hidden')) return;
    refreshStatus();
  }, POLL_MS);
  // The countdowns tick between polls.
  setInterval(() => {
    for (const row of document.querySelectorAll('#ps-body tr')) {
      const m = status.models.find((x) => x.name === row.dataset.model);
      if (m) row.querySelector('.expires').textContent = countdown(m);
    }
  }, 1000);
}
