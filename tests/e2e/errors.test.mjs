// Every error status: 400 (malformed, types, ranges, unknown parameters,
// context length), 401 (API key), 404 (model, route), 405, 413, 429; and a
// server started on a port already in use.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { startServer, postJson, isApiError, MODEL, BIN, MODEL_DIR } from './helpers.mjs';

describe('validation errors', () => {
  let srv;
  before(async () => { srv = await startServer(['--max-body-kb', '64']); });
  after(async () => { await srv.stop(); });

  const chat = (extra) => ({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, ...extra });
  const expect400 = async (body, param, endpoint = '/v1/chat/completions') => {
    const r = await postJson(srv.url, endpoint, body);
    assert.equal(r.status, 400, r.text);
    assert.ok(isApiError(r.json), r.text);
    assert.equal(r.json.error.type, 'invalid_request_error');
    if (param !== undefined) assert.equal(r.json.error.param, param, r.text);
    return r.json.error;
  };

  test('malformed JSON and non-object bodies are 400', async () => {
    await expect400('{"model": ', null);
    await expect400('[1, 2]');
    await expect400('', null);
  });
  test('wrong types are 400 naming the parameter', async () => {
    await expect400(chat({ temperature: 'hot' }), 'temperature');
    await expect400(chat({ max_tokens: 1.5 }), 'max_tokens');
    await expect400(chat({ stream: 'yes' }), 'stream');
    await expect400(chat({ stop: 5 }), 'stop');
    await expect400(chat({ messages: 'hi' }), 'messages');
    await expect400(chat({ messages: [{ role: 'wizard', content: 'x' }] }), 'messages[0].role');
    await expect400(chat({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: {} }] }] }), 'messages[0].content[0].type');
    await expect400({ model: MODEL, prompt: { a: 1 } }, 'prompt', '/v1/completions');
    await expect400({ model: MODEL, prompt: [1, 'a'] }, 'prompt[1]', '/v1/completions');
  });
  test('out-of-range values are 400', async () => {
    await expect400(chat({ temperature: 5 }), 'temperature');
    await expect400(chat({ top_p: 0 }), 'top_p');
    await expect400(chat({ n: 0 }), 'n');
    await expect400(chat({ n: 1000 }), 'n');
    await expect400(chat({ max_tokens: 0 }), 'max_tokens');
    await expect400(chat({ presence_penalty: 3 }), 'presence_penalty');
    await expect400(chat({ top_logprobs: 3 }), 'top_logprobs');
    await expect400(chat({ logprobs: true, top_logprobs: 50 }), 'top_logprobs');
    await expect400({ model: MODEL, prompt: [999999999] }, 'prompt[0]', '/v1/completions');
    await expect400(chat({ stream_options: { include_usage: true } }), 'stream_options');
  });
  test('unsupported parameters are 400 naming them, never ignored', async () => {
    await expect400(chat({ frobnicate: 1 }), 'frobnicate');
    await expect400(chat({ logit_bias: { 5: 101 } }), 'logit_bias.5');
    await expect400(chat({ response_format: { type: 'xml' } }), 'response_format.type');
    await expect400({ model: MODEL, prompt: 'x', messages: [] }, 'messages', '/v1/completions');
  });
  test('prompt + max_tokens over the context with strict_max_tokens is 400 with the numbers', async () => {
    const e = await expect400(chat({ max_tokens: 100000, strict_max_tokens: true }), 'max_tokens');
    assert.match(e.message, /maximum context length is \d+ tokens/);
    assert.match(e.message, /100000 in the completion/);
    const long = 'word '.repeat(9000);
    const e2 = await postJson(srv.url, '/v1/completions', { model: MODEL, prompt: long, max_tokens: 1 });
    assert.equal(e2.status, 400);
    assert.equal(e2.json.error.param, 'prompt');
    assert.match(e2.json.error.message, /maximum context length/);
  });
  test('unknown model is 404', async () => {
    const r = await postJson(srv.url, '/v1/chat/completions', chat({ model: 'gpt-17' }));
    assert.equal(r.status, 404);
    assert.ok(isApiError(r.json));
    assert.equal(r.json.error.code, 'model_not_found');
    await assert.rejects(srv.client.chat.completions.create(chat({ model: 'gpt-17' })), (e) => e.status === 404);
  });
  test('unknown route is 404, wrong method is 405', async () => {
    const r = await fetch(srv.url + '/v1/nothing-here');
    assert.equal(r.status, 404);
    assert.ok(isApiError(await r.json()));
    const m = await fetch(srv.url + '/v1/chat/completions');
    assert.equal(m.status, 405);
    assert.equal(m.headers.get('allow'), 'POST');
    assert.ok(isApiError(await m.json()));
    const m2 = await fetch(srv.url + '/v1/models', { method: 'POST', body: '{}' });
    assert.equal(m2.status, 405);
  });
  test('a body over --max-body-kb is 413', async () => {
    const r = await postJson(srv.url, '/v1/completions', { model: MODEL, prompt: 'x'.repeat(100 * 1024) });
    assert.equal(r.status, 413);
    assert.ok(isApiError(r.json), r.text);
    // The server keeps serving.
    const ok = await srv.client.completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 2 });
    assert.equal(ok.choices.length, 1);
  });
});

describe('API key', () => {
  let srv;
  before(async () => { srv = await startServer([], { env: { MEGASERVE_API_KEY: 'sk-test-123' } }); });
  after(async () => { await srv.stop(); });

  test('every endpoint but /health needs the bearer token', async () => {
    assert.equal((await fetch(srv.url + '/health')).status, 200);
    for (const [path, method] of [['/v1/models', 'GET'], ['/metrics', 'GET'], ['/v1/completions', 'POST'], ['/tokenize', 'POST']]) {
      const r = await fetch(srv.url + path, { method, body: method === 'POST' ? '{}' : undefined });
      assert.equal(r.status, 401, path);
      assert.ok(isApiError(await r.json()));
      const w = await fetch(srv.url + path, { method, headers: { Authorization: 'Bearer wrong' }, body: method === 'POST' ? '{}' : undefined });
      assert.equal(w.status, 401, path);
    }
    const list = await srv.client.models.list();  // client sends the key
    assert.equal(list.data[0].id, MODEL);
    const r = await srv.client.completions.create({ model: MODEL, prompt: 'Hi', max_tokens: 2 });
    assert.equal(r.choices.length, 1);
  });
});

describe('queue full', () => {
  let srv;
  before(async () => { srv = await startServer(['--max-batch', '1', '--max-waiting', '1']); });
  after(async () => { await srv.stop(); });

  test('beyond --max-waiting requests get 429 with Retry-After; the others finish', async () => {
    const body = { model: MODEL, prompt: 'Hello', max_tokens: 48, ignore_eos: true };
    const rs = await Promise.all(Array.from({ length: 12 }, () => postJson(srv.url, '/v1/completions', body)));
    const limited = rs.filter((r) => r.status === 429);
    assert.ok(limited.length >= 1, rs.map((r) => r.status).join(','));
    for (const r of limited) {
      assert.ok(isApiError(r.json));
      assert.ok(Number(r.headers.get('retry-after')) >= 1);
    }
    for (const r of rs.filter((x) => x.status !== 429)) {
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.usage.completion_tokens, 48);
    }
  });
});

describe('port in use', () => {
  let srv;
  before(async () => { srv = await startServer(); });
  after(async () => { await srv.stop(); });

  test('a second server on a port the first listens on exits with an error naming the port', async () => {
    const r = spawnSync(BIN, ['serve', '--model', MODEL_DIR, '--port', String(srv.port), '--log-level', 'warn'],
                        { encoding: 'utf8', timeout: 120000 });
    assert.notEqual(r.status, 0, r.stderr);
    assert.match(r.stderr, new RegExp(`cannot bind 127\\.0\\.0\\.1:${srv.port}`));
    // The first server still answers.
    assert.equal((await fetch(srv.url + '/health')).status, 200);
  });
});
