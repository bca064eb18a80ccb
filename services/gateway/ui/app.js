// app.js: the console's entry point: page switching by the URL's hash,
// the API key panel, and each page's start.
import { api, apiKey, setApiKey, whenUnauthorized } from './api.js';
import { initChat, refreshModels } from './chat.js';
import { initModels, refresh as refreshModelList } from './models.js';
import { initServer, showServer } from './server.js';

const $ = (id) => document.getElementById(id);
const PAGES = ['chat', 'models', 'server'];

function showPage() {
  const want = location.hash.slice(1);
  const page = PAGES.includes(want) ? want : 'chat';
  for (const p of PAGES) {
    $(`page-${p}`).classList.toggle('hidden', p !== page);
    $(`nav-${p}`).classList.toggle('current', p === page);
  }
  if (page === 'models') refreshModelList();
  if (page === 'server') showServer();
  if (page === 'chat') refreshModels();
}

function keyPanel(open) {
  $('key-panel').classList.toggle('hidden', !open);
  if (open) $('key-input').focus();
}

async function start() {
  whenUnauthorized(() => keyPanel(true));
  $('key-open').addEventListener('click', () => keyPanel($('key-panel').classList.contains('hidden')));
  $('key-save').addEventListener('click', () => {
    setApiKey($('key-input').value.trim());
    $('key-input').value = '';
    keyPanel(false);
    showPage();
  });
  $('key-forget').addEventListener('click', () => { setApiKey(''); keyPanel(false); });
  $('key-input').addEventListener('keydown', (ev) => { if (ev.key === 'Enter') $('key-save').click(); });
  $('key-open').title = apiKey() ? 'a key is set for this tab' : 'no key set';
  initChat();
  initModels();
  initServer();
  window.addEventListener('hashchange', showPage);
  showPage();
  try {
    const v = await api('GET', '/api/version');
    $('version').textContent = `corral ${v.corral_version || ''} (Ollama API ${v.version})`;
  } catch { /* the key panel is showing */ }
  document.body.dataset.ready = 'true';
}

start();
