// tool_choice "required" and named on the demo model: the reply starts inside
// a call (forced_call_prefix), so even a question that needs no tool gets a
// well-formed call to an allowed function, streamed or not.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, MODEL } from './helpers.mjs';

const tools = [
  { type: 'function', function: { name: 'calculator', description: 'Evaluate an arithmetic expression and return the result.',
    parameters: { type: 'object', properties: { expression: { type: 'string', description: 'for example 12 * 7' } }, required: ['expression'] } } },
  { type: 'function', function: { name: 'get_weather', description: 'Get the current weather in a city.',
    parameters: { type: 'object', properties: { city: { type: 'string', description: 'city name' } }, required: ['city'] } } },
];

let srv;
before(async () => { srv = await startServer(); });
after(async () => { await srv.stop(); });

const ask = (content, tool_choice, extra = {}) => ({
  model: MODEL, messages: [{ role: 'user', content }], tools, tool_choice, max_tokens: 60, temperature: 0, ...extra,
});

for (const question of ['Who are you?', 'What is the capital of Norway?']) {
  test(`required: "${question}" gets a tool call`, async () => {
    const r = await srv.client.chat.completions.create(ask(question, 'required'));
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.ok(c.message.tool_calls.length >= 1);
    for (const call of c.message.tool_calls) {
      assert.ok(['calculator', 'get_weather'].includes(call.function.name));
      assert.equal(typeof JSON.parse(call.function.arguments), 'object');
    }
  });
}

for (const name of ['calculator', 'get_weather']) {
  test(`named ${name}: the first call is to ${name}, streamed and not`, async () => {
    const choice = { type: 'function', function: { name } };
    const r = await srv.client.chat.completions.create(ask('What is the weather in Paris?', choice));
    const call = r.choices[0].message.tool_calls[0];
    assert.equal(call.function.name, name);
    assert.equal(typeof JSON.parse(call.function.arguments), 'object');
    const stream = await srv.client.chat.completions.create(ask('What is the weather in Paris?', choice, { stream: true }));
    let first = null, args = '';
    for await (const chunk of stream) {
      for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) {
        if (d.index !== 0) continue;
        if (d.function?.name) first = d.function.name;
        args += d.function?.arguments ?? '';
      }
    }
    assert.equal(first, name);
    assert.equal(args, call.function.arguments);
  });
}
