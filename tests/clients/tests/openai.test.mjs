// openai.test.mjs: corral's /v1 routes through the official openai SDK.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { LONG_MODEL, MODEL, openaiClient, ollamaClient, healthy } from './lib.mjs';

const openai = openaiClient();
const MISSING = 'no-such-model-here';
const MESSAGES = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'hello there' },
];

function assertNotFound(err) {
  assert.ok(err instanceof OpenAI.NotFoundError, `expected NotFoundError, got ${err?.constructor?.name}: ${err?.message}`);
  assert.equal(err.status, 404);
  assert.match(err.message, /not found/);
  assert.equal(err.type, 'not_found_error');
  return true;
}

function assertUsage(usage, maxCompletion) {
  assert.ok(usage, 'usage present');
  assert.ok(usage.prompt_tokens > 0, `prompt_tokens ${usage.prompt_tokens}`);
  assert.ok(usage.completion_tokens >= 1 && usage.completion_tokens <= maxCompletion,
    `completion_tokens ${usage.completion_tokens} (max ${maxCompletion})`);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
}

test('models.list and models.retrieve', async () => {
  const page = await openai.models.list();
  const ids = [];
  for await (const m of page) {
    assert.equal(m.object, 'model');
    assert.ok(Number.isInteger(m.created) && m.created > 1_600_000_000, `created ${m.created}`);
    assert.equal(typeof m.owned_by, 'string');
    ids.push(m.id);
  }
  assert.ok(ids.includes(`${MODEL}:latest`), `ids ${JSON.stringify(ids)}`);
  // The id echoes the name as requested, as Ollama does.
  const one = await openai.models.retrieve(MODEL);
  assert.equal(one.id, MODEL);
  assert.equal(one.object, 'model');
  const full = await openai.models.retrieve(`${MODEL}:latest`);
  assert.equal(full.id, `${MODEL}:latest`);
  assert.equal(full.created, one.created);
  await assert.rejects(openai.models.retrieve(MISSING), assertNotFound);
});

let chatText = null;

test('chat.completions.create, not streaming', async () => {
  const r = await openai.chat.completions.create({ model: MODEL, messages: MESSAGES, temperature: 0, max_tokens: 12 });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-\d+$/);
  assert.equal(r.model, MODEL);
  assert.equal(r.system_fingerprint, 'fp_ollama');
  assert.ok(Number.isInteger(r.created));
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.index, 0);
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(['stop', 'length'].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
  assertUsage(r.usage, 12);
  if (c.finish_reason === 'length') assert.equal(r.usage.completion_tokens, 12);
  chatText = c.message.content;
});

test('chat.completions.create, streaming with usage', async () => {
  const stream = await openai.chat.completions.create({
    model: MODEL, messages: MESSAGES, temperature: 0, max_tokens: 12, stream: true,
    stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const ch of stream) chunks.push(ch);
  assert.ok(chunks.length >= 3, `${chunks.length} chunks`);
  const ids = new Set(chunks.map((c) => c.id));
  assert.equal(ids.size, 1, 'one id for the stream');
  assert.equal(new Set(chunks.map((c) => c.created)).size, 1, 'one created for the stream');
  for (const c of chunks) assert.equal(c.object, 'chat.completion.chunk');
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const usageChunk = chunks.at(-1);
  assert.deepEqual(usageChunk.choices, []);
  assertUsage(usageChunk.usage, 12);
  const finish = chunks.at(-2).choices[0];
  assert.ok(['stop', 'length'].includes(finish.finish_reason), `finish ${finish.finish_reason}`);
  for (const c of chunks.slice(0, -2)) assert.equal(c.choices[0].finish_reason, null);
  const text = chunks.slice(0, -1).map((c) => c.choices[0].delta.content ?? '').join('');
  assert.equal(text, chatText, 'temperature 0: same text as the non-streaming call');
});

test('chat.completions: content as an array of text parts', async () => {
  const r = await openai.chat.completions.create({
    model: MODEL, temperature: 0, max_tokens: 12,
    messages: [MESSAGES[0], { role: 'user', content: [{ type: 'text', text: 'hello there' }] }],
  });
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
});

test('chat.completions: seed makes sampling repeatable', async () => {
  const req = { model: MODEL, messages: MESSAGES, temperature: 1.1, seed: 77, max_tokens: 10 };
  const a = await openai.chat.completions.create(req);
  const b = await openai.chat.completions.create(req);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.equal(a.usage.completion_tokens, b.usage.completion_tokens);
});

test('chat.completions: max_tokens limits the output', async () => {
  const r = await openai.chat.completions.create({ model: MODEL, messages: MESSAGES, temperature: 0, max_tokens: 2 });
  assert.ok(r.usage.completion_tokens <= 2, `completion_tokens ${r.usage.completion_tokens}`);
  if (r.choices[0].finish_reason === 'length') assert.equal(r.usage.completion_tokens, 2);
});

test('completions.create, not streaming and streaming', async () => {
  const r = await openai.completions.create({ model: MODEL, prompt: 'Once upon a time', temperature: 0, max_tokens: 8 });
  assert.equal(r.object, 'text_completion');
  assert.match(r.id, /^cmpl-\d+$/);
  assert.equal(r.choices.length, 1);
  assert.equal(typeof r.choices[0].text, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assertUsage(r.usage, 8);

  const stream = await openai.completions.create({
    model: MODEL, prompt: 'Once upon a time', temperature: 0, max_tokens: 8, stream: true,
    stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const ch of stream) chunks.push(ch);
  for (const c of chunks) assert.equal(c.object, 'text_completion');
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assertUsage(last.usage, 8);
  assert.equal(chunks.slice(0, -1).map((c) => c.choices[0].text).join(''), r.choices[0].text);
});

test('embeddings.create: float and base64 agree', async () => {
  const input = ['hello', 'a different text'];
  const f = await openai.embeddings.create({ model: MODEL, input, encoding_format: 'float' });
  assert.equal(f.object, 'list');
  assert.equal(f.model, MODEL);
  assert.equal(f.data.length, 2);
  assert.ok(f.usage.prompt_tokens > 0);
  assert.equal(f.usage.total_tokens, f.usage.prompt_tokens);
  const dim = f.data[0].embedding.length;
  assert.ok(dim > 0);
  f.data.forEach((d, i) => {
    assert.equal(d.object, 'embedding');
    assert.equal(d.index, i);
    assert.equal(d.embedding.length, dim);
  });

  const b = await openai.embeddings.create({ model: MODEL, input, encoding_format: 'base64' });
  assert.equal(b.data.length, 2);
  b.data.forEach((d, i) => {
    assert.equal(typeof d.embedding, 'string', 'base64 stays a string when asked for');
    const bytes = Buffer.from(d.embedding, 'base64');
    assert.equal(bytes.length, dim * 4);
    for (let k = 0; k < dim; k++)
      assert.ok(Math.abs(bytes.readFloatLE(k * 4) - f.data[i].embedding[k]) < 1e-6, `row ${i} [${k}]`);
  });

  // The SDK's default (base64 on the wire, decoded by the SDK) gives floats too.
  const d = await openai.embeddings.create({ model: MODEL, input: 'hello' });
  assert.equal(d.data[0].embedding.length, dim);
  for (let k = 0; k < dim; k++) assert.ok(Math.abs(d.data[0].embedding[k] - f.data[0].embedding[k]) < 1e-6);

  // Same vectors as the native /api/embed.
  const native = await ollamaClient().embed({ model: MODEL, input });
  for (let k = 0; k < dim; k++) assert.ok(Math.abs(native.embeddings[1][k] - f.data[1].embedding[k]) < 1e-6);
});

test('missing model: NotFoundError on every route', async () => {
  await assert.rejects(openai.chat.completions.create({ model: MISSING, messages: MESSAGES }), assertNotFound);
  await assert.rejects(openai.chat.completions.create({ model: MISSING, messages: MESSAGES, stream: true }), assertNotFound);
  await assert.rejects(openai.completions.create({ model: MISSING, prompt: 'x' }), assertNotFound);
  await assert.rejects(openai.embeddings.create({ model: MISSING, input: 'x' }), assertNotFound);
});

test('bad request: empty messages is a BadRequestError', async () => {
  await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: [] }), (err) => {
    assert.ok(err instanceof OpenAI.BadRequestError, `${err?.constructor?.name}: ${err?.message}`);
    assert.equal(err.status, 400);
    assert.equal(err.type, 'invalid_request_error');
    return true;
  });
});

test('abort a chat stream mid-way; the server stays healthy', async () => {
  const ctl = new AbortController();
  const stream = await openai.chat.completions.create(
    { model: LONG_MODEL, messages: MESSAGES, max_tokens: 4000, stream: true }, { signal: ctl.signal });
  let seen = 0;
  let finished = false;
  try {
    // The SDK ends the iteration quietly on an abort (or throws an abort error).
    for await (const ch of stream) {
      if (ch.choices[0]?.finish_reason) finished = true;
      if (++seen === 3) ctl.abort();
    }
  } catch (err) {
    assert.ok(err instanceof OpenAI.APIUserAbortError || err.name === 'AbortError', `${err.name}: ${err.message}`);
  }
  assert.ok(ctl.signal.aborted);
  assert.equal(finished, false, 'no finish chunk after the abort');
  assert.ok(seen >= 3 && seen < 4000, `${seen} chunks read`);
  assert.ok(await healthy());
  const r = await openai.chat.completions.create({ model: MODEL, messages: MESSAGES, temperature: 0, max_tokens: 12 });
  assert.equal(r.choices[0].message.content, chatText);
});
