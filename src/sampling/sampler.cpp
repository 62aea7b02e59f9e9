#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <unordered_map>

namespace ms {
namespace {

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace

Status validate_sampling_params(const SamplingParams& p) {
  auto bad = [](const std::string& name, const std::string& range, double v) {
    return invalid_argument(name + " must be " + range + ", got " + std::to_string(v));
  };
  if (!(p.temperature >= 0.f) || !std::isfinite(p.temperature)) return bad("temperature", ">= 0", p.temperature);
  if (!(p.top_p > 0.f && p.top_p <= 1.f)) return bad("top_p", "in (0, 1]", p.top_p);
  if (p.top_k < -1) return bad("top_k", "-1, 0 or positive", p.top_k);
  if (!(p.min_p >= 0.f && p.min_p <= 1.f)) return bad("min_p", "in [0, 1]", p.min_p);
  if (!(p.presence_penalty >= -2.f && p.presence_penalty <= 2.f))
    return bad("presence_penalty", "in [-2, 2]", p.presence_penalty);
  if (!(p.frequency_penalty >= -2.f && p.frequency_penalty <= 2.f))
    return bad("frequency_penalty", "in [-2, 2]", p.frequency_penalty);
  if (!(p.repetition_penalty > 0.f) || !std::isfinite(p.repetition_penalty))
    return bad("repetition_penalty", "> 0", p.repetition_penalty);
  if (p.logprobs < -1 || p.logprobs > kMaxTopLogprobs)
    return bad("logprobs", "in [0, " + std::to_string(kMaxTopLogprobs) + "]", p.logprobs);
  if (p.logit_bias.size() > size_t(kMaxLogitBias))
    return bad("logit_bias", "at most " + std::to_string(kMaxLogitBias) + " entries", double(p.logit_bias.size()));
  for (size_t i = 0; i < p.logit_bias.size(); ++i) {
    const auto& [t, b] = p.logit_bias[i];
    if (t < 0) return bad("logit_bias token", ">= 0", t);
    if (i > 0 && t <= p.logit_bias[i - 1].first) return invalid_argument("logit_bias must be sorted by token id, one entry per token");
    if (!(b >= -kLogitBiasLimit && b <= kLogitBiasLimit)) return bad("logit_bias value", "in [-100, 100]", b);
  }
  return Status::ok();
}

double sampler_uniform(uint64_t seed, uint64_t index) {
  uint64_t x = mix64(mix64(seed) ^ (index * 0xd1b54a32d192ed03ull));
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

std::vector<float> log_softmax(std::span<const float> logits) {
  float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - mx);
  double lse = mx + std::log(sum);
  std::vector<float> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<float>(double(logits[i]) - lse);
  return out;
}

SampleResult sample_token(std::span<const float> logits_in, const SamplingParams& p, const SamplerContext& ctx) {
  const int vocab = static_cast<int>(logits_in.size());
  // Step 0: the allowed-token mask.
  std::vector<float> masked;
  std::span<const float> logits = logits_in;
  if (!ctx.allowed.empty()) {
    masked.assign(logits_in.begin(), logits_in.end());
    for (int t = 0; t < vocab; ++t) {
      const size_t w = static_cast<size_t>(t) >> 5;
      if (w >= ctx.allowed.size() || !((ctx.allowed[w] >> (t & 31)) & 1u)) masked[t] = kNegInf;
    }
    logits = masked;
  }
  SampleResult res;
  std::vector<float> raw_lp;
  if (p.logprobs >= 0) {
    // Step 1: raw logprobs.
    raw_lp = log_softmax(logits);
    int n = std::min(p.logprobs, vocab);
    std::vector<int32_t> ids(vocab);
    std::iota(ids.begin(), ids.end(), 0);
    auto better = [&](int32_t a, int32_t b) { return raw_lp[a] > raw_lp[b] || (raw_lp[a] == raw_lp[b] && a < b); };
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), better);
    for (int i = 0; i < n; ++i) res.top.push_back({ids[i], raw_lp[ids[i]]});
  }

  std::vector<float> l(logits.begin(), logits.end());
  // Step 2: repetition penalty over distinct prompt + output tokens.
  if (p.repetition_penalty != 1.f) {
    std::vector<int32_t> seen(ctx.prompt.begin(), ctx.prompt.end());
    seen.insert(seen.end(), ctx.output.begin(), ctx.output.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t t : seen) {
      if (t < 0 || t >= vocab) continue;
      l[t] = l[t] > 0 ? l[t] / p.repetition_penalty : l[t] * p.repetition_penalty;
    }
  }
  // Step 3: frequency / presence over output tokens.
  if (p.frequency_penalty != 0.f || p.presence_penalty != 0.f) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t t : ctx.output)
      if (t >= 0 && t < vocab) ++counts[t];
    for (const auto& [t, c] : counts) l[t] -= c * p.frequency_penalty + p.presence_penalty;
  }
  // Step 3b: logit_bias.
  for (const auto& [t, b] : p.logit_bias)
    if (t >= 0 && t < vocab) l[t] += b;

  auto finish = [&](int32_t tok) {
    res.token = tok;
    if (p.logprobs >= 0) res.logprob = raw_lp[tok];
    return res;
  };
  // Step 4: greedy.
  if (p.greedy()) return finish(static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin()));

  // Step 5: temperature.
  for (float& v : l) v /= p.temperature;
  float mx = *std::max_element(l.begin(), l.end());
  // Step 6: min-p.
  if (p.min_p > 0.f) {
    float cut = mx + std::log(p.min_p);
    for (float& v : l)
      if (v < cut) v = kNegInf;
  }
  // Step 7: top-k.
  if (p.top_k > 0 && p.top_k < vocab) {
    std::vector<float> tmp(l);
    std::nth_element(tmp.begin(), tmp.begin() + (p.top_k - 1), tmp.end(), std::greater<float>());
    float kth = tmp[p.top_k - 1];
    for (float& v : l)
      if (v < kth) v = kNegInf;
  }
  // Step 8: top-p.
  if (p.top_p < 1.f) {
    std::vector<int32_t> ids;
    for (int32_t t = 0; t < vocab; ++t)
      if (l[t] != kNegInf) ids.push_back(t);
    std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    double total = 0;
    for (int32_t t : ids) total += std::exp(double(l[t]) - mx);
    double cum = 0;
    size_t keep = 0;
    while (keep < ids.size()) {
      cum += std::exp(double(l[ids[keep]]) - mx);
      ++keep;
      if (cum >= p.top_p * total) break;
    }
    for (size_t i = keep; i < ids.size(); ++i) l[ids[i]] = kNegInf;
  }
  // Step 9: inverse CDF in token-id order.
  double total = 0;
  for (float v : l)
    if (v != kNegInf) total += std::exp(double(v) - mx);
  double target = sampler_uniform(ctx.seed, ctx.output.size()) * total;
  double cum = 0;
  int32_t last = -1;
  for (int32_t t = 0; t < vocab; ++t) {
    if (l[t] == kNegInf) continue;
    last = t;
    cum += std::exp(double(l[t]) - mx);
    if (cum > target) return finish(t);
  }
  return finish(last);
}

}  // namespace ms
