#include "gpu/device_model.h"

#include <cmath>
#include <cstring>

#include <algorithm>
#include <thread>

#include "core/byte_progress.h"
#include "core/dtype.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "gpu/common/cuda_check.h"
#include "gpu/common/device_info.h"
#include "gpu/common/random_fill.h"
#include "gpu/ops/elementwise.h"
#include "gpu/pinned_staging.h"
#include "ref/ref_ops.h"

namespace ms::gpu {
namespace {

// Threads of the upload's read side: O_DIRECT preads in flight at once (the
// queue depth an NVMe drive needs), or conversions out of the mapping
// (memcpy / rounding into pinned memory, ~2.3 GB/s on one core of the build
// machine): a few approach the disk / PCIe rate.
int upload_threads(int requested) {
  if (requested > 0) return requested;
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 2, 1, 8);
}

}  // namespace

Status DeviceModel::init(const ModelConfig& cfg, const DeviceModelOptions& opt) {
  if (!has_gpu()) return unavailable("no CUDA GPU of compute capability >= 9.0");
  MS_RETURN_IF_ERROR(cfg.validate());
  if (opt.block_size <= 0) return invalid_argument("block size must be positive");
  cfg_ = cfg;
  opt_ = opt;
  return Status::ok();
}

Status DeviceModel::alloc_weights() {
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
    DeviceLayer& l = layers_[li];
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

// The upload's job list, in checkpoint-walk order (embedding, head, final
// norm, then per layer attention, norms, FFN / router / experts), each
// tensor to its place in the fused device layouts.
Status DeviceModel::upload_jobs(const ModelWeights& w, std::vector<UploadJob>* jobs) const {
  const int64_t H = cfg_.hidden, qw = cfg_.q_width(), kvw = cfg_.kv_width();
  auto bf = [&](const DeviceBuffer<uint16_t>& dst, int64_t off, const MatView& m, const std::string& what) -> Status {
    if (m.empty()) return internal_error("missing tensor for upload: " + what);
    if (size_t(off + m.numel()) > dst.size()) return internal_error("upload of " + what + " out of bounds");
    jobs->push_back({m, StageFormat::kBF16, dst.get() + off});
    return Status::ok();
  };
  auto f32 = [&](const DeviceBuffer<float>& dst, int64_t off, const MatView& m, const std::string& what) -> Status {
    if (m.numel() == 0) return Status::ok();
    if (size_t(off + m.numel()) > dst.size()) return internal_error("upload of " + what + " out of bounds");
    jobs->push_back({m, StageFormat::kF32, dst.get() + off});
    return Status::ok();
  };
  MS_RETURN_IF_ERROR(bf(embed_, 0, w.embed, "the embedding"));
  if (!cfg_.tie_embeddings) MS_RETURN_IF_ERROR(bf(lm_head_, 0, w.lm_head, "the LM head"));
  MS_RETURN_IF_ERROR(f32(final_norm_, 0, w.final_norm, "the final norm"));
  for (int li = 0; li < cfg_.n_layers; ++li) {
    const LayerWeights& s = w.layers[li];
    const DeviceLayer& l = layers_[li];
    const std::string ctx = "layer " + std::to_string(li);
    MS_RETURN_IF_ERROR(bf(l.qkv_w, 0, s.q, ctx + " q"));
    MS_RETURN_IF_ERROR(bf(l.qkv_w, qw * H, s.k, ctx + " k"));
    MS_RETURN_IF_ERROR(bf(l.qkv_w, (qw + kvw) * H, s.v, ctx + " v"));
    MS_RETURN_IF_ERROR(bf(l.o_w, 0, s.o, ctx + " o"));
    if (cfg_.attention_bias) {
      MS_RETURN_IF_ERROR(f32(l.qkv_b, 0, s.q_bias, ctx + " q bias"));
      MS_RETURN_IF_ERROR(f32(l.qkv_b, qw, s.k_bias, ctx + " k bias"));
      MS_RETURN_IF_ERROR(f32(l.qkv_b, qw + kvw, s.v_bias, ctx + " v bias"));
      MS_RETURN_IF_ERROR(f32(l.o_b, 0, s.o_bias, ctx + " o bias"));
    }
    MS_RETURN_IF_ERROR(f32(l.attn_norm, 0, s.attn_norm, ctx + " norm"));
    if (!cfg_.parallel_block) MS_RETURN_IF_ERROR(f32(l.ffn_norm, 0, s.ffn_norm, ctx + " FFN norm"));
    if (cfg_.qk_norm) {
      MS_RETURN_IF_ERROR(f32(l.q_norm, 0, s.q_norm, ctx + " q norm"));
      MS_RETURN_IF_ERROR(f32(l.k_norm, 0, s.k_norm, ctx + " k norm"));
    }
    if (!cfg_.layers[li].moe) {
      const int64_t F = cfg_.dense_ffn;
      MS_RETURN_IF_ERROR(bf(l.gate_up, 0, s.gate, ctx + " gate"));
      MS_RETURN_IF_ERROR(bf(l.gate_up, F * H, s.up, ctx + " up"));
      MS_RETURN_IF_ERROR(bf(l.down, 0, s.down, ctx + " down"));
    } else {
      const int64_t I = cfg_.moe_ffn;
      MS_RETURN_IF_ERROR(bf(l.router, 0, s.router, ctx + " router"));
      if (static_cast<int>(s.experts.size()) != cfg_.n_experts) return internal_error(ctx + ": expert count");
      for (int e = 0; e < cfg_.n_experts; ++e) {
        const std::string ex = ctx + " expert " + std::to_string(e);
        MS_RETURN_IF_ERROR(bf(l.experts_gate_up, e * 2 * I * H, s.experts[e].gate, ex + " gate"));
        MS_RETURN_IF_ERROR(bf(l.experts_gate_up, (e * 2 + 1) * I * H, s.experts[e].up, ex + " up"));
        MS_RETURN_IF_ERROR(bf(l.experts_down, e * H * I, s.experts[e].down, ex + " down"));
      }
      if (cfg_.n_shared_experts > 0) {
        const int64_t S = cfg_.shared_ffn;
        MS_RETURN_IF_ERROR(bf(l.shared_gate_up, 0, s.shared.gate, ctx + " shared gate"));
        MS_RETURN_IF_ERROR(bf(l.shared_gate_up, S * H, s.shared.up, ctx + " shared up"));
        MS_RETURN_IF_ERROR(bf(l.shared_down, 0, s.shared.down, ctx + " shared down"));
      }
    }
  }
  return Status::ok();
}

// Reads the shards (bf16 ones not in the page cache with O_DIRECT, the rest
// out of the mapping) and uploads them through pinned double buffers
// (src/model/staged_upload.h), with progress (bytes, GB/s) in the log and to
// opt_.progress, and at the end the split of the time between reading /
// converting and waiting for the copy engine.
Status DeviceModel::upload_weights(const ModelWeights& w) {
  std::vector<UploadJob> jobs;
  MS_RETURN_IF_ERROR(upload_jobs(w, &jobs));
  MS_ASSIGN_OR_RETURN(auto sink, PinnedStagingSink::create(opt_.staging_bytes));
  const int threads = upload_threads(opt_.upload_threads);
  ThreadPool pool(threads);
  uint64_t total = 0;
  for (const UploadJob& j : jobs) total += uint64_t(j.src.numel()) * dtype_size(j.src.dtype);
  auto emit = [this](const std::string& line) {
    MS_LOG(Info) << "gpu: " << line;
    if (opt_.progress) opt_.progress(line);
  };
  ByteProgress meter("reading and uploading the weights", total, emit);
  StagedUploadOptions so;
  so.pool = &pool;
  so.progress = [&meter](uint64_t done, uint64_t) { meter.update(done); };
  MS_ASSIGN_OR_RETURN(StagedUploadStats st, staged_upload(jobs, *sink, so));
  meter.finish();
  if (st.src_bytes >= (uint64_t(1) << 30)) {
    MS_LOG(Info) << "gpu: upload: " << st.pieces << " copies of " << format_gb(st.dst_bytes) << " from "
                 << format_gb(st.src_bytes) << " of checkpoint (" << format_gb(st.direct_bytes)
                 << " read with O_DIRECT); reading + converting " << st.convert_seconds << " s (" << threads
                 << " threads), waiting for the copy engine " << st.wait_seconds << " s";
  }
  return Status::ok();
}

Status DeviceModel::random_weights(uint64_t seed) {
  const float a = 0.02f * std::sqrt(3.0f);  // U(-a, a) has std 0.02
  uint64_t n = 0;
  auto mat = [&](DeviceBuffer<uint16_t>& b) {
    return launch_random_fill_bf16(b.get(), b.size(), seed * 1000003ull + (++n), a, 0.f, nullptr);
  };
  auto ones = [&](DeviceBuffer<float>& b) { return launch_random_fill_f32(b.get(), b.size(), 0, 0.f, 1.f, nullptr); };
  auto small = [&](DeviceBuffer<float>& b) {
    return launch_random_fill_f32(b.get(), b.size(), seed * 1000003ull + (++n), a, 0.f, nullptr);
  };
  MS_RETURN_IF_ERROR(mat(embed_));
  if (lm_head_.size()) MS_RETURN_IF_ERROR(mat(lm_head_));
  MS_RETURN_IF_ERROR(ones(final_norm_));
  for (DeviceLayer& l : layers_) {
    for (DeviceBuffer<uint16_t>* b : {&l.qkv_w, &l.o_w, &l.gate_up, &l.down, &l.router, &l.experts_gate_up,
                                      &l.experts_down, &l.shared_gate_up, &l.shared_down})
      MS_RETURN_IF_ERROR(mat(*b));
    for (DeviceBuffer<float>* b : {&l.attn_norm, &l.ffn_norm, &l.q_norm, &l.k_norm}) MS_RETURN_IF_ERROR(ones(*b));
    for (DeviceBuffer<float>* b : {&l.qkv_b, &l.o_b}) MS_RETURN_IF_ERROR(small(*b));
  }
  return Status::ok();
}

// Weights derived from the loaded ones: the routers widened to fp32 (the
// upload's stream was synchronised; the random fill ran on the legacy
// stream: wait for the device first).
Status DeviceModel::derive() {
  MS_CUDA_RETURN(cudaDeviceSynchronize());
  for (DeviceLayer& l : layers_)
    if (l.router.size()) MS_RETURN_IF_ERROR(launch_bf16_to_f32(l.router.get(), l.router.size(), l.router_f32.get(), nullptr));
  MS_CUDA_RETURN(cudaDeviceSynchronize());
  return Status::ok();
}

Result<std::unique_ptr<DeviceModel>> DeviceModel::create(const ModelConfig& cfg, const ModelWeights& w,
                                                         const DeviceModelOptions& opt) {
  auto m = std::unique_ptr<DeviceModel>(new DeviceModel());
  MS_RETURN_IF_ERROR(m->init(cfg, opt));
  MS_RETURN_IF_ERROR(m->alloc_weights());
  MS_RETURN_IF_ERROR(m->upload_weights(w));
  MS_RETURN_IF_ERROR(m->derive());
  return m;
}

Result<std::unique_ptr<DeviceModel>> DeviceModel::create_random(const ModelConfig& cfg, uint64_t seed,
                                                                const DeviceModelOptions& opt) {
  auto m = std::unique_ptr<DeviceModel>(new DeviceModel());
  MS_RETURN_IF_ERROR(m->init(cfg, opt));
  MS_RETURN_IF_ERROR(m->alloc_weights());
  MS_RETURN_IF_ERROR(m->random_weights(seed));
  MS_RETURN_IF_ERROR(m->derive());
  return m;
}

Status DeviceModel::alloc_kv(size_t bytes, const std::vector<int>& blocks) {
  if (!blocks.empty()) {
    kv_ = make_kv_spec_blocks(cfg_, opt_.block_size, blocks, 2);
  } else {
    if (bytes == 0) return invalid_argument("alloc_kv: no KV budget given");
    kv_ = make_kv_spec(cfg_, opt_.block_size, bytes, 2);
  }
  if (kv_.groups.size() > 2) return internal_error("more than two KV groups");
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

Status DeviceModel::fill_kv_random(uint64_t seed, cudaStream_t stream) {
  MS_RETURN_IF_ERROR(launch_random_fill_bf16(kv_pool_.get(), kv_pool_.size(), seed, 1.0f, 0.f, stream));
  MS_CUDA_RETURN(cudaStreamSynchronize(stream));
  return Status::ok();
}

}  // namespace ms::gpu
