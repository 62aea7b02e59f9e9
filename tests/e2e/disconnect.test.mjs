// A client that disconnects cancels its request and frees its KV at once,
// streaming or not (the non-streaming handler probes the connection while it
// waits: src/server/peer_socket.h).
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, metrics, sleep, MODEL } from './helpers.mjs';

let srv;
before(async () => { srv = await startServer(['--max-batch', '2']); });
after(async () => { await srv.stop(); });

async function waitFor(pred, ms) {
  const t0 = Date.now();
  while (Date.now() - t0 < ms) {
    if (await pred()) return true;
    await sleep(50);
  }
  return false;
}

for (const stream of [false, true]) {
  test(`${stream ? 'streaming' : 'non-streaming'} request is cancelled when its client disconnects`, async () => {
    const ctrl = new AbortController();
    // ~2000 tokens with ignore_eos: tens of seconds on the CPU backend.
    const req = fetch(srv.base + '/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: MODEL, prompt: 'The capital of France is', max_tokens: 2000, ignore_eos: true,
                             stream }),
      signal: ctrl.signal,
    }).then((r) => (stream ? r.body.getReader().read() : r.text())).catch(() => null);
    const running = await waitFor(async () => (await metrics(srv.url)).get('megaserve_kv_blocks_used') > 0, 10000);
    assert.ok(running, 'the request should be running and holding KV blocks');
    const t0 = Date.now();
    ctrl.abort();
    await req;
    const freed = await waitFor(async () => {
      const m = await metrics(srv.url);
      return m.get('megaserve_kv_blocks_used') === 0 && m.get('megaserve_num_requests_running') === 0;
    }, 3000);
    assert.ok(freed, 'KV blocks must be freed within 3 s of the disconnect');
    assert.ok(Date.now() - t0 < 3000);
    // A non-streamed request's abort is a 499 (client closed request), not a 500.
    if (!stream) {
      const m = await metrics(srv.url);
      assert.match(m.text, /megaserve_http_requests_total\{endpoint="\/v1\/completions",status="499"\} 1/);
      assert.doesNotMatch(m.text, /status="500"/);
    }
    // The server keeps serving.
    const r = await srv.client.completions.create({ model: MODEL, prompt: 'The capital of Norway is', max_tokens: 4 });
    assert.equal(r.choices.length, 1);
  });
}
