#include "ref/mk_vm.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "ref/ref_ops.h"

namespace ms {
namespace {

using mk::Instruction;
using mk::Opcode;

constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

std::vector<float> bf16_copy(const MatView& m) {
  if (m.empty()) return {};
  std::vector<float> v = m.to_f32();
  for (float& f : v) f = round_bf16(f);
  return v;
}
std::vector<float> f32_copy(const MatView& m) { return m.empty() ? std::vector<float>() : m.to_f32(); }
void append(std::vector<float>& dst, const std::vector<float>& src) { dst.insert(dst.end(), src.begin(), src.end()); }
void round_n(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
}

}  // namespace

Result<std::unique_ptr<MkVm>> MkVm::create(const ModelConfig& cfg, const ModelWeights& w, const MkVmOptions& opt) {
  MS_RETURN_IF_ERROR(cfg.validate());
  if (opt.block_size <= 0) return invalid_argument("mk_vm: block size must be positive");
  if (cfg.head_dim % mk::kTileRows != 0) return unimplemented("mk_vm: head_dim must be a multiple of 16");
  auto vm = std::unique_ptr<MkVm>(new MkVm());
  vm->cfg_ = cfg;
  vm->dims_ = mk::make_dims(cfg, opt.block_size);
  vm->kv_ = make_kv_spec(cfg, opt.block_size, opt.kv_bytes, 2);
  vm->embed_ = bf16_copy(w.embed);
  vm->lm_head_ = w.lm_head.data == w.embed.data ? std::vector<float>() : bf16_copy(w.lm_head);
  vm->final_norm_ = f32_copy(w.final_norm);
  vm->inv_freq_ = ref_rope_inv_freq(cfg);
  vm->routing_.assign(cfg.n_layers, {});
  vm->router_logits_.assign(cfg.n_layers, {});
  vm->own_routing_.assign(cfg.n_layers, {});
  vm->layers_.resize(cfg.n_layers);
  for (int li = 0; li < cfg.n_layers; ++li) {
    const LayerWeights& s = w.layers[li];
    Layer& l = vm->layers_[li];
    l.attn_norm = f32_copy(s.attn_norm);
    l.ffn_norm = f32_copy(s.ffn_norm);
    l.q_norm = f32_copy(s.q_norm);
    l.k_norm = f32_copy(s.k_norm);
    l.qkv = bf16_copy(s.q);
    append(l.qkv, bf16_copy(s.k));
    append(l.qkv, bf16_copy(s.v));
    if (cfg.attention_bias) {
      l.qkv_bias = f32_copy(s.q_bias);
      append(l.qkv_bias, f32_copy(s.k_bias));
      append(l.qkv_bias, f32_copy(s.v_bias));
      l.o_bias = f32_copy(s.o_bias);
    }
    l.o = bf16_copy(s.o);
    if (!cfg.layers[li].moe) {
      l.gate_up = bf16_copy(s.gate);
      append(l.gate_up, bf16_copy(s.up));
      l.down = bf16_copy(s.down);
    } else {
      l.router = bf16_copy(s.router);
      for (const ExpertWeights& e : s.experts) {
        append(l.experts_gate_up, bf16_copy(e.gate));
        append(l.experts_gate_up, bf16_copy(e.up));
        append(l.experts_down, bf16_copy(e.down));
      }
      if (cfg.n_shared_experts > 0) {
        l.shared_gate_up = bf16_copy(s.shared.gate);
        append(l.shared_gate_up, bf16_copy(s.shared.up));
        l.shared_down = bf16_copy(s.shared.down);
      }
    }
    const KvGroupSpec& g = vm->kv_.groups[vm->kv_.layer_group[li]];
    const size_t n = size_t(g.num_blocks) * cfg.n_kv_heads * opt.block_size * cfg.head_dim;
    l.k_cache.assign(n, 0.f);
    l.v_cache.assign(n, 0.f);
  }
  return vm;
}

Status MkVm::import_kv(int layer, const std::vector<uint16_t>& k, const std::vector<uint16_t>& v) {
  if (layer < 0 || layer >= cfg_.n_layers) return invalid_argument("mk_vm: no layer " + std::to_string(layer));
  Layer& l = layers_[layer];
  if (k.size() != l.k_cache.size() || v.size() != l.v_cache.size())
    return invalid_argument("mk_vm: layer " + std::to_string(layer) + " KV import of " + std::to_string(k.size()) +
                            " / " + std::to_string(v.size()) + " elements, the cache holds " +
                            std::to_string(l.k_cache.size()));
  for (size_t i = 0; i < k.size(); ++i) {
    l.k_cache[i] = bf16_to_f32(k[i]);
    l.v_cache[i] = bf16_to_f32(v[i]);
  }
  return Status::ok();
}

const std::vector<float>& MkVm::buffer(const std::string& name) const {
  static const std::vector<float> kEmpty;
  if (name == "x") return st_.x;
  if (name == "h") return st_.h;
  if (name == "hf") return st_.hf;
  if (name == "qkv") return st_.qkv;
  if (name == "attn_out") return st_.attn_out;
  if (name == "o_part") return st_.o_part;
  if (name == "router_logits") return st_.router_logits;
  if (name == "moe_act") return st_.moe_act;
  if (name == "ybuf") return st_.ybuf;
  if (name == "dense_act") return st_.dense_act;
  if (name == "logits") return st_.logits;
  return kEmpty;
}

const float* MkVm::kv_at(const std::vector<float>& cache, int32_t block, int kvh, int slot) const {
  const int64_t bs = kv_.block_size, hd = cfg_.head_dim;
  return cache.data() + ((int64_t(block) * cfg_.n_kv_heads + kvh) * bs + slot) * hd;
}
float* MkVm::kv_at(std::vector<float>& cache, int32_t block, int kvh, int slot) {
  return const_cast<float*>(static_cast<const MkVm*>(this)->kv_at(cache, block, kvh, slot));
}

void MkVm::rows_dot(const float* x, int ldx, int R, const float* w, int ldw, int row0, int n_out, int k,
                    float* y) const {
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < n_out; ++n) ref_matmul(x + int64_t(r) * ldx, w + int64_t(row0 + n) * ldw, nullptr, y + r * n_out + n, 1, 1, k);
}

Status MkVm::step(const mk::Schedule& s, const std::vector<SeqWork>& batch, const mk::MachineOptions& order,
                  StepResult* out, mk::MachineStats* stats) {
  const mk::Dims& d = dims_;
  const int R = static_cast<int>(batch.size());
  if (R != s.opt.rows)
    return invalid_argument("mk_vm: the schedule is for " + std::to_string(s.opt.rows) + " rows, the batch has " +
                            std::to_string(R));
  if (s.dims.hidden != d.hidden || s.dims.n_layers != d.n_layers || s.dims.vocab != d.vocab)
    return invalid_argument("mk_vm: the schedule was built for another model");
  for (const SeqWork& w : batch) {
    if (w.tokens.size() != 1) return invalid_argument("mk_vm: decode steps only (one token per sequence)");
    if (w.start_pos + 1 > s.opt.context)
      return invalid_argument("mk_vm: a row attends " + std::to_string(w.start_pos + 1) +
                              " keys, more than the schedule's context " + std::to_string(s.opt.context));
  }
  MS_RETURN_IF_ERROR(validate_batch(kv_, cfg_, batch));
  Step& st = st_;
  st.batch = &batch;
  st.tokens.resize(R);
  st.pos.resize(R);
  for (int r = 0; r < R; ++r) {
    st.tokens[r] = batch[r].tokens[0];
    st.pos[r] = batch[r].start_pos;
  }
  const int S = std::max(s.splits_full, s.splits_sliding), K = std::max(d.top_k, 1), E = std::max(d.n_experts, 1);
  const int F = std::max(d.dense_ffn, 1), SF = std::max(d.shared_ffn, 1);
  auto poison = [](std::vector<float>& v, size_t n) { v.assign(n, kPoison); };
  poison(st.x, size_t(R) * d.hidden);
  poison(st.h, size_t(R) * d.hidden);
  poison(st.hf, size_t(R) * d.hidden);
  poison(st.qkv, size_t(R) * d.qkv_width);
  poison(st.part_o, size_t(R) * d.n_heads * S * d.head_dim);
  poison(st.part_lse, size_t(R) * d.n_heads * S);
  poison(st.attn_out, size_t(R) * d.q_width);
  poison(st.o_part, size_t(mk::o_slices(d)) * R * d.hidden);
  poison(st.router_logits, size_t(R) * E);
  poison(st.topk_w, size_t(R) * K);
  poison(st.moe_act, size_t(R) * K * std::max(d.moe_ffn, 1));
  poison(st.ybuf, size_t(R) * K * d.hidden);
  poison(st.dense_act, size_t(R) * F);
  poison(st.dense_part, size_t(mk::down_slices(F)) * R * d.hidden);
  poison(st.shared_act, size_t(R) * SF);
  poison(st.shared_part, size_t(mk::down_slices(SF)) * R * d.hidden);
  poison(st.logits, size_t(R) * d.vocab);
  st.topk_ids.assign(size_t(R) * K, -1);
  st.n_active = 0;
  st.active.assign(E, -1);
  st.offset.assign(E, -1);
  st.count.assign(E, 0);
  st.members.assign(size_t(R) * K, -1);
  for (auto& r : routing_) r.clear();
  for (auto& r : router_logits_) r.clear();
  for (auto& r : own_routing_) r.clear();
  sched_ = &s;

  mk::MachineOps ops;
  ops.run = [this](int sm, const Instruction& in) { return run(sm, in); };
  ops.route = [this](int, const Instruction& in) { return route(in); };
  ops.tile = [this](int, const Instruction& in, int slot, int t) { return tile(in, slot, t); };
  Status rs = mk::run_machine(s, ops, order, stats);
  sched_ = nullptr;
  forced_.clear();
  MS_RETURN_IF_ERROR(rs);
  out->logits.assign(R, {});
  for (int r = 0; r < R; ++r)
    out->logits[r].assign(st.logits.begin() + int64_t(r) * d.vocab, st.logits.begin() + int64_t(r + 1) * d.vocab);
  return Status::ok();
}

Status MkVm::run(int, const Instruction& in) {
  const mk::Dims& d = dims_;
  Step& st = st_;
  const int R = sched_->opt.rows;
  std::vector<float> y;
  switch (in.op) {
    case Opcode::kNorm:
    case Opcode::kFinalNorm:
      norm_row(in);
      return Status::ok();
    case Opcode::kAttention:
      attention(in);
      return Status::ok();
    case Opcode::kAttnCombine:
      combine(in);
      return Status::ok();
    case Opcode::kBarrier:
    case Opcode::kNop:
      return Status::ok();
    case Opcode::kQkv: {
      const Layer& l = layers_[in.layer];
      const int row0 = in.gemv.tile0 * mk::kTileRows;
      const int n = std::min(in.gemv.n_tiles * mk::kTileRows, d.qkv_width - row0);
      y.resize(size_t(R) * n);
      rows_dot(st.h.data(), d.hidden, R, l.qkv.data(), d.hidden, row0, n, d.hidden, y.data());
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < n; ++i)
          st.qkv[size_t(r) * d.qkv_width + row0 + i] = y[r * n + i] + (l.qkv_bias.empty() ? 0.f : l.qkv_bias[row0 + i]);
      return Status::ok();
    }
    case Opcode::kOProj: {
      const Layer& l = layers_[in.layer];
      const mk::RowRange cols = mk::o_slice_cols(d, in.gemv.kslice);
      const int row0 = in.gemv.tile0 * mk::kTileRows;
      const int n = std::min(in.gemv.n_tiles * mk::kTileRows, d.hidden - row0), k = cols.end - cols.begin;
      y.resize(size_t(R) * n);
      rows_dot(st.attn_out.data() + cols.begin, d.q_width, R, l.o.data() + cols.begin, d.q_width, row0, n, k, y.data());
      float* part = st.o_part.data() + size_t(in.gemv.kslice) * R * d.hidden;
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < n; ++i)
          part[size_t(r) * d.hidden + row0 + i] =
              y[r * n + i] + (in.gemv.kslice == 0 && !l.o_bias.empty() ? l.o_bias[row0 + i] : 0.f);
      return Status::ok();
    }
    case Opcode::kRouter: {
      const Layer& l = layers_[in.layer];
      const int e0 = in.gemv.tile0 * mk::kTileRows;
      const int n = std::min(in.gemv.n_tiles * mk::kTileRows, d.n_experts - e0);
      y.resize(size_t(R) * n);
      rows_dot(st.hf.data(), d.hidden, R, l.router.data(), d.hidden, e0, n, d.hidden, y.data());
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < n; ++i) st.router_logits[size_t(r) * d.n_experts + e0 + i] = y[r * n + i];
      return Status::ok();
    }
    case Opcode::kDenseGateUp: {
      const Layer& l = layers_[in.layer];
      const bool shared = in.flags & mk::kFlagShared;
      const int F = shared ? d.shared_ffn : d.dense_ffn;
      const std::vector<float>& w = shared ? l.shared_gate_up : l.gate_up;
      std::vector<float>& act = shared ? st.shared_act : st.dense_act;
      const int c0 = in.gemv.tile0 * mk::kPairCols;
      const int n = std::min(in.gemv.n_tiles * mk::kPairCols, F - c0);
      std::vector<float> g(size_t(R) * n), u(size_t(R) * n);
      rows_dot(st.h.data(), d.hidden, R, w.data(), d.hidden, c0, n, d.hidden, g.data());
      rows_dot(st.h.data(), d.hidden, R, w.data(), d.hidden, F + c0, n, d.hidden, u.data());
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < n; ++i) {
          float a;
          ref_swiglu(&g[r * n + i], &u[r * n + i], &a, 1);
          act[size_t(r) * F + c0 + i] = round_bf16(a);
        }
      return Status::ok();
    }
    case Opcode::kDenseDown: {
      const Layer& l = layers_[in.layer];
      const bool shared = in.flags & mk::kFlagShared;
      const int F = shared ? d.shared_ffn : d.dense_ffn;
      const std::vector<float>& w = shared ? l.shared_down : l.down;
      const std::vector<float>& act = shared ? st.shared_act : st.dense_act;
      std::vector<float>& part_all = shared ? st.shared_part : st.dense_part;
      const mk::RowRange cols = mk::down_slice_cols(F, in.gemv.kslice);
      const int row0 = in.gemv.tile0 * mk::kTileRows;
      const int n = std::min(in.gemv.n_tiles * mk::kTileRows, d.hidden - row0), k = cols.end - cols.begin;
      y.resize(size_t(R) * n);
      rows_dot(act.data() + cols.begin, F, R, w.data() + cols.begin, F, row0, n, k, y.data());
      float* part = part_all.data() + size_t(in.gemv.kslice) * R * d.hidden;
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < n; ++i) part[size_t(r) * d.hidden + row0 + i] = y[r * n + i];
      return Status::ok();
    }
    case Opcode::kLmHead: {
      const std::vector<float>& w = lm_head_.empty() ? embed_ : lm_head_;
      const int v0 = in.gemv.tile0 * mk::kTileRows;
      const int n = std::min(in.gemv.n_tiles * mk::kTileRows, d.vocab - v0);
      y.resize(size_t(R) * n);
      rows_dot(st.h.data(), d.hidden, R, w.data(), d.hidden, v0, n, d.hidden, y.data());
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < n; ++i) st.logits[size_t(r) * d.vocab + v0 + i] = y[r * n + i] * d.logit_scale;
      return Status::ok();
    }
    case Opcode::kRoute:
    case Opcode::kExpertGateUp:
    case Opcode::kExpertDown:
      break;
  }
  return internal_error("mk_vm: opcode " + std::string(mk::opcode_name(in.op)) + " reached run()");
}

// x update + norm of one row. The residual adds, in the reference's order:
// parallel blocks x = (x + attention) + ffn, sequential x = x + attention
// (second norm) and x = x + ffn (next layer's first norm); attention is the
// sum of the O-projection's per-group partials, the FFN the routed experts'
// weighted outputs in k order (+ the shared expert) or the dense down's
// k-slice partials.
void MkVm::norm_row(const Instruction& in) {
  const mk::Dims& d = dims_;
  Step& st = st_;
  const int R = sched_->opt.rows, H = d.hidden, r = in.rows.row;
  const bool final = in.op == Opcode::kFinalNorm, second = in.flags & mk::kFlagNormSecond;
  float* x = st.x.data() + size_t(r) * H;
  const int prev = final ? d.n_layers - 1 : in.layer - 1;
  auto attn = [&](int i) {
    float a = 0.f;
    for (int g = 0; g < mk::o_slices(d); ++g) a += st.o_part[(size_t(g) * R + r) * H + i];
    return a;
  };
  auto ffn = [&](int layer, int i) {
    if (!cfg_.layers[layer].moe) {
      float f = 0.f;
      for (int j = 0; j < mk::down_slices(d.dense_ffn); ++j) f += st.dense_part[(size_t(j) * R + r) * H + i];
      return f;
    }
    const int K = d.top_k;
    float o = 0.f;
    for (int k = 0; k < K; ++k) o += st.ybuf[(size_t(r) * K + k) * H + i];
    if (d.shared_ffn > 0) {
      float y = 0.f;
      for (int j = 0; j < mk::down_slices(d.shared_ffn); ++j) y += st.shared_part[(size_t(j) * R + r) * H + i];
      o = d.shared_sum ? o + y : (o + y) / 2;
    }
    return o;
  };
  if (!final && in.layer == 0 && !second) {
    std::copy_n(embed_.data() + int64_t(st.tokens[r]) * H, H, x);
  } else if (second) {
    for (int i = 0; i < H; ++i) x[i] += attn(i);
  } else if (d.parallel_block) {
    for (int i = 0; i < H; ++i) x[i] = x[i] + attn(i) + ffn(prev, i);
  } else {
    for (int i = 0; i < H; ++i) x[i] += ffn(prev, i);
  }
  const std::vector<float>& w =
      final ? final_norm_ : (second ? layers_[in.layer].ffn_norm : layers_[in.layer].attn_norm);
  float* hf = st.hf.data() + size_t(r) * H;
  ref_norm(cfg_.norm, x, w.data(), hf, 1, H, d.norm_eps);
  float* h = st.h.data() + size_t(r) * H;
  std::copy_n(hf, H, h);
  round_n(h, H);
}

void MkVm::attention(const Instruction& in) {
  const mk::Dims& d = dims_;
  Step& st = st_;
  const int R = sched_->opt.rows, hd = d.head_dim, G = d.group, S = std::max(sched_->splits_full, sched_->splits_sliding);
  const int r = in.attn.row, g = in.attn.kv_head;
  Layer& l = layers_[in.layer];
  const mk::LayerInfo& info = sched_->layers[in.layer];
  const int pos = st.pos[r];
  const int window = info.sliding ? d.sliding_window : 0;
  const mk::SplitRange sr = mk::split_range(pos, window, in.attn.split, in.attn.n_splits);
  const float* row = st.qkv.data() + size_t(r) * d.qkv_width;
  // q of the group's heads, the new token's k and v: QK-norm, RoPE, bf16 K/V.
  std::vector<float> q(row + g * G * hd, row + (g + 1) * G * hd);
  std::vector<float> k(row + d.q_width + g * hd, row + d.q_width + (g + 1) * hd);
  std::vector<float> v(row + d.q_width + d.kv_width + g * hd, row + d.q_width + d.kv_width + (g + 1) * hd);
  if (d.qk_norm) {
    ref_rmsnorm(q.data(), l.q_norm.data(), q.data(), G, hd, d.norm_eps);
    ref_rmsnorm(k.data(), l.k_norm.data(), k.data(), 1, hd, d.norm_eps);
  }
  if (info.rope) {
    ref_rope(q.data(), G, hd, pos, inv_freq_.data(), cfg_.rope_style);
    ref_rope(k.data(), 1, hd, pos, inv_freq_.data(), cfg_.rope_style);
  }
  round_n(k.data(), hd);
  round_n(v.data(), hd);
  const int group_idx = kv_.layer_group[in.layer];
  const std::vector<int32_t>& table = (*st.batch)[r].block_tables[group_idx];
  const int bs = kv_.block_size;
  if (in.attn.split == sr.last_split) {
    const int32_t blk = table[pos / bs];
    std::copy(k.begin(), k.end(), kv_at(l.k_cache, blk, g, pos % bs));
    std::copy(v.begin(), v.end(), kv_at(l.v_cache, blk, g, pos % bs));
  }
  if (sr.stage_end <= sr.stage_begin) return;  // empty split: the combine reads splits <= last_split only
  const int k0 = std::max(sr.lo, sr.stage_begin * mk::kStageKeys);
  const int k1 = std::min(pos + 1, sr.stage_end * mk::kStageKeys);
  auto key = [&](int64_t i, int) -> const float* {
    const int p = k0 + static_cast<int>(i);
    return p == pos ? k.data() : kv_at(l.k_cache, table[p / bs], g, p % bs);
  };
  auto val = [&](int64_t i, int) -> const float* {
    const int p = k0 + static_cast<int>(i);
    return p == pos ? v.data() : kv_at(l.v_cache, table[p / bs], g, p % bs);
  };
  // Partial softmax of this split: o normalised by its own sum, lse = m + log(sum).
  const float scale = d.attn_scale;
  std::vector<float> sc(k1 - k0);
  for (int hh = 0; hh < G; ++hh) {
    const float* qh = q.data() + hh * hd;
    float mx = -INFINITY;
    for (int i = 0; i < k1 - k0; ++i) {
      const float* kk = key(i, 0);
      float s = 0.f;
      for (int e = 0; e < hd; ++e) s += qh[e] * kk[e];
      sc[i] = s * scale;
      mx = std::max(mx, sc[i]);
    }
    float sum = 0.f;
    for (float& s : sc) sum += (s = std::exp(s - mx));
    const int head = g * G + hh;
    float* o = st.part_o.data() + ((size_t(r) * d.n_heads + head) * S + in.attn.split) * hd;
    std::fill(o, o + hd, 0.f);
    for (int i = 0; i < k1 - k0; ++i) {
      const float p = sc[i] / sum;
      const float* vv = val(i, 0);
      for (int e = 0; e < hd; ++e) o[e] += p * vv[e];
    }
    st.part_lse[(size_t(r) * d.n_heads + head) * S + in.attn.split] = mx + std::log(sum);
  }
  (void)R;
}

void MkVm::combine(const Instruction& in) {
  const mk::Dims& d = dims_;
  Step& st = st_;
  const int hd = d.head_dim, G = d.group, S = std::max(sched_->splits_full, sched_->splits_sliding);
  const int r = in.attn.row, g = in.attn.kv_head;
  const int window = sched_->layers[in.layer].sliding ? d.sliding_window : 0;
  const int last = mk::split_range(st.pos[r], window, 0, in.attn.n_splits).last_split;
  for (int hh = 0; hh < G; ++hh) {
    const int head = g * G + hh;
    const float* lse = st.part_lse.data() + (size_t(r) * d.n_heads + head) * S;
    float mx = -INFINITY;
    for (int s = 0; s <= last; ++s) mx = std::max(mx, lse[s]);
    float* out = st.attn_out.data() + size_t(r) * d.q_width + size_t(head) * hd;
    std::fill(out, out + hd, 0.f);
    float den = 0.f;
    for (int s = 0; s <= last; ++s) {
      const float w = std::exp(lse[s] - mx);
      den += w;
      const float* o = st.part_o.data() + ((size_t(r) * d.n_heads + head) * S + s) * hd;
      for (int e = 0; e < hd; ++e) out[e] += w * o[e];
    }
    for (int e = 0; e < hd; ++e) out[e] = round_bf16(out[e] / den);
  }
}

Result<int> MkVm::route(const Instruction& in) {
  const mk::Dims& d = dims_;
  Step& st = st_;
  const int R = sched_->opt.rows, K = d.top_k, E = d.n_experts;
  std::vector<int> cnt(E, 0);
  router_logits_[in.layer].assign(st.router_logits.begin(), st.router_logits.begin() + size_t(R) * E);
  const bool forced = in.layer < static_cast<int>(forced_.size()) && !forced_[in.layer].empty();
  if (forced && forced_[in.layer].size() != size_t(R) * K)
    return invalid_argument("mk_vm: forced routing of layer " + std::to_string(in.layer) + " has " +
                            std::to_string(forced_[in.layer].size()) + " ids, want rows x top_k = " +
                            std::to_string(R * K));
  for (int r = 0; r < R; ++r) {
    const float* lg = st.router_logits.data() + size_t(r) * E;
    const RouteChoice own = ref_route(cfg_, lg);
    own_routing_[in.layer].insert(own_routing_[in.layer].end(), own.experts.begin(), own.experts.end());
    if (forced)
      for (int k = 0; k < K; ++k)
        if (const int32_t e = forced_[in.layer][size_t(r) * K + k]; e < 0 || e >= E)
          return invalid_argument("mk_vm: forced routing names expert " + std::to_string(e));
    const RouteChoice rc = forced ? ref_route(cfg_, lg, forced_[in.layer].data() + size_t(r) * K) : own;
    for (int k = 0; k < K; ++k) {
      st.topk_ids[r * K + k] = rc.experts[k];
      st.topk_w[r * K + k] = rc.weights[k];
      ++cnt[rc.experts[k]];
    }
    routing_[in.layer].insert(routing_[in.layer].end(), rc.experts.begin(), rc.experts.end());
  }
  // Plan: routed experts ascending, members grouped by expert in selection order.
  st.n_active = 0;
  int run = 0;
  std::vector<int> cursor(E, 0);
  for (int e = 0; e < E; ++e) {
    if (cnt[e] == 0) continue;
    st.active[st.n_active] = e;
    st.offset[st.n_active] = run;
    st.count[st.n_active] = cnt[e];
    cursor[e] = run;
    run += cnt[e];
    ++st.n_active;
  }
  for (int s = 0; s < R * K; ++s) st.members[cursor[st.topk_ids[s]]++] = s;
  return st.n_active;
}

Status MkVm::tile(const Instruction& in, int slot, int t) {
  const mk::Dims& d = dims_;
  Step& st = st_;
  if (slot >= st.n_active) return internal_error("mk_vm: tile of slot " + std::to_string(slot) + " beyond the plan");
  const Layer& l = layers_[in.layer];
  const int e = st.active[slot], H = d.hidden, I = d.moe_ffn, K = d.top_k;
  for (int m = 0; m < st.count[slot]; ++m) {
    const int sel = st.members[st.offset[slot] + m], r = sel / K;
    if (in.op == Opcode::kExpertGateUp) {
      const float* w = l.experts_gate_up.data() + size_t(e) * 2 * I * H;
      const int c0 = t * mk::kPairCols, n = std::min(mk::kPairCols, I - c0);
      std::vector<float> g(n), u(n);
      rows_dot(st.h.data() + size_t(r) * H, H, 1, w, H, c0, n, H, g.data());
      rows_dot(st.h.data() + size_t(r) * H, H, 1, w, H, I + c0, n, H, u.data());
      for (int i = 0; i < n; ++i) {
        float a;
        ref_swiglu(&g[i], &u[i], &a, 1);
        st.moe_act[size_t(sel) * I + c0 + i] = round_bf16(a);
      }
    } else {
      const float* w = l.experts_down.data() + size_t(e) * H * I;
      const int n0 = t * d.down_rows, n = std::min(d.down_rows, H - n0);
      std::vector<float> y(n);
      rows_dot(st.moe_act.data() + size_t(sel) * I, I, 1, w, I, n0, n, I, y.data());
      for (int i = 0; i < n; ++i) st.ybuf[size_t(sel) * H + n0 + i] = st.topk_w[sel] * y[i];
    }
  }
  return Status::ok();
}

}  // namespace ms
