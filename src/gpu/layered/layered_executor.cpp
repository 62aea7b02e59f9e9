#include "gpu/layered/layered_executor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/int_math.h"
#include "core/log.h"
#include "gpu/common/cuda_check.h"
#include "gpu/common/device_info.h"
#include "gpu/ops/attention.h"
#include "gpu/ops/elementwise.h"
#include "gpu/ops/linear.h"
#include "gpu/ops/moe.h"
#include "gpu/ops/rope_kv.h"
#include "gpu/ops/sampling.h"
#include "ref/ref_ops.h"

namespace ms::gpu {
namespace {

// Attention splits: enough blocks for ~4 per SM at bs 1 (4 KV heads x 128
// splits = 512 blocks of 8 warps on 132 SMs); each split of an 8K context is
// then one 64-key tile.
constexpr int kMaxAttnSplits = 128;
constexpr int kAttnBlocksPerSm = 4;

}  // namespace

LayeredExecutor::~LayeredExecutor() {
  for (auto& [key, g] : graphs_) (void)cudaGraphExecDestroy(g);
  if (meta_copied_) (void)cudaEventDestroy(meta_copied_);
  if (fork_ev_) (void)cudaEventDestroy(fork_ev_);
  if (join_ev_) (void)cudaEventDestroy(join_ev_);
  if (cublas_aux_) (void)cublasDestroy(cublas_aux_);
  if (aux_stream_) (void)cudaStreamDestroy(aux_stream_);
  if (cublas_) (void)cublasDestroy(cublas_);
  if (stream_) (void)cudaStreamDestroy(stream_);
}

Status LayeredExecutor::check_supported(const ModelConfig& cfg) {
  auto need8 = [](int v, const char* what) -> Status {
    if (v % 8 != 0) return unimplemented(std::string("layered backend: ") + what + " must be a multiple of 8");
    return Status::ok();
  };
  MS_RETURN_IF_ERROR(need8(cfg.hidden, "hidden_size"));
  MS_RETURN_IF_ERROR(need8(cfg.q_width(), "q width"));
  MS_RETURN_IF_ERROR(need8(cfg.head_dim, "head_dim"));
  const int hd = cfg.head_dim;
  if (hd > 256 || (hd & (hd - 1)) != 0) return unimplemented("layered backend: head_dim must be a power of two <= 256");
  // Prefill attention takes GQA groups up to 16 (the tensor-core kernel: 1, 2,
  // 4, 8, 16; the CUDA-core one: a warp per row and head, <= 16 warps), so a
  // larger group is refused here rather than at the first long prompt.
  if (cfg.n_heads % cfg.n_kv_heads != 0 || cfg.n_heads / cfg.n_kv_heads > 16)
    return unimplemented("layered backend: GQA group n_heads / n_kv_heads = " + std::to_string(cfg.n_heads) + " / " +
                         std::to_string(cfg.n_kv_heads) + " is larger than 16");
  if (cfg.dense_ffn > 0) MS_RETURN_IF_ERROR(need8(cfg.dense_ffn, "intermediate_size"));
  if (cfg.is_moe()) {
    MS_RETURN_IF_ERROR(need8(cfg.moe_ffn, "moe_intermediate_size"));
    if (cfg.n_experts > 256 || cfg.top_k > 32) return unimplemented("layered backend: > 256 experts or top_k > 32");
    if (cfg.n_shared_experts > 0) MS_RETURN_IF_ERROR(need8(cfg.shared_ffn, "shared expert width"));
  }
  return Status::ok();
}

Status LayeredExecutor::init_common(const LayeredOptions& opt) {
  opt_ = opt;
  if (opt_.max_step_tokens < kMaxDecodeRows) return invalid_argument("max_step_tokens must be >= 8");
  if (opt_.max_seqs < kMaxDecodeRows) return invalid_argument("max_seqs must be >= 8");
  MS_ASSIGN_OR_RETURN(DeviceInfo info, device_info());
  sm_count_ = info.sm_count;
  int max_ctx = opt_.max_context > 0 ? opt_.max_context : std::min(cfg_.max_position > 0 ? cfg_.max_position : 262144, 262144);
  max_blocks_ = static_cast<int>(ceil_div(max_ctx, model_.block_size()));
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

Status LayeredExecutor::alloc_runtime() {
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
  ws_rowsplits_ = static_cast<int>(std::max<int64_t>(2 * Tm, kMaxDecodeRows * kMaxAttnSplits));
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
  return Status::ok();
}

Result<std::unique_ptr<LayeredExecutor>> LayeredExecutor::create(DeviceModel& model, const LayeredOptions& opt) {
  MS_RETURN_IF_ERROR(check_supported(model.config()));
  auto b = std::unique_ptr<LayeredExecutor>(new LayeredExecutor(model));
  MS_RETURN_IF_ERROR(b->init_common(opt));
  MS_RETURN_IF_ERROR(b->alloc_runtime());
  return b;
}

Status LayeredExecutor::routed_experts_per_layer(std::vector<int>* out) {
  MS_CUDA_RETURN(cudaStreamSynchronize(stream_));
  std::vector<int32_t> v;
  MS_RETURN_IF_ERROR(stat_active_.download(&v));
  out->assign(v.begin(), v.end());
  return Status::ok();
}

Status LayeredExecutor::last_routing(int layer, std::vector<int32_t>* ids) {
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

bool LayeredExecutor::is_decode_batch(const std::vector<SeqWork>& batch) const {
  if (batch.empty() || static_cast<int>(batch.size()) > kMaxDecodeRows) return false;
  for (const auto& w : batch)
    if (w.tokens.size() != 1) return false;
  return true;
}

// Fills the pinned metadata for the pieces and copies it to the device.
Status LayeredExecutor::stage_metadata(const std::vector<SeqWork>& batch, const std::vector<Piece>& pieces,
                                      bool decode, StepShape* s) {
  const int G = static_cast<int>(model_.kv_spec().groups.size()), bs = model_.block_size();
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
  const int want = static_cast<int>(ceil_div(kAttnBlocksPerSm * sm_count_, int64_t(s->n_tiles) * cfg_.n_kv_heads));
  s->splits = std::max(1, std::min({want, kMaxAttnSplits, ws_rowsplits_ / std::max(T, 1)}));
  // Copy everything up to the end of the used table rows.
  const size_t n = meta_.tables + size_t(s->n_seq) * stride;
  MS_CUDA_RETURN(cudaMemcpyAsync(meta_dev_.get(), m, n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  MS_CUDA_RETURN(cudaEventRecord(meta_copied_, stream_));
  return Status::ok();
}

Status LayeredExecutor::ffn(int li, int T, float* out, MoeSum* deferred, cudaStream_t st, cublasHandle_t blas) {
  const DeviceLayer& l = model_.layer(li);
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
Status LayeredExecutor::run_forward(const StepShape& s) {
  const int T = s.T, H = cfg_.hidden, qw = cfg_.q_width(), qkvw = qw + 2 * cfg_.kv_width();
  const int32_t* meta = meta_dev_.get();
  const KvSpec& kv = model_.kv_spec();
  const int stride = static_cast<int>(kv.groups.size()) * s.table_width;
  MS_RETURN_IF_ERROR(launch_embedding(model_.embed(), meta + meta_.tokens, T, H, x_.get(), stream_));
  MS_RETURN_IF_ERROR(mark("embedding"));
  // Residual adds not yet applied to x_: pend0, then pend1 or the deferred
  // MoE combine (moe_y_, shared_out_), applied by the next add_norm.
  const float* pend0 = nullptr;
  const float* pend1 = nullptr;
  MoeSum pend_moe;
  for (int li = 0; li < cfg_.n_layers; ++li) {
    const DeviceLayer& l = model_.layer(li);
    const LayerSpec& spec = cfg_.layers[li];
    const int g = kv.layer_group[li];
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
    r.block_size = model_.block_size();
    r.pos = meta + meta_.pos;
    r.slots = meta + meta_.slots + size_t(g) * opt_.max_step_tokens;
    r.q_norm = cfg_.qk_norm ? l.q_norm.get() : nullptr;
    r.k_norm = cfg_.qk_norm ? l.k_norm.get() : nullptr;
    r.eps = cfg_.norm_eps;
    r.inv_freq = spec.rope ? model_.inv_freq() : nullptr;
    r.style = cfg_.rope_style;
    r.k_cache = model_.kv_pool() + l.k_off;
    r.v_cache = model_.kv_pool() + l.v_off;
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
    a.block_size = model_.block_size();
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
  MS_RETURN_IF_ERROR(launch_add_norm(x_.get(), pend0, pend1, meta + meta_.logit_rows, model_.final_norm(), cfg_.norm,
                                     cfg_.norm_eps, R, H, last_h_.get(), nullptr, stream_, pend_moe));
  MS_RETURN_IF_ERROR(mark("final_norm"));
  const void* head = model_.lm_head();
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

Status LayeredExecutor::mark(const char* op) {
  if (!prof_) return Status::ok();
  if (prof_->size() >= prof_pool_.size()) return internal_error("profile_step: more ops than events");
  cudaEvent_t ev = prof_pool_[prof_->size()];
  prof_->push_back({op, ev});
  // External: a timed event-record node in the captured graph (a plain
  // record during capture only orders streams).
  MS_CUDA_RETURN(cudaEventRecordWithFlags(ev, stream_, cudaEventRecordExternal));
  return Status::ok();
}

Status LayeredExecutor::profile_step(const std::vector<SeqWork>& batch,
                                    std::vector<std::pair<std::string, double>>* us_by_op) {
  MS_RETURN_IF_ERROR(validate_batch(model_.kv_spec(), cfg_, batch));
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
  if (st.is_ok()) st = run_forward(s);
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

Status LayeredExecutor::run_decode_graph(const StepShape& s) {
  if (!opt_.use_graphs) return run_forward(s);
  const auto key = std::make_pair(s.T, s.table_width);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    MS_CUDA_RETURN(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    Status st = run_forward(s);
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

Status LayeredExecutor::forward(const std::vector<SeqWork>& batch, const LogitsFn& on_logits) {
  MS_RETURN_IF_ERROR(validate_batch(model_.kv_spec(), cfg_, batch));
  if (is_decode_batch(batch)) {  // the decode graph: logits row i is batch entry i
    std::vector<Piece> pieces;
    std::vector<int> batch_of_row;
    for (size_t i = 0; i < batch.size(); ++i) {
      pieces.push_back({static_cast<int>(i), batch[i].start_pos, 0, 1, batch[i].need_logits});
      batch_of_row.push_back(static_cast<int>(i));
    }
    StepShape s;
    MS_RETURN_IF_ERROR(stage_metadata(batch, pieces, true, &s));
    MS_RETURN_IF_ERROR(run_decode_graph(s));
    return on_logits(logits_.get(), batch_of_row);
  }
  // Eager sub-steps: each one's logits rows (pieces with need_logits, in
  // order) are handed over before the next reuses the buffer.
  return for_each_substep(batch, [&](const std::vector<Piece>& pieces) -> Status {
    StepShape s;
    MS_RETURN_IF_ERROR(stage_metadata(batch, pieces, false, &s));
    MS_RETURN_IF_ERROR(run_forward(s));
    std::vector<int> batch_of_row;
    for (const Piece& p : pieces)
      if (p.need_logits) batch_of_row.push_back(p.batch_index);
    return on_logits(logits_.get(), batch_of_row);
  });
}

Status LayeredExecutor::step(const std::vector<SeqWork>& batch, StepResult* out) {
  out->logits.assign(batch.size(), {});
  const size_t V = cfg_.vocab_size;
  return forward(batch, [&](const float* logits, const std::vector<int>& rows) -> Status {
    for (size_t r = 0; r < rows.size(); ++r) {
      const int b = rows[r];
      if (!batch[b].need_logits) continue;
      out->logits[b].resize(V);
      MS_CUDA_RETURN(cudaMemcpyAsync(out->logits[b].data(), logits + r * V, V * sizeof(float), cudaMemcpyDeviceToHost,
                                     stream_));
    }
    MS_CUDA_RETURN(cudaStreamSynchronize(stream_));
    return Status::ok();
  });
}

Status LayeredExecutor::for_each_substep(const std::vector<SeqWork>& batch,
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

Status LayeredExecutor::enqueue_decode(const std::vector<SeqWork>& batch) {
  if (!is_decode_batch(batch))
    return invalid_argument("decode step: every sequence needs one token, batch <= " + std::to_string(kMaxDecodeRows));
  std::vector<Piece> pieces;
  for (size_t i = 0; i < batch.size(); ++i) pieces.push_back({static_cast<int>(i), batch[i].start_pos, 0, 1, true});
  StepShape s;
  MS_RETURN_IF_ERROR(stage_metadata(batch, pieces, true, &s));
  return run_decode_graph(s);
}

Status LayeredExecutor::decode_greedy(const std::vector<SeqWork>& batch, std::vector<int32_t>* tokens,
                                     std::vector<float>* logprobs) {
  MS_RETURN_IF_ERROR(validate_batch(model_.kv_spec(), cfg_, batch));
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
