// ollama.test.mjs: corral through the official ollama JavaScript library.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LONG_MODEL, MODEL, ollamaClient, collect, healthy } from './lib.mjs';

const ollama = ollamaClient();
const MISSING = 'no-such-model-here';

function assertNotFound(err) {
  assert.equal(err.name, 'ResponseError', `expected a ResponseError, got ${err.name}: ${err.message}`);
  assert.equal(err.status_code, 404, `status of: ${err.message}`);
  assert.match(err.message, /not found/);
  return true;
}

test('version', async () => {
  const v = await ollama.version();
  assert.equal(typeof v.version, 'string');
  assert.match(v.version, /^\d+\.\d+\.\d+/);
});

test('list shows the created model', async () => {
  const { models } = await ollama.list();
  assert.ok(Array.isArray(models));
  const m = models.find((x) => x.name === `${MODEL}:latest`);
  assert.ok(m, `synth:latest in ${JSON.stringify(models.map((x) => x.name))}`);
  assert.equal(m.model, `${MODEL}:latest`);
  assert.ok(m.size > 0, 'size');
  assert.match(m.digest, /^[0-9a-f]{64}$/);
  assert.ok(!Number.isNaN(Date.parse(m.modified_at)), `modified_at ${m.modified_at}`);
  assert.equal(m.details.format, 'gguf');
  assert.equal(m.details.quantization_level, 'Q8_0');
});

test('show returns template, parameters and details', async () => {
  const s = await ollama.show({ model: MODEL });
  assert.match(s.template, /\.Messages/);
  assert.match(s.parameters, /temperature\s+0/);
  assert.match(s.parameters, /num_predict\s+16/);
  assert.match(s.modelfile, /FROM /);
  assert.equal(s.details.format, 'gguf');
  assert.equal(s.details.quantization_level, 'Q8_0');
  assert.ok(Array.isArray(s.capabilities) && s.capabilities.includes('completion'),
    `capabilities ${JSON.stringify(s.capabilities)}`);
  assert.equal(typeof s.model_info, 'object');
  assert.equal(s.model_info['general.architecture'], 'llama');
});

test('show is case-insensitive about the model name', async () => {
  const s = await ollama.show({ model: MODEL.toUpperCase() });
  assert.match(s.template, /\.Messages/);
});

let plainText = null;

test('generate, not streaming', async () => {
  const r = await ollama.generate({ model: MODEL, prompt: 'tell me a story', stream: false });
  assert.equal(r.model, MODEL);
  assert.equal(r.done, true);
  assert.ok(['stop', 'length'].includes(r.done_reason), `done_reason ${r.done_reason}`);
  assert.equal(typeof r.response, 'string');
  assert.ok(r.eval_count >= 1 && r.eval_count <= 16, `eval_count ${r.eval_count} (num_predict 16)`);
  if (r.done_reason === 'length') assert.equal(r.eval_count, 16);
  assert.ok(r.prompt_eval_count > 0, 'prompt_eval_count');
  assert.ok(r.total_duration > 0, 'total_duration');
  assert.ok(Array.isArray(r.context) && r.context.length > 0, 'context');
  plainText = r.response;
});

test('generate, streaming: same text as the non-streaming form', async () => {
  const stream = await ollama.generate({ model: MODEL, prompt: 'tell me a story', stream: true });
  const parts = await collect(stream);
  assert.ok(parts.length >= 2, `${parts.length} parts`);
  const last = parts.at(-1);
  assert.equal(last.done, true);
  assert.ok(['stop', 'length'].includes(last.done_reason));
  for (const p of parts.slice(0, -1)) assert.equal(p.done, false);
  const text = parts.map((p) => p.response).join('');
  assert.equal(text, plainText, 'temperature 0 from the Modelfile: the same greedy text');
  assert.ok(last.eval_count >= 1 && last.eval_count <= 16);
});

test('generate with num_predict from options', async () => {
  const r = await ollama.generate({ model: MODEL, prompt: 'count', stream: false, options: { num_predict: 3 } });
  assert.ok(r.eval_count <= 3, `eval_count ${r.eval_count}`);
  if (r.done_reason === 'length') assert.equal(r.eval_count, 3);
});

test('generate raw mode returns no context', async () => {
  const r = await ollama.generate({ model: MODEL, prompt: 'abc', raw: true, stream: false, options: { num_predict: 4 } });
  assert.equal(r.done, true);
  assert.equal(r.context, undefined);
});

let chatText = null;
const MESSAGES = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'hello there' },
];

test('chat, not streaming', async () => {
  const r = await ollama.chat({ model: MODEL, messages: MESSAGES, stream: false });
  assert.equal(r.model, MODEL);
  assert.equal(r.done, true);
  assert.equal(r.message.role, 'assistant');
  assert.equal(typeof r.message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.done_reason), `done_reason ${r.done_reason}`);
  assert.ok(r.eval_count >= 1 && r.eval_count <= 16);
  assert.ok(r.prompt_eval_count > 0);
  chatText = r.message.content;
});

test('chat, streaming: same text as the non-streaming form', async () => {
  const stream = await ollama.chat({ model: MODEL, messages: MESSAGES, stream: true });
  const parts = await collect(stream);
  assert.ok(parts.length >= 2);
  for (const p of parts) assert.equal(p.message.role, 'assistant');
  assert.equal(parts.at(-1).done, true);
  assert.equal(parts.map((p) => p.message.content).join(''), chatText);
});

test('chat with a multi-turn history', async () => {
  const r = await ollama.chat({
    model: MODEL,
    stream: false,
    messages: [...MESSAGES, { role: 'assistant', content: 'hi' }, { role: 'user', content: 'again' }],
  });
  assert.equal(r.done, true);
  assert.equal(r.message.role, 'assistant');
});

test('ps lists the loaded model', async () => {
  const { models } = await ollama.ps();
  const m = models.find((x) => x.name === `${MODEL}:latest`);
  assert.ok(m, `loaded: ${JSON.stringify(models.map((x) => x.name))}`);
  assert.equal(m.model, `${MODEL}:latest`);
  assert.ok(m.size > 0);
  assert.match(m.digest, /^[0-9a-f]{64}$/);
  assert.ok(Date.parse(m.expires_at) > Date.now(), `expires_at ${m.expires_at}`);
});

test('seeded sampling is deterministic', async () => {
  const req = { model: MODEL, prompt: 'random please', stream: false, options: { seed: 1234, temperature: 1.2, top_k: 0, top_p: 1 } };
  const a = await ollama.generate(req);
  const b = await ollama.generate(req);
  assert.ok(a.response.length > 0 || a.eval_count > 0);
  assert.equal(a.response, b.response);
  assert.equal(a.eval_count, b.eval_count);
  const ca = await ollama.chat({ model: MODEL, messages: MESSAGES, stream: false, options: { seed: 99, temperature: 1 } });
  const cb = await ollama.chat({ model: MODEL, messages: MESSAGES, stream: false, options: { seed: 99, temperature: 1 } });
  assert.equal(ca.message.content, cb.message.content);
});

test('embed: one and many inputs', async () => {
  const one = await ollama.embed({ model: MODEL, input: 'hello' });
  assert.equal(one.model, MODEL);
  assert.equal(one.embeddings.length, 1);
  const dim = one.embeddings[0].length;
  assert.ok(dim > 0);
  const many = await ollama.embed({ model: MODEL, input: ['hello', 'a different text'] });
  assert.equal(many.embeddings.length, 2);
  for (const e of many.embeddings) {
    assert.equal(e.length, dim);
    assert.ok(e.every(Number.isFinite));
    // /api/embed normalises to unit length.
    const norm = Math.sqrt(e.reduce((s, x) => s + x * x, 0));
    assert.ok(Math.abs(norm - 1) < 1e-3, `norm ${norm}`);
  }
  for (let i = 0; i < dim; i++) assert.ok(Math.abs(many.embeddings[0][i] - one.embeddings[0][i]) < 1e-5);
  assert.notDeepEqual(many.embeddings[0], many.embeddings[1]);
  assert.ok(many.prompt_eval_count > 0, 'prompt_eval_count');
});

test('legacy embeddings', async () => {
  const r = await ollama.embeddings({ model: MODEL, prompt: 'hello' });
  assert.ok(Array.isArray(r.embedding) && r.embedding.length > 0);
  assert.ok(r.embedding.every(Number.isFinite));
});

test('copy then delete', async () => {
  const twin = 'synth-twin:v1';
  await ollama.copy({ source: MODEL, destination: twin });
  let { models } = await ollama.list();
  const orig = models.find((x) => x.name === `${MODEL}:latest`);
  const copy = models.find((x) => x.name === twin);
  assert.ok(copy, `copy listed: ${JSON.stringify(models.map((x) => x.name))}`);
  assert.equal(copy.digest, orig.digest);
  const s = await ollama.show({ model: twin });
  assert.match(s.template, /\.Messages/);
  const g = await ollama.generate({ model: twin, prompt: 'tell me a story', stream: false });
  assert.equal(g.response, plainText, 'the copy is the same model');
  await ollama.delete({ model: twin });
  ({ models } = await ollama.list());
  assert.equal(models.find((x) => x.name === twin), undefined);
  assert.ok(models.find((x) => x.name === `${MODEL}:latest`), 'the source survives');
  await assert.rejects(ollama.delete({ model: twin }), assertNotFound);
});

test('copy of a missing model is a 404', async () => {
  await assert.rejects(ollama.copy({ source: MISSING, destination: 'x:y' }), assertNotFound);
});

async function abortMidway(abort) {
  const stream = await ollama.generate({
    model: LONG_MODEL, prompt: 'a long story', stream: true, options: { num_predict: 4000 },
  });
  let seen = 0;
  let caught = null;
  try {
    for await (const part of stream) {
      assert.equal(part.done, false, 'aborted before the end');
      if (++seen === 3) abort(stream);
    }
  } catch (err) {
    caught = err;
  }
  assert.ok(caught, 'iteration ends with an error after abort');
  assert.equal(caught.name, 'AbortError', `${caught.name}: ${caught.message}`);
  assert.ok(seen >= 3 && seen < 4000);
}

test('abort a stream mid-way with the iterator; the server stays healthy', async () => {
  await abortMidway((s) => s.abort());
  assert.ok(await healthy());
  const r = await ollama.generate({ model: MODEL, prompt: 'tell me a story', stream: false });
  assert.equal(r.response, plainText);
});

test('abort every stream with ollama.abort(); the server stays healthy', async () => {
  await abortMidway(() => ollama.abort());
  assert.ok(await healthy());
  const stream = await ollama.chat({ model: MODEL, messages: MESSAGES, stream: true });
  const parts = await collect(stream);
  assert.equal(parts.map((p) => p.message.content).join(''), chatText);
});

test('abort with an AbortController signal via a custom fetch', async () => {
  const ctl = new AbortController();
  const client = ollamaClient();
  const custom = new (client.constructor)({
    host: client.config.host,
    fetch: (url, opts) => fetch(url, { ...opts, signal: ctl.signal }),
  });
  const stream = await custom.generate({
    model: LONG_MODEL, prompt: 'go on', stream: true, options: { num_predict: 4000 },
  });
  let seen = 0;
  await assert.rejects(async () => {
    for await (const _ of stream) if (++seen === 2) ctl.abort();
  }, (err) => err.name === 'AbortError');
  assert.ok(await healthy());
});

test('missing model: 404 ResponseError on every route', async () => {
  await assert.rejects(ollama.generate({ model: MISSING, prompt: 'hi', stream: false }), assertNotFound);
  await assert.rejects(ollama.generate({ model: MISSING, prompt: 'hi', stream: true }), assertNotFound);
  await assert.rejects(ollama.chat({ model: MISSING, messages: MESSAGES, stream: false }), assertNotFound);
  await assert.rejects(ollama.chat({ model: MISSING, messages: MESSAGES, stream: true }), assertNotFound);
  await assert.rejects(ollama.show({ model: MISSING }), assertNotFound);
  await assert.rejects(ollama.embed({ model: MISSING, input: 'x' }), assertNotFound);
  await assert.rejects(ollama.delete({ model: MISSING }), assertNotFound);
});
