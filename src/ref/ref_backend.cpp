#include "ref/ref_backend.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "ref/ref_ops.h"

namespace ms {
namespace {

// emulate_bf16_activations: what storing n floats to a bf16 tensor does.
void round_bf16_n(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
}

}  // namespace

Result<std::unique_ptr<RefBackend>> RefBackend::create(const ModelConfig& cfg, const ModelWeights& w,
                                                       const RefBackendOptions& opt) {
  if (opt.block_size <= 0) return invalid_argument("block size must be positive");
  auto b = std::unique_ptr<RefBackend>(new RefBackend());
  b->cfg_ = cfg;
  b->kv_ = make_kv_spec(cfg, opt.block_size, opt.kv_bytes, sizeof(float));
  b->pool_ = std::make_unique<ThreadPool>(opt.threads);
  b->embed_ = w.embed.to_f32();
  b->final_norm_ = w.final_norm.to_f32();
  b->lm_head_is_embed_ = w.lm_head.data == w.embed.data;
  if (!b->lm_head_is_embed_) b->lm_head_ = w.lm_head.to_f32();
  b->inv_freq_ = ref_rope_inv_freq(cfg);
  b->bf16_ = opt.emulate_bf16_activations;
  b->routing_.assign(cfg.n_layers, {});
  b->layers_.resize(cfg.n_layers);
  auto cvt = [](const MatView& m) { return m.empty() ? std::vector<float>() : m.to_f32(); };
  for (int i = 0; i < cfg.n_layers; ++i) {
    const LayerWeights& s = w.layers[i];
    Layer& l = b->layers_[i];
    l.attn_norm = cvt(s.attn_norm);
    l.ffn_norm = cvt(s.ffn_norm);
    l.q = cvt(s.q);
    l.k = cvt(s.k);
    l.v = cvt(s.v);
    l.o = cvt(s.o);
    l.q_bias = cvt(s.q_bias);
    l.k_bias = cvt(s.k_bias);
    l.v_bias = cvt(s.v_bias);
    l.o_bias = cvt(s.o_bias);
    l.q_norm = cvt(s.q_norm);
    l.k_norm = cvt(s.k_norm);
    l.gate = cvt(s.gate);
    l.up = cvt(s.up);
    l.down = cvt(s.down);
    l.router = cvt(s.router);
    for (const auto& e : s.experts) l.experts.push_back({cvt(e.gate), cvt(e.up), cvt(e.down)});
    l.shared = {cvt(s.shared.gate), cvt(s.shared.up), cvt(s.shared.down)};
    const KvGroupSpec& g = b->kv_.groups[b->kv_.layer_group[i]];
    size_t n = size_t(g.num_blocks) * cfg.n_kv_heads * opt.block_size * cfg.head_dim;
    l.k_cache.assign(n, 0.f);
    l.v_cache.assign(n, 0.f);
  }
  return b;
}

float* RefBackend::kv_slot(std::vector<float>& cache, int32_t block, int kvh, int64_t pos_in_block) {
  const int64_t bs = kv_.block_size, hd = cfg_.head_dim;
  return cache.data() + ((int64_t(block) * cfg_.n_kv_heads + kvh) * bs + pos_in_block) * hd;
}

Status RefBackend::step(const std::vector<SeqWork>& batch, StepResult* out) {
  MS_RETURN_IF_ERROR(validate_batch(kv_, cfg_, batch));
  out->logits.assign(batch.size(), {});
  for (auto& r : routing_) r.clear();
  for (size_t i = 0; i < batch.size(); ++i)
    run_sequence(batch[i], batch[i].need_logits ? &out->logits[i] : nullptr);
  return Status::ok();
}

void RefBackend::run_sequence(const SeqWork& w, std::vector<float>* logits) {
  const int64_t T = static_cast<int64_t>(w.tokens.size()), H = cfg_.hidden;
  std::vector<float> x(T * H), h(T * H), attn(T * H), mlp(T * H);
  std::vector<float> hb(bf16_ ? T * H : 0);  // bf16 mode: h rounded, the matmul input (h stays the router input)
  auto mm_in = [&]() -> const float* {
    if (!bf16_) return h.data();
    std::copy(h.begin(), h.end(), hb.begin());
    round_bf16_n(hb.data(), T * H);
    return hb.data();
  };
  for (int64_t t = 0; t < T; ++t)
    std::copy_n(embed_.data() + int64_t(w.tokens[t]) * H, H, x.data() + t * H);
  for (int li = 0; li < cfg_.n_layers; ++li) {
    Layer& l = layers_[li];
    ref_norm(cfg_.norm, x.data(), l.attn_norm.data(), h.data(), T, H, cfg_.norm_eps);
    const float* hm = mm_in();
    attention(li, w, hm, attn.data());
    if (cfg_.parallel_block) {
      ffn(li, hm, h.data(), mlp.data(), T);
      for (int64_t i = 0; i < T * H; ++i) x[i] = x[i] + attn[i] + mlp[i];
    } else {
      for (int64_t i = 0; i < T * H; ++i) x[i] += attn[i];
      ref_norm(cfg_.norm, x.data(), l.ffn_norm.data(), h.data(), T, H, cfg_.norm_eps);
      ffn(li, mm_in(), h.data(), mlp.data(), T);
      for (int64_t i = 0; i < T * H; ++i) x[i] += mlp[i];
    }
  }
  if (!logits) return;
  std::vector<float> last(H);
  ref_norm(cfg_.norm, x.data() + (T - 1) * H, final_norm_.data(), last.data(), 1, H, cfg_.norm_eps);
  if (bf16_) round_bf16_n(last.data(), H);
  logits->assign(cfg_.vocab_size, 0.f);
  const float* head = lm_head_is_embed_ ? embed_.data() : lm_head_.data();
  ref_matmul(last.data(), head, nullptr, logits->data(), 1, cfg_.vocab_size, H, pool_.get());
  if (cfg_.logit_scale != 1.0f)
    for (float& v : *logits) v *= cfg_.logit_scale;
}

void RefBackend::attention(int li, const SeqWork& w, const float* h, float* out) {
  Layer& l = layers_[li];
  const LayerSpec& spec = cfg_.layers[li];
  const int64_t T = static_cast<int64_t>(w.tokens.size()), H = cfg_.hidden;
  const int nh = cfg_.n_heads, nkv = cfg_.n_kv_heads, hd = cfg_.head_dim;
  const int64_t qw = cfg_.q_width(), kvw = cfg_.kv_width(), bs = kv_.block_size;
  std::vector<float> q(T * qw), k(T * kvw), v(T * kvw), o(T * qw);
  ref_matmul(h, l.q.data(), l.q_bias.empty() ? nullptr : l.q_bias.data(), q.data(), T, qw, H, pool_.get());
  ref_matmul(h, l.k.data(), l.k_bias.empty() ? nullptr : l.k_bias.data(), k.data(), T, kvw, H, pool_.get());
  ref_matmul(h, l.v.data(), l.v_bias.empty() ? nullptr : l.v_bias.data(), v.data(), T, kvw, H, pool_.get());
  const int g = kv_.layer_group[li];
  const auto& table = w.block_tables[g];
  for (int64_t t = 0; t < T; ++t) {
    const int64_t pos = w.start_pos + t;
    if (cfg_.qk_norm) {
      ref_rmsnorm(q.data() + t * qw, l.q_norm.data(), q.data() + t * qw, nh, hd, cfg_.norm_eps);
      ref_rmsnorm(k.data() + t * kvw, l.k_norm.data(), k.data() + t * kvw, nkv, hd, cfg_.norm_eps);
    }
    if (spec.rope) {
      ref_rope(q.data() + t * qw, nh, hd, pos, inv_freq_.data(), cfg_.rope_style);
      ref_rope(k.data() + t * kvw, nkv, hd, pos, inv_freq_.data(), cfg_.rope_style);
    }
    if (bf16_) {  // the bf16 KV cache
      round_bf16_n(k.data() + t * kvw, kvw);
      round_bf16_n(v.data() + t * kvw, kvw);
    }
    const int32_t blk = table[pos / bs];
    for (int kh = 0; kh < nkv; ++kh) {
      std::copy_n(k.data() + t * kvw + kh * hd, hd, kv_slot(l.k_cache, blk, kh, pos % bs));
      std::copy_n(v.data() + t * kvw + kh * hd, hd, kv_slot(l.v_cache, blk, kh, pos % bs));
    }
  }
  // Causal attention over the cache; sliding layers see the last `window`
  // positions (HF: key index > query index - window).
  const int window = spec.sliding ? cfg_.sliding_window : 0;
  pool_->parallel_for(T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t pos = w.start_pos + t;
      const int64_t first = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
      auto key = [&](int64_t i, int kh) {
        int64_t p = first + i;
        return kv_slot(l.k_cache, table[p / bs], kh, p % bs);
      };
      auto val = [&](int64_t i, int kh) {
        int64_t p = first + i;
        return kv_slot(l.v_cache, table[p / bs], kh, p % bs);
      };
      ref_attention_one(q.data() + t * qw, nh, nkv, hd, pos - first + 1, key, val, o.data() + t * qw);
    }
  });
  if (bf16_) round_bf16_n(o.data(), T * qw);
  ref_matmul(o.data(), l.o.data(), l.o_bias.empty() ? nullptr : l.o_bias.data(), out, T, H, qw, pool_.get());
}

void RefBackend::dense_mlp(const float* gate, const float* up, const float* down, int64_t F, const float* h,
                           float* out, int64_t T) {
  const int64_t H = cfg_.hidden;
  std::vector<float> g(T * F), u(T * F), a(T * F);
  ref_matmul(h, gate, nullptr, g.data(), T, F, H, pool_.get());
  ref_matmul(h, up, nullptr, u.data(), T, F, H, pool_.get());
  ref_swiglu(g.data(), u.data(), a.data(), T * F);
  if (bf16_) round_bf16_n(a.data(), T * F);
  ref_matmul(a.data(), down, nullptr, out, T, H, F, pool_.get());
}

void RefBackend::ffn(int li, const float* h, const float* h_router, float* out, int64_t T) {
  Layer& l = layers_[li];
  const int64_t H = cfg_.hidden;
  if (!cfg_.layers[li].moe) {
    dense_mlp(l.gate.data(), l.up.data(), l.down.data(), cfg_.dense_ffn, h, out, T);
    return;
  }
  const int E = cfg_.n_experts;
  std::vector<float> logits(T * E), y(H);
  ref_matmul(h_router, l.router.data(), nullptr, logits.data(), T, E, H, pool_.get());
  std::fill(out, out + T * H, 0.f);
  for (int64_t t = 0; t < T; ++t) {
    RouteChoice rc = ref_route(cfg_, logits.data() + t * E);
    routing_[li].insert(routing_[li].end(), rc.experts.begin(), rc.experts.end());
    float* o = out + t * H;
    for (size_t k = 0; k < rc.experts.size(); ++k) {
      const Expert& e = l.experts[rc.experts[k]];
      dense_mlp(e.gate.data(), e.up.data(), e.down.data(), cfg_.moe_ffn, h + t * H, y.data(), 1);
      for (int64_t i = 0; i < H; ++i) o[i] += rc.weights[k] * y[i];
    }
    if (cfg_.n_shared_experts > 0) {
      dense_mlp(l.shared.gate.data(), l.shared.up.data(), l.shared.down.data(), cfg_.shared_ffn, h + t * H,
                y.data(), 1);
      for (int64_t i = 0; i < H; ++i) o[i] = cfg_.shared_sum ? o[i] + y[i] : (o[i] + y[i]) / 2;
    }
  }
}

}  // namespace ms
