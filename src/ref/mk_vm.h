// The megakernel's CPU interpreter: runs a schedule's instruction lists
// (src/mk/) on the CPU with the reference ops, one instruction or claimed
// tile at a time through the execution model (mk/machine.h), on buffers laid
// out and rounded exactly as the device's (bf16 weights, bf16 matmul inputs,
// bf16 KV cache, fp32 residual / router input / accumulations; the
// rounding points of docs/gpu-layered.md "Data and precision").
//
// What it is for:
//  - the specification of every opcode: the device kernel implements these
//    semantics, and a GPU test compares the device's buffers after a
//    truncated list with the interpreter's after the same list, so a
//    divergence is bisected to one instruction;
//  - CI checks that the instruction lists compute the model: its logits
//    match the fp32 reference backend in bf16-emulation mode, and are
//    bit-identical under every interleaving (a missing dependency would make
//    some order read a stale or poisoned buffer).
//
// Decode steps only (every SeqWork one token): a prompt is fed token by
// token.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "mk/machine.h"
#include "mk/schedule.h"
#include "model/weights.h"

namespace ms {

struct MkVmOptions {
  int block_size = 64;
  size_t kv_bytes = size_t(64) << 20;  // KV budget in bf16 bytes (as the device counts it)
};

class MkVm {
 public:
  static Result<std::unique_ptr<MkVm>> create(const ModelConfig& cfg, const ModelWeights& w, const MkVmOptions& opt);

  const ModelConfig& config() const { return cfg_; }
  const KvSpec& kv_spec() const { return kv_; }
  const mk::Dims& dims() const { return dims_; }
  std::vector<mk::LayerInfo> layer_info() const { return mk::make_layer_info(cfg_); }

  // One decode step: every SeqWork holds one token; `schedule` was built for
  // batch.size() rows and a context >= every row's start_pos + 1. Logits of
  // every row come back (need_logits is ignored: a decode row always has them).
  Status step(const mk::Schedule& schedule, const std::vector<SeqWork>& batch, const mk::MachineOptions& order,
              StepResult* out, mk::MachineStats* stats = nullptr);

  // The next step routes layer l to forced[l] (rows x top_k expert ids, best
  // first; an empty entry: the interpreter's own choice), then forgets it.
  // For device comparisons: after a near-tie flip the interpreter follows
  // the device's experts instead of diverging from it.
  void force_routing(std::vector<std::vector<int32_t>> forced) { forced_ = std::move(forced); }
  // The top-k the interpreter's own scores chose at `layer` in the last step
  // (rows x top_k, best first), forced or not.
  const std::vector<int32_t>& last_own_routing(int layer) const { return own_routing_[layer]; }
  // Layer l's K (or V) cache: (blocks, n_kv_heads, block_size, head_dim)
  // elements, the GPU pool's layout of a layer. import_kv replaces both with
  // bf16 values in that layout (a device cache copied over, for comparisons
  // on contexts the interpreter did not write).
  size_t kv_elems(int layer) const { return layers_[layer].k_cache.size(); }
  Status import_kv(int layer, const std::vector<uint16_t>& k, const std::vector<uint16_t>& v);
  // Expert ids (rows x top_k, best first) chosen at `layer` in the last step.
  const std::vector<int32_t>& last_routing(int layer) const { return routing_[layer]; }
  // The router logits (rows x n_experts) `layer` routed on in the last step.
  const std::vector<float>& last_router_logits(int layer) const { return router_logits_[layer]; }
  // A step buffer after the last step (for device comparisons): "x", "h",
  // "hf", "qkv", "attn_out", "o_part", "router_logits", "moe_act", "ybuf",
  // "dense_act", "logits"; empty for an unknown name.
  const std::vector<float>& buffer(const std::string& name) const;

 private:
  struct Layer {
    std::vector<float> attn_norm, ffn_norm, q_norm, k_norm;  // fp32
    std::vector<float> qkv, qkv_bias, o, o_bias;             // (qkvw, H), (qkvw), (H, qw), (H)
    std::vector<float> gate_up, down;                        // dense: (2F, H), (H, F)
    std::vector<float> router;                               // (E, H)
    std::vector<float> experts_gate_up, experts_down;        // (E, 2I, H), (E, H, I)
    std::vector<float> shared_gate_up, shared_down;          // (2S, H), (H, S)
    std::vector<float> k_cache, v_cache;                     // (blocks, nkv, block_size, hd), bf16 values
  };
  // Step state, every buffer poisoned (NaN) at the start of a step.
  struct Step {
    std::vector<int32_t> tokens, pos;
    const std::vector<SeqWork>* batch = nullptr;
    std::vector<float> x, h, hf, qkv, part_o, part_lse, attn_out, o_part, router_logits, topk_w, moe_act, ybuf,
        dense_act, dense_part, shared_act, shared_part, logits;
    std::vector<int32_t> topk_ids;
    // Plan: routed experts ascending, their members (selection ids r * K + k).
    int n_active = 0;
    std::vector<int32_t> active, offset, count, members;
  };

  MkVm() = default;
  Status run(int sm, const mk::Instruction& in);
  Result<int> route(const mk::Instruction& in);
  Status tile(const mk::Instruction& in, int slot, int t);

  void norm_row(const mk::Instruction& in);
  void attention(const mk::Instruction& in);
  void combine(const mk::Instruction& in);
  // y (R rows of n_out) = x (R rows, stride ldx, from col0, k cols) . w rows [row0, row0 + n_out) (stride ldw, from wcol0).
  void rows_dot(const float* x, int ldx, int R, const float* w, int ldw, int row0, int n_out, int k, float* y) const;
  const float* kv_at(const std::vector<float>& cache, int32_t block, int kvh, int slot) const;
  float* kv_at(std::vector<float>& cache, int32_t block, int kvh, int slot);

  ModelConfig cfg_;
  mk::Dims dims_;
  KvSpec kv_;
  std::vector<float> embed_, lm_head_, final_norm_, inv_freq_;
  std::vector<Layer> layers_;
  Step st_;
  const mk::Schedule* sched_ = nullptr;
  std::vector<std::vector<int32_t>> routing_;
  std::vector<std::vector<float>> router_logits_;
  std::vector<std::vector<int32_t>> own_routing_, forced_;
};

}  // namespace ms
