#!/usr/bin/env python3
"""Trains North Mini Demo: a small cohere2_moe model built exactly like North
Mini Code (parallel blocks, dense layer 0, sliding-window + NoPE full layers in
the 3:1 pattern, sigmoid top-k router without renormalisation, tied
embeddings), scaled down to ~14M parameters, with its own byte-level BPE
tokenizer and a Cohere-style chat template with tool calls.

Run on the device machine (PyTorch, transformers 5.17, tokenizers):
    python3 tools/demo_model/train.py --out models/north-mini-demo --seconds 240

Writes the HF checkpoint (bf16 safetensors, config.json, generation_config.json),
tokenizer.json + tokenizer_config.json (with the chat template), and
golden.json: greedy continuations of a few prompts computed by HF in fp32 from
the saved bf16 weights, which megaserve must reproduce exactly.
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import Cohere2MoeConfig, Cohere2MoeForCausalLM, PreTrainedTokenizerFast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402

SPECIALS = ["<PAD>", "<BOS_TOKEN>", "<EOS_TOKEN>", "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>",
            "<|SYSTEM_TOKEN|>", "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>", "<|START_ACTION|>", "<|END_ACTION|>",
            "<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TOOL_RESULT|>", "<|END_TOOL_RESULT|>"]


def build_tokenizer(texts, vocab_size, template):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<BOS_TOKEN>", eos_token="<|END_OF_TURN_TOKEN|>",
                                   pad_token="<PAD>")
    fast.chat_template = template
    return fast


def compile_template(template):
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render


def strip_specials(s):
    for t in SPECIALS:
        s = s.replace(t, " ")
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="models/north-mini-demo")
    ap.add_argument("--seconds", type=float, default=240)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--conversations", type=int, default=120000)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    t_start = time.time()
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    here = os.path.dirname(os.path.abspath(__file__))
    template = open(os.path.join(here, "chat_template.jinja")).read()

    convs = [data.conversation(rng) for _ in range(args.conversations)]
    docs = [data.document(rng) for _ in range(args.conversations // 6)]
    # Render with jinja2 configured as transformers configures it (checked
    # against apply_chat_template below): apply_chat_template itself is too
    # slow for 100K+ conversations.
    render = compile_template(template)
    rendered = [render(messages=m, tools=t or None, bos_token="<BOS_TOKEN>", add_generation_prompt=False)
                for t, m in convs]
    tok = build_tokenizer([strip_specials(r) for r in rendered[:40000]] + docs[:10000], 4096, template)
    for t, m in convs[:200]:
        assert tok.apply_chat_template(m, tools=t or None, tokenize=False) == render(
            messages=m, tools=t or None, bos_token="<BOS_TOKEN>", add_generation_prompt=False)
    print(f"tokenizer: {len(tok)} tokens; rendered {len(rendered)} conversations in {time.time() - t_start:.0f}s",
          flush=True)

    eot = tok.convert_tokens_to_ids("<|END_OF_TURN_TOKEN|>")
    eos = tok.convert_tokens_to_ids("<EOS_TOKEN>")
    bos = tok.convert_tokens_to_ids("<BOS_TOKEN>")
    stream = []
    items = tok(rendered, add_special_tokens=False)["input_ids"]
    items += [[bos] + ids + [eos] for ids in tok(docs, add_special_tokens=False)["input_ids"]]
    rng.shuffle(items)
    for ids in items:
        stream.extend(ids)
    seq = 512
    n_seq = len(stream) // seq
    tokens = torch.tensor(stream[: n_seq * seq]).view(n_seq, seq)
    print(f"data: {len(stream)} tokens, {n_seq} sequences of {seq}", flush=True)

    cfg = Cohere2MoeConfig(
        vocab_size=len(tok), hidden_size=256, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=2,
        head_dim=32, intermediate_size=128, prefix_dense_intermediate_size=768, num_experts=16,
        num_experts_per_tok=2, num_shared_experts=0, expert_selection_fn="sigmoid", norm_topk_prob=False,
        first_k_dense_replace=1, prefix_dense_sliding_window_pattern=1, sliding_window_pattern=4,
        sliding_window=256, rms_norm_eps=1e-6, rope_theta=50000.0, logit_scale=0.25, tie_word_embeddings=True,
        max_position_embeddings=4096, bos_token_id=bos, eos_token_id=[eot, eos], pad_token_id=0)
    dev = "cuda"
    model = Cohere2MoeForCausalLM(cfg).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.1f}M parameters", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    batch = 32
    step, t0 = 0, time.time()
    model.train()
    while step < args.steps and time.time() - t0 < args.seconds:
        lr = 3e-3 * min(1.0, (step + 1) / 100) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / args.steps))))
        for g in opt.param_groups:
            g["lr"] = lr
        idx = torch.randint(0, n_seq, (batch,))
        x = tokens[idx].to(dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f} lr {lr:.2e} {time.time() - t0:.0f}s", flush=True)
        step += 1
    print(f"trained {step} steps in {time.time() - t0:.0f}s, final loss {loss.item():.3f}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(args.out, safe_serialization=True)
    tok.save_pretrained(args.out)
    model = Cohere2MoeForCausalLM.from_pretrained(args.out, dtype=torch.float32).to(dev).eval()

    prompts = [
        ("chat", None, [{"role": "user", "content": "Who are you?"}]),
        ("capital", None, [{"role": "user", "content": "What is the capital of Norway?"}]),
        ("tool_call", [data.CALCULATOR, data.WEATHER], [{"role": "user", "content": "What is 37 * 41?"}]),
        ("tool_result", [data.CALCULATOR, data.WEATHER], [
            {"role": "user", "content": "What is 37 * 41?"},
            {"role": "assistant", "tool_calls": [data.tool_call("calculator", {"expression": "37 * 41"})]},
            {"role": "tool", "content": json.dumps({"result": 1517})}]),
        ("weather_call", [data.WEATHER], [{"role": "user", "content": "What is the weather in Oslo?"}]),
    ]
    golden = {"prompts": []}
    with torch.no_grad():
        for name, tools, msgs in prompts:
            text = tok.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True)
            ids = tok(text, add_special_tokens=False)["input_ids"]
            out, cur = [], list(ids)
            for _ in range(64):
                logits = model(torch.tensor([cur], device=dev)).logits[0, -1]
                t = int(torch.argmax(logits))
                out.append(t)
                cur.append(t)
                if t in (eot, eos):
                    break
            golden["prompts"].append({"name": name, "messages": msgs, "tools": tools, "prompt_text": text,
                                      "prompt_ids": ids, "greedy": out,
                                      "text": tok.decode(out, skip_special_tokens=False)})
            print(f"[{name}] {tok.decode(out, skip_special_tokens=False)!r}", flush=True)
        # Held-out accuracy of tool use (a new seed).
        hrng = random.Random(99)
        ok_call = ok_answer = 0
        n_eval = 40
        for _ in range(n_eval):
            q, expr, result = data.math_question(hrng)
            msgs = [{"role": "user", "content": q}]
            text = tok.apply_chat_template(msgs, tools=[data.CALCULATOR], tokenize=False, add_generation_prompt=True)
            ids = tok(text, add_special_tokens=False)["input_ids"]
            gen = model.generate(torch.tensor([ids], device=dev), max_new_tokens=40, do_sample=False,
                                 eos_token_id=[eot, eos], pad_token_id=0)[0, len(ids):].tolist()
            ok_call += f'"expression": "{expr}"' in tok.decode(gen)
            msgs += [{"role": "assistant", "tool_calls": [data.tool_call("calculator", {"expression": expr})]},
                     {"role": "tool", "content": json.dumps({"result": result})}]
            text = tok.apply_chat_template(msgs, tools=[data.CALCULATOR], tokenize=False, add_generation_prompt=True)
            ids = tok(text, add_special_tokens=False)["input_ids"]
            gen = model.generate(torch.tensor([ids], device=dev), max_new_tokens=40, do_sample=False,
                                 eos_token_id=[eot, eos], pad_token_id=0)[0, len(ids):].tolist()
            ok_answer += str(result) in tok.decode(gen)
    golden["eval"] = {"tool_call_exact": ok_call / n_eval, "answer_uses_result": ok_answer / n_eval,
                      "n": n_eval, "train_steps": step, "final_loss": loss.item(), "params": n_params}
    print("eval:", golden["eval"], flush=True)
    with open(os.path.join(args.out, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
    print(f"done in {time.time() - t_start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
