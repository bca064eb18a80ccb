// loading.test.mjs: the official clients while a model is loading.
//
// run.mjs makes loads of "slowload" take 2.5 s (the runner's
// CORRAL_TEST_SLOW_LOAD hook), so a streaming request waits through a
// load and receives corral's load progress: NDJSON lines with
// "status":"loading model" (an empty, not-done answer piece) and, on /v1,
// SSE comment lines. Both libraries must read through them to the answer.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { collect, ollamaClient, openaiClient } from './lib.mjs';

const SLOW = 'slowload';

async function unload() {
  await ollamaClient().generate({ model: SLOW, prompt: '', keep_alive: 0 });
}

test('ollama generate streams through a load', async () => {
  await unload();
  const parts = await collect(await ollamaClient().generate({
    model: SLOW, prompt: 'hello', stream: true, options: { num_predict: 5 },
  }));
  const loading = parts.filter((p) => p.status === 'loading model');
  assert.ok(loading.length >= 1, 'no loading progress seen');
  for (const p of loading) {
    assert.equal(p.response, '');
    assert.equal(p.done, false);
  }
  const last = parts.at(-1);
  assert.equal(last.done, true);
  assert.ok(last.eval_count > 0);
});

test('ollama chat streams through a load', async () => {
  await unload();
  const parts = await collect(await ollamaClient().chat({
    model: SLOW, messages: [{ role: 'user', content: 'hi' }], stream: true,
    options: { num_predict: 5 },
  }));
  assert.ok(parts.some((p) => p.status === 'loading model'));
  const text = parts.map((p) => p.message.content).join('');
  assert.ok(text.length > 0);
  assert.equal(parts.at(-1).done, true);
});

test('ollama non-streaming answer is unchanged by a load', async () => {
  await unload();
  const r = await ollamaClient().generate({
    model: SLOW, prompt: 'hello', stream: false, options: { num_predict: 5 },
  });
  assert.equal(r.done, true);
  assert.equal(r.status, undefined);
  assert.ok(r.load_duration > 2e9, `load_duration ${r.load_duration}`);
});

test('openai chat stream reads through a load', async () => {
  await unload();
  const stream = await openaiClient().chat.completions.create({
    model: SLOW, messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: 5,
  });
  const chunks = await collect(stream);
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  assert.ok(chunks.some((c) => c.choices[0]?.finish_reason));
  const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  assert.ok(text.length > 0);
});

test('raw SSE of /v1 carries the loading comment first', async () => {
  await unload();
  const { BASE } = await import('./lib.mjs');
  const res = await fetch(`${BASE}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: SLOW, messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: 3 }),
  });
  const body = await res.text();
  assert.equal(res.status, 200);
  assert.ok(body.startsWith(': loading model\n\n'), body.slice(0, 80));
  assert.ok(body.endsWith('data: [DONE]\n\n'));
});
