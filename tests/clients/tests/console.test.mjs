// console.test.mjs: the web console (/ui) in a real browser: Debian's
// chromium, headless, driven by puppeteer-core. Loads the console (no CSP
// violation, no request to another origin), chats with the test model
// (streamed text, timings), stops a stream, shows a scripted answer full
// of markup as text, pulls a model from a local docker-registry (every
// layer's bar reaches 100%), sees it loaded on the server page with its
// countdown, unloads it, and sees the charts move; attaches images to a
// message for a vision model and sees them reach it. The XSS answer comes
// from a third private server (the runner's CORRAL_TEST_SCRIPT hook) that
// also has CORRAL_API_KEY set, so the key panel is exercised there, and a
// described GPU inventory (CORRAL_GPU_INVENTORY) and a corral-node joined
// to it, so the server page shows both hosts and their GPUs, the model
// placed on one, and a queue held by a slow load.
// Screenshots go to $CORRAL_BUILD_DIR/test-artifacts/console/.
// Skips, saying so, without chromium, puppeteer-core or (for the pull)
// docker-registry.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { deflateSync } from 'node:zlib';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BASE, MODEL, LONG_MODEL, SCRIPTED_HOST, THINK_MODEL } from './lib.mjs';

const CHROMIUM = process.env.CORRAL_CHROMIUM || '/usr/bin/chromium';
const REGISTRY = '/usr/bin/docker-registry';
const BUILD = process.env.CORRAL_BUILD_DIR;
const SHOTS = BUILD ? join(BUILD, 'test-artifacts', 'console') : null;
const KEY = 'console-test-key';
// What the scripted server answers: markup that must show as text.
const XSS_ANSWER = [
  'Look: <script>window.__pwned = 1</script> and <img src=x onerror="window.__pwned = 2"> with **bold** and `<i>code</i>`.',
  '',
  '```html',
  '<b onclick="window.__pwned = 3">not bold</b>',
  '```',
].join('\n');
// Its second answer: a tool call (the parser wants it at the start).
const TOOL_ANSWER = '{"name": "get_weather", "arguments": {"city": "<b>Paris</b>"}}';
// The xss model's template: tool definitions make it tool-capable, and the
// tool-call parser (tag "{") turns the answer's last line into a call.
const TOOL_TEMPLATE = '{{- if .Tools }}[tools] {{ range .Tools }}{{ json . }} {{ end }}\n{{ end }}' +
  '{{- range .Messages }}[{{ .Role }}] {{ if .ToolCalls }}{{ range .ToolCalls }}' +
  '{"name": "{{ .Function.Name }}", "arguments": {{ json .Function.Arguments }}}{{ end }}' +
  '{{- else }}{{ .Content }}{{ end }}\n{{ end }}[assistant] ';
const TOOLS = [{ type: 'function', function: { name: 'get_weather', description: 'weather of a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];

let puppeteer = null;
try { puppeteer = (await import('puppeteer-core')).default; } catch { /* skipped below */ }
const skipAll = !existsSync(CHROMIUM) ? `chromium is not installed (${CHROMIUM}; tools/install-deps.sh --test installs it)`
  : !puppeteer ? 'puppeteer-core is not installed (npm ci in tests/clients)' : false;
if (skipAll) console.log(`console: skipped: ${skipAll}`);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The keyed server's described GPUs, and the model whose loads it slows.
const GPU_A = 'Console GPU A';
const GPU_B = 'Console GPU B';
const INVENTORY = `0:${GPU_A}:8000000000,1:${GPU_B}:4000000000,cpu:32000000000`;
const SLOW = 'slowq';
// The node that joins it: one GPU smaller than GPU A, so models stay here.
const NODE = 'console-node';
const NODE_GPU = 'Console Node GPU';
const NODE_INVENTORY = `0:${NODE_GPU}:2000000000,cpu:8000000000`;

// A w x h RGB PNG of a gradient (seed shifts it), written by hand: the
// test needs image bytes and no image library.
function png(w, h, seed) {
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (buf) => {
    let c = 0xffffffff;
    for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
  const chunk = (type, data) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const body = Buffer.concat([Buffer.from(type, 'ascii'), data]);
    const sum = Buffer.alloc(4);
    sum.writeUInt32BE(crc(body));
    return Buffer.concat([len, body, sum]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // RGB
  const raw = Buffer.alloc(h * (1 + 3 * w));
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const o = y * (1 + 3 * w) + 1 + 3 * x;
      raw[o] = (x * 8 + seed) & 0xff;
      raw[o + 1] = (y * 8 + 2 * seed) & 0xff;
      raw[o + 2] = ((x + y) * 4 + 3 * seed) & 0xff;
    }
  }
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
}
const tmp = mkdtempSync(join(tmpdir(), 'corral-console-'));
const children = []; // {proc, exited}: stopped by PID in after()
let browser = null;
let page = null;
let keyedSrv = null; // {base, page}: the keyed server with described GPUs
let seer = null;     // the vision model made on the main server
const requests = [];
const problems = []; // CSP violations, page errors, console errors

// Signals and exit: the servers this file started are stopped by PID
// (after() does it gently when the tests end normally).
function stopChildrenNow() {
  for (const c of children) {
    if (!c.exited) { try { process.kill(c.proc.pid, 'SIGTERM'); } catch { /* gone */ } }
  }
}
process.on('exit', stopChildrenNow);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => { stopChildrenNow(); process.exit(1); });

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => { const { port } = srv.address(); srv.close(() => resolve(port)); });
  });
}

function startChild(exe, args, env, logName) {
  const out = openSync(join(tmp, logName), 'w');
  const c = { proc: spawn(exe, args, { env, cwd: tmp, stdio: ['ignore', out, out] }), exited: false };
  c.proc.on('exit', () => { c.exited = true; });
  children.push(c);
  return c;
}

async function waitFor(what, fn, ms = 60_000) {
  const end = Date.now() + ms;
  for (;;) {
    try { if (await fn()) return; } catch { /* not yet */ }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

async function shot(p, name) {
  if (!SHOTS) return;
  mkdirSync(SHOTS, { recursive: true });
  await p.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
}

// A page that records every request and every problem the console meets
// (a keyed server's 401s before the key is given are expected there).
async function newPage({ keyed = false } = {}) {
  const p = await browser.newPage();
  await p.setViewport({ width: 1280, height: 900 });
  await p.evaluateOnNewDocument(() => {
    document.addEventListener('securitypolicyviolation', (e) => {
      window.__csp = (window.__csp || []).concat(`${e.violatedDirective} ${e.blockedURI}`);
    });
  });
  p.on('request', (r) => requests.push(r.url()));
  p.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  p.on('console', (m) => {
    if (m.type() !== 'error' || (keyed && /status of 401/.test(m.text()))) return;
    problems.push(`console: ${m.text()}`);
  });
  return p;
}

// The last assistant message of the chat page.
const lastAnswer = (p) => p.evaluate(() => {
  const all = document.querySelectorAll('#chat-messages .msg.assistant');
  const m = all[all.length - 1];
  if (!m) return null;
  return {
    text: m.querySelector('.md')?.textContent ?? '',
    stats: m.querySelector('.stats')?.textContent ?? '',
    streaming: !document.getElementById('chat-stop').classList.contains('hidden'),
  };
});

async function sendChat(p, model, text) {
  const value = await p.$eval('#chat-model', (s, m) => [...s.options].map((o) => o.value)
    .find((v) => v === m || v === `${m}:latest`), model);
  assert.ok(value, `${model} is not in the model list`);
  await p.select('#chat-model', value);
  await p.click('#chat-input', { clickCount: 3 });
  await p.type('#chat-input', text);
  await p.click('#chat-send');
}

before(async () => {
  if (skipAll) return;
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    // Pages the test is not looking at keep running at full speed.
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-dev-shm-usage',
      '--disable-background-timer-throttling', '--disable-renderer-backgrounding',
      '--disable-backgrounding-occluded-windows'],
  });
  page = await newPage();
});

after(async () => {
  if (browser) await browser.close();
  // The test files after this one see the store as run.mjs made it.
  for (const model of [pulled, seer]) {
    if (model) await fetch(`${BASE}/api/delete`, { method: 'DELETE', body: JSON.stringify({ model }) }).catch(() => {});
  }
  for (const c of children) {
    if (c.exited) continue;
    try { process.kill(c.proc.pid, 'SIGTERM'); } catch { continue; }
    for (let i = 0; i < 150 && !c.exited; i++) await sleep(100);
    if (!c.exited) { try { process.kill(c.proc.pid, 'SIGKILL'); } catch { /* gone */ } }
  }
  if (!process.env.CORRAL_CLIENTS_KEEP) rmSync(tmp, { recursive: true, force: true });
});

test('the console loads with its CSP, same-origin requests only, no errors', { skip: skipAll }, async () => {
  const res = await page.goto(`${BASE}/ui`, { waitUntil: 'load' });
  assert.equal(res.status(), 200);
  assert.match(res.headers()['content-security-policy'], /script-src 'self'/);
  await page.waitForSelector('body[data-ready="true"]');
  await waitFor('the model list', () => page.$eval('#chat-model', (s) => s.options.length > 0));
  const names = await page.$$eval('#chat-model option', (os) => os.map((o) => o.value));
  assert.ok(names.includes(`${MODEL}:latest`), `models ${names}`);
  const root = (await fetch(`${BASE}/`)).text();
  assert.equal(await root, 'Ollama is running');
  for (const name of ['models', 'server']) {
    await page.click(`#nav-${name}`);
    await page.waitForSelector(`#page-${name}:not(.hidden)`);
  }
  await waitFor('the models table', () => page.$(`#models-body tr[data-model="${MODEL}:latest"]`));
  await page.click('#nav-chat');
  assert.deepEqual(await page.evaluate(() => window.__csp || []), []);
  assert.deepEqual(problems, []);
  const origin = new URL(BASE).origin;
  const foreign = requests.filter((u) => !u.startsWith('data:') && new URL(u).origin !== origin);
  assert.deepEqual(foreign, [], 'requests to another origin');
});

test('chat with the test model streams an answer with its timings', { skip: skipAll }, async () => {
  await sendChat(page, MODEL, 'hello there');
  await waitFor('the answer and its timings', async () => /tokens\/s/.test((await lastAnswer(page))?.stats ?? ''));
  const a = await lastAnswer(page);
  assert.ok(a.text.length > 0, 'answer text');
  assert.match(a.stats, /\d+ tokens, [\d.]+ tokens\/s/);
  assert.match(a.stats, /prompt \d+ tokens/);
  assert.equal(a.streaming, false);
  // Kept in the browser: a reload shows the same conversation.
  await page.reload({ waitUntil: 'load' });
  await page.waitForSelector('body[data-ready="true"]');
  const again = await lastAnswer(page);
  assert.equal(again.text, a.text);
  await shot(page, 'chat');
});

test('a streaming answer shows text as it comes and stops on Stop', { skip: skipAll }, async () => {
  await sendChat(page, LONG_MODEL, 'a long story');
  // Text on screen while the stream is still open: it streams.
  await waitFor('streamed text', async () => { const a = await lastAnswer(page); return a.streaming && a.text.length > 0; });
  await page.click('#chat-stop');
  await waitFor('the stop', async () => { const a = await lastAnswer(page); return !a.streaming && /stopped/.test(a.stats); });
  const a = await lastAnswer(page);
  assert.doesNotMatch(a.stats, /tokens\/s/, 'stopped before the end');
  // The conversation keeps the stopped answer as it was.
  const kept = await page.evaluate(() => JSON.parse(localStorage.getItem('corral.chats'))[0].messages.at(-1));
  assert.equal(kept.stopped, true);
  assert.equal(kept.content.length > 0, true);
  assert.deepEqual(problems, []);
});

// Uploads a file as a blob and returns its digest.
async function uploadBlob(base, file, headers = {}) {
  const bytes = readFileSync(file);
  const digest = `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
  const r = await fetch(`${base}/api/blobs/${digest}`, { method: 'POST', headers, body: bytes });
  assert.ok(r.ok, `blob upload of ${file}: ${r.status}`);
  return digest;
}

test('images attached in the chat (picker, paste, drop) reach a vision model', { skip: skipAll }, async () => {
  const clipSynth = join(BUILD ?? '', 'bin', 'corral-clip-synth');
  const gguf = join(process.cwd(), 'synth.gguf');
  assert.ok(BUILD && existsSync(clipSynth) && existsSync(gguf), `needs ${clipSynth} and ${gguf}`);
  // A synthetic llava-style projector (112 px, 14 px patches: 64 image
  // tokens per image) beside synth's weights: the vision model "seer".
  // Its context is synth's 256 tokens: two images, the text and 8 tokens
  // of answer fit.
  const mmproj = join(tmp, 'mmproj.gguf');
  const synth = startChild(clipSynth, ['--out', mmproj, '--seed', '6'], process.env, 'clip-synth.log');
  await waitFor('corral-clip-synth', () => synth.exited, 120_000);
  assert.equal(synth.proc.exitCode, 0, 'corral-clip-synth failed (clip-synth.log)');
  const files = { 'synth.gguf': await uploadBlob(BASE, gguf), 'mmproj.gguf': await uploadBlob(BASE, mmproj) };
  let r = await fetch(`${BASE}/api/create`, { method: 'POST',
    body: JSON.stringify({ model: 'seer', files, template: TOOL_TEMPLATE, parameters: { num_predict: 8 }, stream: false }) });
  assert.ok(r.ok, `create seer: ${r.status} ${await r.text()}`);
  seer = 'seer';
  const pngs = [png(40, 30, 1), png(24, 24, 2), png(16, 32, 3)];
  const first = join(tmp, 'first.png');
  writeFileSync(first, pngs[0]);

  await page.bringToFront();
  await page.click('#nav-chat');
  await page.click('#chat-new');
  await page.reload({ waitUntil: 'load' }); // the model list now has seer
  await page.waitForSelector('body[data-ready="true"]');
  await waitFor('seer in the model list', () => page.$eval('#chat-model', (s) => [...s.options].some((o) => o.value === 'seer:latest')));
  // The picker, then a paste and a drop of the other two.
  const input = await page.$('#chat-file');
  await input.uploadFile(first);
  await waitFor('the picked image', async () => (await page.$$('#chat-attachments .thumb')).length === 1);
  await page.evaluate((b64s) => {
    const file = (b64, name) => new File([Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))], name, { type: 'image/png' });
    const pasted = new DataTransfer();
    pasted.items.add(file(b64s[0], 'pasted.png'));
    document.getElementById('chat-input').dispatchEvent(new ClipboardEvent('paste', { clipboardData: pasted, bubbles: true, cancelable: true }));
    const dropped = new DataTransfer();
    dropped.items.add(file(b64s[1], 'dropped.png'));
    document.querySelector('#page-chat .chat').dispatchEvent(new DragEvent('drop', { dataTransfer: dropped, bubbles: true, cancelable: true }));
  }, [pngs[1].toString('base64'), pngs[2].toString('base64')]);
  await waitFor('three thumbnails', async () => (await page.$$('#chat-attachments .thumb img')).length === 3);
  const loaded = await page.$$eval('#chat-attachments .thumb img', (imgs) => imgs.map((i) => i.complete && i.naturalWidth));
  assert.deepEqual(loaded, [40, 24, 16], 'thumbnails decoded from the attached bytes');
  // The pasted one goes again (its × button): two are sent.
  await page.click('#chat-attachments .thumb:nth-of-type(2) button');
  await waitFor('two thumbnails', async () => (await page.$$('#chat-attachments .thumb')).length === 2);
  // A file that is not an image is refused with a notice.
  const text = join(tmp, 'notes.txt');
  writeFileSync(text, 'not an image');
  await input.uploadFile(text);
  await waitFor('the refusal', () => page.$eval('#notice', (n) => /not a PNG, JPEG or WebP/.test(n.textContent)));
  assert.equal((await page.$$('#chat-attachments .thumb')).length, 2);

  // The system prompt and the common options go with it.
  const setField = (id, v) => page.$eval(id, (e, x) => { e.value = x; e.dispatchEvent(new Event('change')); }, v);
  await setField('#chat-system', 'Be brief.');
  await setField('#chat-temperature', '0');
  await setField('#chat-num-ctx', '256');
  await setField('#chat-seed', '42');
  let sent = null;
  const onRequest = (req) => { if (req.url().endsWith('/api/chat') && req.method() === 'POST') sent = JSON.parse(req.postData()); };
  page.on('request', onRequest);
  try {
    await sendChat(page, 'seer:latest', 'what is in these?');
    await waitFor('the answer to the images', async () => { const a = await lastAnswer(page); return a && !a.streaming; }, 120_000);
  } finally {
    page.off('request', onRequest);
  }
  const error = await page.$eval('#chat-messages .msg.assistant:last-child', (m) => m.querySelector('.error-text')?.textContent ?? '');
  assert.equal(error, '', 'the answer is not an error');
  assert.ok(sent, 'the chat request was seen');
  assert.deepEqual(sent.options, { temperature: 0, num_ctx: 256, seed: 42 });
  assert.deepEqual(sent.messages[0], { role: 'system', content: 'Be brief.' });
  for (const id of ['#chat-system', '#chat-temperature', '#chat-num-ctx', '#chat-seed']) await setField(id, '');
  const last = sent.messages.at(-1);
  assert.equal(last.content, 'what is in these?');
  assert.deepEqual(last.images, [pngs[0].toString('base64'), pngs[2].toString('base64')], 'the images went as base64');
  assert.equal((await page.$$('#chat-attachments .thumb')).length, 0, 'the composer is cleared');
  // The model read them: 64 image tokens each, while the text alone is
  // under 64 tokens (asked of the same model, without images).
  const stats = (await lastAnswer(page)).stats;
  const withImages = Number(/prompt (\d+) tokens/.exec(stats)?.[1]);
  r = await fetch(`${BASE}/api/chat`, { method: 'POST', body: JSON.stringify({ model: 'seer', stream: false,
    messages: [{ role: 'user', content: 'what is in these?' }] }) });
  assert.ok(r.ok, `text-only chat: ${r.status}`);
  const textOnly = (await r.json()).prompt_eval_count;
  assert.ok(textOnly < 64, `text alone: ${textOnly} tokens`);
  assert.ok(withImages >= 128, `with two images: ${withImages} prompt tokens (${stats})`);
  // The message keeps its thumbnails, in the page and after a reload.
  await page.reload({ waitUntil: 'load' });
  await page.waitForSelector('body[data-ready="true"]');
  const thumbs = await page.$$eval('#chat-messages .msg.user .thumb img', (imgs) => imgs.map((i) => i.naturalWidth));
  assert.deepEqual(thumbs, [40, 16]);
  assert.deepEqual(await page.evaluate(() => window.__csp || []), []);
  assert.deepEqual(problems, []);
  await shot(page, 'chat-images');
});

test('an answer full of markup is shown as text (key asked for and kept per tab)', { skip: skipAll }, async () => {
  const gguf = join(process.cwd(), 'synth.gguf');
  assert.ok(BUILD && existsSync(gguf), `needs ${gguf} and CORRAL_BUILD_DIR`);
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  const script = join(tmp, 'xss.txt');
  writeFileSync(script, `${XSS_ANSWER}\n---\n${TOOL_ANSWER}\n`); // one runner: answers in turn
  // A node host joins it (corral-node over CURVE, its GPU described too),
  // for the server page's host list.
  const keys = join(tmp, 'keys');
  const admitted = join(tmp, 'admitted');
  mkdirSync(admitted, { recursive: true });
  for (const name of ['scheduler', NODE]) {
    const kg = startChild(join(BUILD, 'bin', 'corral'), ['keygen', '--out', keys, name], process.env, `keygen-${name}.log`);
    await waitFor(`keygen ${name}`, () => kg.exited, 30_000);
    assert.equal(kg.proc.exitCode, 0, `corral keygen ${name} (keygen-${name}.log)`);
  }
  copyFileSync(join(keys, NODE), join(admitted, NODE));
  const nodes = `tcp://127.0.0.1:${await freePort()}`;
  const env = { ...process.env, CORRAL_RUNTIME_DIR: join(tmp, 'run3'), CORRAL_MODELS: join(tmp, 'models3'),
    CORRAL_HOST: host, CORRAL_TEST_SCRIPT: script, CORRAL_API_KEY: KEY,
    CORRAL_GPU_INVENTORY: INVENTORY, CORRAL_TEST_SLOW_LOAD: `${SLOW}:120000`,
    CORRAL_NODES_ENDPOINT: nodes, CORRAL_NODES_CERT: join(keys, 'scheduler'), CORRAL_NODE_KEYS_DIR: admitted };
  const srv = startChild(join(BUILD, 'bin', 'corral'), ['serve'], env, 'serve-xss.log');
  const base = `http://${host}`;
  keyedSrv = { base, page: null };
  await waitFor('the keyed server', async () => !srv.exited && (await (await fetch(`${base}/`)).text()) === 'Ollama is running', 30_000);
  startChild(join(BUILD, 'bin', 'corral-node'), [], { ...process.env, CORRAL_RUNTIME_DIR: join(tmp, 'run-node'),
    CORRAL_NODE_SCHEDULER: nodes, CORRAL_NODE_SERVER_CERT: join(keys, 'scheduler'), CORRAL_NODE_NAME: NODE,
    CORRAL_NODE_CERT: join(keys, NODE), CORRAL_NODE_CACHE: join(tmp, 'node-cache'), CORRAL_GPU_INVENTORY: NODE_INVENTORY }, 'node.log');
  const auth = { Authorization: `Bearer ${KEY}` };
  const bytes = readFileSync(gguf);
  const digest = `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
  let r = await fetch(`${base}/api/blobs/${digest}`, { method: 'POST', headers: auth, body: bytes });
  assert.ok(r.ok, `blob upload: ${r.status}`);
  r = await fetch(`${base}/api/create`, { method: 'POST', headers: auth,
    body: JSON.stringify({ model: 'xss', files: { 'synth.gguf': digest }, template: TOOL_TEMPLATE, stream: false }) });
  assert.ok(r.ok, `create: ${r.status} ${await r.text()}`);

  const p = await newPage({ keyed: true });
  await p.goto(`${base}/ui`, { waitUntil: 'load' });
  await p.waitForSelector('#key-panel:not(.hidden)'); // /api/tags said 401
  await p.type('#key-input', KEY);
  await p.click('#key-save');
  await waitFor('the model list', () => p.$eval('#chat-model', (s) => [...s.options].some((o) => o.value === 'xss:latest')));
  assert.equal(await p.evaluate(() => sessionStorage.getItem('corral.apiKey')), KEY);
  assert.ok(!(await p.evaluate(() => JSON.stringify(localStorage))).includes(KEY), 'the key is not in localStorage');
  await sendChat(p, 'xss:latest', 'show me');
  await waitFor('the scripted answer', async () => /tokens\/s|stopped/.test((await lastAnswer(p))?.stats ?? ''));
  const got = await p.evaluate(() => {
    const all = document.querySelectorAll('#chat-messages .msg.assistant');
    const m = all[all.length - 1];
    return {
      text: m.textContent,
      elements: m.querySelectorAll('script, img, b, i, [onclick], [onerror]').length,
      strong: m.querySelector('strong')?.textContent,
      code: [...m.querySelectorAll('code')].map((c) => c.textContent),
      pwned: window.__pwned ?? null,
    };
  });
  assert.equal(got.pwned, null);
  assert.equal(got.elements, 0, 'no element came from the answer');
  assert.ok(got.text.includes('<script>window.__pwned = 1</script>'), got.text);
  assert.ok(got.text.includes('<img src=x onerror="window.__pwned = 2">'), got.text);
  assert.equal(got.strong, 'bold');
  assert.ok(got.code.includes('<i>code</i>'), got.code.join('|'));
  assert.ok(got.code.includes('<b onclick="window.__pwned = 3">not bold</b>'), got.code.join('|'));
  // The second answer, with tools offered: a call, shown as a card.
  await p.type('#chat-tools', JSON.stringify(TOOLS));
  await sendChat(p, 'xss:latest', 'and the weather?');
  await waitFor('the tool call', async () => (await p.$$('#chat-messages .msg.assistant')).length === 2 &&
    /tokens\/s/.test((await lastAnswer(p))?.stats ?? ''));
  const tool = await p.evaluate(() => [...document.querySelectorAll('#chat-messages .tool-call')].map((c) => ({
    text: c.textContent, elements: c.querySelectorAll('b').length })));
  assert.equal(tool.length, 1, JSON.stringify(tool));
  assert.match(tool[0].text, /tool call: get_weather/);
  assert.ok(tool[0].text.includes('"city": "<b>Paris</b>"'), tool[0].text);
  assert.equal(tool[0].elements, 0);
  assert.deepEqual(await p.evaluate(() => window.__csp || []), []);
  await shot(p, 'chat-markup-as-text');
  keyedSrv.page = p; // the server page test goes on with it (and its key)
});

test('the server page shows each GPU, where a model runs on it, and the queue', { skip: skipAll }, async () => {
  assert.ok(keyedSrv?.page, 'the keyed server test ran');
  const p = keyedSrv.page;
  const auth = { Authorization: `Bearer ${KEY}` };
  await p.click('#nav-server');
  const row = '#ps-body tr[data-model="xss:latest"]';
  await waitFor('the loaded model', () => p.$(row));
  // The node's card: its system memory and its GPU (it joins on its own
  // time: waited for).
  const nodeCard = `#hosts .host[data-host="${NODE}"]`;
  await waitFor('the node host', () => p.$(`${nodeCard} .mem[data-device="gpu0"]`));
  const nodeMem = await p.$$eval(`${nodeCard} .mem`, (ms) => ms.map((m) => [m.dataset.device, Number(m.dataset.total), m.textContent]));
  assert.deepEqual(nodeMem.map((m) => m.slice(0, 2)), [['cpu', 8e9], ['gpu0', 2e9]]);
  assert.ok(nodeMem[1][2].includes(NODE_GPU), nodeMem[1][2]);
  assert.match(await p.$eval(`${nodeCard} h3`, (h) => h.textContent), new RegExp(`^${NODE}`));
  // Two described GPUs on this host: names, totals.
  const gpus = await p.$$eval('#hosts .host[data-host=""] .mem', (ms) => ms.map((m) => ({ device: m.dataset.device,
    total: Number(m.dataset.total), used: Number(m.dataset.used), free: Number(m.dataset.free), text: m.textContent })));
  assert.deepEqual(gpus.map((g) => g.device), ['cpu', 'gpu0', 'gpu1']);
  assert.equal(gpus[0].total, 32e9);
  assert.ok(gpus[1].text.includes(GPU_A) && gpus[2].text.includes(GPU_B), JSON.stringify(gpus));
  assert.equal(gpus[1].total, 8e9);
  assert.equal(gpus[2].total, 4e9);
  // xss is placed whole on the GPU with the most free memory (A); the page
  // shows what the endpoint says, and the endpoint adds up.
  const where = await p.$eval(row, (tr) => tr.children[1].textContent);
  assert.match(where, new RegExp(`^this host · GPU 0 ${GPU_A} \\(\\d+ layers, [\\d.]+ [KMG]?B\\)$`));
  const st = await (await fetch(`${keyedSrv.base}/api/console/status`, { headers: auth })).json();
  const model = st.models.find((m) => m.name === 'xss:latest');
  assert.equal(model.gpus.length, 1);
  assert.equal(model.gpus[0].index, 0);
  assert.equal(model.gpus[0].bytes, model.size_vram);
  const host = st.hosts.find((h) => h.local);
  assert.deepEqual(st.hosts.map((h) => h.name ?? 'local'), ['local', NODE]);
  assert.equal(st.hosts[1].gpus[0].used, 0);
  assert.equal(host.described, true);
  assert.equal(host.gpus[0].used, model.gpus[0].bytes);
  assert.equal(host.gpus[0].free, 8e9 - model.gpus[0].bytes);
  assert.equal(host.gpus[1].used, 0);
  assert.ok(host.ram.used > 0 && host.ram.used + host.ram.free === 32e9, JSON.stringify(host.ram));
  const onGpu = model.gpus[0].bytes;
  await waitFor('the page\'s figures', () => p.$eval('#hosts .mem[data-device="gpu0"]', (m, b) => Number(m.dataset.used) === b, onGpu));
  const usedPct = await p.$eval('#hosts .mem[data-device="gpu0"] .membar .used', (d) => parseFloat(d.style.width));
  assert.ok(Math.abs(usedPct - (100 * model.gpus[0].bytes) / 8e9) < 0.1, `bar ${usedPct}%`);

  // The queue: two requests for a model whose load takes long (the
  // runner's CORRAL_TEST_SLOW_LOAD hook) wait until they are canceled.
  let r = await fetch(`${keyedSrv.base}/api/copy`, { method: 'POST', headers: auth, body: JSON.stringify({ source: 'xss', destination: SLOW }) });
  assert.equal(r.status, 200);
  const waiting = [new AbortController(), new AbortController()];
  const sent = waiting.map((c) => fetch(`${keyedSrv.base}/api/generate`, { method: 'POST', headers: auth, signal: c.signal,
    body: JSON.stringify({ model: SLOW, prompt: 'wait', stream: true }) }).catch(() => null));
  const qrow = `#queue-body tr[data-model="${SLOW}:latest"]`;
  try {
    await waitFor('the queue on the page', () => p.$eval(qrow, (tr) => tr.children[1].textContent === '2'));
    assert.equal(await p.$eval('#queue-depth', (d) => d.textContent), '2');
    assert.match(await p.$eval(qrow, (tr) => tr.children[2].textContent), /^\d+ s$/);
    await waitFor('the loading model', () => p.$eval(`#ps-body tr[data-model="${SLOW}:latest"]`, (tr) => tr.children[7].textContent === 'loading'));
    const q = await (await fetch(`${keyedSrv.base}/api/console/status`, { headers: auth })).json();
    assert.equal(q.queue_depth, 2);
    assert.deepEqual(q.queue.map((e) => [e.model, e.waiting]), [[`${SLOW}:latest`, 2]]);
    await shot(p, 'server-gpus-queue');
  } finally {
    for (const c of waiting) c.abort();
    await Promise.all(sent);
  }
  await waitFor('the queue emptied', () => p.$eval('#queue-empty', (e) => !e.classList.contains('hidden')));
  assert.equal(await p.$eval('#queue-depth', (d) => d.textContent), '0');
  assert.deepEqual(await p.evaluate(() => window.__csp || []), []);
  await p.close();
});

test('thinking is shown collapsed above the answer', { skip: skipAll || (!SCRIPTED_HOST && 'no scripted server') }, async () => {
  const p = await newPage();
  await p.goto(`http://${SCRIPTED_HOST}/ui`, { waitUntil: 'load' });
  await p.waitForSelector('body[data-ready="true"]');
  await waitFor('the model list', () => p.$eval('#chat-model', (s) => s.options.length > 0));
  await p.click('#chat-think');
  await sendChat(p, THINK_MODEL, 'think first');
  await waitFor('the answer', async () => /tokens\/s/.test((await lastAnswer(p))?.stats ?? ''));
  const got = await p.evaluate(() => {
    const all = document.querySelectorAll('#chat-messages .msg.assistant');
    const m = all[all.length - 1];
    const d = m.querySelector('details.thinking');
    return { open: d?.open, thinking: d?.textContent, answer: m.querySelector(':scope > .md')?.textContent };
  });
  assert.equal(got.open, false, 'collapsed');
  assert.match(got.thinking, /reasoning here/);
  assert.equal(got.answer, 'final answer');
  await p.click('details.thinking summary');
  await shot(p, 'chat-thinking');
  await p.close();
});

// The pull, server page and charts share the registry and the pulled name.
let pulled = null;

test('pull from a local registry: every layer bar reaches 100%', { skip: skipAll || (!existsSync(REGISTRY) && 'docker-registry is not installed') }, async () => {
  const port = await freePort();
  const remote = `127.0.0.1:${port}`;
  const dir = join(tmp, 'oci');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'config.yml'), [
    'version: 0.1', 'log:', '  level: warn',
    'storage:', '  filesystem:', `    rootdirectory: ${dir}/data`, '  delete:', '    enabled: true',
    'http:', `  addr: ${remote}`, '  secret: corral-console-test', '',
  ].join('\n'));
  const reg = startChild(REGISTRY, ['serve', join(dir, 'config.yml')], process.env, 'registry.log');
  await waitFor('docker-registry', async () => !reg.exited && (await fetch(`http://${remote}/v2/`)).status === 200, 30_000);
  // Publish a copy of synth and drop it locally, so the pull fetches it.
  pulled = `${remote}/library/console-pull:latest`;
  await page.bringToFront(); // the other tests' pages are closed
  const post = (path, body, method = 'POST') => fetch(`${BASE}${path}`, { method, body: JSON.stringify(body) });
  assert.equal((await post('/api/copy', { source: MODEL, destination: pulled })).status, 200);
  const pushed = await post('/api/push', { model: pulled, insecure: true, stream: false });
  assert.equal(pushed.status, 200, await pushed.text());
  assert.equal((await post('/api/delete', { model: pulled }, 'DELETE')).status, 200);

  await page.click('#nav-models');
  await page.waitForSelector('#page-models:not(.hidden)');
  await page.type('#pull-name', pulled);
  await page.click('#pull-insecure');
  await page.click('#pull-start');
  await waitFor('the pull to end', () => page.$eval('.pull-status', (s) => s.dataset.done === 'success' || /^error|canceled/.test(s.textContent)), 120_000);
  assert.equal(await page.$eval('.pull-status', (s) => s.textContent), 'success');
  const bars = await page.$$eval('#pull-progress .layer', (ls) => ls.map((l) => l.dataset.percent));
  assert.ok(bars.length >= 2, `layers ${bars}`); // weights, template, params, config...
  assert.deepEqual(bars.filter((b) => b !== '100'), [], `bars ${bars}`);
  await waitFor('the pulled model in the table', () => page.$(`#models-body tr[data-model="${pulled}"]`));
  await page.click(`#models-body tr[data-model="${pulled}"] a`);
  await waitFor('the details', () => page.$eval('#model-details', (d) => /Modelfile/.test(d.textContent)));
  assert.match(await page.$eval('#model-details', (d) => d.textContent), /Template/);
  await shot(page, 'models');
});

test('copy and delete ask first, then act', { skip: skipAll || (!existsSync(REGISTRY) && 'docker-registry is not installed') }, async () => {
  assert.ok(pulled, 'the pull test ran');
  const row = (name) => `#models-body tr[data-model="${name}"]`;
  const answers = [];
  const onDialog = async (d) => {
    answers.push(d.type());
    if (d.type() === 'prompt') await d.accept('console-copy');
    else if (answers.length === 2) await d.dismiss(); // the first delete: "no"
    else await d.accept();
  };
  page.on('dialog', onDialog);
  try {
    await page.click(`${row(pulled)} button:nth-of-type(1)`);
    await waitFor('the copy', () => page.$(row('console-copy:latest')));
    await page.click(`${row('console-copy:latest')} button:nth-of-type(2)`);
    await waitFor('the first confirmation', () => answers.length === 2);
    // The click handler has returned once the page runs the next task;
    // a "no" sends nothing, so the copy is still on the server.
    await page.evaluate(() => 0);
    const kept = await (await fetch(`${BASE}/api/tags`)).json();
    assert.ok(kept.models.some((m) => m.name === 'console-copy:latest'), 'kept after "no"');
    await page.click(`${row('console-copy:latest')} button:nth-of-type(2)`);
    await waitFor('the delete', async () => !(await page.$(row('console-copy:latest'))));
  } finally {
    page.off('dialog', onDialog);
  }
  assert.deepEqual(answers, ['prompt', 'confirm', 'confirm']);
  const tags = await (await fetch(`${BASE}/api/tags`)).json();
  assert.ok(!tags.models.some((m) => m.name === 'console-copy:latest'));
});

test('the server page shows the model loaded, unloads it, and its charts move', { skip: skipAll || (!existsSync(REGISTRY) && 'docker-registry is not installed') }, async () => {
  assert.ok(pulled, 'the pull test ran');
  await page.bringToFront();
  await page.click('#nav-chat');
  await page.click('#chat-new'); // the last chat holds images: not for this model
  await sendChat(page, pulled, 'hello from the pulled model');
  await waitFor('the answer', async () => /tokens\/s/.test((await lastAnswer(page))?.stats ?? ''));
  await page.click('#nav-server');
  const row = `#ps-body tr[data-model="${pulled}"]`;
  await waitFor('the loaded model', () => page.$(row));
  const cells = await page.$eval(row, (tr) => [...tr.children].map((td) => td.textContent));
  assert.match(cells[1], /^this host · (CPU|GPU)/);
  assert.match(cells[7], /\d+ s$/, `countdown '${cells[7]}'`);
  // Generated tokens and requests happened while the page was polling.
  await waitFor('the tokens/s chart', () => page.$eval('#chart-tokens', (c) => Number(c.dataset.max) > 0));
  await waitFor('the requests/s chart', () => page.$eval('#chart-requests', (c) => Number(c.dataset.max) > 0));
  await waitFor('the time-to-first-token chart', () => page.$eval('#chart-ttft', (c) => Number(c.dataset.max) > 0));
  await shot(page, 'server');
  await page.click(`${row} button`);
  await waitFor('the unload', async () => !(await page.$(row)));
  const ps = await (await fetch(`${BASE}/api/ps`)).json();
  assert.ok(!ps.models.some((m) => m.name === pulled), 'unloaded on the server too');
  assert.deepEqual(problems, []);
});
