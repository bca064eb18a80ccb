// format.test.mjs: structured output (JSON format, JSON schema) and the
// tools round trip through both clients. The model has random weights, so
// a schema with fixed values forces what it writes; a tool call is forced
// the same way and must come back parsed as a tool call.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MODEL, ollamaClient, openaiClient, withFormat, collect } from './lib.mjs';

const ollama = ollamaClient();
const openai = openaiClient();
const LONG = { num_predict: 256 };

const ANSWER_SCHEMA = {
  type: 'object',
  properties: { answer: { type: 'string', enum: ['yes', 'no'] }, count: { type: 'integer', enum: [3] } },
  required: ['answer', 'count'],
  additionalProperties: false,
};

function checkAnswer(text) {
  const v = JSON.parse(text);
  assert.ok(['yes', 'no'].includes(v.answer), `answer in ${text}`);
  assert.equal(v.count, 3);
  assert.deepEqual(Object.keys(v).sort(), ['answer', 'count']);
}

const WEATHER_TOOL = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The current weather in a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', description: 'the city' } },
      required: ['city'],
    },
  },
};

// Forces the model's text to be exactly one call of get_weather for Paris.
const CALL_SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string', enum: ['get_weather'] },
    arguments: {
      type: 'object',
      properties: { city: { type: 'string', enum: ['Paris'] } },
      required: ['city'],
      additionalProperties: false,
    },
  },
  required: ['name', 'arguments'],
  additionalProperties: false,
};

const ASK = [{ role: 'user', content: 'What is the weather in Paris?' }];

test('generate with a JSON schema format', async (t) => {
  await withFormat(t, async () => {
    const r = await ollama.generate({ model: MODEL, prompt: 'answer me', format: ANSWER_SCHEMA, stream: false, options: LONG });
    assert.equal(r.done_reason, 'stop');
    checkAnswer(r.response);
  });
});

test('chat with a JSON schema format, streaming', async (t) => {
  await withFormat(t, async () => {
    const parts = await collect(await ollama.chat({ model: MODEL, messages: ASK, format: ANSWER_SCHEMA, stream: true, options: LONG }));
    checkAnswer(parts.map((p) => p.message.content).join(''));
  });
});

test('generate with format "json" writes JSON', async (t) => {
  await withFormat(t, async () => {
    const r = await ollama.generate({ model: MODEL, prompt: 'json please', format: 'json', stream: false, options: { num_predict: 64 } });
    assert.match(r.response, /^\s*[{[]/, `response '${r.response}'`);
    if (r.done_reason === 'stop') JSON.parse(r.response);
  });
});

test('openai response_format json_schema and json_object', async (t) => {
  await withFormat(t, async () => {
    const r = await openai.chat.completions.create({
      model: MODEL, messages: ASK, max_tokens: 256, temperature: 0,
      response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: ANSWER_SCHEMA } },
    });
    assert.equal(r.choices[0].finish_reason, 'stop');
    checkAnswer(r.choices[0].message.content);
    const o = await openai.chat.completions.create({
      model: MODEL, messages: ASK, max_tokens: 64, temperature: 0, response_format: { type: 'json_object' },
    });
    assert.match(o.choices[0].message.content, /^\s*[{[]/);
  });
});

test('tools round trip through the ollama library', async (t) => {
  await withFormat(t, async () => {
    for (const stream of [false, true]) {
      const req = { model: MODEL, messages: ASK, tools: [WEATHER_TOOL], format: CALL_SCHEMA, options: LONG };
      let msg;
      if (stream) {
        const parts = await collect(await ollama.chat({ ...req, stream: true }));
        const calls = parts.flatMap((p) => p.message.tool_calls ?? []);
        msg = { role: 'assistant', content: parts.map((p) => p.message.content).join(''), tool_calls: calls };
      } else {
        msg = (await ollama.chat({ ...req, stream: false })).message;
      }
      assert.ok(msg.tool_calls?.length === 1, `one tool call (stream ${stream}): ${JSON.stringify(msg)}`);
      const call = msg.tool_calls[0];
      assert.equal(call.function.name, 'get_weather');
      assert.deepEqual(call.function.arguments, { city: 'Paris' });
      assert.equal(msg.content.trim(), '', 'the call is not left in the content');

      const next = await ollama.chat({
        model: MODEL, stream: false, tools: [WEATHER_TOOL],
        messages: [...ASK, msg, { role: 'tool', tool_name: 'get_weather', content: '22 degrees and sunny' }],
      });
      assert.equal(next.done, true);
      assert.equal(next.message.role, 'assistant');
    }
  });
});

test('tools round trip through the openai SDK', async (t) => {
  await withFormat(t, async () => {
    const r = await openai.chat.completions.create({
      model: MODEL, messages: ASK, tools: [WEATHER_TOOL], max_tokens: 256, temperature: 0,
      response_format: { type: 'json_schema', json_schema: { name: 'call', schema: CALL_SCHEMA } },
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.tool_calls?.length, 1, JSON.stringify(c.message));
    const call = c.message.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.equal(typeof call.id, 'string');
    assert.equal(call.function.name, 'get_weather');
    assert.equal(typeof call.function.arguments, 'string', 'arguments are a JSON string');
    assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' });

    const next = await openai.chat.completions.create({
      model: MODEL, tools: [WEATHER_TOOL], max_tokens: 8, temperature: 0,
      messages: [...ASK, c.message, { role: 'tool', tool_call_id: call.id, content: '22 degrees and sunny' }],
    });
    assert.equal(next.choices[0].message.role, 'assistant');
  });
});

// Needs no structured output: a history with a call and its result is
// rendered by the template (.ToolCalls, json) and answered.
test('tool definitions, calls and results are accepted in a history', async () => {
  const call = { function: { name: 'get_weather', arguments: { city: 'Paris' } } };
  const r = await ollama.chat({
    model: MODEL, stream: false, tools: [WEATHER_TOOL],
    messages: [...ASK, { role: 'assistant', content: '', tool_calls: [call] },
      { role: 'tool', tool_name: 'get_weather', content: '22 degrees and sunny' }],
  });
  assert.equal(r.done, true);
  assert.equal(r.message.role, 'assistant');
  const plain = await ollama.chat({ model: MODEL, stream: false, messages: ASK });
  assert.ok(r.prompt_eval_count > plain.prompt_eval_count + 10,
    `the tools and the call are in the prompt: ${r.prompt_eval_count} vs ${plain.prompt_eval_count} tokens`);

  const o = await openai.chat.completions.create({
    model: MODEL, tools: [WEATHER_TOOL], max_tokens: 8, temperature: 0,
    messages: [...ASK,
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '22 degrees and sunny' }],
  });
  assert.equal(o.choices[0].message.role, 'assistant');
  assert.ok(o.usage.prompt_tokens > 10);
});
