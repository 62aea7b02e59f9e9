#include "gpu/gpu_backend.h"

#include <chrono>

#include "core/log.h"
#include "engine/kv_sizing.h"
#include "gpu/common/cuda_check.h"

namespace ms::gpu {

Result<DecodePath> parse_decode_path(const std::string& s) {
  if (s == "layered") return DecodePath::kLayered;
  if (s == "megakernel") return DecodePath::kMegakernel;
  if (s == "auto") return DecodePath::kAuto;
  return invalid_argument("unknown decode backend '" + s + "' (available: megakernel, layered, auto)");
}

Status GpuBackend::init_executors(const GpuBackendOptions& opt) {
  LayeredOptions lo = opt.layered;
  lo.max_context = opt.max_context;
  MS_ASSIGN_OR_RETURN(layered_, LayeredExecutor::create(*model_, lo));
  if (opt.decode == DecodePath::kMegakernel || opt.decode == DecodePath::kAuto) {
    MkOptions mo = opt.mk;
    mo.max_context = opt.max_context;
    Status why = MkExecutor::check_supported(model_->config(), opt.block_size);
    if (why.is_ok()) {
      auto mk = MkExecutor::create(*model_, layered_->stream(), mo);
      if (mk.is_ok()) mk_all_ = std::move(*mk);
      else why = mk.status();
    }
    if (!why.is_ok()) {
      MS_LOG(Warn) << "gpu: decode runs on the layered path: " << why.message();
    }
  }
  // The KV pool last: its default size is what the executors left.
  if (opt.kv_blocks_within) {
    DeviceMemory mem;
    MS_CUDA_RETURN(cudaMemGetInfo(&mem.free, &mem.total));
    const size_t budget = mem.free > kKvRuntimeReserveBytes ? mem.free - kKvRuntimeReserveBytes : 0;
    const std::vector<int> blocks = opt.kv_blocks_within(budget);
    if (blocks.empty())
      return resource_exhausted("gpu: no KV cache of the benchmark's points fits the " +
                                std::to_string(budget >> 20) + " MiB free after the weights and the executors");
    MS_RETURN_IF_ERROR(model_->alloc_kv(0, blocks));
  } else if (opt.kv_blocks.empty()) {
    DeviceMemory mem;
    MS_CUDA_RETURN(cudaMemGetInfo(&mem.free, &mem.total));
    MS_ASSIGN_OR_RETURN(KvMemoryPlan plan,
                        plan_kv_memory(mem, model_->weight_bytes(), opt.kv_bytes, opt.gpu_memory_utilization));
    kv_plan_ = plan.explanation;
    MS_LOG(Info) << "gpu: " << kv_plan_;
    MS_RETURN_IF_ERROR(model_->alloc_kv(plan.bytes));
  } else {
    MS_RETURN_IF_ERROR(model_->alloc_kv(0, opt.kv_blocks));
  }
  if (mk_all_) {
    MS_RETURN_IF_ERROR(mk_all_->bind_kv());
    mk_ = mk_all_.get();
    if (opt.decode == DecodePath::kAuto) auto_ = std::make_unique<::ms::mk::DecodeChooser>();
  }
  sampler_ = std::make_unique<DeviceSampler>(model_->config().vocab_size);
  MS_LOG(Info) << "gpu: " << model_->weight_bytes() / (1 << 20) << " MiB of weights, " << model_->kv_bytes() / (1 << 20)
               << " MiB of KV cache, decode on the " << decode_path_name(decode_path()) << " path";
  return Status::ok();
}

GpuBackend::~GpuBackend() {
  // The members free device memory, streams and graphs of this device.
  (void)bind_device();
}

Status GpuBackend::bind_device() const {
  MS_CUDA_RETURN(cudaSetDevice(device_));
  return Status::ok();
}

// An empty backend on opt.device, made current before anything is allocated.
Result<std::unique_ptr<GpuBackend>> GpuBackend::start(const GpuBackendOptions& opt) {
  auto b = std::unique_ptr<GpuBackend>(new GpuBackend());
  if (opt.device >= 0) {
    int n = 0;
    MS_CUDA_RETURN(cudaGetDeviceCount(&n));
    if (opt.device >= n)
      return invalid_argument("CUDA device " + std::to_string(opt.device) + " does not exist (" + std::to_string(n) +
                              " devices)");
    b->device_ = opt.device;
    MS_RETURN_IF_ERROR(b->bind_device());
  } else {
    MS_CUDA_RETURN(cudaGetDevice(&b->device_));
  }
  return b;
}

namespace {
DeviceModelOptions model_options(const GpuBackendOptions& opt) {
  DeviceModelOptions mo;
  mo.block_size = opt.block_size;
  mo.upload_threads = opt.upload_threads;
  mo.progress = opt.progress;
  return mo;
}
}  // namespace

Result<std::unique_ptr<GpuBackend>> GpuBackend::create(const ModelConfig& cfg, const ModelWeights& w,
                                                       const GpuBackendOptions& opt) {
  MS_RETURN_IF_ERROR(LayeredExecutor::check_supported(cfg));  // before a long upload
  MS_ASSIGN_OR_RETURN(auto b, start(opt));
  MS_ASSIGN_OR_RETURN(b->model_, DeviceModel::create(cfg, w, model_options(opt)));
  MS_RETURN_IF_ERROR(b->init_executors(opt));
  return b;
}

Result<std::unique_ptr<GpuBackend>> GpuBackend::create_random(const ModelConfig& cfg, uint64_t seed,
                                                              const GpuBackendOptions& opt) {
  MS_RETURN_IF_ERROR(LayeredExecutor::check_supported(cfg));
  MS_ASSIGN_OR_RETURN(auto b, start(opt));
  MS_ASSIGN_OR_RETURN(b->model_, DeviceModel::create_random(cfg, seed, model_options(opt)));
  MS_RETURN_IF_ERROR(b->init_executors(opt));
  return b;
}

BackendLimits GpuBackend::limits() const {
  BackendLimits l;
  l.max_batch_rows = kMaxDecodeRows;
  l.max_decode_rows = mk_ ? ::ms::mk::kMaxRows : kMaxDecodeRows;
  return l;
}

Status GpuBackend::set_decode_path(DecodePath p) {
  if (p == DecodePath::kMegakernel || p == DecodePath::kAuto) {
    if (!mk_all_) return unavailable("the megakernel executor was not created for this model");
    if (mk_all_->failed()) return unavailable("the megakernel executor failed earlier in this process");
    mk_ = mk_all_.get();
    if (p == DecodePath::kAuto && !auto_) auto_ = std::make_unique<::ms::mk::DecodeChooser>();
    if (p == DecodePath::kMegakernel) auto_.reset();
  } else {
    mk_ = nullptr;
    auto_.reset();
  }
  return Status::ok();
}

GpuBackend::Route GpuBackend::route(const std::vector<SeqWork>& batch) {
  Route r;
  if (!mk_ || !mk_->accepts(batch)) return r;
  if (!auto_) {
    r.mk = true;
    return r;
  }
  int keys = 1;
  for (const SeqWork& w : batch) keys = std::max(keys, w.start_pos + 1);
  r.timed = true;
  r.rows = static_cast<int>(batch.size());
  r.bucket = ::ms::mk::context_bucket(keys);
  r.mk = auto_->pick(r.rows, r.bucket) == ::ms::mk::DecodeChoice::kMegakernel;
  return r;
}

void GpuBackend::record(const Route& r, double ms) {
  if (!r.timed || !auto_) return;
  using ::ms::mk::DecodeChoice;
  auto line = auto_->record(r.rows, r.bucket, r.mk ? DecodeChoice::kMegakernel : DecodeChoice::kLayered, ms);
  if (line) {
    MS_LOG(Info) << "gpu: " << *line;
  }
}

// A failure the kernel reported itself (it ended, so the device is usable)
// turns the megakernel off and the step runs again on the layered path,
// which rewrites the same KV slots: auto serves on.
// A device fault or a wedged kernel stays the step's error (the layered
// path would queue behind it). An explicit --decode-backend megakernel
// keeps failing: its user asked for that path.
bool GpuBackend::fall_back(const Status& why) {
  // Only the kernel's own report: an error before the launch may be the
  // batch's or an earlier fault of the context, which the layered path
  // would meet too (review).
  if (!auto_ || !mk_->failed_cleanly()) return false;
  MS_LOG(Error) << "gpu: decode auto: the megakernel failed (" << why.message()
                << "); decode steps run on the layered path from now on";
  auto_.reset();
  mk_ = nullptr;
  return true;
}

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

Status GpuBackend::step(const std::vector<SeqWork>& batch, StepResult* out) {
  MS_RETURN_IF_ERROR(bind_device());
  const auto t0 = std::chrono::steady_clock::now();
  const Route r = route(batch);
  if (r.mk) {
    const Status st = mk_->step(batch, out);
    if (st.is_ok()) {
      record(r, ms_since(t0));
      return st;
    }
    if (!fall_back(st)) return st;
    return layered_->step(batch, out);
  }
  MS_RETURN_IF_ERROR(layered_->step(batch, out));
  record(r, ms_since(t0));
  return Status::ok();
}

Status GpuBackend::step_sample(const std::vector<SeqWork>& batch, const std::vector<const SampleSpec*>& specs,
                               std::vector<SampleResult>* out) {
  MS_RETURN_IF_ERROR(bind_device());
  MS_RETURN_IF_ERROR(validate_batch(model_->kv_spec(), model_->config(), batch));
  MS_RETURN_IF_ERROR(check_sample_specs(batch, specs));
  out->assign(batch.size(), SampleResult{});
  const auto t0 = std::chrono::steady_clock::now();
  const Route r = route(batch);
  auto layered = [&]() {
    return layered_->forward(batch, [&](const float* logits, const std::vector<int>& rows) {
      return sampler_->sample(logits, rows, specs, layered_->stream(), out);
    });
  };
  if (r.mk) {
    Status st = mk_->enqueue(batch);
    if (st.is_ok()) st = mk_->finish();
    if (!st.is_ok()) return fall_back(st) ? layered() : st;
    std::vector<int> rows(batch.size());
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int>(i);
    MS_RETURN_IF_ERROR(sampler_->sample(mk_->logits(), rows, specs, mk_->stream(), out));
  } else {
    MS_RETURN_IF_ERROR(layered());
    // A timed step is over when its GPU work is (a step that samples no row
    // has not waited for it).
    if (r.timed) MS_CUDA_RETURN(cudaStreamSynchronize(layered_->stream()));
  }
  record(r, ms_since(t0));  // the sampled results are on the host: the step is over
  return Status::ok();
}

}  // namespace ms::gpu
