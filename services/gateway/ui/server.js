// server.js: the server page: loaded models (/api/ps) with their memory,
// place and expiry countdown, unload (keep_alive 0), and live charts of
// the gateway's /metrics, polled every POLL_MS while the console is open.
import { api, el, formatBytes, notice } from './api.js';
import { parseMetrics, snapshot, rates } from './metrics.js';
import { drawChart } from './chart.js';

const $ = (id) => document.getElementById(id);
const POLL_MS = 2000;
const KEEP_MS = 10 * 60 * 1000;
let loaded = [];
let previous = null;
const series = { tokens: [], requests: [], ttft: [] };

function where(m) {
  const host = m.host || 'local';
  let place;
  if (!m.size_vram) place = 'CPU';
  else if (m.size_vram >= m.size) place = 'GPU';
  else place = `CPU/GPU ${Math.round((100 * m.size_vram) / m.size)}% on GPU`;
  return `${host} · ${place}`;
}

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
  await refreshPs();
}

function renderPs() {
  $('ps-body').replaceChildren(...loaded.map((m) => el('tr', { 'data-model': m.name },
    el('td', {}, m.name),
    el('td', {}, where(m)),
    el('td', {}, formatBytes(m.size)),
    el('td', {}, formatBytes(m.size_vram || 0)),
    el('td', {}, m.context_length ? String(m.context_length) : ''),
    el('td', {}, String(m.active ?? '')),
    el('td', {}, String(m.queued ?? '')),
    el('td', { class: 'expires' }, countdown(m)),
    el('td', {}, el('button', { type: 'button', onclick: () => unload(m.name) }, 'Unload')))));
  $('ps-empty').classList.toggle('hidden', loaded.length > 0);
}

export async function refreshPs() {
  try { loaded = (await api('GET', '/api/ps')).models || []; } catch (e) { notice(`ps: ${e.message}`); return; }
  renderPs();
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

export function showServer() { refreshPs(); draw(); }

export function initServer() {
  scrape();
  setInterval(scrape, POLL_MS);
  setInterval(() => {
    if ($('page-server').classList.contains('hidden')) return;
    refreshPs();
  }, POLL_MS);
  // The countdowns tick between polls.
  setInterval(() => {
    for (const row of document.querySelectorAll('#ps-body tr')) {
      const m = loaded.find((x) => x.name === row.dataset.model);
      if (m) row.querySelector('.expires').textContent = countdown(m);
    }
  }, 1000);
}
