// Encode throughput of the HF Rust tokenizer (npm tokenizers@0.23.2) on
// tests/fixtures/tokenizer/bench_corpus.txt, the same text the C++ benchmark
// (tests/tokenizer/tokenizer_bench_test.cpp) encodes. Prints MB/s per model:
// one call on the whole text (after a warm-up call), and the text cut into
// ~4 KB prompts encoded one after the other.
// Run: cd tools && node tokenizer_bench.js
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

const dir = path.resolve(__dirname, '../tests/fixtures/tokenizer');
const text = fs.readFileSync(path.join(dir, 'bench_corpus.txt'), 'utf8');
const bytes = Buffer.byteLength(text, 'utf8');

function chunks(s, size) {
  const out = [];
  for (let i = 0; i < s.length; i += size) out.push(s.slice(i, i + size));
  return out;
}

async function main() {
  for (const name of ['qwen3', 'llama3']) {
    const tok = Tokenizer.fromFile(path.join(dir, name, 'tokenizer.json'));
    let t0 = process.hrtime.bigint();
    const warm = await tok.encode(text, null, { addSpecialTokens: false });
    const cold = Number(process.hrtime.bigint() - t0) / 1e9;
    const reps = 5;
    t0 = process.hrtime.bigint();
    for (let r = 0; r < reps; ++r) await tok.encode(text, null, { addSpecialTokens: false });
    const whole = Number(process.hrtime.bigint() - t0) / 1e9 / reps;
    const parts = chunks(text, 4096);
    t0 = process.hrtime.bigint();
    for (const p of parts) await tok.encode(p, null, { addSpecialTokens: false });
    const chunked = Number(process.hrtime.bigint() - t0) / 1e9;
    console.log(`${name}: ${bytes} bytes -> ${warm.getIds().length} tokens; ` +
                `whole text ${(bytes / whole / 1e6).toFixed(2)} MB/s, ` +
                `4 KB prompts ${(bytes / chunked / 1e6).toFixed(2)} MB/s, ` +
                `first call (cold cache) ${(bytes / cold / 1e6).toFixed(2)} MB/s`);
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
