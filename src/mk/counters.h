// Dependency counters of one decode step: uint32 words in device memory,
// incremented by producers (release) and spun on by consumers (acquire).
// The layout (which id means what) is a pure function of the model shape and
// the step's row count, shared by the schedule builder, the interpreter and
// the device kernel.
//
// Reset without a separate pass: the executor keeps two banks and alternates
// them per step; while step e runs on bank e % 2, its CTAs zero bank
// (e + 1) % 2, which the previous step used and the next step will use.
#pragma once

#include <cstdint>

#include "mk/dims.h"

namespace ms::mk {

struct CounterLayout {
  int32_t rows = 0, n_kv = 0, slots = 0;  // slots: routed-expert slots per layer
  // Offsets inside one layer's block.
  int32_t o_norm = 0, o_norm2 = 0, o_qkv = 0, o_attn = 0, o_combine = 0, o_oproj = 0, o_router = 0, o_route = 0,
          o_gu_claim = 0, o_down_claim = 0, o_gu_done = 0, o_down_done = 0, o_dense_gu = 0, o_dense_down = 0,
          o_shared_gu = 0, o_shared_down = 0, o_n_active = 0, o_phase = 0;
  int32_t per_layer = 0;
  int32_t n_layers = 0;
  int32_t n_phases = 0;  // barrier-ablation phase counters per layer
  // The final norm and LM head use the block of pseudo-layer n_layers.
  int32_t total = 0;

  MS_HD uint32_t at(int layer, int off) const { return uint32_t(layer * per_layer + off); }
  // kNorm of layer l (sequential blocks: the first norm) done, per row.
  MS_HD uint32_t norm(int l) const { return at(l, o_norm); }
  // Sequential blocks: the second norm (before the FFN) done.
  MS_HD uint32_t norm2(int l) const { return at(l, o_norm2); }
  // QKV instructions of KV group g done.
  MS_HD uint32_t qkv(int l, int g) const { return at(l, o_qkv + g); }
  // Attention splits of (row, group) done.
  MS_HD uint32_t attn(int l, int row, int g) const { return at(l, o_attn + row * n_kv + g); }
  // Combines of group g done (one per row).
  MS_HD uint32_t combine(int l, int g) const { return at(l, o_combine + g); }
  MS_HD uint32_t oproj(int l) const { return at(l, o_oproj); }
  MS_HD uint32_t router(int l) const { return at(l, o_router); }
  MS_HD uint32_t route(int l) const { return at(l, o_route); }
  // Claim queues: the next tile index to hand out.
  MS_HD uint32_t gu_claim(int l) const { return at(l, o_gu_claim); }
  MS_HD uint32_t down_claim(int l) const { return at(l, o_down_claim); }
  // Gate/up tiles of routed-expert slot u done.
  MS_HD uint32_t gu_done(int l, int u) const { return at(l, o_gu_done + u); }
  // Down tiles done (all slots).
  MS_HD uint32_t down_done(int l) const { return at(l, o_down_done); }
  MS_HD uint32_t dense_gu(int l) const { return at(l, o_dense_gu); }
  MS_HD uint32_t dense_down(int l) const { return at(l, o_dense_down); }
  MS_HD uint32_t shared_gu(int l) const { return at(l, o_shared_gu); }
  MS_HD uint32_t shared_down(int l) const { return at(l, o_shared_down); }
  // Not a counter: kRoute stores the layer's number of routed experts here
  // (the claim queues' size), in the bank that is zeroed every step, so a
  // loader that reads it late never sees another layer's value.
  MS_HD uint32_t n_active(int l) const { return at(l, o_n_active); }
  MS_HD uint32_t phase(int l, int p) const { return at(l, o_phase + p); }
  MS_HD uint32_t final_norm_done() const { return at(n_layers, o_norm); }
  // A counter nothing signals (the watchdog test's planted wait); the
  // counter arrays hold words() = total + 1 entries.
  MS_HD uint32_t never() const { return uint32_t(total); }
  MS_HD int32_t words() const { return total + 1; }
};

// Phases of a layer for the barrier ablation (one counter each).
constexpr int kPhasesPerLayer = 12;

inline CounterLayout make_counter_layout(const Dims& d, int rows) {
  CounterLayout c;
  c.rows = rows;
  c.n_kv = d.n_kv_heads;
  c.slots = d.n_experts > 0 ? max_expert_slots(d, rows) : 0;
  int o = 0;
  c.o_norm = o++;
  c.o_norm2 = o++;
  c.o_qkv = o;
  o += d.n_kv_heads;
  c.o_attn = o;
  o += rows * d.n_kv_heads;
  c.o_combine = o;
  o += d.n_kv_heads;
  c.o_oproj = o++;
  c.o_router = o++;
  c.o_route = o++;
  c.o_gu_claim = o++;
  c.o_down_claim = o++;
  c.o_gu_done = o;
  o += c.slots;
  c.o_down_done = o++;
  c.o_dense_gu = o++;
  c.o_dense_down = o++;
  c.o_shared_gu = o++;
  c.o_shared_down = o++;
  c.o_n_active = o++;
  c.o_phase = o;
  c.n_phases = kPhasesPerLayer;
  o += kPhasesPerLayer;
  c.per_layer = o;
  c.n_layers = d.n_layers;
  c.total = (d.n_layers + 1) * o;
  return c;
}

}  // namespace ms::mk
