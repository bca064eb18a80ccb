// chat.js: the chat page. Conversations live in this browser's
// localStorage; answers stream from /api/chat and can be stopped.
import { api, stream, el, notice } from './api.js';
import { renderMarkdown } from './markdown.js';

const STORE = 'corral.chats';
const SETTINGS = 'corral.chatSettings';
const $ = (id) => document.getElementById(id);

let chats = [];
let current = null;     // the open conversation
let controller = null;  // AbortController of the stream in progress

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
  if (m.role === 'user') node.append(el('div', { class: 'md' }, m.content));
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
  if (!text.trim() || controller) return;
  if (!s.model) { notice('pick a model first (pull one on the Models page)'); return; }
  let tools;
  if (s.tools.trim()) {
    try { tools = JSON.parse(s.tools); } catch (e) { notice(`tools: not JSON: ${e.message}`); return; }
  }
  notice('');
  saveSettings();
  if (!current) newChat();
  const chat = current;
  if (!chat.messages.length) { chat.title = text.slice(0, 40); renderList(); }
  chat.messages.push({ role: 'user', content: text });
  $('chat-input').value = '';
  const history = chat.messages.map((m) => {
    const out = { role: m.role, content: m.content };
    if (m.tool_calls) out.tool_calls = m.tool_calls;
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
  for (const id of ['chat-model', 'chat-system', 'chat-temperature', 'chat-num-ctx', 'chat-seed', 'chat-think', 'chat-tools']) {
    $(id).addEventListener('change', saveSettings);
  }
}
