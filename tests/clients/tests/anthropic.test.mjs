// anthropic.test.mjs: corral's /v1/messages through the official Anthropic
// SDK (@anthropic-ai/sdk): messages.create and messages.stream with text,
// a tool-use round trip (the call forced by tool_choice, so the random
// model's answer is a call), thinking blocks (from the scripted server),
// count_tokens, and errors arriving as the SDK's typed errors.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { MODEL, SCRIPTED_HOST, THINK_MODEL, anthropicClient } from './lib.mjs';

const client = anthropicClient();
const ASK = [{ role: 'user', content: 'What is the weather in Paris?' }];
const WEATHER = {
  name: 'get_weather',
  description: 'The current weather in a city',
  // the enum makes the forced call's input exactly {"city":"Paris"}
  input_schema: {
    type: 'object',
    properties: { city: { type: 'string', enum: ['Paris'] } },
    required: ['city'],
    additionalProperties: false,
  },
};

function textOf(msg) {
  return msg.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
}

test('messages.create and messages.stream give the same text', async () => {
  const req = { model: MODEL, max_tokens: 8, temperature: 0, system: 'Be brief.', messages: [{ role: 'user', content: 'hello' }] };
  const msg = await client.messages.create(req);
  assert.equal(msg.type, 'message');
  assert.equal(msg.role, 'assistant');
  assert.equal(msg.model, MODEL);
  assert.match(msg.id, /^msg_[0-9a-f]{24}$/);
  assert.ok(['end_turn', 'max_tokens'].includes(msg.stop_reason), msg.stop_reason);
  assert.ok(msg.usage.input_tokens > 0);
  assert.ok(msg.usage.output_tokens > 0 && msg.usage.output_tokens <= 8);
  if (msg.stop_reason === 'max_tokens') assert.equal(msg.usage.output_tokens, 8);

  const stream = client.messages.stream(req);
  let pieces = '';
  stream.on('text', (t) => { pieces += t; });
  const final = await stream.finalMessage();
  assert.equal(textOf(final), textOf(msg));
  assert.equal(pieces, textOf(msg));
  assert.equal(final.stop_reason, msg.stop_reason);
  assert.equal(final.usage.output_tokens, msg.usage.output_tokens);
});

test('tool use round trip through messages.create and messages.stream', async () => {
  for (const streamed of [false, true]) {
    const req = { model: MODEL, max_tokens: 256, temperature: 0, tools: [WEATHER],
      tool_choice: { type: 'tool', name: 'get_weather' }, messages: ASK };
    const msg = streamed ? await client.messages.stream(req).finalMessage() : await client.messages.create(req);
    assert.equal(msg.stop_reason, 'tool_use', JSON.stringify(msg));
    const uses = msg.content.filter((b) => b.type === 'tool_use');
    assert.equal(uses.length, 1, JSON.stringify(msg.content));
    assert.equal(uses[0].name, 'get_weather');
    assert.deepEqual(uses[0].input, { city: 'Paris' });
    assert.match(uses[0].id, /^toolu_/);
    // the result goes back; the model answers in text
    const next = await client.messages.create({
      model: MODEL, max_tokens: 8, temperature: 0, tools: [WEATHER],
      messages: [...ASK, { role: 'assistant', content: msg.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: uses[0].id, content: '22 degrees and sunny' }] }],
    });
    assert.equal(next.type, 'message');
    // the whole prompt: evaluated plus read from the slot's cache
    const whole = (u) => u.input_tokens + u.cache_read_input_tokens;
    assert.ok(whole(next.usage) > whole(msg.usage),
      `the call and its result are in the prompt: ${whole(next.usage)} vs ${whole(msg.usage)}`);
  }
});

test('thinking blocks through messages.create and messages.stream', async () => {
  const scripted = anthropicClient(SCRIPTED_HOST);
  const req = { model: THINK_MODEL, max_tokens: 64, thinking: { type: 'enabled', budget_tokens: 32 },
    messages: [{ role: 'user', content: 'think first' }] };
  const msg = await scripted.messages.create(req);
  assert.deepEqual(msg.content.map((b) => b.type), ['thinking', 'text']);
  assert.equal(msg.content[0].thinking, 'reasoning here');
  assert.equal(msg.content[1].text, 'final answer');
  assert.equal(msg.stop_reason, 'end_turn');

  const stream = scripted.messages.stream(req);
  let thinking = '';
  stream.on('thinking', (delta) => { thinking += delta; });
  const final = await stream.finalMessage();
  assert.equal(thinking, 'reasoning here');
  assert.deepEqual(final.content.map((b) => b.type), ['thinking', 'text']);
  assert.equal(final.content[0].thinking, 'reasoning here');
  assert.equal(final.content[1].text, 'final answer');
});

test('messages.countTokens counts what the model would read', async () => {
  const a = await client.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: 'hello' }] });
  const b = await client.messages.countTokens({ model: MODEL, system: 'You answer in French, always.',
    messages: [{ role: 'user', content: 'hello' }] });
  assert.ok(a.input_tokens > 0);
  assert.ok(b.input_tokens > a.input_tokens, `${b.input_tokens} > ${a.input_tokens}`);
});

test('errors are the SDK\'s typed errors', async () => {
  await assert.rejects(client.messages.create({ model: 'no-such-model', max_tokens: 8, messages: ASK }),
    (e) => e instanceof Anthropic.NotFoundError && e.error?.error?.type === 'not_found_error');
  await assert.rejects(client.messages.create({ model: MODEL, max_tokens: 8,
    messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'x' } }] }] }),
  (e) => e instanceof Anthropic.BadRequestError && /unknown content block type 'document'/.test(e.message));
});
