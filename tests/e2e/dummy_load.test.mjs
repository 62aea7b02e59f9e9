// --load-format dummy end to end on the CPU backend (issue 13): a directory
// holding only a config.json (the tiny North Mini Code shape) is served with
// random weights and the byte-level dummy tokenizer; token-id and text
// prompts both work; the KV cache (--kv-cache-mb 1: 10 blocks of 64 tokens)
// lowers max_model_len, and a longer prompt is a 400 naming the numbers;
// /metrics gives the cache's size; `megaserve bench serve --prompt-kind
// tokens` runs against it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, postJson, metrics, repoRoot, BIN, isApiError } from './helpers.mjs';

const DIR = path.join(repoRoot, 'tests', 'fixtures', 'configs', 'nmc-tiny');
const NAME = 'nmc-tiny';
let srv;
before(async () => {
  srv = await startServer(['--model', DIR, '--load-format', 'dummy', '--kv-cache-mb', '1', '--log-level', 'info']);
});
after(async () => { assert.equal(await srv.stop(), 0); });

test('the log says which backend and why, and what the cache holds', () => {
  const log = srv.stderr();
  assert.match(log, /backend auto: ref \((this build has no CUDA|the CUDA runtime sees no GPU[^)]*)\)/);
  assert.match(log, /dummy byte-level tokenizer of the 512 ids/);
  assert.match(log, /kv cache: group 0 \(2 full-attention layers\): 10 blocks x 64 tokens = 640 tokens/);
  assert.match(log, /max_model_len lowered to 640 tokens \(the model's is 2048\)/);
});

test('token-id and text prompts', async () => {
  const models = await srv.client.models.list();
  assert.equal(models.data[0].id, NAME);
  assert.equal(models.data[0].max_model_len, 640);
  const ids = Array.from({ length: 20 }, (_, i) => 258 + i * 7);
  const a = await srv.client.completions.create({ model: NAME, prompt: ids, max_tokens: 12, ignore_eos: true });
  assert.equal(a.usage.prompt_tokens, 20);
  assert.equal(a.usage.completion_tokens, 12);
  assert.equal(typeof a.choices[0].text, 'string');
  const b = await srv.client.completions.create({ model: NAME, prompt: 'hello wörld', max_tokens: 4, ignore_eos: true });
  assert.equal(b.usage.prompt_tokens, 12);  // one token per byte
  const tok = await postJson(srv.url, '/tokenize', { model: NAME, prompt: 'hi' });
  assert.equal(tok.status, 200);
  assert.deepEqual(tok.json.tokens, [0x68 + 2, 0x69 + 2]);  // bytes shifted past <|bos|> = 2, <|eos|> = 3
  const detok = await postJson(srv.url, '/detokenize', { model: NAME, tokens: [0x68 + 2, 300, 3] });
  assert.equal(detok.status, 200);
  assert.equal(detok.json.prompt, 'h<300><|eos|>');
});

test('a prompt larger than the whole KV cache is a 400 with the numbers', async () => {
  const ids = Array.from({ length: 700 }, (_, i) => 300 + (i % 200));
  const r = await postJson(srv.url, '/v1/completions', { model: NAME, prompt: ids, max_tokens: 5 });
  assert.equal(r.status, 400);
  assert.ok(isApiError(r.json));
  assert.equal(r.json.error.code, 'context_length_exceeded');
  assert.equal(r.json.error.param, 'prompt');
  assert.match(r.json.error.message, /maximum context length is 640 tokens\. However, you requested 705 tokens/);
  assert.match(r.json.error.message, /KV cache holds 640 tokens/);
  const m = await metrics(srv.url);
  assert.equal(m.get('megaserve_kv_cache_context_tokens'), 640);
  assert.equal(m.get('megaserve_max_request_tokens'), 640);
  assert.equal(m.get('megaserve_kv_cache_block_size'), 64);
  assert.match(m.text, /^megaserve_kv_group_blocks\{group="1",attention="sliding",window="8",layers="4"\} 10$/m);
});

test('chat needs a template: the dummy tokenizer has none', async () => {
  const r = await postJson(srv.url, '/v1/chat/completions', { model: NAME, messages: [{ role: 'user', content: 'x' }] });
  assert.equal(r.status, 400);
  assert.equal(r.json.error.code, 'no_chat_template');
});

test('bench serve --prompt-kind tokens runs against it', async () => {
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'ms-bench-')), 'result.json');
  const args = ['bench', 'serve', '--base-url', srv.url, '--num-prompts', '6', '--max-concurrency', '3',
    '--prompt-kind', 'tokens', '--vocab-range', '258:512', '--input-len', '16', '--output-len', '8',
    '--result-json', out];
  const code = await new Promise((resolve) => {
    const p = spawn(BIN, args, { stdio: ['ignore', 'ignore', 'inherit'] });
    p.on('exit', resolve);
  });
  assert.equal(code, 0);
  const r = JSON.parse(fs.readFileSync(out, 'utf8'));
  assert.equal(r.model, NAME);
  assert.equal(r.completed, 6);
  assert.equal(r.failed, 0);
  assert.equal(r.total_input_tokens, 6 * 16);
  assert.equal(r.total_output_tokens, 6 * 8);
});
