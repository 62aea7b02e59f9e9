// The official openai client (7.x) against megaserve: the Responses API
// (issue 12 item 1), lenient documented fields and logit_bias (item 3),
// context clamping (item 4), tool-call markup never in content (item 6),
// and the smaller fixes of item 7 (logprobs, /v1/models created, cached
// tokens, reasoning in history).
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import {
  startServer, postJson, MODEL, responsesTools, chatTools, calculate, MARKUP, CONTROL_TOKEN,
} from './helpers.mjs';

let srv;
before(async () => { srv = await startServer(); });
after(async () => { await srv.stop(); });

async function events(stream) {
  const out = [];
  for await (const e of stream) out.push(e);
  return out;
}

describe('Responses API', () => {
  test('text: non-streaming and streaming agree; usage; stored and retrievable', async () => {
    const params = { model: MODEL, input: 'Hello, who are you?', max_output_tokens: 24, temperature: 0 };
    const r = await srv.client.responses.create(params);
    assert.match(r.id, /^resp_/);
    assert.equal(r.object, 'response');
    assert.ok(['completed', 'incomplete'].includes(r.status));
    assert.equal(r.output[0].type, 'message');
    assert.equal(r.output[0].role, 'assistant');
    assert.equal(r.output[0].content[0].type, 'output_text');
    assert.ok(r.output_text.length > 0);
    assert.doesNotMatch(r.output_text, MARKUP);
    assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
    assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
    assert.equal(typeof r.usage.input_tokens_details.cached_tokens, 'number');
    assert.equal(r.usage.output_tokens_details.reasoning_tokens, 0);
    assert.equal(r.max_output_tokens, 24);

    const evs = await events(await srv.client.responses.create({ ...params, stream: true }));
    evs.forEach((e, i) => assert.equal(e.sequence_number, i));
    const types = evs.map((e) => e.type);
    assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added',
                                         'response.content_part.added']);
    assert.deepEqual(types.slice(-4), ['response.output_text.done', 'response.content_part.done',
                                       'response.output_item.done', r.status === 'completed' ? 'response.completed' : 'response.incomplete']);
    const text = evs.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
    assert.equal(text, r.output_text);
    const done = evs.at(-1).response;
    assert.equal(done.output[0].content[0].text, text);
    assert.deepEqual(done.usage.output_tokens, r.usage.output_tokens);

    const got = await srv.client.responses.retrieve(r.id);
    assert.equal(got.id, r.id);
    assert.equal(got.output[0].content[0].text, r.output_text);
    await srv.client.responses.delete(r.id);
    await assert.rejects(srv.client.responses.retrieve(r.id), (e) => e.status === 404);
  });

  test('instructions, input items, and max_output_tokens cut-off is "incomplete"', async () => {
    const r = await srv.client.responses.create({
      model: MODEL, instructions: 'Be brief.', temperature: 0, max_output_tokens: 2,
      input: [{ role: 'user', content: [{ type: 'input_text', text: 'Tell me about Paris.' }] }],
    });
    assert.equal(r.status, 'incomplete');
    assert.equal(r.incomplete_details.reason, 'max_output_tokens');
    assert.equal(r.instructions, 'Be brief.');
    assert.equal(r.usage.output_tokens, 2);
  });

  test('function tools: a call, streamed and not, then the round trip with function_call_output', async () => {
    const params = { model: MODEL, input: 'What is the weather in Paris?', tools: responsesTools, temperature: 0 };
    const r = await srv.client.responses.create(params);
    const call = r.output.find((o) => o.type === 'function_call');
    assert.ok(call, JSON.stringify(r.output));
    assert.equal(call.name, 'get_weather');
    assert.match(call.call_id, /^call_/);
    assert.equal(JSON.parse(call.arguments).city, 'Paris');
    assert.equal(call.status, 'completed');

    const evs = await events(await srv.client.responses.create({ ...params, stream: true }));
    const added = evs.find((e) => e.type === 'response.output_item.added' && e.item.type === 'function_call');
    assert.equal(added.item.name, 'get_weather');
    const args = evs.filter((e) => e.type === 'response.function_call_arguments.delta' && e.item_id === added.item.id)
      .map((e) => e.delta).join('');
    assert.equal(args, call.arguments);
    assert.equal(evs.find((e) => e.type === 'response.function_call_arguments.done').arguments, call.arguments);

    // Stateless round trip: the whole history as input items.
    const r2 = await srv.client.responses.create({
      model: MODEL, tools: responsesTools, temperature: 0, store: false,
      input: [{ role: 'user', content: 'What is the weather in Paris?' },
              { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments },
              { type: 'function_call_output', call_id: call.call_id, output: 'sunny, 21 C' }],
    });
    assert.equal(r2.status, 'completed');
    assert.ok(r2.output_text.length > 0);
    assert.doesNotMatch(r2.output_text, MARKUP);
    assert.equal(r2.store, false);
    await assert.rejects(srv.client.responses.retrieve(r2.id), (e) => e.status === 404);  // not stored
  });

  test('previous_response_id continues a stored conversation; unknown ids are 400', async () => {
    const r1 = await srv.client.responses.create({ model: MODEL, input: 'What is 12 * 7?', tools: responsesTools, temperature: 0 });
    const call = r1.output.find((o) => o.type === 'function_call');
    assert.ok(call, JSON.stringify(r1.output));
    assert.equal(call.name, 'calculator');
    const r2 = await srv.client.responses.create({
      model: MODEL, previous_response_id: r1.id, tools: responsesTools, temperature: 0,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: calculate(JSON.parse(call.arguments).expression) }],
    });
    assert.equal(r2.previous_response_id, r1.id);
    assert.ok(r2.output_text.length > 0);
    // The previous turn is in the prompt: more input tokens than the new item alone.
    assert.ok(r2.usage.input_tokens > r1.usage.input_tokens, `${r2.usage.input_tokens} vs ${r1.usage.input_tokens}`);
    // An item_reference to the stored call works the same.
    const r3 = await srv.client.responses.create({
      model: MODEL, tools: responsesTools, temperature: 0,
      input: [{ role: 'user', content: 'What is 12 * 7?' }, { type: 'item_reference', id: call.id },
              { type: 'function_call_output', call_id: call.call_id, output: '84' }],
    });
    assert.equal(r3.status, 'completed');
    const bad = await postJson(srv.url, '/v1/responses', { model: MODEL, input: 'x', previous_response_id: 'resp_nope' });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.param, 'previous_response_id');
    assert.equal(bad.json.error.code, 'previous_response_not_found');
    const badRef = await postJson(srv.url, '/v1/responses', { model: MODEL, input: [{ type: 'item_reference', id: 'msg_nope' }] });
    assert.equal(badRef.status, 400);
    assert.equal(badRef.json.error.param, 'input[0].id');
  });

  test('documented fields are accepted; unsupported ones are 400s naming them', async () => {
    const r = await srv.client.responses.create({
      model: MODEL, input: 'Hi', max_output_tokens: 4, store: false, metadata: { run: 'e2e' }, user: 'u1',
      safety_identifier: 's', prompt_cache_key: 'k', service_tier: 'auto', truncation: 'disabled', parallel_tool_calls: false,
      reasoning: { effort: 'low' }, text: { format: { type: 'text' }, verbosity: 'low' }, include: ['reasoning.encrypted_content'],
    });
    assert.deepEqual(r.metadata, { run: 'e2e' });
    for (const [body, param] of [
      [{ tools: [{ type: 'web_search' }] }, 'tools[0].type'],
      [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'http://x/y.png' }] }] }, 'input[0].content[0].type'],
      [{ text: { format: { type: 'xml' } } }, 'text.format.type'],
      [{ background: true }, 'background'],
      [{ frobnicate: 1 }, 'frobnicate'],
      [{ input: [{ type: 'computer_call_output', call_id: 'c', output: {} }] }, 'input[0].type'],
    ]) {
      const res = await postJson(srv.url, '/v1/responses', { model: MODEL, input: 'x', ...body });
      assert.equal(res.status, 400, res.text);
      assert.equal(res.json.error.param, param, res.text);
    }
  });
});

describe('chat: lenient fields, logit_bias, context, tool markup, logprobs', () => {
  const chat = (extra) => ({ model: MODEL, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4, temperature: 0, ...extra });

  test('documented fields that change nothing are accepted; audio / modalities audio are refused', async () => {
    const r = await srv.client.chat.completions.create(chat({
      metadata: { a: 'b' }, store: false, reasoning_effort: 'low', service_tier: 'auto', prompt_cache_key: 'k',
      safety_identifier: 's', verbosity: 'low', modalities: ['text'], prediction: { type: 'content', content: 'Hi' },
      user: 'u', audio: null, parallel_tool_calls: true,
    }));
    assert.equal(r.choices.length, 1);
    for (const [body, param] of [[{ audio: { voice: 'alloy', format: 'mp3' } }, 'audio'],
                                 [{ modalities: ['text', 'audio'] }, 'modalities'],
                                 [{ web_search_options: {} }, 'web_search_options']]) {
      const res = await postJson(srv.url, '/v1/chat/completions', chat(body));
      assert.equal(res.status, 400, res.text);
      assert.equal(res.json.error.param, param);
    }
  });

  test('logit_bias bans and forces tokens', async () => {
    const base = { model: MODEL, prompt: 'The capital of France is', max_tokens: 3, temperature: 0 };
    const plain = await srv.client.completions.create(base);
    const tok = await postJson(srv.url, '/tokenize', { prompt: plain.choices[0].text, add_special_tokens: false });
    const first = tok.json.tokens[0];
    const banned = await srv.client.completions.create({ ...base, logit_bias: { [first]: -100 } });
    const tok2 = await postJson(srv.url, '/tokenize', { prompt: banned.choices[0].text, add_special_tokens: false });
    assert.notEqual(tok2.json.tokens[0], first, `${plain.choices[0].text} / ${banned.choices[0].text}`);
    const forced = await srv.client.completions.create({ ...base, max_tokens: 1, logit_bias: { 300: 100 } });
    const back = await postJson(srv.url, '/detokenize', { tokens: [300] });
    assert.equal(forced.choices[0].text, back.json.prompt);
  });

  test('a max_tokens over the context is clamped (finish_reason length); strict or a long prompt is a 400', async () => {
    const models = await srv.client.models.list();
    const maxLen = models.data[0].max_model_len;
    // A prompt that leaves ~40 tokens of room (fewer tokens to generate on the CPU).
    const unit = 'one two three four five six seven eight nine ten ';
    const per = (await postJson(srv.url, '/tokenize', { prompt: unit.repeat(10), add_special_tokens: false })).json.count / 10;
    const prompt = unit.repeat(Math.floor((maxLen - 60) / per));
    const n = (await postJson(srv.url, '/tokenize', { prompt })).json.count;
    assert.ok(n > maxLen - 200 && n < maxLen - 10, `${n}`);
    const r = await srv.client.completions.create({ model: MODEL, prompt, max_tokens: 32000, ignore_eos: true, temperature: 0 });
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, maxLen - r.usage.prompt_tokens);
    const strict = await postJson(srv.url, '/v1/chat/completions', chat({ max_tokens: 32000, strict_max_tokens: true }));
    assert.equal(strict.status, 400);
    assert.equal(strict.json.error.param, 'max_tokens');
    assert.equal(strict.json.error.code, 'context_length_exceeded');
    const long = 'word '.repeat(9000);
    const tooLong = await postJson(srv.url, '/v1/chat/completions', chat({ messages: [{ role: 'user', content: long }] }));
    assert.equal(tooLong.status, 400);
    assert.equal(tooLong.json.error.param, 'messages');
    const tooLongR = await postJson(srv.url, '/v1/responses', { model: MODEL, input: long });
    assert.equal(tooLongR.json.error.param, 'input');
  });

  const toolChat = (content, extra = {}) => ({
    model: MODEL, messages: [{ role: 'user', content }], tools: chatTools, temperature: 0, max_tokens: 80, ...extra,
  });
  async function streamed(params) {
    const out = { content: '', calls: [], finish: null };
    for await (const c of await srv.client.chat.completions.create({ ...params, stream: true })) {
      const ch = c.choices[0];
      if (!ch) continue;
      out.content += ch.delta?.content ?? '';
      for (const d of ch.delta?.tool_calls ?? []) {
        if (d.id) out.calls[d.index] = { name: d.function.name, arguments: d.function.arguments ?? '' };
        else out.calls[d.index].arguments += d.function?.arguments ?? '';
      }
      if (ch.finish_reason) out.finish = ch.finish_reason;
    }
    return out;
  }

  test('parallel_tool_calls false: one call, streamed and not', async () => {
    const q = 'What is the weather in Paris, and what is 3 * 4?';
    const both = await srv.client.chat.completions.create(toolChat(q));
    assert.equal(both.choices[0].message.tool_calls?.length, 2, JSON.stringify(both.choices[0].message));  // the trained double call
    for (const params of [toolChat(q, { parallel_tool_calls: false })]) {
      const r = await srv.client.chat.completions.create(params);
      assert.equal(r.choices[0].message.tool_calls.length, 1);
      assert.equal(r.choices[0].finish_reason, 'tool_calls');
      assert.ok(!r.choices[0].message.content || !MARKUP.test(r.choices[0].message.content));
      const s = await streamed(params);
      assert.equal(s.calls.length, 1);
      assert.equal(s.finish, 'tool_calls');
      assert.equal(s.calls[0].arguments, r.choices[0].message.tool_calls[0].function.arguments);
    }
  });

  test('markup never reaches content: named choice extras, unknown functions, cut-offs, tool_choice none', async () => {
    const q = 'What is the weather in Paris, and what is 3 * 4?';
    const cases = [
      toolChat(q, { tool_choice: { type: 'function', function: { name: 'get_weather' } } }),
      toolChat('What is 12 * 7?', { tools: [chatTools[1]] }),  // the model wants calculator, which is not offered
      toolChat('What is 12 * 7?', { max_tokens: 6 }),            // cut off inside the call
      toolChat('What is 12 * 7?', { tool_choice: 'none' }),
    ];
    for (const params of cases) {
      const r = await srv.client.chat.completions.create(params);
      const m = r.choices[0].message;
      assert.doesNotMatch(m.content ?? '', MARKUP, JSON.stringify(params) + ' -> ' + JSON.stringify(m));
      const allowed = params.tool_choice?.function ? [params.tool_choice.function.name] : params.tools.map((t) => t.function.name);
      for (const c of m.tool_calls ?? []) assert.ok(allowed.includes(c.function.name), c.function.name);
      if (params.tool_choice === 'none') assert.equal(m.tool_calls, undefined);
      if (params.max_tokens === 6) assert.equal(r.choices[0].finish_reason, 'length');
      const s = await streamed(params);
      assert.doesNotMatch(s.content, MARKUP);
      assert.equal(s.content, m.content ?? '');
      assert.equal(s.finish, r.choices[0].finish_reason);
    }
  });

  test('logprobs list no control tokens', async () => {
    const r = await srv.client.chat.completions.create(chat({ logprobs: true, top_logprobs: 5, max_tokens: 6 }));
    const entries = r.choices[0].logprobs.content;
    assert.ok(entries.length > 0);
    for (const e of entries) {
      assert.doesNotMatch(e.token, CONTROL_TOKEN);
      for (const t of e.top_logprobs) assert.doesNotMatch(t.token, CONTROL_TOKEN);
    }
    assert.equal(entries.map((e) => e.token).join(''), r.choices[0].message.content);
  });

  test('/v1/models created is the server start time; cached_tokens counts prefix-cache hits', async () => {
    const m = await srv.client.models.list();
    const now = Date.now() / 1000;
    assert.ok(m.data[0].created > now - 3600 && m.data[0].created <= now + 5, String(m.data[0].created));
    const system = 'You are a helpful assistant. ' + 'Answer briefly and precisely, and be kind. '.repeat(20);
    const p = { model: MODEL, max_tokens: 2, messages: [{ role: 'system', content: system }, { role: 'user', content: 'Hi' }] };
    await srv.client.chat.completions.create(p);
    const again = await srv.client.chat.completions.create(p);
    assert.ok(again.usage.prompt_tokens_details.cached_tokens >= 64, JSON.stringify(again.usage));
    const resp = await srv.client.responses.create({ model: MODEL, instructions: system, input: 'Hi', max_output_tokens: 2 });
    assert.ok(resp.usage.input_tokens_details.cached_tokens >= 64, JSON.stringify(resp.usage));
  });

  test('earlier assistant reasoning in history passes through', async () => {
    const r = await srv.client.chat.completions.create({
      model: MODEL, max_tokens: 4, messages: [
        { role: 'user', content: 'Hi' },
        { role: 'assistant', content: 'Hello!', reasoning_content: 'The user greets me.', refusal: null, audio: null },
        { role: 'user', content: 'And again' },
        { role: 'assistant', content: 'Hi again.', reasoning: 'Another greeting.' },
        { role: 'user', content: 'Bye' }],
    });
    assert.equal(r.choices.length, 1);
  });
});
