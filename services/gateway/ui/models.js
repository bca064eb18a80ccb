// models.js: the models page: the installed list (/api/tags), pull with a
// progress bar per layer, copy and delete after confirmation, details
// (/api/show).
import { api, stream, el, formatBytes, notice } from './api.js';
import { refreshModels as refreshChatModels } from './chat.js';

const $ = (id) => document.getElementById(id);
let pulling = null; // AbortController of the pull in progress

function capabilities(show) {
  return Array.isArray(show?.capabilities) ? show.capabilities.join(', ') : '';
}

async function showDetails(name) {
  const box = $('model-details');
  box.classList.remove('hidden');
  box.replaceChildren(el('p', { class: 'muted' }, `loading ${name}…`));
  let s;
  try { s = await api('POST', '/api/show', { model: name }); } catch (e) { box.replaceChildren(el('p', { class: 'error-text' }, e.message)); return; }
  const section = (title, text) => text ? [el('h3', {}, title), el('pre', {}, text)] : [];
  const d = s.details || {};
  box.replaceChildren(
    el('h2', {}, name),
    el('p', {}, `format ${d.format || '?'} · family ${d.family || '?'} · ${d.parameter_size || '?'} · ${d.quantization_level || '?'}`),
    el('p', {}, `capabilities: ${capabilities(s) || 'none'}`),
    ...section('Parameters', s.parameters),
    ...section('Template', s.template),
    ...section('System', s.system),
    ...section('Modelfile', s.modelfile),
    ...section('License', Array.isArray(s.license) ? s.license.join('\n\n') : s.license),
    el('button', { type: 'button', onclick: () => box.classList.add('hidden') }, 'Close'));
}

async function copyModel(name) {
  const to = prompt(`Copy ${name} to:`, `${name.split(':')[0]}-copy`);
  if (!to) return;
  try { await api('POST', '/api/copy', { source: name, destination: to }); notice(''); } catch (e) { notice(`copy: ${e.message}`); }
  await refresh();
}

async function deleteModel(name) {
  if (!confirm(`Delete ${name}? Its files are removed unless another model shares them.`)) return;
  try { await api('DELETE', '/api/delete', { model: name }); notice(''); } catch (e) { notice(`delete: ${e.message}`); }
  await refresh();
}

export async function refresh() {
  let tags;
  try { tags = await api('GET', '/api/tags'); } catch (e) { notice(`models: ${e.message}`); return; }
  const models = tags.models || [];
  // Capabilities come from /api/show, one request per model.
  const shows = await Promise.all(models.map((m) => api('POST', '/api/show', { model: m.name }).catch(() => null)));
  $('models-body').replaceChildren(...models.map((m, i) => {
    const d = m.details || {};
    return el('tr', { 'data-model': m.name },
      el('td', {}, el('a', { href: '#models', onclick: (ev) => { ev.preventDefault(); showDetails(m.name); } }, m.name)),
      el('td', {}, formatBytes(m.size)),
      el('td', {}, d.family || ''),
      el('td', {}, d.parameter_size || ''),
      el('td', {}, d.quantization_level || ''),
      el('td', {}, capabilities(shows[i])),
      el('td', {}, m.modified_at ? new Date(m.modified_at).toLocaleString() : ''),
      el('td', {},
        el('button', { type: 'button', onclick: () => copyModel(m.name) }, 'Copy'), ' ',
        el('button', { type: 'button', onclick: () => deleteModel(m.name) }, 'Delete')));
  }));
  await refreshChatModels();
}

function layerRow(digest) {
  const fill = el('div');
  const text = el('span', { class: 'pct' }, '0%');
  const row = el('div', { class: 'layer', 'data-digest': digest },
    el('code', {}, digest.replace(/^sha256:/, '').slice(0, 12)),
    el('div', { class: 'bar' }, fill), text);
  row.update = (completed, total) => {
    const pct = total > 0 ? Math.min(100, Math.floor((100 * completed) / total)) : 0;
    fill.style.width = `${pct}%`;
    text.textContent = `${pct}% of ${formatBytes(total)}`;
    row.dataset.percent = String(pct);
  };
  return row;
}

async function pull() {
  const name = $('pull-name').value.trim();
  if (!name || pulling) return;
  const box = $('pull-progress');
  const status = el('p', { class: 'pull-status' }, `pulling ${name}`);
  box.replaceChildren(status);
  const rows = new Map();
  pulling = new AbortController();
  $('pull-start').textContent = 'Cancel';
  try {
    await stream('/api/pull', { model: name, insecure: $('pull-insecure').checked, stream: true }, (o) => {
      if (o.error) throw new Error(o.error);
      status.textContent = o.status || '';
      if (o.digest) {
        if (!rows.has(o.digest)) { rows.set(o.digest, layerRow(o.digest)); box.append(rows.get(o.digest)); }
        if (o.total) rows.get(o.digest).update(o.completed || 0, o.total);
      }
    }, pulling.signal);
    status.dataset.done = status.textContent === 'success' ? 'success' : '';
  } catch (e) {
    status.textContent = e.name === 'AbortError' ? 'canceled' : `error: ${e.message}`;
  } finally {
    pulling = null;
    $('pull-start').textContent = 'Pull';
    await refresh();
  }
}

export function initModels() {
  $('pull-start').addEventListener('click', () => (pulling ? pulling.abort() : pull()));
  $('models-refresh').addEventListener('click', refresh);
}
