// Bounded load test: 64 concurrent clients for E2E_LOAD_SECONDS (default 20)
// mixing streaming and non-streaming chat / completions, clients that
// disconnect mid-stream, malformed and oversized requests. Ends with every
// well-formed request answered correctly and the KV blocks used back at their
// starting value (from /metrics).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, postJson, metrics, sleep, MODEL } from './helpers.mjs';

const SECONDS = Number(process.env.E2E_LOAD_SECONDS || 20);
const CLIENTS = Number(process.env.E2E_LOAD_CLIENTS || 64);

let srv;
// The handler pool gets twice the clients: a disconnected request holds its
// handler until the cancellation reaches the engine while its client already
// sends the next one, and at the pool's limit the server answers 503 by
// design (HttpTransport.BusyHandlerThreadsAnswer503FastAndHealthStillAnswers).
before(async () => {
  srv = await startServer(['--max-body-kb', '256', '--max-waiting', '1024',
                           '--http-threads', String(Math.max(256, 2 * CLIENTS))]);
});
after(async () => { assert.equal(await srv.stop(), 0); });

async function streamOnce(rng, stats) {
  const chat = rng() < 0.5;
  const maxTokens = 4 + Math.floor(rng() * 24);
  const body = chat
    ? { model: MODEL, messages: [{ role: 'user', content: 'Tell me about the number ' + Math.floor(rng() * 1000) }], max_tokens: maxTokens, ignore_eos: true, stream: true, stream_options: { include_usage: true } }
    : { model: MODEL, prompt: 'Count: ' + Math.floor(rng() * 1000), max_tokens: maxTokens, ignore_eos: true, stream: true, stream_options: { include_usage: true } };
  const s = chat ? await srv.client.chat.completions.create(body) : await srv.client.completions.create(body);
  let usage = null, finish = null, chunks = 0;
  for await (const c of s) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) if (ch.finish_reason) finish = ch.finish_reason;
  }
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, maxTokens);
  assert.ok(chunks >= 2);
  stats.ok++;
}

async function disconnectOnce(rng, stats) {
  const ctrl = new AbortController();
  const r = await fetch(srv.url + '/v1/completions', {
    method: 'POST', signal: ctrl.signal, headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt: 'Long story', max_tokens: 400, ignore_eos: true, stream: true }),
  });
  assert.equal(r.status, 200);
  const reader = r.body.getReader();
  let got = 0;
  try {
    while (got < 2 + Math.floor(rng() * 3)) {
      const { done } = await reader.read();
      if (done) break;
      got++;
    }
  } finally {
    ctrl.abort();
  }
  stats.disconnects++;
}

async function badOnce(rng, stats) {
  if (rng() < 0.5) {
    const r = await postJson(srv.url, '/v1/chat/completions', '{"model": "' + MODEL + '", "messages": [');
    assert.equal(r.status, 400);
  } else {
    const r = await postJson(srv.url, '/v1/completions', { model: MODEL, prompt: 'y'.repeat(300 * 1024) });
    assert.equal(r.status, 413);
  }
  stats.bad++;
}

async function plainOnce(rng, stats) {
  const n = 1 + Math.floor(rng() * 2);
  const r = await srv.client.completions.create({ model: MODEL, prompt: 'Hi ' + Math.floor(rng() * 50), max_tokens: 6, n, ignore_eos: true });
  assert.equal(r.choices.length, n);
  assert.equal(r.usage.completion_tokens, 6 * n);
  stats.ok++;
}

function mulberry32(a) {
  return () => {
    a |= 0; a = (a + 0x6D2B79F5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

test(`load: ${CLIENTS} clients for ${SECONDS} s`, { timeout: (SECONDS + 180) * 1000 }, async () => {
  const m0 = await metrics(srv.url);
  const used0 = m0.get('megaserve_kv_blocks_used');
  assert.notEqual(used0, undefined);
  const stats = { ok: 0, disconnects: 0, bad: 0, failures: [] };
  const deadline = Date.now() + SECONDS * 1000;
  const worker = async (id) => {
    const rng = mulberry32(1000 + id);
    while (Date.now() < deadline) {
      const x = rng();
      try {
        if (x < 0.6) await streamOnce(rng, stats);
        else if (x < 0.75) await plainOnce(rng, stats);
        else if (x < 0.87) await disconnectOnce(rng, stats);
        else await badOnce(rng, stats);
      } catch (e) {
        if (e.name === 'AbortError') continue;
        // fetch reports socket errors as "fetch failed" with the reason in e.cause.
        const cause = e && e.cause ? ` (cause: ${e.cause.code || ''} ${e.cause.message || e.cause})` : '';
        stats.failures.push(String(e && e.stack || e) + cause);
      }
    }
  };
  await Promise.all(Array.from({ length: CLIENTS }, (_, i) => worker(i)));
  assert.deepEqual(stats.failures.slice(0, 3), [], `${stats.failures.length} failures`);
  assert.ok(stats.ok > 0 && stats.disconnects > 0 && stats.bad > 0, JSON.stringify(stats));
  // Everything drains and every KV block comes back.
  let m;
  for (let i = 0; i < 300; i++) {
    m = await metrics(srv.url);
    if (m.get('megaserve_num_requests_running') === 0 && m.get('megaserve_num_requests_waiting') === 0 &&
        m.get('megaserve_kv_blocks_used') === used0) break;
    await sleep(100);
  }
  assert.equal(m.get('megaserve_num_requests_running'), 0);
  assert.equal(m.get('megaserve_num_requests_waiting'), 0);
  assert.equal(m.get('megaserve_kv_blocks_used'), used0);
  // Health is still fine and a request still works.
  assert.equal((await fetch(srv.url + '/health')).status, 200);
  const r = await srv.client.completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 3 });
  assert.equal(r.choices.length, 1);
  console.log(`load: ${JSON.stringify({ ok: stats.ok, disconnects: stats.disconnects, bad: stats.bad })}`);
});
