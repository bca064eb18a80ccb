// responses.test.mjs: corral's /v1/responses through the official openai
// SDK: responses.create streamed and not (text, a json_schema format, a
// function call round trip forced by tool_choice, reasoning from the
// scripted server), the responses.stream helper assembling the events, and
// previous_response_id refused as a BadRequestError.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { MODEL, SCRIPTED_HOST, THINK_MODEL, openaiClient, openaiClientAt, collect } from './lib.mjs';

const openai = openaiClient();
const WEATHER = {
  type: 'function',
  name: 'get_weather',
  description: 'The current weather in a city',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string', enum: ['Paris'] } },
    required: ['city'],
    additionalProperties: false,
  },
};

test('responses.create, not streaming and streaming, agree', async () => {
  const req = { model: MODEL, instructions: 'Be brief.', input: 'hello', max_output_tokens: 8, temperature: 0 };
  const r = await openai.responses.create(req);
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.ok(['completed', 'incomplete'].includes(r.status), r.status);
  if (r.status === 'incomplete') assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0 && r.usage.output_tokens <= 8);
  assert.equal(typeof r.output_text, 'string');

  const events = await collect(await openai.responses.create({ ...req, stream: true }));
  const types = events.map((e) => e.type);
  assert.equal(types[0], 'response.created');
  assert.equal(types.at(-1), r.status === 'completed' ? 'response.completed' : 'response.incomplete');
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  assert.equal(text, r.output_text);
  assert.equal(events.at(-1).response.usage.output_tokens, r.usage.output_tokens);
});

test('responses.create with a json_schema text format', async () => {
  const schema = { type: 'object', properties: { answer: { type: 'string', enum: ['yes', 'no'] } },
    required: ['answer'], additionalProperties: false };
  const r = await openai.responses.create({ model: MODEL, input: 'yes or no?', max_output_tokens: 256,
    text: { format: { type: 'json_schema', name: 'answer', schema, strict: true } } });
  const v = JSON.parse(r.output_text);
  assert.ok(['yes', 'no'].includes(v.answer), r.output_text);
});

test('function call round trip, streamed and not', async () => {
  for (const stream of [false, true]) {
    const req = { model: MODEL, input: 'What is the weather in Paris?', tools: [WEATHER],
      tool_choice: 'required', max_output_tokens: 256, temperature: 0 };
    let output;
    if (stream) {
      const events = await collect(await openai.responses.create({ ...req, stream: true }));
      const done = events.find((e) => e.type === 'response.function_call_arguments.done');
      assert.deepEqual(JSON.parse(done.arguments), { city: 'Paris' });
      output = events.at(-1).response.output;
    } else {
      output = (await openai.responses.create(req)).output;
    }
    const calls = output.filter((o) => o.type === 'function_call');
    assert.equal(calls.length, 1, JSON.stringify(output));
    assert.equal(calls[0].name, 'get_weather');
    assert.deepEqual(JSON.parse(calls[0].arguments), { city: 'Paris' });
    const next = await openai.responses.create({
      model: MODEL, tools: [WEATHER], max_output_tokens: 8, temperature: 0,
      input: [{ role: 'user', content: 'What is the weather in Paris?' }, calls[0],
        { type: 'function_call_output', call_id: calls[0].call_id, output: '22 degrees and sunny' }],
    });
    assert.equal(next.object, 'response');
    assert.ok(next.usage.input_tokens > 0);
  }
});

test('reasoning items from a thinking model', async () => {
  const scripted = openaiClientAt(SCRIPTED_HOST);
  const req = { model: THINK_MODEL, input: 'think first', reasoning: { effort: 'medium' } };
  const r = await scripted.responses.create(req);
  assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message']);
  assert.equal(r.output[0].summary[0].text, 'reasoning here');
  assert.equal(r.output_text, 'final answer');
  const events = await collect(await scripted.responses.create({ ...req, stream: true }));
  const summary = events.filter((e) => e.type === 'response.reasoning_summary_text.delta').map((e) => e.delta).join('');
  assert.equal(summary, 'reasoning here');
  assert.deepEqual(events.at(-1).response.output.map((o) => o.type), ['reasoning', 'message']);
});

test('responses.stream assembles the same response from the events', async () => {
  // The SDK's stream helper places every delta by output_index and
  // content_index, so the indices the server sends must hold together.
  const scripted = openaiClientAt(SCRIPTED_HOST);
  const stream = scripted.responses.stream({ model: THINK_MODEL, input: 'think first' });
  let text = '';
  stream.on('response.output_text.delta', (e) => { text += e.delta; });
  const r = await stream.finalResponse();
  assert.equal(text, 'final answer');
  assert.equal(r.output_text, 'final answer');
  assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message']);
  // and with a forced function call from the main server
  const calls = await openai.responses.stream({ model: MODEL, input: 'Weather?', tools: [WEATHER],
    tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 256, temperature: 0 }).finalResponse();
  const fc = calls.output.find((o) => o.type === 'function_call');
  assert.deepEqual(JSON.parse(fc.arguments), { city: 'Paris' });
});

test('previous_response_id is a BadRequestError', async () => {
  await assert.rejects(openai.responses.create({ model: MODEL, input: 'x', previous_response_id: 'resp_123' }),
    (e) => e instanceof OpenAI.BadRequestError && /previous_response_id/.test(e.message));
});
