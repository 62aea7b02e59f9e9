// The HTTP layer against hostile and careless clients, on the real server:
// slow clients and idle keep-alive hogs cannot starve /health or generation,
// connection and body/header limits hold with flat memory, pipelining,
// half-close, HTTP/1.0 and bad Content-Length, CORS, /health while the model
// loads, and the SIGTERM drain (streams complete, exit 0).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import http from 'node:http';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { spawn, execFileSync } from 'node:child_process';
import { startServer, sleep, MODEL, BIN, MODEL_DIR } from './helpers.mjs';

// One GET on a fresh connection (no keep-alive); resolves { status, body, ms }.
function probe(port, pathName = '/health', headers = {}) {
  const t0 = performance.now();
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path: pathName, agent: false, headers }, (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body, ms: performance.now() - t0 }));
    });
    req.on('error', (e) => resolve({ status: 0, body: String(e), ms: performance.now() - t0 }));
    req.setTimeout(5000, () => req.destroy(new Error('timeout')));
  });
}

// Raw bytes in, everything the server sent until it closed (or `ms` passed).
function raw(port, bytes, { ms = 5000, halfClose = false } = {}) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let out = '';
    const t0 = performance.now();
    const timer = setTimeout(() => { s.destroy(); resolve({ out, ms: performance.now() - t0, closed: false }); }, ms);
    s.on('connect', () => { s.write(bytes); if (halfClose) s.end(); });
    s.on('data', (d) => { out += d; });
    s.on('close', () => { clearTimeout(timer); resolve({ out, ms: performance.now() - t0, closed: true }); });
    s.on('error', () => {});
  });
}

function completionRequest(body, version = '1.1', extra = '') {
  const b = JSON.stringify(body);
  return `POST /v1/completions HTTP/${version}\r\nHost: x\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(b)}\r\n${extra}\r\n${b}`;
}

function peakRssMb(pid) {
  const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(s.match(/VmHWM:\s+(\d+)/)[1]) / 1024;
}

describe('slow clients and connection limits', () => {
  let srv;
  before(async () => {
    srv = await startServer(['--http-threads', '8', '--max-connections', '300', '--header-timeout', '3',
                             '--keep-alive-timeout', '2']);
  });
  after(async () => { await srv.stop(); });

  test('200 clients trickling header bytes: /health answers every probe within 500 ms, generation works', async () => {
    const socks = [];
    for (let i = 0; i < 200; i++) {
      const s = net.connect(srv.port, '127.0.0.1');
      s.on('error', () => {});
      s.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\n');
      socks.push(s);
    }
    const trickle = setInterval(() => { for (const s of socks) s.write('X'); }, 200);
    after(() => { clearInterval(trickle); for (const s of socks) s.destroy(); });
    const latencies = [];
    const t0 = Date.now();
    const gen = srv.client.completions.create({ model: MODEL, prompt: 'The capital of France is', max_tokens: 4 });
    while (Date.now() - t0 < 2500) {
      const r = await probe(srv.port);
      assert.equal(r.status, 200, r.body);
      latencies.push(r.ms);
      await sleep(100);
    }
    const done = await gen;
    clearInterval(trickle);
    assert.equal(done.choices.length, 1);
    latencies.sort((a, b) => a - b);
    const worst = latencies[latencies.length - 1];
    console.log(`slow clients: ${latencies.length} /health probes, p50 ${latencies[latencies.length >> 1].toFixed(1)} ms, max ${worst.toFixed(1)} ms`);
    // Starved by the slow clients, a probe would wait for the 3 s head
    // deadline or time out; 500 ms leaves room for a 2-core CI machine's
    // scheduling (one probe took 122 ms while a compile ran beside the test).
    assert.ok(worst < 500, `slowest /health probe took ${worst} ms`);
    // The head deadline (3 s) drops them with a 408.
    const closed = await Promise.all(socks.map((s) => new Promise((resolve) => {
      let out = '';
      s.on('data', (d) => { out += d; });
      s.on('close', () => resolve(out));
      setTimeout(() => resolve(out), 5000);
    })));
    const not408 = closed.filter((o) => !o.startsWith('HTTP/1.1 408'));
    assert.equal(not408.length, 0, `${not408.length} slow clients got no 408, e.g. ${JSON.stringify(not408[0])}`);
  });

  test('300 idle keep-alive connections hold no handler thread and are closed after the idle limit', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 300 });
    after(() => agent.destroy());
    const first = await Promise.all(Array.from({ length: 250 }, () => new Promise((resolve) => {
      http.get({ host: '127.0.0.1', port: srv.port, path: '/v1/models', agent }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode));
      }).on('error', () => resolve(0));
    })));
    assert.ok(first.every((s) => s === 200));
    const r = await srv.client.completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 2 });
    assert.equal(r.choices.length, 1);
    assert.equal((await probe(srv.port)).status, 200);
    await sleep(3000);
    const open = Number((await (await fetch(srv.url + '/metrics')).text()).match(/^megaserve_http_connections_open (\d+)/m)[1]);
    assert.ok(open <= 2, `${open} connections still open after the idle limit`);
    agent.destroy();
  });

  test('over --max-connections: a fast 503 for work, /health still answers', async () => {
    const socks = [];
    after(() => { for (const s of socks) s.destroy(); });
    for (let i = 0; i < 300; i++) {
      const s = net.connect(srv.port, '127.0.0.1');
      s.on('error', () => {});
      s.write('GET /v1/models HTTP/1.1\r\n');
      socks.push(s);
    }
    await sleep(300);
    const t0 = performance.now();
    const over = await probe(srv.port, '/v1/models');
    assert.equal(over.status, 503, over.body);
    assert.ok(performance.now() - t0 < 500);
    assert.equal(JSON.parse(over.body).error.code, 'too_many_connections');
    assert.equal((await probe(srv.port, '/health')).status, 200);
    for (const s of socks) s.destroy();
    await sleep(200);
    assert.equal((await probe(srv.port, '/v1/models')).status, 200);
  });
});

describe('HTTP correctness with real generations', () => {
  let srv;
  before(async () => { srv = await startServer(['--max-body-kb', '1024']); });
  after(async () => { await srv.stop(); });

  const body = (extra = {}) => ({ model: MODEL, prompt: 'The capital of France is', max_tokens: 3, ...extra });

  test('pipelined requests each get their response, in order', async () => {
    const bytes = completionRequest(body({ max_tokens: 2 })) + 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n' +
      completionRequest(body({ max_tokens: 1 }), '1.1', 'Connection: close\r\n');
    const { out } = await raw(srv.port, bytes);
    const statuses = [...out.matchAll(/HTTP\/1\.1 (\d{3}) [A-Z]/g)].map((m) => Number(m[1]));
    assert.deepEqual(statuses, [200, 200, 200], out);
    assert.equal((out.match(/"object":"text_completion"/g) || []).length, 2);
  });

  test('a client that half-closes after sending still gets its response (streaming or not)', async () => {
    for (const stream of [false, true]) {
      const { out } = await raw(srv.port, completionRequest(body({ stream })), { halfClose: true });
      assert.match(out, /HTTP\/1\.1 200/, out);
      assert.ok(stream ? out.includes('data: [DONE]') : out.includes('"finish_reason"'), out);
    }
  });

  test('HTTP/1.0 clients get a close-delimited stream, never chunked', async () => {
    const { out, closed } = await raw(srv.port, completionRequest(body({ stream: true }), '1.0'));
    const [head, rest] = out.split('\r\n\r\n');
    assert.match(head, /^HTTP\/1\.1 200/);
    assert.doesNotMatch(head, /Transfer-Encoding/i);
    assert.match(head, /Connection: close/i);
    assert.ok(rest.startsWith('data: {'), rest.slice(0, 40));
    assert.ok(rest.trimEnd().endsWith('data: [DONE]'));
    assert.ok(closed);
  });

  test('Content-Length of -5 or 1e11 is refused at once', async () => {
    for (const [cl, status] of [['-5', 400], ['1e11', 400], ['100000000000', 413]]) {
      const { out, ms } = await raw(srv.port, `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ${cl}\r\n\r\n{}`,
                                    { ms: 3000 });
      assert.match(out, new RegExp(`^HTTP/1\\.1 ${status}`), `${cl}: ${out}`);
      assert.ok(ms < 1000, `${cl} took ${ms} ms`);
    }
  });

  test('a gzip request body works; a gzip bomb, a huge chunked body and a header flood are refused with flat memory', async () => {
    const gz = zlib.gzipSync(JSON.stringify(body({ max_tokens: 2 })));
    const ok = await fetch(srv.base + '/completions', { method: 'POST', body: gz,
      headers: { 'Content-Type': 'application/json', 'Content-Encoding': 'gzip' } });
    assert.equal(ok.status, 200, await ok.text());

    const before = peakRssMb(srv.proc.pid);
    const bomb = zlib.gzipSync(Buffer.alloc(256 << 20, 0x20), { level: 9 });  // 256 MiB of spaces, ~250 KB
    const b = await fetch(srv.base + '/completions', { method: 'POST', body: bomb,
      headers: { 'Content-Type': 'application/json', 'Content-Encoding': 'gzip' } });
    assert.equal(b.status, 413);

    // 64 MiB chunked: refused once 1 MiB has arrived.
    const { out: chunked } = await raw(srv.port, 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n' +
      ('100000\r\n' + ' '.repeat(0x100000) + '\r\n').repeat(64), { ms: 10000 });
    assert.match(chunked, /^HTTP\/1\.1 413/);

    // 100k headers (1.4 MB) before any authentication.
    const { out: flood } = await raw(srv.port, 'GET /v1/models HTTP/1.1\r\n' + 'X-A: b\r\n'.repeat(100000) + '\r\n', { ms: 10000 });
    assert.match(flood, /^HTTP\/1\.1 431/);
    const after = peakRssMb(srv.proc.pid);
    console.log(`peak RSS before the attacks ${before.toFixed(0)} MB, after ${after.toFixed(0)} MB`);
    assert.ok(after - before < 50, `peak RSS grew by ${after - before} MB`);
    assert.equal((await probe(srv.port)).status, 200);
  });
});

describe('CORS', () => {
  test('default (local): a localhost page may call, another site may not; preflights need no API key', async () => {
    const srv = await startServer(['--api-key', 'sekrit']);
    try {
      const pre = await fetch(srv.base + '/chat/completions', { method: 'OPTIONS', headers: {
        Origin: 'http://localhost:5173', 'Access-Control-Request-Method': 'POST',
        'Access-Control-Request-Headers': 'authorization,content-type,x-stainless-os' } });
      assert.equal(pre.status, 204);
      assert.equal(pre.headers.get('access-control-allow-origin'), 'http://localhost:5173');
      assert.match(pre.headers.get('access-control-allow-headers'), /authorization/);
      const noKey = await fetch(srv.base + '/models', { headers: { Origin: 'http://localhost:5173' } });
      assert.equal(noKey.status, 401);
      assert.equal(noKey.headers.get('access-control-allow-origin'), 'http://localhost:5173');
      const withKey = await fetch(srv.base + '/models', { headers: { Origin: 'http://localhost:5173', Authorization: 'Bearer sekrit' } });
      assert.equal(withKey.status, 200);
      assert.equal(withKey.headers.get('access-control-allow-origin'), 'http://localhost:5173');
      const evil = await fetch(srv.base + '/chat/completions', { method: 'OPTIONS', headers: {
        Origin: 'https://evil.example', 'Access-Control-Request-Method': 'POST' } });
      assert.equal(evil.status, 403);
      assert.equal(evil.headers.get('access-control-allow-origin'), null);
    } finally {
      await srv.stop();
    }
  });

  test('--allowed-origins "*" lets any page call', async () => {
    const srv = await startServer(['--allowed-origins', '*']);
    try {
      const r = await fetch(srv.base + '/models', { headers: { Origin: 'https://chat.example.org' } });
      assert.equal(r.headers.get('access-control-allow-origin'), '*');
    } finally {
      await srv.stop();
    }
  });
});

describe('lifecycle', () => {
  test('/health says loading while the model loads, then ready', async () => {
    // config.json is a FIFO: the load blocks reading it until the test writes it.
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'megaserve-loading-'));
    for (const f of fs.readdirSync(MODEL_DIR)) {
      if (f !== 'config.json') fs.symlinkSync(path.resolve(MODEL_DIR, f), path.join(dir, f));
    }
    execFileSync('mkfifo', [path.join(dir, 'config.json')]);
    const proc = spawn(BIN, ['serve', '--model', dir, '--port', '0', '--log-level', 'warn'], { stdio: ['ignore', 'pipe', 'pipe'] });
    try {
      const port = await new Promise((resolve, reject) => {
        let out = '';
        proc.stdout.on('data', (d) => { out += d; const m = out.match(/listening on http:\/\/[^:]+:(\d+)/); if (m) resolve(Number(m[1])); });
        proc.on('exit', (c) => reject(new Error('exited ' + c)));
      });
      const h = await probe(port);
      assert.equal(h.status, 503);
      assert.equal(JSON.parse(h.body).status, 'loading');
      const { out } = await raw(port, completionRequest({ prompt: 'x', max_tokens: 1 }), { ms: 2000 });
      assert.match(out, /^HTTP\/1\.1 503/);
      assert.match(out, /model_loading/);
      fs.writeFileSync(path.join(dir, 'config.json'), fs.readFileSync(path.join(MODEL_DIR, 'config.json')));
      let ready;
      for (let i = 0; i < 100 && !ready; i++) {
        const r = await probe(port);
        if (r.status === 200) ready = JSON.parse(r.body);
        else await sleep(100);
      }
      assert.deepEqual(ready, { status: 'ready' });
    } finally {
      proc.kill('SIGKILL');
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('SIGTERM drains: streams in flight complete, new work and /health get 503, a slow client does not block, exit 0', async () => {
    const srv = await startServer(['--max-batch', '4']);
    const slow = net.connect(srv.port, '127.0.0.1');
    slow.on('error', () => {});
    slow.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\n');
    const trickle = setInterval(() => slow.write('X'), 200);
    try {
      // ~1000 tokens each: a few seconds on the CPU backend, so the drain has work to wait for.
      const streams = [0, 1, 2].map(async () => {
        const s = await srv.client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 1000,
                                                       ignore_eos: true, stream: true });
        let n = 0, finish;
        for await (const ch of s) { n += ch.choices[0]?.text !== undefined ? 1 : 0; finish = ch.choices[0]?.finish_reason ?? finish; }
        return { n, finish };
      });
      await sleep(300);
      const exited = new Promise((r) => srv.proc.on('exit', (code, sig) => r({ code, sig })));
      const t0 = Date.now();
      srv.proc.kill('SIGTERM');
      await sleep(100);
      const h = await probe(srv.port);
      assert.equal(h.status, 503, h.body);
      assert.equal(JSON.parse(h.body).status, 'draining');
      const refused = await fetch(srv.base + '/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                                              body: JSON.stringify({ prompt: 'x', max_tokens: 1 }) });
      assert.equal(refused.status, 503);
      assert.equal(refused.headers.get('connection'), 'close');
      const results = await Promise.all(streams);
      for (const r of results) assert.equal(r.finish, 'length');
      const { code } = await exited;
      assert.equal(code, 0);
      console.log(`drain: 3 streams of 1000 tokens completed, exit 0 ${Date.now() - t0} ms after SIGTERM`);
    } finally {
      clearInterval(trickle);
      slow.destroy();
      srv.proc.kill('SIGKILL');
    }
  });

  test('past --shutdown-timeout the rest end with a clean 503 (stream: error event and [DONE]), exit 0', async () => {
    const srv = await startServer(['--max-batch', '2', '--shutdown-timeout', '1']);
    const long = { model: MODEL, prompt: 'Once upon a time', max_tokens: 3000, ignore_eos: true };
    const streamed = fetch(srv.base + '/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                                       body: JSON.stringify({ ...long, stream: true }) }).then((r) => r.text());
    const whole = fetch(srv.base + '/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                                    body: JSON.stringify(long) }).then(async (r) => ({ status: r.status, body: await r.json() }));
    await sleep(500);
    const exited = new Promise((r) => srv.proc.on('exit', (code) => r(code)));
    const t0 = Date.now();
    srv.proc.kill('SIGTERM');
    const text = await streamed;
    assert.match(text, /"code":"shutting_down"/);
    assert.ok(text.trimEnd().endsWith('data: [DONE]'), text.slice(-200));
    const w = await whole;
    assert.equal(w.status, 503);
    assert.equal(w.body.error.code, 'shutting_down');
    assert.equal(await exited, 0);
    const ms = Date.now() - t0;
    assert.ok(ms < 4000, `exit took ${ms} ms with --shutdown-timeout 1`);
  });
});
