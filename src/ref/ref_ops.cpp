#include "ref/ref_ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ms {

void ref_matmul(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t N, int64_t K,
                ThreadPool* pool) {
  auto rows = [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* wr = w + n * K;
      for (int64_t t = 0; t < T; ++t) {
        const float* xr = x + t * K;
        // 4 partial sums: fp32 accumulation, auto-vectorisable.
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        int64_t k = 0;
        for (; k + 4 <= K; k += 4) {
          s0 += xr[k] * wr[k];
          s1 += xr[k + 1] * wr[k + 1];
          s2 += xr[k + 2] * wr[k + 2];
          s3 += xr[k + 3] * wr[k + 3];
        }
        for (; k < K; ++k) s0 += xr[k] * wr[k];
        y[t * N + n] = (s0 + s1) + (s2 + s3) + (bias ? bias[n] : 0.f);
      }
    }
  };
  if (pool && N * T * K > (1 << 15)) pool->parallel_for(N, rows, 16);
  else rows(0, N);
}

void ref_rmsnorm(const float* x, const float* w, float* y, int64_t T, int64_t H, float eps) {
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = x + t * H;
    float ss = 0;
    for (int64_t i = 0; i < H; ++i) ss += xr[i] * xr[i];
    float r = 1.0f / std::sqrt(ss / static_cast<float>(H) + eps);
    for (int64_t i = 0; i < H; ++i) y[t * H + i] = w[i] * (xr[i] * r);
  }
}

void ref_layernorm(const float* x, const float* w, float* y, int64_t T, int64_t H, float eps) {
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = x + t * H;
    float mean = 0;
    for (int64_t i = 0; i < H; ++i) mean += xr[i];
    mean /= static_cast<float>(H);
    float var = 0;
    for (int64_t i = 0; i < H; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<float>(H);
    float r = 1.0f / std::sqrt(var + eps);
    for (int64_t i = 0; i < H; ++i) y[t * H + i] = w[i] * ((xr[i] - mean) * r);
  }
}

void ref_norm(NormKind kind, const float* x, const float* w, float* y, int64_t T, int64_t H, float eps) {
  if (kind == NormKind::kRms) ref_rmsnorm(x, w, y, T, H, eps);
  else ref_layernorm(x, w, y, T, H, eps);
}

std::vector<float> ref_rope_inv_freq(const ModelConfig& cfg) {
  const int d = cfg.head_dim;
  std::vector<float> inv(d / 2);
  const float base = static_cast<float>(cfg.rope_theta);
  for (int i = 0; i < d / 2; ++i) {
    // HF: 1.0 / (base ** (arange(0, dim, 2).float() / dim)) in fp32.
    float e = static_cast<float>(2 * i) / static_cast<float>(d);
    inv[i] = 1.0f / std::pow(base, e);
  }
  const RopeScaling& s = cfg.rope_scaling;
  if (s.kind == RopeScaling::Kind::kLinear) {
    for (float& f : inv) f = f / static_cast<float>(s.factor);
  } else if (s.kind == RopeScaling::Kind::kLlama3) {
    const float factor = static_cast<float>(s.factor);
    const float old_len = static_cast<float>(s.original_max_position);
    const float lo = static_cast<float>(s.low_freq_factor), hi = static_cast<float>(s.high_freq_factor);
    const float low_wavelen = old_len / lo, high_wavelen = old_len / hi;
    for (float& f : inv) {
      float wavelen = 2.0f * static_cast<float>(M_PI) / f;
      float scaled = wavelen > low_wavelen ? f / factor : f;
      float smooth = (old_len / wavelen - lo) / (hi - lo);
      float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
      bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
      f = medium ? smoothed : scaled;
    }
  }
  return inv;
}

void ref_rope(float* x, int n_heads, int head_dim, int64_t pos, const float* inv_freq, RopeStyle style) {
  const int half = head_dim / 2;
  const float p = static_cast<float>(pos);
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + int64_t(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const float ang = inv_freq[i] * p;  // fp32 product, as HF's freqs
      const float c = std::cos(ang), s = std::sin(ang);
      if (style == RopeStyle::kNeox) {
        float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      } else {
        float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * c - b * s;
        v[2 * i + 1] = b * c + a * s;
      }
    }
  }
}

void ref_swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

RouteChoice ref_route(const ModelConfig& cfg, const float* logits, const int32_t* forced) {
  const int E = cfg.n_experts, K = cfg.top_k;
  std::vector<float> score(logits, logits + E);
  if (!cfg.softmax_over_topk && cfg.router == RouterFn::kSoftmax) {
    // qwen3_moe: softmax over all experts, then top-k.
    float mx = *std::max_element(score.begin(), score.end());
    float sum = 0;
    for (float& s : score) sum += (s = std::exp(s - mx));
    for (float& s : score) s /= sum;
  }
  std::vector<int> idx(E);
  std::iota(idx.begin(), idx.end(), 0);
  // Ties go to the lower index (torch.topk on CPU/GPU behaves so for distinct data).
  std::partial_sort(idx.begin(), idx.begin() + K, idx.end(), [&](int a, int b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  RouteChoice rc;
  if (forced) rc.experts.assign(forced, forced + K);
  else rc.experts.assign(idx.begin(), idx.begin() + K);
  for (int e : rc.experts) rc.weights.push_back(score[e]);
  if (cfg.softmax_over_topk) {
    if (cfg.router == RouterFn::kSoftmax) {
      float mx = *std::max_element(rc.weights.begin(), rc.weights.end());
      float sum = 0;
      for (float& w : rc.weights) sum += (w = std::exp(w - mx));
      for (float& w : rc.weights) w /= sum;
    } else {
      for (float& w : rc.weights) w = 1.0f / (1.0f + std::exp(-w));
    }
  }
  if (cfg.norm_topk_prob && !(cfg.softmax_over_topk && cfg.router == RouterFn::kSoftmax)) {
    float sum = 0;
    for (float w : rc.weights) sum += w;
    for (float& w : rc.weights) w /= sum;
  }
  return rc;
}

}  // namespace ms
