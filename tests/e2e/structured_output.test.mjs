// Structured outputs on the demo model through the official openai client:
// response_format json_schema (create, .parse(), streaming, n > 1 sampled,
// /v1/completions), json_object, strict tools under tool_choice required /
// named, a zod schema through openai/helpers/zod when zod is installed, and
// the 400s. The demo model knows no JSON: whatever it writes must still
// parse and validate (checked by a small validator for the supported subset,
// independent of the server's grammar). The schemas bound every string,
// number and array, so that a model this small finishes ("stop") well within
// max_tokens.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, postJson, MODEL } from './helpers.mjs';

let srv;
before(async () => { srv = await startServer(); });
after(async () => { await srv.stop(); });

// JSON-schema validation for the subset the server supports (enough for these schemas).
function valid(v, s, root = s) {
  if (s === true) return true;
  if (s.$ref) return valid(v, s.$ref === '#' ? root : s.$ref.slice(2).split('/').reduce((o, k) => o[k], root), root);
  if (s.anyOf) return s.anyOf.some((a) => valid(v, a, root));
  if ('const' in s && JSON.stringify(v) !== JSON.stringify(s.const)) return false;
  if (s.enum && !s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) return false;
  const types = s.type === undefined ? null : [].concat(s.type);
  const is = (t) => (t === 'integer' ? Number.isInteger(v) : t === 'null' ? v === null
    : t === 'array' ? Array.isArray(v) : t === 'object' ? v !== null && typeof v === 'object' && !Array.isArray(v)
      : typeof v === t);
  if (types && !types.some(is)) return false;
  if (typeof v === 'string') {
    if (s.format === 'date' && !/^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/.test(v)) return false;
    if (s.format === 'date' && Number.isNaN(Date.parse(v + 'T00:00:00Z'))) return false;
    const n = [...v].length;
    if (s.minLength !== undefined && n < s.minLength) return false;
    if (s.maxLength !== undefined && n > s.maxLength) return false;
  }
  if (typeof v === 'number') {
    if (s.minimum !== undefined && v < s.minimum) return false;
    if (s.maximum !== undefined && v > s.maximum) return false;
  }
  if (Array.isArray(v)) {
    if (s.minItems !== undefined && v.length < s.minItems) return false;
    if (s.maxItems !== undefined && v.length > s.maxItems) return false;
    if (s.items && !v.every((x) => valid(x, s.items, root))) return false;
  }
  if (v !== null && typeof v === 'object' && !Array.isArray(v)) {
    for (const r of s.required ?? []) if (!(r in v)) return false;
    for (const [k, x] of Object.entries(v)) {
      if (s.properties?.[k]) { if (!valid(x, s.properties[k], root)) return false; }
      else if (s.additionalProperties === false) return false;
    }
  }
  return true;
}

const weather = {
  type: 'object',
  properties: {
    city: { type: 'string', enum: ['Paris', 'London', 'Oslo'] },
    sunny: { type: 'boolean' },
    temperature_c: { type: 'integer', minimum: -40, maximum: 50 },
    summary: { type: 'string', maxLength: 24 },
    date: { type: 'string', format: 'date' },
    alerts: { type: 'array', items: { type: 'string', maxLength: 10 }, maxItems: 2 },
    wind: { anyOf: [{ type: 'null' }, { $ref: '#/$defs/Wind' }] },
  },
  required: ['city', 'sunny', 'temperature_c', 'summary', 'date', 'alerts', 'wind'],
  additionalProperties: false,
  $defs: { Wind: { type: 'object', properties: { kmh: { type: 'integer', minimum: 0, maximum: 200 },
    dir: { enum: ['N', 'E', 'S', 'W'] } }, required: ['kmh', 'dir'], additionalProperties: false } },
};
const format = { type: 'json_schema', json_schema: { name: 'weather', strict: true, schema: weather } };
const ask = (extra = {}) => ({
  model: MODEL, messages: [{ role: 'user', content: 'What is the weather in Paris?' }], max_tokens: 300,
  temperature: 0, response_format: format, ...extra,
});

function checkChoice(choice, text = choice.message.content) {
  assert.equal(choice.finish_reason, 'stop', `unfinished output: ${text}`);
  const v = JSON.parse(text);
  assert.ok(valid(v, weather), `does not validate: ${text}`);
  return v;
}

test('json_schema: greedy and sampled choices parse and validate', async () => {
  const greedy = await srv.client.chat.completions.create(ask());
  checkChoice(greedy.choices[0]);
  const sampled = await srv.client.chat.completions.create(ask({ temperature: 1.2, top_p: 0.95, n: 3, seed: 5 }));
  assert.equal(sampled.choices.length, 3);
  for (const c of sampled.choices) checkChoice(c);
});

test('json_schema: chat.completions.parse() returns the parsed object', async () => {
  const r = await srv.client.chat.completions.parse(ask({ temperature: 0.8, seed: 1 }));
  const m = r.choices[0].message;
  const v = checkChoice(r.choices[0]);
  assert.deepEqual(m.parsed, v);
});

test('json_schema: streamed deltas concatenate to a valid document', async () => {
  const stream = await srv.client.chat.completions.create(ask({ stream: true, temperature: 1, seed: 9 }));
  let text = '', finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  checkChoice({ finish_reason: finish }, text);
});

test('json_schema through the Responses API (text.format, flat)', async () => {
  const r = await srv.client.responses.create({
    model: MODEL, input: 'What is the weather in Paris?', max_output_tokens: 300, temperature: 0.7, store: false,
    text: { format: { type: 'json_schema', name: 'weather', strict: true, schema: weather } },
  });
  assert.equal(r.status, 'completed', JSON.stringify(r));
  const text = r.output.filter((o) => o.type === 'message').flatMap((o) => o.content).map((c) => c.text).join('');
  assert.ok(valid(JSON.parse(text), weather), `does not validate: ${text}`);
});

test('json_schema on /v1/completions', async () => {
  const r = await srv.client.completions.create({
    model: MODEL, prompt: 'The weather report as JSON:', max_tokens: 300, temperature: 0.7, seed: 3, response_format: format,
  });
  checkChoice({ finish_reason: r.choices[0].finish_reason }, r.choices[0].text);
});

test('json_schema: max_tokens cuts with finish_reason length', async () => {
  const r = await srv.client.chat.completions.create(ask({ max_tokens: 4 }));
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.choices[0].message.content[0], '{');
  assert.throws(() => JSON.parse(r.choices[0].message.content));
});

test('json_schema: logprobs are those of the constrained choice', async () => {
  const r = await srv.client.chat.completions.create(ask({ logprobs: true, top_logprobs: 3, max_tokens: 300 }));
  const c = r.choices[0];
  checkChoice(c);
  for (const t of c.logprobs.content) {
    assert.ok(t.logprob <= 0);
    assert.ok(t.top_logprobs.length >= 1 && t.top_logprobs[0].logprob >= t.logprob - 1e-6);
  }
});

test('json_object: an object, or a prefix of one when cut', async () => {
  const r = await srv.client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Reply in JSON.' }], max_tokens: 120, temperature: 0,
    response_format: { type: 'json_object' },
  });
  const c = r.choices[0];
  assert.equal(c.message.content[0], '{');
  if (c.finish_reason === 'stop') {
    const v = JSON.parse(c.message.content);
    assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v));
  } else {
    assert.equal(c.finish_reason, 'length');
  }
});

test('zod schema through openai/helpers/zod', async (t) => {
  let z, zodResponseFormat;
  try {
    ({ z } = await import('zod'));
    ({ zodResponseFormat } = await import('openai/helpers/zod'));
  } catch {
    t.skip('zod is not installed in tests/e2e');
    return;
  }
  // zod 4 emits "format" together with its own "pattern" for email / uuid / datetime: their product.
  const Weather = z.object({
    city: z.enum(['Paris', 'London']),
    sunny: z.boolean(),
    note: z.string().max(20).nullable(),
    reporter: z.string().email(),
    id: z.string().uuid(),
    at: z.string().datetime(),
  });
  const r = await srv.client.chat.completions.parse({
    model: MODEL, messages: [{ role: 'user', content: 'Weather in London?' }], max_tokens: 400, temperature: 0,
    response_format: zodResponseFormat(Weather, 'weather'),
  });
  assert.equal(r.choices[0].finish_reason, 'stop');
  const parsed = r.choices[0].message.parsed;
  assert.deepEqual(Weather.parse(parsed), parsed);
});

const tools = [
  { type: 'function', function: { name: 'get_weather', strict: true, description: 'Get the current weather in a city.',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 20 },
      unit: { enum: ['c', 'f'] } }, required: ['city', 'unit'], additionalProperties: false } } },
  { type: 'function', function: { name: 'calculator', strict: true, description: 'Evaluate an arithmetic expression.',
    parameters: { type: 'object', properties: { expression: { type: 'string', maxLength: 30 } },
      required: ['expression'], additionalProperties: false } } },
];

for (const tool_choice of ['required', { type: 'function', function: { name: 'get_weather' } }]) {
  test(`strict tools, tool_choice ${JSON.stringify(tool_choice)}: arguments validate`, async () => {
    for (const temperature of [0, 1.3]) {
      const r = await srv.client.chat.completions.create({
        model: MODEL, messages: [{ role: 'user', content: 'What is the weather in Oslo?' }], tools, tool_choice,
        max_tokens: 150, temperature, seed: 4,
      });
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'tool_calls');
      assert.equal(c.message.tool_calls.length, 1);
      const call = c.message.tool_calls[0];
      const tool = tools.find((x) => x.function.name === call.function.name);
      assert.ok(tool, call.function.name);
      if (typeof tool_choice === 'object') assert.equal(call.function.name, 'get_weather');
      assert.ok(valid(JSON.parse(call.function.arguments), tool.function.parameters), call.function.arguments);
    }
  });
}

test('unsupported schemas and combinations are 400s naming the parameter', async () => {
  const bad = async (body, param, needle) => {
    const r = await postJson(srv.url, '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'x' }], ...body });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.param, param, r.text);
    assert.ok(r.json.error.message.includes(needle), r.text);
  };
  await bad({ response_format: { type: 'json_schema', json_schema: { name: 'a', schema: { type: 'object',
    properties: { zip: { type: 'string', pattern: '^(\\d)\\1$' } } } } } }, 'response_format', "'pattern' at /properties/zip");
  await bad({ response_format: { type: 'json_schema', json_schema: { name: 'a', schema: { type: 'string', format: 'ipv6' } } } },
    'response_format', "'format'");
  await bad({ response_format: { type: 'json_schema', json_schema: { name: 'a' } } }, 'response_format.json_schema.schema', 'required');
  await bad({ response_format: { type: 'yaml' } }, 'response_format.type', 'yaml');
  await bad({ response_format: { type: 'json_object' }, tools, tool_choice: 'auto' }, 'response_format', 'tool_choice');
  await bad({ tools: [{ type: 'function', function: { name: 'f', strict: true, parameters: { type: 'object',
    properties: { n: { type: 'number', multipleOf: 2 } } } } }], tool_choice: 'required' }, 'tools', "'multipleOf'");
  // The server still answers normally afterwards.
  const ok = await srv.client.chat.completions.create(ask());
  checkChoice(ok.choices[0]);
});
