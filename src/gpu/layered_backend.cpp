#include "gpu/layered_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/dtype.h"
#include "core/log.h"
#include "gpu/common/cuda_check.h"
#include "gpu/common/device_info.h"
#include "gpu/common/random_fill.h"
#include "gpu/ops/attention.h"
#include "gpu/ops/elementwise.h"
#include "gpu/ops/linear.h"
#include "gpu/ops/moe.h"
#include "gpu/ops/rope_kv.h"
#include "gpu/ops/sampling.h"
#include "ref/ref_ops.h"

namespace ms::gpu {
namespace {

constexpr int kDecodeMaxBatch = 8;
// Attention splits: enough blocks for ~4 per SM at bs 1 (4 KV heads x 128
// splits = 512 blocks of 8 warps on 132 SMs); each split of an 8K context is
// then one 64-key tile.
constexpr int kMaxSplits = 128;
constexpr int kAttnBlocksPerSm = 4;

int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

// Converts a checkpoint view to bf16 bits (bf16 views are copied as they are).
std::vector<uint16_t> to_bf16(const MatView& m) {
  std::vector<uint16_t> out(static_cast<size_t>(m.numel()));
  if (m.dtype == DType::kBF16) {
    std::memcpy(out.data(), m.data, out.size() * 2);
  } else {
    std::vector<float> f = m.to_f32();
    for (size_t i = 0; i < f.size(); ++i) out[i] = f32_to_bf16(f[i]);
  }
  return out;
}

Status put_bf16(DeviceBuffer<uint16_t>& dst, size_t offset, const MatView& m) {
  if (m.empty()) return internal_error("missing tensor for upload");
  std::vector<uint16_t> v = to_bf16(m);
  return dst.upload(v.data(), v.size(), offset);
}

Status put_f32(DeviceBuffer<float>& dst, size_t offset, const MatView& m) {
  std::vector<float> v = m.to_f32();
  return dst.upload(v.data(), v.size(), offset);
}

}  // namespace

LayeredBackend::~LayeredBackend() {
  for (auto& [key, g] : graphs_) (void)cudaGraphExecDestroy(g);
  if (meta_copied_) (void)cudaEventDestroy(meta_copied_);
  if (fork_ev_) (void)cudaEventDestroy(fork_ev_);
  if (join_ev_) (void)cudaEventDestroy(join_ev_);
  if (cublas_aux_) (void)cublasDestroy(cublas_aux_);
  if (aux_stream_) (void)cudaStreamDestroy(aux_stream_);
  if (cublas_) (void)cublasDestroy(cublas_);
  if (stream_) (void)cudaStreamDestroy(stream_);
}

Status LayeredBackend::init_common(const ModelConfig& cfg, const LayeredBackendOptions& opt) {
  if (!has_gpu()) return unavailable("no CUDA GPU of compute capability >= 9.0");
  MS_RETURN_IF_ERROR(cfg.validate());
  cfg_ = cfg;
  opt_ = opt;
  if (opt_.block_size <= 0) return invalid_argument("block size must be positive");
  if (opt_.max_step_tokens < kDecodeMaxBatch) return invalid_argument("max_step_tokens must be >= 8");
  if (opt_.max_seqs < kDecodeMaxBatch) return invalid_argument("max_seqs must be >= 8");
  auto need8 = [](int v, const char* what) -> Status {
    if (v % 8 != 0) return unimplemented(std::string("layered backend: ") + what + " must be a multiple of 8");
    return Status::ok();
  };
  MS_RETURN_IF_ERROR(need8(cfg_.hidden, "hidden_size"));
  MS_RETURN_IF_ERROR(need8(cfg_.q_width(), "q width"));
  MS_RETURN_IF_ERROR(need8(cfg_.head_dim, "head_dim"));
  const int hd = cfg_.head_dim;
  if (hd > 256 || (hd & (hd - 1)) != 0) return unimplemented("layered backend: head_dim must be a power of two <= 256");
  // Prefill attention takes GQA groups up to 16 (the tensor-core kernel: 1, 2,
  // 4, 8, 16; the CUDA-core one: a warp per row and head, <= 16 warps), so a
  // larger group is refused here rather than at the first long prompt.
  if (cfg_.n_heads % cfg_.n_kv_heads != 0 || cfg_.n_heads / cfg_.n_kv_heads > 16)
    return unimplemented("layered backend: GQA group n_heads / n_kv_heads = " + std::to_string(cfg_.n_heads) + " / " +
                         std::to_string(cfg_.n_kv_heads) + " is larger than 16");
  if (cfg_.dense_ffn > 0) MS_RETURN_IF_ERROR(need8(cfg_.dense_ffn, "intermediate_size"));
  if (cfg_.is_moe()) {
    MS_RETURN_IF_ERROR(need8(cfg_.moe_ffn, "moe_intermediate_size"));
    if (cfg_.n_experts > 256 || cfg_.top_k > 32) return unimplemented("layered backend: > 256 experts or top_k > 32");
    if (cfg_.n_shared_experts > 0) MS_RETURN_IF_ERROR(need8(cfg_.shared_ffn, "shared expert width"));
  }
  MS_ASSIGN_OR_RETURN(DeviceInfo info, device_info());
  sm_count_ = info.sm_count;
  int max_ctx = opt_.max_context > 0 ? opt_.max_context : std::min(cfg_.max_position > 0 ? cfg_.max_position : 262144, 262144);
  max_blocks_ = ceil_div(max_ctx, opt_.block_size);
  MS_CUDA_RETURN(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  MS_CUBLAS_RETURN(cublasCreate(&cublas_));
  MS_CUBLAS_RETURN(cublasSetStream(cublas_, stream_));
  MS_CUDA_RETURN(cudaEventCreateWithFlags(&meta_copied_, cudaEventDisableTiming));
  if (const char* e = std::getenv("MEGASERVE_CONCURRENT_BRANCHES"); e && std::string(e) == "0")
    opt_.concurrent_branches = false;
  if (const char* e = std::getenv("MEGASERVE_MOE_PREFILL")) {
    const std::string v = e;
    if (v == "grouped") opt_.moe_prefill = MoePrefillPath::kGrouped;
    else if (v == "kernel") opt_.moe_prefill = MoePrefillPath::kKernel;
    else return invalid_argument("MEGASERVE_MOE_PREFILL: expected grouped or kernel, got '" + v + "'");
  }
  if (cfg_.parallel_block && opt_.concurrent_branches) {
    MS_CUDA_RETURN(cudaStreamCreateWithFlags(&aux_stream_, cudaStreamNonBlocking));
    MS_CUBLAS_RETURN(cublasCreate(&cublas_aux_));
    MS_CUBLAS_RETURN(cublasSetStream(cublas_aux_, aux_stream_));
    MS_CUDA_RETURN(cudaEventCreateWithFlags(&fork_ev_, cudaEventDisableTiming));
    MS_CUDA_RETURN(cudaEventCreateWithFlags(&join_ev_, cudaEventDisableTiming));
  }
  return Status::ok();
}

Status LayeredBackend::alloc_weights() {
  const int64_t H = cfg_.hidden, V = cfg_.vocab_size, qkvw = cfg_.q_width() + 2 * cfg_.kv_width();
  const int64_t hd = cfg_.head_dim;
  weight_bytes_ = 0;
  auto bf = [&](DeviceBuffer<uint16_t>& b, int64_t n) {
    weight_bytes_ += size_t(n) * 2;
    return b.alloc(size_t(n));
  };
  MS_RETURN_IF_ERROR(bf(embed_, V * H));
  if (!cfg_.tie_embeddings) MS_RETURN_IF_ERROR(bf(lm_head_, V * H));
  MS_RETURN_IF_ERROR(final_norm_.alloc(H));
  layers_.clear();
  layers_.resize(cfg_.n_layers);
  for (int li = 0; li < cfg_.n_layers; ++li) {
    Layer& l = layers_[li];
    MS_RETURN_IF_ERROR(bf(l.qkv_w, qkvw * H));
    MS_RETURN_IF_ERROR(bf(l.o_w, H * cfg_.q_width()));
    if (cfg_.attention_bias) {
      MS_RETURN_IF_ERROR(l.qkv_b.alloc(qkvw));
      MS_RETURN_IF_ERROR(l.o_b.alloc(H));
    }
    MS_RETURN_IF_ERROR(l.attn_norm.alloc(H));
    if (!cfg_.parallel_block) MS_RETURN_IF_ERROR(l.ffn_norm.alloc(H));
    if (cfg_.qk_norm) {
      MS_RETURN_IF_ERROR(l.q_norm.alloc(hd));
      MS_RETURN_IF_ERROR(l.k_norm.alloc(hd));
    }
    if (!cfg_.layers[li].moe) {
      MS_RETURN_IF_ERROR(bf(l.gate_up, 2 * int64_t(cfg_.dense_ffn) * H));
      MS_RETURN_IF_ERROR(bf(l.down, H * cfg_.dense_ffn));
    } else {
      const int64_t E = cfg_.n_experts, I = cfg_.moe_ffn;
      MS_RETURN_IF_ERROR(bf(l.router, E * H));
      MS_RETURN_IF_ERROR(l.router_f32.alloc(E * H));
      MS_RETURN_IF_ERROR(bf(l.experts_gate_up, E * 2 * I * H));
      MS_RETURN_IF_ERROR(bf(l.experts_down, E * H * I));
      if (cfg_.n_shared_experts > 0) {
        MS_RETURN_IF_ERROR(bf(l.shared_gate_up, 2 * int64_t(cfg_.shared_ffn) * H));
        MS_RETURN_IF_ERROR(bf(l.shared_down, H * cfg_.shared_ffn));
      }
    }
  }
  std::vector<float> inv = ref_rope_inv_freq(cfg_);
  return inv_freq_.upload(inv);
}

Status LayeredBackend::upload_weights(const ModelWeights& w) {
  const int64_t H = cfg_.hidden, qw = cfg_.q_width(), kvw = cfg_.kv_width();
  MS_RETURN_IF_ERROR(put_bf16(embed_, 0, w.embed));
  if (!cfg_.tie_embeddings) MS_RETURN_IF_ERROR(put_bf16(lm_head_, 0, w.lm_head));
  MS_RETURN_IF_ERROR(put_f32(final_norm_, 0, w.final_norm));
  for (int li = 0; li < cfg_.n_layers; ++li) {
    const LayerWeights& s = w.layers[li];
    Layer& l = layers_[li];
    std::string ctx = "uploading layer " + std::to_string(li);
    // Progress for large checkpoints (a 60 GB model uploads for tens of seconds).
    if (weight_bytes_ > (size_t(1) << 30) && (li % 8 == 0 || li + 1 == cfg_.n_layers)) {
      MS_LOG(Info) << "layered: uploading weights, layer " << li + 1 << "/" << cfg_.n_layers << " ("
                   << weight_bytes_ / (1 << 20) << " MiB in all)";
    }
    MS_RETURN_IF_ERROR(put_bf16(l.qkv_w, 0, s.q).with_context(ctx));
    MS_RETURN_IF_ERROR(put_bf16(l.qkv_w, qw * H, s.k).with_context(ctx));
    MS_RETURN_IF_ERROR(put_bf16(l.qkv_w, (qw + kvw) * H, s.v).with_context(ctx));
    MS_RETURN_IF_ERROR(put_bf16(l.o_w, 0, s.o).with_context(ctx));
    if (cfg_.attention_bias) {
      MS_RETURN_IF_ERROR(put_f32(l.qkv_b, 0, s.q_bias));
      MS_RETURN_IF_ERROR(put_f32(l.qkv_b, qw, s.k_bias));
      MS_RETURN_IF_ERROR(put_f32(l.qkv_b, qw + kvw, s.v_bias));
      MS_RETURN_IF_ERROR(put_f32(l.o_b, 0, s.o_bias));
    }
    MS_RETURN_IF_ERROR(put_f32(l.attn_norm, 0, s.attn_norm));
    if (!cfg_.parallel_block) MS_RETURN_IF_ERROR(put_f32(l.ffn_norm, 0, s.ffn_norm));
    if (cfg_.qk_norm) {
      MS_RETURN_IF_ERROR(put_f32(l.q_norm, 0, s.q_norm));
      MS_RETURN_IF_ERROR(put_f32(l.k_norm, 0, s.k_norm));
    }
    if (!cfg_.layers[li].moe) {
      const int64_t F = cfg_.dense_ffn;
      MS_RETURN_IF_ERROR(put_bf16(l.gate_up, 0, s.gate).with_context(ctx));
      MS_RETURN_IF_ERROR(put_bf16(l.gate_up, F * H, s.up).with_context(ctx));
      MS_RETURN_IF_ERROR(put_bf16(l.down, 0, s.down).with_context(ctx));
    } else {
      const int64_t I = cfg_.moe_ffn;
      MS_RETURN_IF_ERROR(put_bf16(l.router, 0, s.router).with_context(ctx));
      if (static_cast<int>(s.experts.size()) != cfg_.n_experts) return internal_error(ctx + ": expert count");
      for (int e = 0; e < cfg_.n_experts; ++e) {
        MS_RETURN_IF_ERROR(put_bf16(l.experts_gate_up, e * 2 * I * H, s.experts[e].gate).with_context(ctx));
        MS_RETURN_IF_ERROR(put_bf16(l.experts_gate_up, (e * 2 + 1) * I * H, s.experts[e].up).with_context(ctx));
        MS_RETURN_IF_ERROR(put_bf16(l.experts_down, e * H * I, s.experts[e].down).with_context(ctx));
      }
      if (cfg_.n_shared_experts > 0) {
        const int64_t S = cfg_.shared_ffn;
        MS_RETURN_IF_ERROR(put_bf16(l.shared_gate_up, 0, s.shared.gate).with_context(ctx));
        MS_RETURN_IF_ERROR(put_bf16(l.shared_gate_up, S * H, s.shared.up).with_context(ctx));
        MS_RETURN_IF_ERROR(put_bf16(l.shared_down, 0, s.shared.down).with_context(ctx));
      }
    }
  }
  return Status::ok();
}

Status LayeredBackend::random_weights(uint64_t seed) {
  const float a = 0.02f * std::sqrt(3.0f);  // U(-a, a) has std 0.02
  uint64_t n = 0;
  auto mat = [&](DeviceBuffer<uint16_t>& b) {
    return launch_random_fill_bf16(b.get(), b.size(), seed * 1000003ull + (++n), a, 0.f, stream_);
  };
  auto ones = [&](DeviceBuffer<float>& b) { return launch_random_fill_f32(b.get(), b.size(), 0, 0.f, 1.f, stream_); };
  auto small = [&](DeviceBuffer<float>& b) {
    return launch_random_fill_f32(b.get(), b.size(), seed * 1000003ull + (++n), a, 0.f, stream_);
  };
  MS_RETURN_IF_ERROR(mat(embed_));
  if (lm_head_.size()) MS_RETURN_IF_ERROR(mat(lm_head_));
  MS_RETURN_IF_ERROR(ones(final_norm_));
  for (Layer& l : layers_) {
    for (DeviceBuffer<uint16_t>* b : {&l.qkv_w, &l.o_w, &l.gate_up, &l.down, &l.router, &l.experts_gate_up,
                                      &l.experts_down, &l.shared_gate_up, &l.shared_down})
      MS_RETURN_IF_ERROR(mat(*b));
    for (DeviceBuffer<float>* b : {&l.attn_norm, &l.ffn_norm, &l.q_norm, &l.k_norm}) MS_RETURN_IF_ERROR(ones(*b));
    for (DeviceBuffer<float>* b : {&l.qkv_b, &l.o_b}) MS_RETURN_IF_ERROR(small(*b));
  }
  MS_CUDA_RETURN(cudaStreamSynchronize(stream_));
  return Status::ok();
}

Status LayeredBackend::alloc_runtime() {
  // Weights derived from the loaded ones: the routers widened to fp32. The
  // uploads were cudaMemcpy from pageable memory on the legacy stream, which
  // can return before the last DMA lands and does not order the non-blocking
  // stream_: wait for the device first.
  MS_CUDA_RETURN(cudaDeviceSynchronize());
  for (Layer& l : layers_)
    if (l.router.size()) MS_RETURN_IF_ERROR(launch_bf16_to_f32(l.router.get(), l.router.size(), l.router_f32.get(), stream_));
  const int64_t Tm = opt_.max_step_tokens, H = cfg_.hidden, qw = cfg_.q_width();
  const int64_t qkvw = qw + 2 * cfg_.kv_width(), V = cfg_.vocab_size, S = opt_.max_seqs;
  const int64_t Fmax = std::max(cfg_.dense_ffn, cfg_.n_shared_experts > 0 ? cfg_.shared_ffn : 0);
  const int64_t E = std::max(cfg_.n_experts, 1), K = std::max(cfg_.top_k, 1), I = std::max(cfg_.moe_ffn, 1);
  MS_RETURN_IF_ERROR(x_.alloc(Tm * H));
  MS_RETURN_IF_ERROR(h_.alloc(Tm * H));
  MS_RETURN_IF_ERROR(hf_.alloc(Tm * H));
  MS_RETURN_IF_ERROR(qkv_.alloc(Tm * qkvw));
  MS_RETURN_IF_ERROR(attn_o_.alloc(Tm * qw));
  MS_RETURN_IF_ERROR(attn_out_.alloc(Tm * H));
  MS_RETURN_IF_ERROR(mlp_out_.alloc(Tm * H));
  if (Fmax > 0) {
    MS_RETURN_IF_ERROR(gu_.alloc(Tm * 2 * Fmax));
    MS_RETURN_IF_ERROR(act_.alloc(Tm * Fmax));
  }
  if (cfg_.is_moe()) {
    MS_RETURN_IF_ERROR(shared_out_.alloc(Tm * H));
    MS_RETURN_IF_ERROR(router_logits_.alloc(Tm * E));
    MS_RETURN_IF_ERROR(topk_ids_.alloc(cfg_.n_layers * Tm * K));
    MS_RETURN_IF_ERROR(topk_w_.alloc(Tm * K));
    MS_RETURN_IF_ERROR(moe_act_.alloc(Tm * K * I));
    MS_RETURN_IF_ERROR(moe_y_.alloc(Tm * K * H));
    MS_RETURN_IF_ERROR(plan_buf_.alloc(moe_plan_ints(E, Tm * K)));
  }
  MS_RETURN_IF_ERROR(stat_active_.alloc(cfg_.n_layers));
  MS_CUDA_RETURN(cudaMemset(stat_active_.get(), 0, stat_active_.bytes()));
  ws_rowsplits_ = static_cast<int>(std::max<int64_t>(2 * Tm, kDecodeMaxBatch * kMaxSplits));
  MS_RETURN_IF_ERROR(part_o_.alloc(size_t(ws_rowsplits_) * cfg_.n_heads * cfg_.head_dim));
  MS_RETURN_IF_ERROR(part_lse_.alloc(size_t(ws_rowsplits_) * cfg_.n_heads));
  MS_RETURN_IF_ERROR(last_h_.alloc(S * H));
  MS_RETURN_IF_ERROR(logits_.alloc(S * V));
  MS_RETURN_IF_ERROR(tokens_out_.alloc(S));
  MS_RETURN_IF_ERROR(logprobs_out_.alloc(S));
  // Metadata layout.
  const size_t G = 2;  // at most two KV groups (full, sliding)
  size_t o = 0;
  auto take = [&](size_t n) {
    size_t at = o;
    o += (n + 3) & ~size_t(3);  // keep 16-byte alignment
    return at;
  };
  meta_.tokens = take(Tm);
  meta_.pos = take(Tm);
  meta_.row_seq = take(Tm);
  meta_.tiles = take(2 * Tm);
  meta_.logit_rows = take(S);
  meta_.slots = take(G * Tm);
  meta_.tables = take(size_t(S) * G * max_blocks_);
  meta_.total = o;
  MS_RETURN_IF_ERROR(meta_host_.alloc(meta_.total));
  MS_RETURN_IF_ERROR(meta_dev_.alloc(meta_.total));

  // KV cache: budget, or 90% of what is left.
  size_t budget = opt_.kv_bytes;
  if (budget == 0) {
    size_t free_b = 0, total_b = 0;
    MS_CUDA_RETURN(cudaMemGetInfo(&free_b, &total_b));
    budget = free_b / 10 * 9;
  }
  kv_ = make_kv_spec(cfg_, opt_.block_size, budget, 2);
  if (kv_.groups.size() > G) return internal_error("more than two KV groups");
  size_t total = 0;
  const size_t per_block = size_t(cfg_.n_kv_heads) * opt_.block_size * cfg_.head_dim;  // elements, K or V
  for (int li = 0; li < cfg_.n_layers; ++li) {
    const KvGroupSpec& g = kv_.groups[kv_.layer_group[li]];
    layers_[li].k_off = total;
    total += per_block * g.num_blocks;
    layers_[li].v_off = total;
    total += per_block * g.num_blocks;
  }
  MS_RETURN_IF_ERROR(kv_pool_.alloc(total));
  MS_CUDA_RETURN(cudaMemset(kv_pool_.get(), 0, kv_pool_.bytes()));
  return Status::ok();
}

Result<std::unique_ptr<LayeredBackend>> LayeredBackend::create(const ModelConfig& cfg, const ModelWeights& w,
                                                               const LayeredBackendOptions& opt) {
  auto b = std::unique_ptr<LayeredBackend>(new LayeredBackend());
  MS_RETURN_IF_ERROR(b->init_common(cfg, opt));
  MS_RETURN_IF_ERROR(b->alloc_weights());
  MS_RETURN_IF_ERROR(b->upload_weights(w));
  MS_RETURN_IF_ERROR(b->alloc_runtime());
  return b;
}

Result<std::unique_ptr<LayeredBackend>> LayeredBackend::create_random(const ModelConfig& cfg, uint64_t seed,
                                                                      const LayeredBackendOptions& opt) {
  auto b = std::unique_ptr<LayeredBackend>(new LayeredBackend());
  MS_RETURN_IF_ERROR(b->init_common(cfg, opt));
  MS_RETURN_IF_ERROR(b->alloc_weights());
  MS_RETURN_IF_ERROR(b->random_weights(seed));
  MS_RETURN_IF_ERROR(b->alloc_runtime());
  return b;
}

Status LayeredBackend::fill_kv_random(uint64_t seed) {
  MS_RETURN_IF_ERROR(launch_random_fill_bf16(kv_pool_.get(), kv_pool_.size(), seed, 1.0f, 0.f, stream_));
  MS_CUDA_RETURN(cudaStreamSynchronize(stream_));
  return Status::ok();
}

Status LayeredBackend::routed_experts_per_layer(std::vector<int>* out) {
  MS_CUDA_RETURN(cudaStreamSynchronize(stream_));
  std::vector<int32_t> v;
  MS_RETURN_IF_ERROR(stat_active_.download(&v));
  out->assign(v.begin(), v.end());
  return Status::ok();
}

Status LayeredBackend::last_routing(int layer, std::vector<int32_t>* ids) {
  if (layer < 0 || layer >= cfg_.n_layers) return invalid_argument("last_routing: no such layer");
  ids->clear();
  if (!cfg_.layers[layer].moe) return Status::ok();
  MS_CUDA_RETURN(cudaStreamSynchronize(stream_));
  const size_t K = cfg_.top_k, n = size_t(last_T_) * K;
  ids->resize(n);
  if (n == 0) return Status::ok();
  MS_CUDA_RETURN(cudaMemcpy(ids->data(), topk_ids_.get() + size_t(layer) * opt_.max_step_tokens * K,
                            n * sizeof(int32_t), cudaMemcpyDeviceToHost));
  return Status::ok();
}

bool LayeredBackend::is_decode_batch(const std::vector<SeqWork>& batch) const {
  if (batch.empty() || static_cast<int>(batch.size()) > kDecodeMaxBatch) return false;
  for (const auto& w : batch)
    if (w.tokens.size() != 1) return false;
  return true;
}

// Fills the pinned metadata for the pieces and copies it to the device.
Status LayeredBackend::stage_metadata(const std::vector<SeqWork>& batch, const std::vector<Piece>& pieces,
                                      bool decode, StepShape* s) {
  const int G = static_cast<int>(kv_.groups.size()), bs = opt_.block_size;
  const int Tm = opt_.max_step_tokens;
  MS_CUDA_RETURN(cudaEventSynchronize(meta_copied_));  // the previous copy is done with meta_host_
  int32_t* m = meta_host_.get();
  *s = StepShape{};
  s->decode = decode;
  s->n_seq = static_cast<int>(pieces.size());
  int64_t max_pos = 0;
  for (const Piece& p : pieces) max_pos = std::max(max_pos, int64_t(p.start_pos) + p.n_tokens);
  s->rows_per_tile =
      decode ? 1 : attention_prefill_rows_per_tile(cfg_.n_heads, cfg_.n_kv_heads, cfg_.head_dim, max_pos);
  const int width = std::max<int>(8, static_cast<int>(ceil_div(max_pos, bs)));
  if (width > max_blocks_)
    return out_of_range("sequence longer than max_context (" + std::to_string(max_blocks_ * bs) + " tokens)");
  int w2 = 8;
  while (w2 < width) w2 *= 2;  // few distinct strides: few decode graphs
  s->table_width = std::min(w2, max_blocks_);
  const int stride = G * s->table_width;
  int T = 0;
  for (int si = 0; si < s->n_seq; ++si) {
    const Piece& p = pieces[si];
    const SeqWork& w = batch[p.batch_index];
    for (int g = 0; g < G; ++g) {
      const auto& tab = w.block_tables[g];
      int32_t* row = m + meta_.tables + size_t(si) * stride + size_t(g) * s->table_width;
      const int n = std::min<int>(static_cast<int>(tab.size()), s->table_width);
      std::copy_n(tab.begin(), n, row);
      std::fill(row + n, row + s->table_width, -1);
    }
    for (int t = 0; t < p.n_tokens; t += s->rows_per_tile) {
      m[meta_.tiles + 2 * s->n_tiles] = T + t;
      m[meta_.tiles + 2 * s->n_tiles + 1] = std::min(s->rows_per_tile, p.n_tokens - t);
      ++s->n_tiles;
    }
    for (int t = 0; t < p.n_tokens; ++t, ++T) {
      const int32_t pos = p.start_pos + t;
      m[meta_.tokens + T] = w.tokens[p.first_token + t];
      m[meta_.pos + T] = pos;
      m[meta_.row_seq + T] = si;
      for (int g = 0; g < G; ++g)
        m[meta_.slots + size_t(g) * Tm + T] = w.block_tables[g][pos / bs] * bs + pos % bs;
    }
    if (decode || p.need_logits) m[meta_.logit_rows + s->n_logits++] = T - 1;
  }
  s->T = T;
  last_T_ = T;
  const int want = ceil_div(kAttnBlocksPerSm * sm_count_, int64_t(s->n_tiles) * cfg_.n_kv_heads);
  s->splits = std::max(1, std::min({want, kMaxSplits, ws_rowsplits_ / std::max(T, 1)}));
  // Copy everything up to the end of the used table rows.
  const size_t n = meta_.tables + size_t(s->n_seq) * stride;
  MS_CUDA_RETURN(cudaMemcpyAsync(meta_dev_.get(), m, n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  MS_CUDA_RETURN(cudaEventRecord(meta_copied_, stream_));
  return Status::ok();
}

Status LayeredBackend::ffn(int li, int T, float* out, MoeSum* deferred, cudaStream_t st, cublasHandle_t blas) {
  const Layer& l = layers_[li];
  const int H = cfg_.hidden;
  auto dense = [&](const DeviceBuffer<uint16_t>& gate_up, const DeviceBuffer<uint16_t>& down, int F,
                   float* y) -> Status {
    MS_RETURN_IF_ERROR(launch_linear(blas, h_.get(), H, gate_up.get(), nullptr, 1.f, gu_.get(), 2 * F, T, 2 * F,
                                     H, st));
    MS_RETURN_IF_ERROR(launch_swiglu(gu_.get(), 2 * F, T, F, act_.get(), st));
    return launch_linear(blas, act_.get(), F, down.get(), nullptr, 1.f, y, H, T, H, F, st);
  };
  if (!cfg_.layers[li].moe) {
    MS_RETURN_IF_ERROR(dense(l.gate_up, l.down, cfg_.dense_ffn, out));
    return mark("dense_ffn");
  }
  const int E = cfg_.n_experts, K = cfg_.top_k, I = cfg_.moe_ffn;
  int32_t* topk_ids = topk_ids_.get() + size_t(li) * opt_.max_step_tokens * K;
  MoePlan plan = moe_plan_view(plan_buf_.get(), E);
  plan.stat_active = stat_active_.get() + li;
  if (T <= kMoeRoutePlanMaxT && H % 8 == 0) {  // decode: router GEMV, route and plan in one launch
    MS_RETURN_IF_ERROR(launch_moe_router_route_plan(hf_.get(), l.router.get(), T, E, H, K, cfg_.router,
                                                    cfg_.softmax_over_topk, cfg_.norm_topk_prob,
                                                    router_logits_.get(), topk_ids, topk_w_.get(), plan, st));
  } else {
    if (T <= kMoeRoutePlanMaxT) {  // hidden % 8 != 0
      MS_RETURN_IF_ERROR(launch_gemv_f32x(hf_.get(), l.router.get(), router_logits_.get(), T, E, H, st));
    } else {
      MS_RETURN_IF_ERROR(launch_gemm_f32(blas, hf_.get(), l.router_f32.get(), router_logits_.get(), T, E, H, st));
    }
    MS_RETURN_IF_ERROR(mark("router_gemv"));
    if (T <= kMoeRoutePlanMaxT) {
      MS_RETURN_IF_ERROR(launch_moe_route_plan(router_logits_.get(), T, E, K, cfg_.router, cfg_.softmax_over_topk,
                                               cfg_.norm_topk_prob, topk_ids, topk_w_.get(), plan, st));
    } else {
      MS_RETURN_IF_ERROR(launch_moe_route(router_logits_.get(), T, E, K, cfg_.router, cfg_.softmax_over_topk,
                                          cfg_.norm_topk_prob, topk_ids, topk_w_.get(), st));
      MS_RETURN_IF_ERROR(launch_moe_plan(topk_ids, T, K, E, plan, st));
    }
  }
  MS_RETURN_IF_ERROR(mark("moe_route_plan"));
  if (opt_.moe_prefill == MoePrefillPath::kGrouped && T > kMoeRowKernelMaxT) {
    // Gathered order: act rows [offset[u], offset[u] + count[u]) belong to expert u.
    MS_RETURN_IF_ERROR(launch_moe_grouped_gate_up(h_.get(), l.experts_gate_up.get(), H, I, T, K, E, plan,
                                                  moe_act_.get(), st));
    MS_RETURN_IF_ERROR(mark("moe_gate_up"));
    MS_RETURN_IF_ERROR(launch_moe_grouped_down(moe_act_.get(), l.experts_down.get(), topk_w_.get(), H, I, T, K, E,
                                               plan, moe_y_.get(), st));
    MS_RETURN_IF_ERROR(mark("moe_down"));
  } else {
    const int max_active = std::min(E, T * K);
    MS_RETURN_IF_ERROR(launch_moe_gate_up(h_.get(), l.experts_gate_up.get(), H, I, T, K, plan, max_active,
                                          moe_act_.get(), st));
    MS_RETURN_IF_ERROR(mark("moe_gate_up"));
    MS_RETURN_IF_ERROR(launch_moe_down(moe_act_.get(), l.experts_down.get(), topk_w_.get(), H, I, T, plan,
                                       max_active, moe_y_.get(), st));
    MS_RETURN_IF_ERROR(mark("moe_down"));
  }
  const float* shared = nullptr;
  if (cfg_.n_shared_experts > 0) {
    MS_RETURN_IF_ERROR(dense(l.shared_gate_up, l.shared_down, cfg_.shared_ffn, shared_out_.get()));
    MS_RETURN_IF_ERROR(mark("shared_expert"));
    shared = shared_out_.get();
  }
  if (deferred) {  // folded into the next add_norm
    *deferred = MoeSum{moe_y_.get(), K, shared, cfg_.shared_sum};
    return Status::ok();
  }
  MS_RETURN_IF_ERROR(launch_moe_combine(moe_y_.get(), shared, cfg_.shared_sum, T, K, H, out, st));
  return mark("moe_combine");
}

// The whole forward pass of one sub-step, launched on stream_ (captured into
// a graph for decode steps).
Status LayeredBackend::forward(const StepShape& s) {
  const int T = s.T, H = cfg_.hidden, qw = cfg_.q_width(), qkvw = qw + 2 * cfg_.kv_width();
  const int32_t* meta = meta_dev_.get();
  const int stride = static_cast<int>(kv_.groups.size()) * s.table_width;
  MS_RETURN_IF_ERROR(launch_embedding(embed_.get(), meta + meta_.tokens, T, H, x_.get(), stream_));
  MS_RETURN_IF_ERROR(mark("embedding"));
  // Residual adds not yet applied to x_: pend0, then pend1 or the deferred
  // MoE combine (moe_y_, shared_out_), applied by the next add_norm.
  const float* pend0 = nullptr;
  const float* pend1 = nullptr;
  MoeSum pend_moe;
  for (int li = 0; li < cfg_.n_layers; ++li) {
    const Layer& l = layers_[li];
    const LayerSpec& spec = cfg_.layers[li];
    const int g = kv_.layer_group[li];
    // The router reads the fp32 normed input; attention and dense FFNs the bf16 copy.
    MS_RETURN_IF_ERROR(launch_add_norm(x_.get(), pend0, pend1, nullptr, l.attn_norm.get(), cfg_.norm,
                                       cfg_.norm_eps, T, H, h_.get(),
                                       cfg_.parallel_block && spec.moe ? hf_.get() : nullptr, stream_, pend_moe));
    MS_RETURN_IF_ERROR(mark("add_norm"));
    // Parallel block: the FFN / MoE branch reads only the normed input, so
    // it goes first on the aux stream and the attention branch follows on
    // stream_; joined after o_proj. The profiler keeps one chain (its events
    // time consecutive ops on stream_).
    const bool fork = cfg_.parallel_block && aux_stream_ && !prof_;
    if (fork) {
      MS_CUDA_RETURN(cudaEventRecord(fork_ev_, stream_));
      MS_CUDA_RETURN(cudaStreamWaitEvent(aux_stream_, fork_ev_, 0));
      pend_moe = MoeSum{};
      MS_RETURN_IF_ERROR(ffn(li, T, mlp_out_.get(), &pend_moe, aux_stream_, cublas_aux_));
      MS_CUDA_RETURN(cudaEventRecord(join_ev_, aux_stream_));
    }
    MS_RETURN_IF_ERROR(launch_linear(cublas_, h_.get(), H, l.qkv_w.get(), l.qkv_b.size() ? l.qkv_b.get() : nullptr,
                                     1.f, qkv_.get(), qkvw, T, qkvw, H, stream_));
    MS_RETURN_IF_ERROR(mark("qkv_linear"));
    RopeKvArgs r;
    r.qkv = qkv_.get();
    r.ld = qkvw;
    r.T = T;
    r.nh = cfg_.n_heads;
    r.nkv = cfg_.n_kv_heads;
    r.hd = cfg_.head_dim;
    r.block_size = opt_.block_size;
    r.pos = meta + meta_.pos;
    r.slots = meta + meta_.slots + size_t(g) * opt_.max_step_tokens;
    r.q_norm = cfg_.qk_norm ? l.q_norm.get() : nullptr;
    r.k_norm = cfg_.qk_norm ? l.k_norm.get() : nullptr;
    r.eps = cfg_.norm_eps;
    r.inv_freq = spec.rope ? inv_freq_.get() : nullptr;
    r.style = cfg_.rope_style;
    r.k_cache = kv_pool_.get() + l.k_off;
    r.v_cache = kv_pool_.get() + l.v_off;
    MS_RETURN_IF_ERROR(launch_rope_kv(r, stream_));
    MS_RETURN_IF_ERROR(mark("rope_kv"));
    AttnArgs a;
    a.q = qkv_.get();
    a.ldq = qkvw;
    a.k_cache = r.k_cache;
    a.v_cache = r.v_cache;
    a.block_tables = meta + meta_.tables + size_t(g) * s.table_width;
    a.max_blocks = stride;
    a.row_seq = meta + meta_.row_seq;
    a.row_pos = meta + meta_.pos;
    a.tiles = reinterpret_cast<const AttnTile*>(meta + meta_.tiles);
    a.n_tiles = s.n_tiles;
    a.rows_per_tile = s.rows_per_tile;
    a.rows = T;
    a.splits = s.splits;
    a.window = spec.sliding ? cfg_.sliding_window : 0;
    a.nh = cfg_.n_heads;
    a.nkv = cfg_.n_kv_heads;
    a.hd = cfg_.head_dim;
    a.block_size = opt_.block_size;
    a.scale = 1.0f / std::sqrt(static_cast<float>(cfg_.head_dim));
    a.part_o = part_o_.get();
    a.part_lse = part_lse_.get();
    a.out = attn_o_.get();
    MS_RETURN_IF_ERROR(launch_paged_attention(a, stream_));
    MS_RETURN_IF_ERROR(mark("attention+combine"));
    MS_RETURN_IF_ERROR(launch_linear(cublas_, attn_o_.get(), qw, l.o_w.get(), l.o_b.size() ? l.o_b.get() : nullptr,
                                     1.f, attn_out_.get(), H, T, H, qw, stream_));
    MS_RETURN_IF_ERROR(mark("o_linear"));
    if (cfg_.parallel_block) {
      if (fork) {
        MS_CUDA_RETURN(cudaStreamWaitEvent(stream_, join_ev_, 0));
      } else {
        pend_moe = MoeSum{};
        MS_RETURN_IF_ERROR(ffn(li, T, mlp_out_.get(), &pend_moe, stream_, cublas_));
      }
      pend0 = attn_out_.get();
      pend1 = pend_moe.ysel ? nullptr : mlp_out_.get();
    } else {
      MS_RETURN_IF_ERROR(launch_add_norm(x_.get(), attn_out_.get(), nullptr, nullptr, l.ffn_norm.get(), cfg_.norm,
                                         cfg_.norm_eps, T, H, h_.get(), spec.moe ? hf_.get() : nullptr, stream_));
      MS_RETURN_IF_ERROR(mark("add_norm"));
      pend_moe = MoeSum{};
      MS_RETURN_IF_ERROR(ffn(li, T, mlp_out_.get(), &pend_moe, stream_, cublas_));
      pend0 = pend_moe.ysel ? nullptr : mlp_out_.get();
      pend1 = nullptr;
    }
  }
  // Final norm of the rows whose logits are wanted (residual adds applied to them).
  const int R = s.n_logits;
  MS_RETURN_IF_ERROR(launch_add_norm(x_.get(), pend0, pend1, meta + meta_.logit_rows, final_norm_.get(), cfg_.norm,
                                     cfg_.norm_eps, R, H, last_h_.get(), nullptr, stream_, pend_moe));
  MS_RETURN_IF_ERROR(mark("final_norm"));
  const void* head = lm_head_.size() ? lm_head_.get() : embed_.get();
  MS_RETURN_IF_ERROR(launch_linear(cublas_, last_h_.get(), H, head, nullptr, cfg_.logit_scale, logits_.get(),
                                   cfg_.vocab_size, R, cfg_.vocab_size, H, stream_));
  MS_RETURN_IF_ERROR(mark("lm_head"));
  if (s.decode) {
    MS_RETURN_IF_ERROR(
        launch_argmax(logits_.get(), R, cfg_.vocab_size, tokens_out_.get(), logprobs_out_.get(), stream_));
    MS_RETURN_IF_ERROR(mark("argmax"));
  }
  return Status::ok();
}

Status LayeredBackend::mark(const char* op) {
  if (!prof_) return Status::ok();
  if (prof_->size() >= prof_pool_.size()) return internal_error("profile_step: more ops than events");
  cudaEvent_t ev = prof_pool_[prof_->size()];
  prof_->push_back({op, ev});
  // External: a timed event-record node in the captured graph (a plain
  // record during capture only orders streams).
  MS_CUDA_RETURN(cudaEventRecordWithFlags(ev, stream_, cudaEventRecordExternal));
  return Status::ok();
}

Status LayeredBackend::profile_step(const std::vector<SeqWork>& batch,
                                    std::vector<std::pair<std::string, double>>* us_by_op) {
  MS_RETURN_IF_ERROR(validate_batch(kv_, cfg_, batch));
  const bool decode = is_decode_batch(batch);
  std::vector<Piece> pieces;
  int total = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const int n = static_cast<int>(batch[i].tokens.size());
    pieces.push_back({static_cast<int>(i), batch[i].start_pos, 0, n, true});
    total += n;
  }
  if (total > opt_.max_step_tokens)
    return invalid_argument("profile_step: " + std::to_string(total) + " tokens do not fit one sub-step of " +
                            std::to_string(opt_.max_step_tokens));
  if (static_cast<int>(batch.size()) > opt_.max_seqs)
    return invalid_argument("profile_step: " + std::to_string(batch.size()) + " sequences do not fit one sub-step of " +
                            std::to_string(opt_.max_seqs));
  StepShape s;
  MS_RETURN_IF_ERROR(stage_metadata(batch, pieces, decode, &s));
  std::vector<ProfMark> marks;
  cudaGraphExec_t exec = nullptr;
  auto cleanup = [&]() {
    for (cudaEvent_t ev : prof_pool_) (void)cudaEventDestroy(ev);
    prof_pool_.clear();
    if (exec) (void)cudaGraphExecDestroy(exec);
  };
  // Events are created before the capture (at most 16 ops per layer + 8).
  for (int i = 0; i < 16 * cfg_.n_layers + 8; ++i) {
    cudaEvent_t ev = nullptr;
    cudaError_t ce = cudaEventCreate(&ev);
    if (ce != cudaSuccess) {
      cleanup();
      MS_CUDA_RETURN(ce);
    }
    prof_pool_.push_back(ev);
  }
  const cudaError_t begin = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal);
  if (begin != cudaSuccess) {
    cleanup();
    MS_CUDA_RETURN(begin);
  }
  prof_ = &marks;
  Status st = mark("start");
  if (st.is_ok()) st = forward(s);
  prof_ = nullptr;
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(stream_, &graph);
  if (st.is_ok() && e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
  if (graph) (void)cudaGraphDestroy(graph);
  for (int rep = 0; rep < 2 && st.is_ok() && e == cudaSuccess; ++rep) {  // the second replay is timed
    e = cudaGraphLaunch(exec, stream_);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  }
  us_by_op->clear();
  for (size_t i = 1; i < marks.size() && st.is_ok() && e == cudaSuccess; ++i) {
    float ms = 0.f;
    e = cudaEventElapsedTime(&ms, marks[i - 1].ev, marks[i].ev);
    auto it = std::find_if(us_by_op->begin(), us_by_op->end(), [&](const auto& p) { return p.first == marks[i].op; });
    if (it == us_by_op->end()) it = us_by_op->insert(us_by_op->end(), {marks[i].op, 0.0});
    it->second += 1000.0 * ms;
  }
  cleanup();
  if (!st.is_ok()) return st.with_context("profile_step");
  MS_CUDA_RETURN(e);
  return Status::ok();
}

Status LayeredBackend::run_decode_graph(const StepShape& s) {
  if (!opt_.use_graphs) return forward(s);
  const auto key = std::make_pair(s.T, s.table_width);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    MS_CUDA_RETURN(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    Status st = forward(s);
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(stream_, &graph);
    if (!st.is_ok()) {
      if (graph) (void)cudaGraphDestroy(graph);
      return st.with_context("capturing the decode graph");
    }
    MS_CUDA_RETURN(e);
    cudaGraphExec_t exec = nullptr;
    e = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    MS_CUDA_RETURN(e);
    it = graphs_.emplace(key, exec).first;
  }
  MS_CUDA_RETURN(cudaGraphLaunch(it->second, stream_));
  return Status::ok();
}

// Splits the batch into pieces of at most max_step_tokens tokens and packs
// them into sub-steps; each sub-step's logits rows are copied out.
Status LayeredBackend::run_pieces(const std::vector<SeqWork>& batch, const std::vector<Piece>& pieces,
                                  StepResult* out) {
  StepShape s;
  MS_RETURN_IF_ERROR(stage_metadata(batch, pieces, false, &s));
  MS_RETURN_IF_ERROR(forward(s));
  int row = 0;
  for (const Piece& p : pieces) {
    if (!p.need_logits) continue;
    auto& dst = out->logits[p.batch_index];
    dst.resize(cfg_.vocab_size);
    MS_CUDA_RETURN(cudaMemcpyAsync(dst.data(), logits_.get() + size_t(row) * cfg_.vocab_size,
                                   size_t(cfg_.vocab_size) * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    ++row;
  }
  MS_CUDA_RETURN(cudaStreamSynchronize(stream_));
  return Status::ok();
}

Status LayeredBackend::step(const std::vector<SeqWork>& batch, StepResult* out) {
  MS_RETURN_IF_ERROR(validate_batch(kv_, cfg_, batch));
  out->logits.assign(batch.size(), {});
  if (is_decode_batch(batch)) {
    std::vector<Piece> pieces;
    for (size_t i = 0; i < batch.size(); ++i)
      pieces.push_back({static_cast<int>(i), batch[i].start_pos, 0, 1, batch[i].need_logits});
    StepShape s;
    MS_RETURN_IF_ERROR(stage_metadata(batch, pieces, true, &s));
    MS_RETURN_IF_ERROR(run_decode_graph(s));
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!batch[i].need_logits) continue;
      out->logits[i].resize(cfg_.vocab_size);
      MS_CUDA_RETURN(cudaMemcpyAsync(out->logits[i].data(), logits_.get() + i * size_t(cfg_.vocab_size),
                                     size_t(cfg_.vocab_size) * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    }
    MS_CUDA_RETURN(cudaStreamSynchronize(stream_));
    return Status::ok();
  }
  return for_each_substep(batch, [&](const std::vector<Piece>& pieces) { return run_pieces(batch, pieces, out); });
}

Status LayeredBackend::for_each_substep(const std::vector<SeqWork>& batch,
                                        const std::function<Status(const std::vector<Piece>&)>& run) const {
  const int Tm = opt_.max_step_tokens;
  std::vector<Piece> cur;
  int cur_tokens = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SeqWork& w = batch[i];
    const int n = static_cast<int>(w.tokens.size());
    for (int t0 = 0; t0 < n;) {
      if (cur_tokens == Tm || static_cast<int>(cur.size()) == opt_.max_seqs) {
        MS_RETURN_IF_ERROR(run(cur));
        cur.clear();
        cur_tokens = 0;
      }
      const int take = std::min(n - t0, Tm - cur_tokens);
      cur.push_back({static_cast<int>(i), w.start_pos + t0, t0, take, w.need_logits && t0 + take == n});
      cur_tokens += take;
      t0 += take;
    }
  }
  if (!cur.empty()) MS_RETURN_IF_ERROR(run(cur));
  return Status::ok();
}

Status LayeredBackend::enqueue_decode(const std::vector<SeqWork>& batch) {
  if (!is_decode_batch(batch)) return invalid_argument("decode step: every sequence needs one token, batch <= 8");
  std::vector<Piece> pieces;
  for (size_t i = 0; i < batch.size(); ++i) pieces.push_back({static_cast<int>(i), batch[i].start_pos, 0, 1, true});
  StepShape s;
  MS_RETURN_IF_ERROR(stage_metadata(batch, pieces, true, &s));
  return run_decode_graph(s);
}

Status LayeredBackend::decode_greedy(const std::vector<SeqWork>& batch, std::vector<int32_t>* tokens,
                                     std::vector<float>* logprobs) {
  MS_RETURN_IF_ERROR(validate_batch(kv_, cfg_, batch));
  MS_RETURN_IF_ERROR(enqueue_decode(batch));
  tokens->resize(batch.size());
  MS_CUDA_RETURN(cudaMemcpyAsync(tokens->data(), tokens_out_.get(), batch.size() * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, stream_));
  if (logprobs) {
    logprobs->resize(batch.size());
    MS_CUDA_RETURN(cudaMemcpyAsync(logprobs->data(), logprobs_out_.get(), batch.size() * sizeof(float),
                                   cudaMemcpyDeviceToHost, stream_));
  }
  MS_CUDA_RETURN(cudaStreamSynchronize(stream_));
  return Status::ok();
}

}  // namespace ms::gpu
