// OpenCode (npm opencode-ai, pinned in package.json) against megaserve on
// the demo model: `opencode run` non-interactively, with a custom agent (one
// tool, `calculator`, which the demo model was trained to call; a short
// prompt, since the model has a 4K context), once through
// @ai-sdk/openai-compatible (chat completions) and once through
// @ai-sdk/openai (the Responses API). Each run must complete a tool round
// trip and exit 0. OpenCode asks for max_tokens 32000 with a model it does
// not know, more than the 4K context holds: served clamped (issue 12 item 4). A recording proxy keeps what OpenCode sent; the shapes recorded
// from OpenCode 1.18.33 (fixtures/opencode_requests.json) are also replayed,
// so the request shapes stay covered where the binary cannot run.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { startServer, postJson, MODEL, MARKUP } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const BIN = path.join(here, 'node_modules', 'opencode-ai', 'bin', 'opencode.exe');
const canRun = fs.existsSync(BIN);

let srv, proxy, proxyUrl, work;
const recorded = [];

// Forwards to megaserve, keeping each request's path and body.
function startProxy(target) {
  return new Promise((resolve) => {
    const server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (d) => { body += d; });
      req.on('end', async () => {
        recorded.push({ method: req.method, path: req.url, body: body ? JSON.parse(body) : null });
        try {
          const r = await fetch(target + req.url, { method: req.method, headers: { 'content-type': 'application/json' },
                                                    body: req.method === 'GET' ? undefined : body });
          res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json' });
          for await (const chunk of r.body) res.write(chunk);
          res.end();
        } catch (e) {
          res.writeHead(502);
          res.end(String(e));
        }
      });
    });
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}

function writeProject(dir) {
  // No `limit`: OpenCode then asks for its default of 32000 output tokens,
  // as with any model it does not know, which the server clamps. (With
  // limit.output above limit.context OpenCode compacts after every step.)
  const model = { name: 'North Mini demo' };
  const config = {
    $schema: 'https://opencode.ai/config.json',
    autoupdate: false,
    share: 'disabled',
    provider: {
      compat: { npm: '@ai-sdk/openai-compatible', name: 'megaserve chat', options: { baseURL: proxyUrl + '/v1', apiKey: 'none' },
                models: { [MODEL]: model } },
      responses: { npm: '@ai-sdk/openai', name: 'megaserve responses', options: { baseURL: proxyUrl + '/v1', apiKey: 'none' },
                   models: { [MODEL]: model } },
    },
    agent: {
      calc: { description: 'Does arithmetic with the calculator tool.', mode: 'primary', temperature: 0,
              prompt: 'You are a helpful assistant.', tools: { '*': false, calculator: true } },
    },
  };
  fs.mkdirSync(path.join(dir, '.opencode', 'tool'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'opencode.json'), JSON.stringify(config, null, 2));
  const zod = pathToFileURL(path.join(here, 'node_modules', 'zod', 'index.js')).href;
  fs.writeFileSync(path.join(dir, '.opencode', 'tool', 'calculator.js'), `import { z } from ${JSON.stringify(zod)};
export default {
  description: "Evaluate an arithmetic expression and return the result.",
  args: { expression: z.string().describe("for example 12 * 7") },
  async execute(args) {
    const m = /^\\s*(-?\\d+(?:\\.\\d+)?)\\s*([-+*/])\\s*(-?\\d+(?:\\.\\d+)?)\\s*$/.exec(args.expression);
    if (!m) return "error: cannot evaluate " + args.expression;
    const a = Number(m[1]), b = Number(m[3]);
    return String(m[2] === "+" ? a + b : m[2] === "-" ? a - b : m[2] === "*" ? a * b : a / b);
  },
};
`);
}

// Runs `opencode run` with a home of its own (no user config, no network
// side trips); resolves to { code, events, stderr }.
function opencodeRun(dir, model, message) {
  const home = path.join(work, 'home');
  const env = {
    ...process.env, PWD: dir, HOME: home, XDG_CONFIG_HOME: path.join(home, '.config'), XDG_DATA_HOME: path.join(home, '.local/share'),
    XDG_CACHE_HOME: path.join(home, '.cache'), XDG_STATE_HOME: path.join(home, '.local/state'),
    OPENCODE_DISABLE_AUTOUPDATE: '1', OPENCODE_DISABLE_MODELS_FETCH: '1', OPENCODE_DISABLE_LSP_DOWNLOAD: '1',
    OPENCODE_DISABLE_SHARE: '1', OPENCODE_DISABLE_DEFAULT_PLUGINS: '1', OPENCODE_DISABLE_CLAUDE_CODE: '1',
  };
  return new Promise((resolve) => {
    const p = spawn(BIN, ['run', '--format', 'json', '--model', model, '--agent', 'calc', message],
                    { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { err += d; });
    const timer = setTimeout(() => p.kill('SIGKILL'), 120000);
    p.on('exit', (code) => {
      clearTimeout(timer);
      const events = out.split('\n').filter((l) => l.trim().startsWith('{')).map((l) => JSON.parse(l));
      resolve({ code, events, stderr: err + out.slice(-3000) });
    });
  });
}

before(async () => {
  // OpenCode sends no temperature (its agent's `temperature: 0` is not
  // forwarded for a model it does not know), so at OpenAI's default of 1 the
  // 4K demo model samples its calculator arguments, and some samples are not
  // JSON (about one CI run in three failed so). A server-side default for
  // fields a request leaves out, as a deployment for agents sets it, makes
  // the runs greedy and repeatable.
  srv = await startServer(['--override-generation-config', '{"temperature": 0}']);
  proxy = await startProxy(srv.url);
  proxyUrl = `http://127.0.0.1:${proxy.address().port}`;
  // A fixed directory, not mkdtemp: OpenCode puts the working directory in
  // its system prompt, so a fixed one keeps the prompt the same every run.
  work = path.join(os.tmpdir(), 'megaserve-opencode-e2e');
  fs.rmSync(work, { recursive: true, force: true });
  fs.mkdirSync(work, { recursive: true });
});
after(async () => {
  proxy?.close();
  await srv.stop();
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('OpenCode', () => {
  for (const [provider, endpoint] of [['compat', '/v1/chat/completions'], ['responses', '/v1/responses']]) {
    test(`opencode run completes a calculator round trip through ${endpoint}`, { skip: !canRun && `no opencode binary at ${BIN}` },
      async () => {
        const dir = path.join(work, provider);
        fs.mkdirSync(dir, { recursive: true });
        writeProject(dir);
        const start = recorded.length;
        const r = await opencodeRun(dir, `${provider}/${MODEL}`, 'What is 12 * 7?');
        assert.equal(r.code, 0, r.stderr.slice(-3000));
        const tools = r.events.filter((e) => e.type === 'tool_use');
        assert.ok(tools.length >= 1, JSON.stringify(r.events).slice(0, 3000));
        assert.equal(tools[0].part.tool, 'calculator');
        assert.equal(tools[0].part.state.status, 'completed', JSON.stringify(tools[0].part.state).slice(0, 2000));
        const texts = r.events.filter((e) => e.type === 'text').map((e) => e.part.text).join('');
        assert.ok(texts.length > 0, 'a final answer');
        assert.doesNotMatch(texts, MARKUP);
        const sent = recorded.slice(start).filter((q) => q.path === endpoint);
        assert.ok(sent.length >= 2, `${sent.length} requests`);
        if (endpoint.includes('chat')) assert.ok(sent.every((q) => q.body.max_tokens === 32000), 'OpenCode asks for 32000');
        const roundTrip = sent.some((q) => endpoint.includes('chat')
          ? q.body.messages.some((m) => m.role === 'tool')
          : q.body.input.some((i) => i.type === 'function_call_output'));
        assert.ok(roundTrip, 'a request carried the tool result back');
        assert.ok(sent.every((q) => q.body.temperature === undefined), 'OpenCode leaves temperature to the server');
        if (process.env.E2E_RECORD_OPENCODE) {
          fs.writeFileSync(path.join(process.env.E2E_RECORD_OPENCODE, `${provider}.json`), JSON.stringify(sent, null, 1));
        }
      });
  }

  test('--override-generation-config: a request without temperature is decoded greedily', async () => {
    const ask = (extra) => postJson(srv.url, '/v1/chat/completions', {
      model: MODEL, max_tokens: 24, messages: [{ role: 'user', content: 'Tell me about the sea.' }], ...extra });
    const [dflt, greedy, again] = await Promise.all([ask({}), ask({ temperature: 0 }), ask({})]);
    for (const r of [dflt, greedy, again]) assert.equal(r.status, 200, r.text);
    const text = (r) => r.json.choices[0].message.content;
    assert.ok(text(greedy).length > 0);
    assert.equal(text(dflt), text(greedy));
    assert.equal(text(again), text(greedy));
  });

  test('the request shapes OpenCode 1.18.33 sent are served', async () => {
    const shapes = JSON.parse(fs.readFileSync(path.join(here, 'fixtures', 'opencode_requests.json'), 'utf8'));
    assert.ok(shapes.length >= 4);
    for (const q of shapes) {
      // Short replies keep this quick; the 32000-token ask is served clamped above.
      const body = { ...q.body, stream: false };
      delete body.stream_options;
      if (body.max_tokens) body.max_tokens = 16;
      if (body.max_output_tokens) body.max_output_tokens = 16;
      const r = await postJson(srv.url, q.path, body);
      assert.equal(r.status, 200, `${q.path}: ${r.text}`);
    }
  });
});
