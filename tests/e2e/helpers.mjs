// Shared e2e helpers: start the real `megaserve serve` binary on a free port
// (MEGASERVE_BIN, model dir MEGASERVE_E2E_MODEL), wait for /health, read /metrics.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, '..', '..');
export const BIN = process.env.MEGASERVE_BIN || path.join(repoRoot, 'build', 'megaserve');
export const MODEL_DIR = process.env.MEGASERVE_E2E_MODEL || path.join(repoRoot, 'models', 'north-mini-demo');
export const MODEL = path.basename(path.resolve(MODEL_DIR));

// Starts a server; resolves to { url, base, port, proc, client, stop() }.
export async function startServer(extraArgs = [], { env = {} } = {}) {
  const args = ['serve', '--model', MODEL_DIR, '--port', '0', '--log-level', 'warn', ...extraArgs];
  const proc = spawn(BIN, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d.toString(); if (stderr.length > 100000) stderr = stderr.slice(-50000); });
  const port = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error('server did not start in 120 s:\n' + stderr)), 120000);
    proc.stdout.on('data', (d) => {
      out += d.toString();
      const m = out.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited (${code}) before listening:\n${stderr}`)); });
  });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 600; i++) {
    try {
      const r = await fetch(url + '/health');
      if (r.status === 200) break;
    } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  const apiKey = env.MEGASERVE_API_KEY || extraArgs[extraArgs.indexOf('--api-key') + 1] || 'none';
  const client = new OpenAI({ baseURL: url + '/v1', apiKey, maxRetries: 0, timeout: 120000 });
  const stop = async () => {
    if (proc.exitCode !== null) return proc.exitCode;
    const done = new Promise((r) => proc.on('exit', (code, sig) => r(code ?? sig)));
    proc.kill('SIGTERM');
    const t = setTimeout(() => proc.kill('SIGKILL'), 15000);
    const code = await done;
    clearTimeout(t);
    return code;
  };
  return { url, base: url + '/v1', port, proc, client, stop, stderr: () => stderr };
}

export async function metrics(url, headers = {}) {
  const text = await (await fetch(url + '/metrics', { headers })).text();
  const get = (name) => {
    const m = text.match(new RegExp('^' + name + ' ([0-9.eE+-]+)$', 'm'));
    return m ? Number(m[1]) : undefined;
  };
  return { text, get };
}

export async function postJson(url, pathName, body, headers = {}) {
  const r = await fetch(url + pathName, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: r.status, headers: r.headers, text, json };
}

// Asserts an OpenAI error body.
export function isApiError(json) {
  return json && json.error && typeof json.error.message === 'string' && typeof json.error.type === 'string' &&
    'param' in json.error && 'code' in json.error;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The demo model's two trained tools, in the chat and the Responses shapes.
export const calculatorParams = {
  type: 'object', properties: { expression: { type: 'string', description: 'for example 12 * 7' } }, required: ['expression'],
};
export const weatherParams = { type: 'object', properties: { city: { type: 'string', description: 'city name' } }, required: ['city'] };
export const chatTools = [
  { type: 'function', function: { name: 'calculator', description: 'Evaluate an arithmetic expression and return the result.', parameters: calculatorParams } },
  { type: 'function', function: { name: 'get_weather', description: 'Get the current weather in a city.', parameters: weatherParams } },
];
export const responsesTools = chatTools.map((t) => ({ type: 'function', ...t.function }));

// Evaluates "a op b" (what the demo model asks its calculator).
export function calculate(expression) {
  const m = /^\s*(-?\d+(?:\.\d+)?)\s*([-+*/])\s*(-?\d+(?:\.\d+)?)\s*$/.exec(String(expression));
  if (!m) return `error: cannot evaluate ${expression}`;
  const a = Number(m[1]), b = Number(m[3]);
  return String(m[2] === '+' ? a + b : m[2] === '-' ? a - b : m[2] === '*' ? a * b : a / b);
}

// Tool-call markup of any supported format; content must never match it.
export const MARKUP = /<\|START_ACTION\|>|<\|END_ACTION\|>|"tool_call_id"|"tool_name"|<tool_call>|<\|python_tag\|>/;
export const CONTROL_TOKEN = /^<\|[A-Z_]+\|>$/;
