// HTTP-layer attacks against a running megaserve (issue 14 items 2-4), with
// the server's peak RSS per attack (VmHWM, reset before each through
// /proc/PID/clear_refs) and /health latency under slow clients.
//   node bench/http_attacks.mjs --port 8000 --pid PID [--api-key K] [--slow 64] [--only body,gzip,headers,slow]
// Not run by the test suite; results are quoted in bench/results/.
import net from 'node:net';
import http from 'node:http';
import fs from 'node:fs';
import zlib from 'node:zlib';

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1] && !all[i + 1].startsWith('--') ? all[i + 1] : 'true']);
  return acc;
}, []));
const port = Number(args.port || 8000);
const pid = Number(args.pid);
const only = (args.only || 'body,gzip,headers,slow').split(',');
const auth = args['api-key'] ? `Authorization: Bearer ${args['api-key']}\r\n` : '';
const MB = 1 << 20;

const rssKb = (field) => Number(fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(new RegExp(field + ':\\s+(\\d+)'))[1]);
const resetPeak = () => fs.writeFileSync(`/proc/${pid}/clear_refs`, '5');

// Sends `head`, then `bodyBytes` produced by next(i) in pieces with
// backpressure (or stops when the server answers/closes); resolves with the
// first line of the answer and the time.
function attack(head, next, { halfClose = false, timeoutMs = 120000 } = {}) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    const t0 = performance.now();
    let out = '', done = false, i = 0;
    const finish = (why) => {
      if (done) return;
      done = true;
      s.destroy();
      resolve({ answer: out.split('\r\n')[0] || why, ms: Math.round(performance.now() - t0) });
    };
    const pump = () => {
      while (!done) {
        const piece = next(i++);
        if (piece === null) { if (halfClose) s.end(); return; }
        if (!s.write(piece)) return s.once('drain', pump);
      }
    };
    s.on('connect', () => { s.write(head); pump(); });
    s.on('data', (d) => { out += d; if (out.includes('\r\n\r\n')) setTimeout(() => finish('answered'), 200); });
    s.on('error', (e) => finish(out ? 'answered' : 'error ' + e.code));
    s.on('close', () => finish(out ? 'answered' : 'closed without an answer'));
    setTimeout(() => finish('timeout'), timeoutMs);
  });
}

async function measure(name, run) {
  const base = rssKb('VmRSS');
  resetPeak();
  const r = await run();
  await new Promise((res) => setTimeout(res, 300));
  const peak = rssKb('VmHWM');
  console.log(`${name.padEnd(44)} answer: ${String(r.answer).padEnd(44)} ${String(r.ms).padStart(6)} ms  ` +
              `peak RSS +${((peak - base) / 1024).toFixed(0)} MB (RSS before ${(base / 1024).toFixed(0)} MB)`);
}

const piece = Buffer.alloc(MB, 0x20);
if (only.includes('body')) {
  await measure('chunked 256 MiB body', () => attack(
    `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${auth}Transfer-Encoding: chunked\r\n\r\n`,
    (i) => (i < 256 ? Buffer.concat([Buffer.from('100000\r\n'), piece, Buffer.from('\r\n')]) : i === 256 ? '0\r\n\r\n' : null)));
  await measure('length-less 256 MiB body (then half-close)', () => attack(
    `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${auth}Connection: close\r\n\r\n`,
    (i) => (i < 256 ? piece : null), { halfClose: true }));
}
if (only.includes('gzip')) {
  const bomb = zlib.gzipSync(Buffer.alloc(1024 * MB, 0x20), { level: 9 });
  await measure(`gzip body of ${(bomb.length / MB).toFixed(2)} MB (1 GiB inflated)`, () => attack(
    `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/json\r\nContent-Encoding: gzip\r\n` +
    `Content-Length: ${bomb.length}\r\n\r\n`, (i) => (i === 0 ? bomb : null)));
}
if (only.includes('headers')) {
  const line = Buffer.from('X-Flood: ' + 'a'.repeat(96) + '\r\n');
  const block = Buffer.concat(Array.from({ length: 10000 }, () => line));  // 10k headers per write
  await measure('2M headers (214 MB) in one GET', () => attack(
    `GET /v1/models HTTP/1.1\r\nHost: x\r\n`, (i) => (i < 200 ? block : i === 200 ? '\r\n' : null)));
}
if (only.includes('slow')) {
  const n = Number(args.slow || 64);
  const socks = [];
  for (let i = 0; i < n; i++) {
    const s = net.connect(port, '127.0.0.1');
    s.on('error', () => {});
    s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${auth}`);
    socks.push(s);
  }
  const trickle = setInterval(() => { for (const s of socks) if (!s.destroyed) s.write('X'); }, 1000);
  await new Promise((r) => setTimeout(r, 1000));
  const lat = [];
  let ok = 0;
  const probes = Number(args.probes || 8);
  for (let i = 0; i < probes; i++) {
    const t0 = performance.now();
    const status = await new Promise((resolve) => {
      const req = http.get({ host: '127.0.0.1', port, path: '/health', agent: false }, (res) => { res.resume(); res.on('end', () => resolve(res.statusCode)); });
      req.on('error', () => resolve(0));
      req.setTimeout(5000, () => { req.destroy(); resolve(0); });
    });
    lat.push(performance.now() - t0);
    if (status === 200) ok++;
    await new Promise((r) => setTimeout(r, 500));
  }
  clearInterval(trickle);
  for (const s of socks) s.destroy();
  lat.sort((a, b) => a - b);
  console.log(`${n} slow clients (1 byte/s): /health ${ok}/${probes} answered 200 within 5 s; ` +
              `latency p50 ${lat[lat.length >> 1].toFixed(1)} ms, max ${lat[lat.length - 1].toFixed(1)} ms`);
}
