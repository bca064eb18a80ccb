// run.mjs: start a private corral, create the test models, run every
// tests/*.test.mjs against it with node's built-in test runner (one file at
// a time), and always stop the server by its PID at the end.
//
// Env: CORRAL_BUILD_DIR (required: its bin/ holds corral and
// corral-gguf-synth), CORRAL_TESTDATA (optional: stories260K and the
// llama.cpp reference text), CORRAL_CLIENTS_KEEP=1 keeps the temp dir.
// Exit: 0 all passed, 1 a failure, 77 skipped (nothing to run against).
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync, openSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const SKIP = 77;

function skip(why) {
  console.log(`clients: skipped: ${why}`);
  process.exit(SKIP);
}

const build = process.env.CORRAL_BUILD_DIR;
if (!build) skip('CORRAL_BUILD_DIR is not set');
const bin = join(build, 'bin');
for (const prog of ['corral', 'corral-gguf-synth']) {
  if (!existsSync(join(bin, prog))) skip(`${join(bin, prog)} is not built`);
}
for (const pkg of ['ollama', 'openai', '@anthropic-ai/sdk']) {
  if (!existsSync(join(here, 'node_modules', pkg, 'package.json')))
    skip(`node_modules/${pkg} is absent (run npm ci in tests/clients)`);
}

const t0 = Date.now();
const stamp = () => `${((Date.now() - t0) / 1000).toFixed(1)}s`;
const log = (msg) => console.log(`clients [${stamp()}]: ${msg}`);

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const tmp = mkdtempSync(join(tmpdir(), 'corral-clients-'));
const port = await freePort();
const host = `127.0.0.1:${port}`;
const env = { ...process.env };
delete env.OLLAMA_HOST;
delete env.OLLAMA_MODELS;
delete env.CORRAL_API_KEY;
env.CORRAL_RUNTIME_DIR = join(tmp, 'run');
env.CORRAL_MODELS = join(tmp, 'models');
env.CORRAL_HOST = host;
// The runner's test hook: loads of "slowload" take 2.5 s, so
// loading.test.mjs sees the load progress events.
env.CORRAL_TEST_SLOW_LOAD = 'slowload:2500';

let server = null;
let serverExited = false;
const serveLog = join(tmp, 'serve.log');
// The second server: the runner's scripted sampler answers every request
// with SCRIPTED_ANSWER (a thinking answer), for surfaces.test.mjs.
let scripted = null;
let scriptedExited = false;
const scriptedLog = join(tmp, 'serve-scripted.log');

async function stopOne(proc, exited) {
  if (!proc || exited()) return;
  const pid = proc.pid;
  try { process.kill(pid, 'SIGTERM'); } catch { return; }
  for (let i = 0; i < 150 && !exited(); i++) await sleep(100);
  if (!exited()) {
    console.log(`clients: corral serve (pid ${pid}) ignored SIGTERM; killing it`);
    try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
    for (let i = 0; i < 50 && !exited(); i++) await sleep(100);
  }
}

async function stopServer() {
  await stopOne(scripted, () => scriptedExited);
  await stopOne(server, () => serverExited);
}

function stopServerNow() {
  // Synchronous last resort (process exit, signals): SIGTERM by PID.
  if (server && !serverExited) {
    try { process.kill(server.pid, 'SIGTERM'); } catch { /* gone */ }
  }
  if (scripted && !scriptedExited) {
    try { process.kill(scripted.pid, 'SIGTERM'); } catch { /* gone */ }
  }
}

function cleanup() {
  if (process.env.CORRAL_CLIENTS_KEEP) {
    console.log(`clients: kept ${tmp}`);
    return;
  }
  rmSync(tmp, { recursive: true, force: true });
}

function dumpServeLog() {
  for (const file of [serveLog, scriptedLog]) {
    try {
      const text = readFileSync(file, 'utf8');
      console.log(`---- ${file} (last 4000 chars) ----`);
      console.log(text.slice(-4000));
      console.log('---- end of log ----');
    } catch { /* none */ }
  }
}

// The child running now (a CLI call or a test file), killed by PID when
// this script is told to stop.
let current = null;
let stopping = false;

async function interrupted(sig) {
  if (stopping) return;
  stopping = true;
  console.log(`clients: ${sig}: stopping`);
  if (current && current.exitCode === null && current.signalCode === null) {
    try { process.kill(current.pid, 'SIGTERM'); } catch { /* gone */ }
  }
  await stopServer();
  cleanup();
  process.exit(1);
}

process.on('exit', stopServerNow);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => interrupted(sig));

// Runs a program to its end without blocking the event loop (so signals
// are handled); resolves with its exit status and, unless inherit, output.
function runChild(exe, args, { inherit = false, timeoutMs = 300_000 } = {}) {
  return new Promise((resolve) => {
    const child = spawn(exe, args, { env: childEnv, cwd: tmp, stdio: inherit ? 'inherit' : ['ignore', 'pipe', 'pipe'] });
    current = child;
    let output = '';
    if (!inherit) {
      child.stdout.on('data', (d) => { output += d; });
      child.stderr.on('data', (d) => { output += d; });
    }
    const timer = setTimeout(() => {
      console.log(`clients: ${exe} ran past ${timeoutMs / 1000}s; killing it`);
      try { process.kill(child.pid, 'SIGKILL'); } catch { /* gone */ }
    }, timeoutMs);
    child.on('error', (e) => { output += String(e); });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (current === child) current = null;
      resolve({ status: code, signal, output });
    });
  });
}

let childEnv = env;

async function run(prog, args, what) {
  const r = await runChild(join(bin, prog), args);
  if (r.status !== 0) {
    throw new Error(`${what}: ${prog} ${args.join(' ')} exited ${r.status ?? r.signal}\n${r.output}`);
  }
  return r.output;
}

async function waitUp(at = host, exited = () => serverExited) {
  for (let i = 0; i < 300; i++) { // up to 30 s
    if (exited()) throw new Error('corral serve exited early');
    try {
      const res = await fetch(`http://${at}/`);
      const body = await res.text();
      if (res.status === 200 && body === 'Ollama is running') return;
    } catch { /* not yet */ }
    await sleep(100);
  }
  throw new Error(`corral serve did not answer on ${at}`);
}

// The chat template: messages by role, tool definitions, earlier tool calls
// in a llama3.1-like bare-JSON form (the tool-call parser's tag is "{").
const TEMPLATE = [
  '{{- if .System }}[system] {{ .System }}',
  '{{ end }}',
  '{{- if .Tools }}[tools] {{ range .Tools }}{{ json . }} {{ end }}',
  '{{ end }}',
  '{{- range .Messages }}[{{ .Role }}] {{ if .ToolCalls }}{{ range .ToolCalls }}{"name": "{{ .Function.Name }}", "arguments": {{ json .Function.Arguments }}}{{ end }}',
  '{{- else }}{{ .Content }}{{ end }}',
  '{{ end }}[assistant] ',
].join('\n');

// A qwen3-like template with the thinking capability, and what the
// scripted server answers: the parser splits it into thinking and text.
const THINK_TEMPLATE = [
  '{{- range $i, $_ := .Messages }}',
  '{{- $last := eq (len (slice $.Messages $i)) 1 -}}',
  '{{- if eq .Role "user" }}<|im_start|>user',
  '{{ .Content }}<|im_end|>',
  '{{ else if eq .Role "assistant" }}<|im_start|>assistant',
  '{{ if .Thinking }}<think>{{ .Thinking }}</think>',
  '{{ end }}{{ .Content }}<|im_end|>',
  '{{ end }}',
  '{{- if and (ne .Role "assistant") $last }}<|im_start|>assistant',
  '{{ if and $.IsThinkSet (not $.Think) }}<think>\n\n</think>\n\n{{ end }}',
  '{{ end }}',
  '{{- end }}',
].join('\n');
const SCRIPTED_ANSWER = '<think>reasoning here</think>final answer';

let status = 1;
try {
  log(`temp dir ${tmp}, host ${host}`);
  await run('corral-gguf-synth', ['--out', join(tmp, 'synth.gguf'), '--type', 'q8_0', '--seed', '7'], 'synthetic model');
  writeFileSync(join(tmp, 'Modelfile'),
    'FROM ./synth.gguf\n' +
    `TEMPLATE """${TEMPLATE}"""\n` +
    'PARAMETER temperature 0\n' +
    'PARAMETER num_predict 16\n');

  const out = openSync(serveLog, 'w');
  server = spawn(join(bin, 'corral'), ['serve'], { env, cwd: tmp, stdio: ['ignore', out, out] });
  server.on('exit', () => { serverExited = true; });
  await waitUp();
  log(`corral serve (pid ${server.pid}) is up`);

  await run('corral', ['create', 'synth', '-f', join(tmp, 'Modelfile')], 'create synth');
  await run('corral', ['cp', 'synth', 'slowload'], 'copy synth to slowload');
  // "long": greedy answers that run to num_predict (synth's end after 6 to
  // 1121 tokens), for the tests that abort a stream mid-way: an answer
  // that ended before the client acted would be read to its end, since
  // both libraries yield what they have buffered after an abort.
  await run('corral-gguf-synth', ['--out', join(tmp, 'long.gguf'), '--type', 'q8_0', '--seed', '5', '--ctx', '8192'], 'synthetic long model');
  writeFileSync(join(tmp, 'Modelfile.long'),
    'FROM ./long.gguf\n' +
    `TEMPLATE """${TEMPLATE}"""\n` +
    'PARAMETER temperature 0\n');
  await run('corral', ['create', 'long', '-f', join(tmp, 'Modelfile.long')], 'create long');
  log('created synth, slowload and long');

  // The scripted server and its "thinker": a template with the thinking
  // capability (<think> around .Thinking), every answer SCRIPTED_ANSWER.
  const port2 = await freePort();
  const host2 = `127.0.0.1:${port2}`;
  const script = join(tmp, 'script.txt');
  writeFileSync(script, `${SCRIPTED_ANSWER}\n`);
  const env2 = { ...env, CORRAL_RUNTIME_DIR: join(tmp, 'run2'), CORRAL_MODELS: join(tmp, 'models2'),
    CORRAL_HOST: host2, CORRAL_TEST_SCRIPT: script };
  const out2 = openSync(scriptedLog, 'w');
  scripted = spawn(join(bin, 'corral'), ['serve'], { env: env2, cwd: tmp, stdio: ['ignore', out2, out2] });
  scripted.on('exit', () => { scriptedExited = true; });
  await waitUp(host2, () => scriptedExited);
  writeFileSync(join(tmp, 'Modelfile.thinker'),
    'FROM ./synth.gguf\n' + `TEMPLATE """${THINK_TEMPLATE}"""\n`);
  childEnv = env2;
  await run('corral', ['create', 'thinker', '-f', join(tmp, 'Modelfile.thinker')], 'create thinker');
  childEnv = env;
  log(`scripted corral serve (pid ${scripted.pid}) is up with thinker`);

  const testEnv = { ...env, CORRAL_CLIENTS_HOST: host, CORRAL_CLIENTS_SCRIPTED_HOST: host2 };
  const td = process.env.CORRAL_TESTDATA;
  const stories = td && join(td, 'models', 'stories260K.gguf');
  const ref = td && join(td, 'reference', 'stories260K-F32', 'ref.greedy_text.txt');
  if (stories && existsSync(stories) && existsSync(ref)) {
    writeFileSync(join(tmp, 'Modelfile.stories'), `FROM ${stories}\n`);
    await run('corral', ['create', 'stories', '-f', join(tmp, 'Modelfile.stories')], 'create stories');
    testEnv.CORRAL_CLIENTS_STORIES_REF = ref;
    log('created stories');
  } else {
    log('no stories260K testdata; the fidelity test will skip');
  }

  const files = readdirSync(join(here, 'tests')).filter((f) => f.endsWith('.test.mjs')).sort();
  const only = process.env.CORRAL_CLIENTS_ONLY;
  const failed = [];
  for (const f of files) {
    if (only && !f.includes(only)) continue;
    const start = Date.now();
    childEnv = testEnv;
    const r = await runChild(process.execPath, ['--test', join(here, 'tests', f)], { inherit: true, timeoutMs: 400_000 });
    if (stopping) await new Promise(() => {}); // interrupted() exits
    const secs = ((Date.now() - start) / 1000).toFixed(1);
    log(`${f}: ${r.status === 0 ? 'ok' : 'FAILED'} in ${secs}s`);
    if (r.status !== 0) failed.push(f);
  }
  // The server must still be healthy after everything above (aborts too).
  const res = await fetch(`http://${host}/`);
  if (res.status !== 200) failed.push('final health check');
  const res2 = await fetch(`http://${host2}/`);
  if (res2.status !== 200) failed.push('final health check of the scripted server');
  if (failed.length) {
    log(`failed: ${failed.join(', ')}`);
    dumpServeLog();
  } else {
    log('all client tests passed');
    status = 0;
  }
} catch (e) {
  if (stopping) await new Promise(() => {});
  console.log(`clients: ${e.stack || e}`);
  dumpServeLog();
}
await stopServer();
log('server stopped');
// A sanitizer build of the services reports into the serve logs (leaks at
// exit, so only now): any report fails the run.
for (const file of [serveLog, scriptedLog]) {
  try {
    const text = readFileSync(file, 'utf8');
    const m = text.match(/ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:/);
    if (m) {
      log(`${file} has a sanitizer report (${m[0]})`);
      const at = text.indexOf(m[0]);
      console.log(text.slice(Math.max(0, at - 500), at + 6000));
      status = 1;
    }
  } catch { /* no log */ }
}
cleanup();
process.exit(status);
