#!/usr/bin/env python3
"""Builds tiny random checkpoints with Hugging Face's own model classes and
records HF's logits and greedy continuations: the goldens the C++ backends are
tested against (tests/fixtures/hf/<family>/).

Run on the device machine (transformers 5.17, torch 2.11):
    python3 tools/make_hf_fixtures.py --out tests/fixtures/hf

Each family directory gets config.json + model.safetensors (bf16, written by
save_pretrained) and golden.json:
  prompt          prompt token ids (longer than the sliding window)
  prompt_logits   HF fp32 logits at every prompt position
  greedy          32 greedy continuation tokens (HF fp32, KV cache)
  step_logits     logits before each greedy token (step 0 = last prompt position)
The model is reloaded from the saved bf16 files and run in fp32, so the C++
fp32 reference must match it to fp32 rounding.
"""
import argparse
import json
import os

import torch
import transformers
from transformers import (Cohere2MoeConfig, Cohere2MoeForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

VOCAB = 512
PROMPT_LEN = 21  # > sliding window (8) and > 2 KV blocks of 8
GEN = 32


def families():
    common = dict(vocab_size=VOCAB, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  max_position_embeddings=256, bos_token_id=2, eos_token_id=3, pad_token_id=0)
    return {
        # North Mini Code pattern: parallel blocks, dense RoPE layer 0, sliding
        # layers, NoPE full layers at i % 4 == 0, sigmoid top-k router without
        # renormalisation, tied embeddings, logit_scale.
        "cohere2_moe": (Cohere2MoeConfig, Cohere2MoeForCausalLM, dict(
            common, num_hidden_layers=6, intermediate_size=32, prefix_dense_intermediate_size=96, num_experts=8,
            num_experts_per_tok=2, num_shared_experts=0, expert_selection_fn="sigmoid", norm_topk_prob=False,
            first_k_dense_replace=1, prefix_dense_sliding_window_pattern=1, sliding_window_pattern=4,
            sliding_window=8, rms_norm_eps=1e-6, rope_theta=50000.0, logit_scale=0.5, tie_word_embeddings=True)),
        # Same pattern with a shared expert (sum) and a softmax router: the
        # cohere2_moe settings North does not use but the engine supports.
        "cohere2_moe_shared": (Cohere2MoeConfig, Cohere2MoeForCausalLM, dict(
            common, num_hidden_layers=5, intermediate_size=32, prefix_dense_intermediate_size=96, num_experts=8,
            num_experts_per_tok=3, num_shared_experts=1, shared_expert_combination_strategy="average",
            expert_selection_fn="softmax", first_k_dense_replace=1, prefix_dense_sliding_window_pattern=1,
            sliding_window_pattern=4, sliding_window=8, rms_norm_eps=1e-5, rope_theta=10000.0, logit_scale=0.25,
            tie_word_embeddings=True)),
        # Qwen3-MoE: sequential blocks, QK-norm, NeoX RoPE, softmax router over
        # all experts without renormalisation, a dense layer via mlp_only_layers.
        "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM, dict(
            common, num_hidden_layers=4, intermediate_size=128, moe_intermediate_size=32, num_experts=8,
            num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[0],
            rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False)),
        # Qwen3 dense with sliding-window layers.
        "qwen3": (Qwen3Config, Qwen3ForCausalLM, dict(
            common, num_hidden_layers=3, intermediate_size=128, rms_norm_eps=1e-6, rope_theta=1000000.0,
            use_sliding_window=True, sliding_window=8, max_window_layers=1, tie_word_embeddings=True)),
        # Llama 3 style: llama3 RoPE scaling, attention biases, untied head.
        "llama": (LlamaConfig, LlamaForCausalLM, dict(
            common, num_hidden_layers=3, intermediate_size=128, rms_norm_eps=1e-5, rope_theta=500000.0,
            rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                              original_max_position_embeddings=64),
            attention_bias=True, tie_word_embeddings=False)),
    }


def randomize(model, seed):
    """HF init leaves norms at 1 and std 0.02 matrices; use larger, varied
    values so norms, biases and routing all matter and logits are peaked."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() == 1 and "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) * (1.5 / fan_in ** 0.5))


@torch.no_grad()
def record(model, prompt):
    ids = torch.tensor([prompt])
    full = model(ids, use_cache=False).logits[0].float()
    out = model(ids, use_cache=True)
    past = out.past_key_values
    logits = out.logits[0, -1].float()
    steps, greedy = [], []
    for _ in range(GEN):
        steps.append(logits.tolist())
        tok = int(torch.argmax(logits))
        greedy.append(tok)
        out = model(torch.tensor([[tok]]), past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits = out.logits[0, -1].float()
    # Cross-check the cached decode against a no-cache forward of everything.
    seq = torch.tensor([prompt + greedy])
    nocache = model(seq, use_cache=False).logits[0].float()
    cached = torch.tensor(steps)
    ref = nocache[len(prompt) - 1: len(prompt) - 1 + GEN]
    err = float((cached - ref).norm() / ref.norm())
    return full.tolist(), greedy, steps, err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/hf")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    print("transformers", transformers.__version__, "torch", torch.__version__)
    for i, (name, (cfg_cls, model_cls, kw)) in enumerate(families().items()):
        if args.only and name not in args.only.split(","):
            continue
        torch.manual_seed(1000 + i)
        cfg = cfg_cls(**kw)
        cfg._attn_implementation = "eager"
        model = model_cls(cfg).eval()
        randomize(model, 2000 + i)
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        model.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
        # Reload what was written and compute in fp32.
        model = model_cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
        g = torch.Generator().manual_seed(3000 + i)
        prompt = [2] + torch.randint(4, VOCAB, (PROMPT_LEN - 1,), generator=g).tolist()
        prompt_logits, greedy, steps, err = record(model, prompt)
        golden = dict(family=name, transformers=transformers.__version__, torch=torch.__version__, prompt=prompt,
                      prompt_logits=prompt_logits, greedy=greedy, step_logits=steps, cache_vs_nocache_rel_err=err)
        with open(os.path.join(d, "golden.json"), "w") as f:
            json.dump(golden, f, separators=(",", ":"))
        from safetensors import safe_open
        with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
            keys = sorted(f.keys())
        print(f"{name}: greedy {greedy[:12]}... cache-vs-nocache rel err {err:.2e}; {len(keys)} tensors, e.g. "
              f"{[k for k in keys if 'experts' in k][:3]}")


if __name__ == "__main__":
    main()
