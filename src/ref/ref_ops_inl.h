// Template body of ref_attention_one (kept out of ref_ops.h for readability).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace ms {

template <typename KeyFn, typename ValFn>
void ref_attention_one(const float* q, int n_heads, int n_kv_heads, int head_dim, int64_t n_keys, KeyFn key,
                       ValFn value, float* out) {
  const int group = n_heads / n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<float> scores(static_cast<size_t>(n_keys));
  for (int h = 0; h < n_heads; ++h) {
    const int kvh = h / group;
    const float* qh = q + int64_t(h) * head_dim;
    float mx = -INFINITY;
    for (int64_t i = 0; i < n_keys; ++i) {
      const float* k = key(i, kvh);
      float s = 0.f;
      for (int d = 0; d < head_dim; ++d) s += qh[d] * k[d];
      s *= scale;
      scores[i] = s;
      mx = std::max(mx, s);
    }
    float denom = 0.f;
    for (int64_t i = 0; i < n_keys; ++i) {
      scores[i] = std::exp(scores[i] - mx);
      denom += scores[i];
    }
    float* oh = out + int64_t(h) * head_dim;
    std::fill(oh, oh + head_dim, 0.f);
    for (int64_t i = 0; i < n_keys; ++i) {
      const float p = scores[i] / denom;
      const float* v = value(i, kvh);
      for (int d = 0; d < head_dim; ++d) oh[d] += p * v[d];
    }
  }
}

}  // namespace ms
