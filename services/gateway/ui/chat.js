// chat.js: the chat page. Conversations live in this browser's
// localStorage; answers stream from /api/chat and can be stopped. Images
// (file picker, paste, drop) go with a message as base64 `images`.
import { api, stream, el, notice } from './api.js';
import { renderMarkdown } from './markdown.js';

const STORE = 'corral.chats';
const SETTINGS = 'corral.chatSettings';
const $ = (id) => document.getElementById(id);

let chats = [];
let current = null;     // the open conversation
let controller = null;  // AbortController of the stream in progress
let attachments = [];   // [{name, type, data (base64)}] for the next message

// What the server decodes (docs/api.md, images); the type also picks the
// data: URL of a thumbnail, so nothing else is ever put in one.
const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/webp'];
const IMAGE_MAX_BYTES = 20 * 1000 * 1000;

function load() {
  try { chats = JSON.parse(localStorage.getItem(STORE) || '[]'); } catch { chats = []; }
  if (!Array.isArray(chats)) chats = [];
}

function save() {
  try { localStorage.setItem(STORE, JSON.stringify(chats)); } catch (e) { notice(`cannot keep the chat: ${e.message}`); }
}

function settings() {
  return {
    model: $('chat-model').value,
    system: $('chat-system').value,
    temperature: $('chat-temperature').value,
    num_ctx: $('chat-num-ctx').value,
    seed: $('chat-seed').value,
    think: $('chat-think').checked,
    tools: $('chat-tools').value,
  };
}

function saveSettings() { localStorage.setItem(SETTINGS, JSON.stringify(settings())); }

function restoreSettings() {
  let s = {};
  try { s = JSON.parse(localStorage.getItem(SETTINGS) || '{}') || {}; } catch { /* none */ }
  $('chat-system').value = s.system || '';
  $('chat-temperature').value = s.temperature || '';
  $('chat-num-ctx').value = s.num_ctx || '';
  $('chat-seed').value = s.seed || '';
  $('chat-think').checked = !!s.think;
  $('chat-tools').value = s.tools || '';
  return s;
}

function newChat() {
  current = { id: `${Date.now()}-${Math.random().toString(36).slice(2, 8)}`, title: 'New chat', messages: [] };
  chats.unshift(current);
  save();
  renderList();
  renderMessages();
}

function renderList() {
  const list = $('chat-list');
  list.replaceChildren(...chats.map((c) => el('li', {
    class: c === current ? 'current' : '',
    onclick: () => { if (!controller) { current = c; renderList(); renderMessages(); } },
  }, el('span', {}, c.title), el('button', {
    type: 'button', title: 'Delete this chat',
    onclick: (ev) => {
      ev.stopPropagation();
      if (controller || !confirm(`Delete the chat "${c.title}"?`)) return;
      chats = chats.filter((x) => x !== c);
      if (current === c) current = chats[0] || null;
      save();
      if (!current) newChat(); else { renderList(); renderMessages(); }
    },
  }, '×'))));
}

function seconds(ns) { return (ns / 1e9).toFixed(2); }

// The timings Ollama returns with the final chunk.
function statsText(s) {
  if (!s) return '';
  const parts = [];
  if (s.eval_count && s.eval_duration) parts.push(`${s.eval_count} tokens, ${(s.eval_count / (s.eval_duration / 1e9)).toFixed(1)} tokens/s`);
  if (s.prompt_eval_count) parts.push(`prompt ${s.prompt_eval_count} tokens in ${seconds(s.prompt_eval_duration || 0)} s`);
  if (s.load_duration) parts.push(`load ${seconds(s.load_duration)} s`);
  if (s.total_duration) parts.push(`total ${seconds(s.total_duration)} s`);
  return parts.join(' · ');
}

function messageNode(m) {
  const node = el('div', { class: `msg ${m.role}${m.error ? ' error' : ''}` });
  node.append(el('div', { class: 'role' }, m.role === 'user' ? 'you' : (m.model || 'assistant')));
  if (m.thinking) {
    node.append(el('details', { class: 'thinking' }, el('summary', {}, 'Thinking'), renderMarkdown(m.thinking)));
  }
  if (m.role === 'user') {
    node.append(el('div', { class: 'md' }, m.content));
    if (m.attachments?.length) node.append(thumbnails(m.attachments));
  }
  else node.append(renderMarkdown(m.content));
  for (const call of m.tool_calls || []) {
    const f = call.function || {};
    node.append(el('div', { class: 'tool-call' },
      el('strong', {}, `tool call: ${f.name ?? '?'}`),
      el('pre', {}, JSON.stringify(f.arguments ?? {}, null, 2))));
  }
  if (m.error) node.append(el('div', { class: 'error-text' }, m.error));
  const st = statsText(m.stats);
  if (st || m.stopped) node.append(el('div', { class: 'stats' }, [st, m.stopped ? 'stopped' : ''].filter(Boolean).join(' · ')));
  return node;
}

function thumbnails(list, onRemove) {
  return el('div', { class: 'thumbs' }, list.map((a, i) => IMAGE_TYPES.includes(a.type) && el('figure', { class: 'thumb' },
    el('img', { src: `data:${a.type};base64,${a.data}`, alt: a.name || 'image', title: a.name || '' }),
    onRemove ? el('button', { type: 'button', title: 'Remove', onclick: () => onRemove(i) }, '×') : null)));
}

function renderAttachments() {
  $('chat-attachments').replaceChildren(thumbnails(attachments, (i) => {
    attachments.splice(i, 1);
    renderAttachments();
  }));
}

// Reads image files into attachments (others are refused with a notice).
async function attach(files) {
  for (const f of files) {
    if (!IMAGE_TYPES.includes(f.type)) { notice(`${f.name || 'file'}: not a PNG, JPEG or WebP image`); continue; }
    if (f.size > IMAGE_MAX_BYTES) { notice(`${f.name}: larger than ${IMAGE_MAX_BYTES / 1e6} MB`); continue; }
    const url = await new Promise((resolve, reject) => {
      const r = new FileReader();
      r.onload = () => resolve(String(r.result));
      r.onerror = () => reject(r.error);
      r.readAsDataURL(f);
    }).catch((e) => { notice(`${f.name}: ${e.message}`); return null; });
    if (!url) continue;
    attachments.push({ name: f.name || 'pasted image', type: f.type, data: url.slice(url.indexOf(',') + 1) });
  }
  renderAttachments();
}

function renderMessages() {
  const box = $('chat-messages');
  box.replaceChildren(...(current ? current.messages.map(messageNode) : []));
  box.scrollTop = box.scrollHeight;
}

// Redraws only the last message: at most every REDRAW_MS while
// streaming (a timer, not requestAnimationFrame, which a hidden tab never
// runs), and at once when the answer ends.
const REDRAW_MS = 40;
let pending = null;
function redrawLast(now = false) {
  if (pending && !now) return;
  clearTimeout(pending);
  const draw = () => {
    pending = null;
    const box = $('chat-messages');
    const last = current.messages[current.messages.length - 1];
    if (box.lastElementChild) box.lastElementChild.replaceWith(messageNode(last));
    box.scrollTop = box.scrollHeight;
  };
  if (now) draw(); else pending = setTimeout(draw, REDRAW_MS);
}

function options(s) {
  const o = {};
  if (s.temperature !== '') o.temperature = Number(s.temperature);
  if (s.num_ctx !== '') o.num_ctx = Number(s.num_ctx);
  if (s.seed !== '') o.seed = Number(s.seed);
  return o;
}

function busy(on) {
  $('chat-send').classList.toggle('hidden', on);
  $('chat-stop').classList.toggle('hidden', !on);
}

async function send() {
  const text = $('chat-input').value;
  const s = settings();
  if ((!text.trim() && !attachments.length) || controller) return;
  if (!s.model) { notice('pick a model first (pull one on the Models page)'); return; }
  let tools;
  if (s.tools.trim()) {
    try { tools = JSON.parse(s.tools); } catch (e) { notice(`tools: not JSON: ${e.message}`); return; }
  }
  notice('');
  saveSettings();
  if (!current) newChat();
  const chat = current;
  if (!chat.messages.length) { chat.title = (text || attachments[0].name).slice(0, 40); renderList(); }
  const user = { role: 'user', content: text };
  if (attachments.length) user.attachments = attachments;
  chat.messages.push(user);
  $('chat-input').value = '';
  attachments = [];
  renderAttachments();
  const history = chat.messages.map((m) => {
    const out = { role: m.role, content: m.content };
    if (m.tool_calls) out.tool_calls = m.tool_calls;
    if (m.attachments?.length) out.images = m.attachments.map((a) => a.data);
    return out;
  });
  if (s.system.trim()) history.unshift({ role: 'system', content: s.system });
  const answer = { role: 'assistant', model: s.model, content: '', thinking: '' };
  chat.messages.push(answer);
  renderMessages();
  controller = new AbortController();
  busy(true);
  const body = { model: s.model, messages: history, stream: true, options: options(s) };
  if (s.think) body.think = true;
  if (tools) body.tools = tools;
  try {
    await stream('/api/chat', body, (o) => {
      if (o.error) throw new Error(o.error);
      const m = o.message || {};
      if (m.content) answer.content += m.content;
      if (m.thinking) answer.thinking += m.thinking;
      if (m.tool_calls) answer.tool_calls = [...(answer.tool_calls || []), ...m.tool_calls];
      if (o.done) answer.stats = o;
      redrawLast();
    }, controller.signal);
  } catch (e) {
    if (e.name === 'AbortError') answer.stopped = true;
    else answer.error = e.message;
  } finally {
    controller = null;
    busy(false);
    save();
    redrawLast(true);
  }
}

function stop() { if (controller) controller.abort(); }

export async function refreshModels() {
  const sel = $('chat-model');
  const want = sel.value || restoreSettings().model;
  let tags;
  try { tags = await api('GET', '/api/tags'); } catch (e) { notice(`models: ${e.message}`); return; }
  const names = (tags.models || []).map((m) => m.name);
  sel.replaceChildren(...names.map((n) => el('option', { value: n }, n)));
  if (names.includes(want)) sel.value = want;
}

export function initChat() {
  load();
  restoreSettings();
  current = chats[0] || null;
  if (!current) newChat(); else { renderList(); renderMessages(); }
  $('chat-new').addEventListener('click', () => { if (!controller) newChat(); });
  $('chat-send').addEventListener('click', send);
  $('chat-stop').addEventListener('click', stop);
  $('chat-input').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); send(); }
  });
  $('chat-attach').addEventListener('click', () => $('chat-file').click());
  $('chat-file').addEventListener('change', async () => {
    await attach([...$('chat-file').files]);
    $('chat-file').value = '';
  });
  $('chat-input').addEventListener('paste', (ev) => {
    const files = [...(ev.clipboardData?.files || [])];
    if (!files.length) return;
    ev.preventDefault();
    attach(files);
  });
  // A file dropped beside the chat is not opened in place of the console.
  for (const type of ['dragover', 'drop']) window.addEventListener(type, (ev) => ev.preventDefault());
  const drop = document.querySelector('#page-chat .chat');
  drop.addEventListener('dragover', (ev) => { ev.preventDefault(); drop.classList.add('dropping'); });
  drop.addEventListener('dragleave', () => drop.classList.remove('dropping'));
  drop.addEventListener('drop', (ev) => {
    ev.preventDefault();
    drop.classList.remove('dropping');
    attach([...(ev.dataTransfer?.files || [])]);
  });
  for (const id of ['chat-model', 'chat-system', 'chat-temperature', 'chat-num-ctx', 'chat-seed', 'chat-think', 'chat-tools']) {
    $(id).addEventListener('change', saveSettings);
  }
}
