// stories.test.mjs: a real trained model (stories260K) through the ollama
// library gives llama.cpp's greedy text. Skips without the shared testdata.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { ollamaClient, collect } from './lib.mjs';

const refPath = process.env.CORRAL_CLIENTS_STORIES_REF;
const ollama = ollamaClient();
const REQ = { model: 'stories', prompt: 'Once upon a time', raw: true, options: { temperature: 0, num_predict: 32 } };

test('stories260K greedy text matches llama.cpp', { skip: !refPath && 'no stories260K testdata' }, async () => {
  const ref = readFileSync(refPath, 'utf8');
  const r = await ollama.generate({ ...REQ, stream: false });
  assert.ok(r.response.length > 20, `response '${r.response}'`);
  assert.ok(ref.startsWith(r.response), `response '${r.response}'\nreference '${ref.slice(0, r.response.length + 40)}'`);
  assert.equal(r.eval_count, 32);
  assert.equal(r.done_reason, 'length');

  const parts = await collect(await ollama.generate({ ...REQ, stream: true }));
  assert.equal(parts.map((p) => p.response).join(''), r.response, 'streamed text is the same');
});
