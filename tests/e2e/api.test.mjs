// The OpenAI API through the official client: chat and completions, streaming
// and not, usage, stop strings, n > 1, logprobs, seeds, tool calls.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, postJson, MODEL } from './helpers.mjs';

let srv;
before(async () => { srv = await startServer(); });
after(async () => { const code = await srv.stop(); assert.equal(code, 0, 'clean exit on SIGTERM'); });

const user = (content) => [{ role: 'user', content }];
const calculator = [{
  type: 'function',
  function: {
    name: 'calculator', description: 'Evaluate an arithmetic expression',
    parameters: { type: 'object', properties: { expression: { type: 'string' } }, required: ['expression'] },
  },
}];

async function collectChat(stream) {
  const out = { role: null, content: '', finish: null, usage: null, chunks: 0, toolCalls: [], logprobs: [] };
  for await (const chunk of stream) {
    out.chunks++;
    if (chunk.usage) out.usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) { assert.equal(out.chunks, 1, 'role comes in the first chunk'); out.role = c.delta.role; }
      if (c.delta.content) out.content += c.delta.content;
      for (const tc of c.delta.tool_calls ?? []) {
        if (tc.id) out.toolCalls[tc.index] = { id: tc.id, name: tc.function.name, arguments: tc.function.arguments ?? '' };
        else out.toolCalls[tc.index].arguments += tc.function.arguments;
      }
      if (c.logprobs?.content) out.logprobs.push(...c.logprobs.content);
      if (c.finish_reason) out.finish = c.finish_reason;
    }
  }
  return out;
}

test('GET /v1/models lists the served model', async () => {
  const list = await srv.client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), [MODEL]);
});

test('chat: non-streaming and streaming agree (greedy), usage is consistent', async () => {
  const params = { model: MODEL, messages: user('Hello, who are you?'), max_tokens: 24, temperature: 0 };
  const r = await srv.client.chat.completions.create(params);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 24);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);

  const s = await collectChat(await srv.client.chat.completions.create(
    { ...params, stream: true, stream_options: { include_usage: true } }));
  assert.equal(s.role, 'assistant');
  assert.equal(s.content, r.choices[0].message.content);
  assert.equal(s.finish, r.choices[0].finish_reason);
  assert.deepEqual(s.usage.completion_tokens, r.usage.completion_tokens);
  assert.deepEqual(s.usage.prompt_tokens, r.usage.prompt_tokens);
});

test('chat: content-part arrays, system messages and max_completion_tokens', async () => {
  const r = await srv.client.chat.completions.create({
    model: MODEL, max_completion_tokens: 5, temperature: 0,
    messages: [{ role: 'system', content: 'Be brief.' },
      { role: 'user', content: [{ type: 'text', text: 'Hello' }, { type: 'text', text: ' there' }] }],
  });
  assert.ok(r.usage.completion_tokens <= 5);
});

test('completions: string, token ids and several prompts; streaming matches', async () => {
  const r = await srv.client.completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 12, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  const text = r.choices[0].text;
  assert.ok(text.length > 0);
  let streamed = '', finish = null, usage = null;
  for await (const c of await srv.client.completions.create(
    { model: MODEL, prompt: 'Hello', max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true } })) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) { streamed += ch.text; if (ch.finish_reason) finish = ch.finish_reason; }
  }
  assert.equal(streamed, text);
  assert.equal(finish, r.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, r.usage.completion_tokens);

  const tok = await postJson(srv.url, '/tokenize', { prompt: 'Hello' });
  assert.equal(tok.status, 200);
  const ids = await srv.client.completions.create({ model: MODEL, prompt: tok.json.tokens, max_tokens: 12, temperature: 0 });
  assert.equal(ids.choices[0].text, text);
  const many = await srv.client.completions.create({ model: MODEL, prompt: ['Hello', 'The'], max_tokens: 4, temperature: 0 });
  assert.deepEqual(many.choices.map((c) => c.index), [0, 1]);
  assert.equal(many.choices[0].text, text.slice(0, many.choices[0].text.length));
  const lists = await srv.client.completions.create({ model: MODEL, prompt: [tok.json.tokens, tok.json.tokens], max_tokens: 4, temperature: 0 });
  assert.equal(lists.choices[0].text, lists.choices[1].text);
  const echo = await srv.client.completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 3, temperature: 0, echo: true });
  assert.ok(echo.choices[0].text.startsWith('Hello'));
});

test('tokenize / detokenize round trip', async () => {
  const t = await postJson(srv.url, '/tokenize', { model: MODEL, prompt: 'The quick brown fox' });
  assert.equal(t.status, 200);
  assert.equal(t.json.count, t.json.tokens.length);
  const d = await postJson(srv.url, '/detokenize', { tokens: t.json.tokens });
  assert.equal(d.status, 200);
  assert.ok(d.json.prompt.includes('The quick brown fox'));
  const bad = await postJson(srv.url, '/detokenize', { tokens: [-1] });
  assert.equal(bad.status, 400);
});

test('stop strings: text ends before the stop string, streaming too', async () => {
  const base = { model: MODEL, prompt: 'Once upon a time', max_tokens: 30, temperature: 0, ignore_eos: true };
  const full = (await srv.client.completions.create(base)).choices[0].text;
  assert.ok(full.length > 12, 'need some output: ' + JSON.stringify(full));
  // A stop string spanning the middle of the output (likely across tokens).
  const stop = full.slice(6, 10);
  const cut = full.indexOf(stop);
  const r = await srv.client.completions.create({ ...base, stop: [stop, 'NEVER-APPEARS'] });
  assert.equal(r.choices[0].text, full.slice(0, cut));
  assert.equal(r.choices[0].finish_reason, 'stop');
  let streamed = '';
  for await (const c of await srv.client.completions.create({ ...base, stop, stream: true })) {
    for (const ch of c.choices) streamed += ch.text;
  }
  assert.equal(streamed, full.slice(0, cut));
  const chat = await srv.client.chat.completions.create({ model: MODEL, messages: user('Hello'), max_tokens: 20, temperature: 0 });
  const content = chat.choices[0].message.content;
  if (content.length > 4) {
    const st = content.slice(2, 4);
    const r2 = await srv.client.chat.completions.create({ model: MODEL, messages: user('Hello'), max_tokens: 20, temperature: 0, stop: st });
    assert.equal(r2.choices[0].message.content, content.slice(0, content.indexOf(st)));
  }
});

test('n > 1: one choice per index, usage sums the choices', async () => {
  const r = await srv.client.chat.completions.create(
    { model: MODEL, messages: user('Tell me a story'), max_tokens: 8, n: 3, temperature: 1.0, seed: 7 });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  const seen = new Set();
  const s = await srv.client.chat.completions.create(
    { model: MODEL, messages: user('Tell me a story'), max_tokens: 8, n: 3, temperature: 1.0, seed: 7, stream: true });
  for await (const chunk of s) for (const c of chunk.choices) seen.add(c.index);
  assert.deepEqual([...seen].sort(), [0, 1, 2]);
  const c = await srv.client.completions.create({ model: MODEL, prompt: 'Hi', max_tokens: 4, n: 2, temperature: 0.8, seed: 1, ignore_eos: true });
  assert.equal(c.choices.length, 2);
  assert.equal(c.usage.completion_tokens, 8);
});

test('logprobs: chat top_logprobs and completions logprobs', async () => {
  const r = await srv.client.chat.completions.create(
    { model: MODEL, messages: user('Hello'), max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3, ignore_eos: true });
  const lp = r.choices[0].logprobs.content;
  // Control tokens (the demo model's <|START_RESPONSE|>) are counted but not
  // listed, as alternatives neither: a list may be shorter than asked.
  assert.ok(lp.length > 0 && lp.length <= r.usage.completion_tokens);
  assert.equal(lp.map((e) => e.token).join(''), r.choices[0].message.content);
  for (const e of lp) {
    assert.equal(typeof e.token, 'string');
    assert.doesNotMatch(e.token, /^<\|[A-Z_]+\|>$/);
    assert.ok(e.logprob <= 0);
    assert.ok(Array.isArray(e.bytes));
    assert.ok(e.top_logprobs.length >= 1 && e.top_logprobs.length <= 3);
    // Greedy: the chosen token is the most likely one.
    assert.ok(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-4);
  }
  const s = await collectChat(await srv.client.chat.completions.create(
    { model: MODEL, messages: user('Hello'), max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3, ignore_eos: true, stream: true }));
  assert.deepEqual(s.logprobs.map((e) => e.token), lp.map((e) => e.token));
  const c = await srv.client.completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 4, temperature: 0, logprobs: 2, ignore_eos: true });
  const l = c.choices[0].logprobs;
  assert.equal(l.tokens.length, 4);
  assert.equal(l.token_logprobs.length, 4);
  assert.equal(l.top_logprobs.length, 4);
  assert.equal(l.tokens.join(''), c.choices[0].text);
});

test('seeds: same seed, same output', async () => {
  const p = { model: MODEL, prompt: 'The weather today', max_tokens: 16, temperature: 1.0, top_p: 0.95, seed: 1234, ignore_eos: true };
  const a = await srv.client.completions.create(p);
  const b = await srv.client.completions.create(p);
  assert.equal(a.choices[0].text, b.choices[0].text);
  const outs = new Set();
  for (const seed of [1, 2, 3, 4]) outs.add((await srv.client.completions.create({ ...p, seed })).choices[0].text);
  assert.ok(outs.size > 1, 'different seeds should not all agree');
  const pen = await srv.client.completions.create({ ...p, presence_penalty: 0.5, frequency_penalty: 0.5, repetition_penalty: 1.1, top_k: 20, min_p: 0.05 });
  assert.equal(pen.choices[0].finish_reason, 'length');
});

test('tool calls: parsed calls, streamed as incremental deltas', async () => {
  const p = { model: MODEL, messages: user('What is 12*7?'), tools: calculator, max_tokens: 60, temperature: 0 };
  const r = await srv.client.chat.completions.create(p);
  const msg = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(msg));
  assert.equal(msg.tool_calls.length >= 1, true);
  const call = msg.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'calculator');
  assert.match(call.id, /^call_/);
  assert.equal(typeof JSON.parse(call.function.arguments), 'object');
  const s = await collectChat(await srv.client.chat.completions.create({ ...p, stream: true }));
  assert.equal(s.finish, 'tool_calls');
  assert.equal(s.toolCalls[0].name, 'calculator');
  assert.equal(s.toolCalls[0].arguments, call.function.arguments);
  // A follow-up turn with the assistant's call and the tool's result renders and runs.
  const follow = await srv.client.chat.completions.create({
    model: MODEL, max_tokens: 20, temperature: 0, tools: calculator,
    messages: [...user('What is 12*7?'), { role: 'assistant', content: null, tool_calls: [call] },
      { role: 'tool', tool_call_id: call.id, content: '84' }],
  });
  assert.ok(['stop', 'length', 'tool_calls'].includes(follow.choices[0].finish_reason));
});

test('tool_choice: none gives plain content; named and required are validated', async () => {
  const none = await srv.client.chat.completions.create(
    { model: MODEL, messages: user('What is 12*7?'), tools: calculator, tool_choice: 'none', max_tokens: 30, temperature: 0 });
  assert.equal(none.choices[0].message.tool_calls, undefined);
  assert.notEqual(none.choices[0].finish_reason, 'tool_calls');
  const named = await srv.client.chat.completions.create({
    model: MODEL, messages: user('What is 12*7?'), tools: calculator, max_tokens: 60, temperature: 0,
    tool_choice: { type: 'function', function: { name: 'calculator' } },
  });
  assert.equal(named.choices[0].message.tool_calls[0].function.name, 'calculator');
  await assert.rejects(srv.client.chat.completions.create({
    model: MODEL, messages: user('x'), tools: calculator, tool_choice: { type: 'function', function: { name: 'nope' } },
  }), (e) => e.status === 400);
  await assert.rejects(srv.client.chat.completions.create({
    model: MODEL, messages: user('x'), tools: [{ type: 'function', function: {} }],
  }), (e) => e.status === 400 && e.param === 'tools');
});
