// The Vercel AI SDK (ai 7) against megaserve, as apps and OpenCode use it:
// @ai-sdk/openai-compatible (chat completions) and @ai-sdk/openai, whose
// default model is the Responses API (issue 12 item 1), with a tool round
// trip through generateText's tool loop, streaming, and a multi-turn
// conversation that sends the earlier turn back (item_reference while
// `store` is on, the SDK's default). Also the documented fields the SDK sends
// (item 3) and a max_tokens larger than the context (item 4).
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { generateText, streamText, tool, stepCountIs } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { createOpenAI } from '@ai-sdk/openai';
import { z } from 'zod';
import { startServer, MODEL, calculate, MARKUP } from './helpers.mjs';

let srv;
before(async () => { srv = await startServer(); });
after(async () => { await srv.stop(); });

const calculator = tool({
  description: 'Evaluate an arithmetic expression and return the result.',
  inputSchema: z.object({ expression: z.string().describe('for example 12 * 7') }),
  execute: async ({ expression }) => calculate(expression),
});

function models() {
  const compat = createOpenAICompatible({ name: 'megaserve', baseURL: srv.base, apiKey: 'none', includeUsage: true });
  const openai = createOpenAI({ baseURL: srv.base, apiKey: 'none' });
  return [
    ['openai-compatible (chat completions)', compat(MODEL)],
    ['@ai-sdk/openai responses (default)', openai(MODEL)],
    ['@ai-sdk/openai chat', openai.chat(MODEL)],
  ];
}

describe('AI SDK', () => {
  test('generateText and streamText agree, on each provider', async () => {
    for (const [name, model] of models()) {
      const g = await generateText({ model, prompt: 'Hello, who are you?', temperature: 0, maxOutputTokens: 24 });
      assert.ok(g.text.length > 0, name);
      assert.doesNotMatch(g.text, MARKUP);
      assert.ok(g.usage.inputTokens > 0 && g.usage.outputTokens > 0, name + ' ' + JSON.stringify(g.usage));
      const s = streamText({ model, prompt: 'Hello, who are you?', temperature: 0, maxOutputTokens: 24 });
      let text = '';
      for await (const d of s.textStream) text += d;
      assert.equal(text, g.text, name);
      assert.ok(['stop', 'length'].includes(await s.finishReason), name);
    }
  });

  test('a tool round trip in the tool loop, on each provider', async () => {
    for (const [name, model] of models()) {
      const g = await generateText({
        model, prompt: 'What is 12 * 7?', tools: { calculator }, temperature: 0, stopWhen: stepCountIs(3),
        maxOutputTokens: 4096,  // over what fits after the prompt: clamped by the server
      });
      const calls = g.steps.flatMap((s) => s.toolCalls);
      assert.ok(calls.length >= 1, name + ' ' + JSON.stringify(g.steps.map((s) => s.finishReason)));
      assert.equal(calls[0].toolName, 'calculator');
      const results = g.steps.flatMap((s) => s.toolResults);
      assert.equal(results[0].output, calculate(calls[0].input.expression));
      assert.ok(g.steps.length >= 2, name);
      assert.equal(g.steps[0].finishReason, 'tool-calls', name);
      assert.doesNotMatch(g.text, MARKUP);
    }
  });

  test('streamed tool calls parse on each provider', async () => {
    for (const [name, model] of models()) {
      const s = streamText({ model, prompt: 'What is the weather in Paris?', temperature: 0,
        tools: { get_weather: tool({ description: 'Get the current weather in a city.',
                                     inputSchema: z.object({ city: z.string() }) }) } });
      const calls = await s.toolCalls;
      assert.equal(calls.length, 1, name);
      assert.equal(calls[0].toolName, 'get_weather');
      assert.equal(calls[0].input.city, 'Paris');
      assert.equal(await s.finishReason, 'tool-calls', name);
    }
  });

  test('multi-turn on the Responses API: the earlier turn comes back (item_reference with store, inline without)', async () => {
    const openai = createOpenAI({ baseURL: srv.base, apiKey: 'none' });
    for (const store of [true, false]) {
      const first = await generateText({ model: openai(MODEL), prompt: 'Hi', temperature: 0, maxOutputTokens: 16,
                                         providerOptions: { openai: { store } } });
      const second = await generateText({
        model: openai(MODEL), temperature: 0, maxOutputTokens: 16, providerOptions: { openai: { store } },
        messages: [{ role: 'user', content: 'Hi' }, ...first.response.messages, { role: 'user', content: 'Who are you?' }],
      });
      assert.ok(second.text.length > 0, `store ${store}`);
      assert.ok(second.usage.inputTokens > first.usage.inputTokens);
    }
  });
});
