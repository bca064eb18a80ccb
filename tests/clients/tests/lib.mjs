// lib.mjs: what every client test file shares: the server address, the
// two clients, and how a "not supported yet" answer becomes a skip.
import { Ollama } from 'ollama';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

export const HOST = process.env.CORRAL_CLIENTS_HOST;
if (!HOST) throw new Error('CORRAL_CLIENTS_HOST is not set: run the suite through run.mjs');
export const BASE = `http://${HOST}`;
export const MODEL = 'synth';
// Greedy answers that run to num_predict without an end token (measured:
// 1500 of 1500 for the prompts used), so a stream aborted after a few
// pieces is still being generated: see run.mjs.
export const LONG_MODEL = 'long';

// The second server (run.mjs): every answer is the scripted
// '<think>reasoning here</think>final answer' of THINK_MODEL.
export const SCRIPTED_HOST = process.env.CORRAL_CLIENTS_SCRIPTED_HOST;
export const THINK_MODEL = 'thinker';

export function ollamaClient() {
  return new Ollama({ host: BASE });
}

export function openaiClient() {
  return new OpenAI({ baseURL: `${BASE}/v1`, apiKey: 'corral-test', maxRetries: 0, timeout: 120_000 });
}

export function anthropicClient(host = HOST) {
  return new Anthropic({ baseURL: `http://${host}`, apiKey: 'corral-test', maxRetries: 0, timeout: 120_000 });
}

export function openaiClientAt(host) {
  return new OpenAI({ baseURL: `http://${host}/v1`, apiKey: 'corral-test', maxRetries: 0, timeout: 120_000 });
}

// Structured output may not be merged yet; its tests skip on this answer
// and pass on their own once it lands.
const FORMAT_UNSUPPORTED = 'structured output (format) is not supported yet';

export function formatUnsupported(err) {
  const text = `${err?.message ?? ''} ${err?.error ?? ''} ${JSON.stringify(err?.error ?? '')}`;
  return text.includes(FORMAT_UNSUPPORTED);
}

// Runs fn; when the server says structured output is not supported, the
// test is marked skipped with that message instead of failing.
export async function withFormat(t, fn) {
  try {
    await fn();
  } catch (err) {
    if (formatUnsupported(err)) {
      t.skip(`server: ${FORMAT_UNSUPPORTED}`);
      return;
    }
    throw err;
  }
}

export async function collect(stream) {
  const parts = [];
  for await (const part of stream) parts.push(part);
  return parts;
}

export async function healthy() {
  const res = await fetch(`${BASE}/`);
  return res.status === 200 && (await res.text()) === 'Ollama is running';
}
