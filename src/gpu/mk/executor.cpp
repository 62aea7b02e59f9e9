#include "gpu/mk/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/dtype.h"
#include "core/log.h"
#include "gpu/common/cuda_check.h"
#include "gpu/common/device_info.h"
#include "gpu/mk/megakernel.h"
#include "gpu/ops/sampling.h"

namespace ms::gpu {
namespace {

using ::ms::mk::kMaxRows;
using ::ms::mk::kMaxSplits;

// cuTensorMapEncodeTiled through the runtime's driver entry point (no link
// against libcuda).
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

Result<EncodeTiledFn> encode_tiled() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  MS_CUDA_RETURN(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
  if (q != cudaDriverEntryPointSuccess || !fn) return unavailable("cuTensorMapEncodeTiled is not available in this driver");
  return reinterpret_cast<EncodeTiledFn>(fn);
}

std::string error_text(const mk::MkError& e, const ::ms::mk::Schedule* s) {
  std::string what = e.code == 1   ? "a dependency counter wait timed out"
                     : e.code == 2 ? "a stage wait timed out"
                                   : "the loader and consumers disagreed on an instruction";
  std::string instr = "?";
  if (s && e.sm < uint32_t(s->n_sm()) && e.instr < s->sm_list(int(e.sm)).size())
    instr = ::ms::mk::describe(s->sm_list(int(e.sm))[e.instr]);
  return "megakernel watchdog: " + what + " on SM " + std::to_string(e.sm) + " at instruction " +
         std::to_string(e.instr) + " (" + instr + ", " + (e.role ? "loader" : "consumers") + "), counter " +
         std::to_string(e.counter) + " at " + std::to_string(e.value) + " of " + std::to_string(e.target);
}

}  // namespace

Status MkExecutor::check_supported(const ModelConfig& cfg, int block_size) {
  return ::ms::mk::check_supported(cfg, block_size);
}

MkExecutor::~MkExecutor() {
  if (meta_copied_) (void)cudaEventDestroy(meta_copied_);
  if (done_) (void)cudaEventDestroy(done_);
}

Result<std::unique_ptr<MkExecutor>> MkExecutor::create(DeviceModel& model, cudaStream_t stream, const MkOptions& opt) {
  MS_RETURN_IF_ERROR(check_supported(model.config(), model.block_size()));
  auto e = std::unique_ptr<MkExecutor>(new MkExecutor(model, stream));
  MS_RETURN_IF_ERROR(e->init(opt));
  return e;
}

namespace {
struct IntSetting {
  const char* name;
  int MkTuning::*field;
  int lo, hi;
};
constexpr IntSetting kIntSettings[] = {{"gu_batch", &MkTuning::gu_batch, 0, 64},
                                       {"down_batch", &MkTuning::down_batch, 0, 64},
                                       {"gu_gate", &MkTuning::gu_gate, -1, 8},
                                       {"down_gate", &MkTuning::down_gate, -1, 8},
                                       {"qkv_run", &MkTuning::qkv_run, 1, 64},
                                       {"o_run", &MkTuning::o_run, 1, 64},
                                       {"costs", &MkTuning::costs, 0, 2},
                                       {"attn_pct", &MkTuning::attn_pct, 0, 400},
                                       {"attn_wave", &MkTuning::attn_wave, -1, 1},
                                       {"route_fast", &MkTuning::route_fast, 0, 1},
                                       {"head_sms", &MkTuning::head_sms, -1, 4},
                                       {"o_sms", &MkTuning::o_sms, 0, 132},
                                       {"local_route", &MkTuning::local_route, 0, 1},
                                       {"async_signal", &MkTuning::async_signal, 0, 1},
                                       {"gemv_warps", &MkTuning::gemv_warps, 0, 1},
                                       {"static_pct", &MkTuning::static_pct, 0, 100},
                                       {"down_window", &MkTuning::down_window, 0, 1},
                                       {"attn_pack", &MkTuning::attn_pack, 0, 1},
                                       {"attn_ablate", &MkTuning::attn_ablate, 0, 3},
                                       {"poll_ns", &MkTuning::poll_ns, 0, 4096},
                                       {"norm_direct", &MkTuning::norm_direct, 0, 1}};
}  // namespace

Result<MkTuning> parse_mk_tuning(const std::string& spec, MkTuning t) {
  if (spec == "default") return t;
  size_t at = 0;
  while (at <= spec.size()) {
    const size_t end = std::min(spec.find(',', at), spec.size());
    const std::string tok = spec.substr(at, end - at);
    at = end + 1;
    if (tok.empty()) continue;
    const size_t eq = tok.find('=');
    const std::string key = tok.substr(0, eq), val = eq == std::string::npos ? "" : tok.substr(eq + 1);
    if (key == "order" && eq != std::string::npos) {
      MS_ASSIGN_OR_RETURN(t.order, ::ms::mk::parse_list_order(val));
      continue;
    }
    const IntSetting* set = nullptr;
    for (const IntSetting& s : kIntSettings)
      if (key == s.name) set = &s;
    if (!set || eq == std::string::npos)
      return invalid_argument("megakernel tuning: unknown setting '" + tok +
                              "' (known: order=..., gu_batch=N, down_batch=N, gu_gate=N, down_gate=N, qkv_run=N, o_run=N, "
                              "costs=0|1|2, attn_pct=0 or 10..400, attn_wave=-1|0|1, route_fast=0|1, "
                              "head_sms=-1..4, o_sms=0..132, local_route=0|1, async_signal=0|1, gemv_warps=0|1, static_pct=0..100, down_window=0|1, attn_pack=0|1, attn_ablate=0..3, poll_ns=0..4096, norm_direct=0|1)");
    char* e = nullptr;
    const long v = std::strtol(val.c_str(), &e, 10);
    if (val.empty() || *e != 0 || v < set->lo || v > set->hi)
      return invalid_argument("megakernel tuning: " + key + " wants an integer in " + std::to_string(set->lo) + ".." +
                              std::to_string(set->hi) + ", got '" + val + "'");
    if (set->field == &MkTuning::attn_pct && v > 0 && v < 10)
      return invalid_argument("megakernel tuning: attn_pct wants 0 (by shape) or 10..400, got '" + val + "'");
    t.*(set->field) = static_cast<int>(v);
  }
  return t;
}

std::string mk_tuning_name(const MkTuning& t) {
  const MkTuning def;
  std::string s;
  auto add = [&](const std::string& x) { s += (s.empty() ? "" : ",") + x; };
  if (t.order != def.order) add(std::string("order=") + ::ms::mk::list_order_name(t.order));
  for (const IntSetting& set : kIntSettings)
    if (t.*(set.field) != def.*(set.field)) add(std::string(set.name) + "=" + std::to_string(t.*(set.field)));
  return s.empty() ? "default" : s;
}

Status MkExecutor::set_tuning(const MkTuning& t) {
  // Another tuning: the cached lists are rebuilt (most settings are the
  // schedule's; a list per (rows, bucket) costs milliseconds, and a new
  // setting cannot be left out of a hand-kept list of those that are).
  if (!(t == opt_.tuning)) {
    MS_CUDA_RETURN(cudaStreamSynchronize(stream_));  // no step still reads the cached lists
    last_ = nullptr;
    last_cached_ = nullptr;
    cache_.clear();
  }
  opt_.tuning = t;
  return Status::ok();
}

Status MkExecutor::init(const MkOptions& opt) {
  opt_ = opt;
  if (const char* env = std::getenv("MEGASERVE_MK_EXPERIMENTS")) {
    auto t = parse_mk_tuning(env, opt_.tuning);
    if (!t.is_ok()) return invalid_argument("MEGASERVE_MK_EXPERIMENTS: " + t.status().message());
    opt_.tuning = *t;
  }
  if (!(opt_.tuning == MkTuning{})) {
    MS_LOG(Info) << "megakernel: tuning " << mk_tuning_name(opt_.tuning);
  }
  dims_ = ::ms::mk::make_dims(cfg_, model_.block_size());
  MS_ASSIGN_OR_RETURN(DeviceInfo info, device_info());
  n_sm_ = opt_.n_sm > 0 ? std::min(opt_.n_sm, info.sm_count) : info.sm_count;
  if (info.smem_per_block_optin < mk::megakernel_smem_bytes())
    return unimplemented("megakernel: needs " + std::to_string(mk::megakernel_smem_bytes()) +
                         " bytes of shared memory per block, the device allows " +
                         std::to_string(info.smem_per_block_optin));
  MS_ASSIGN_OR_RETURN(const int per_sm, mk::megakernel_blocks_per_sm());
  if (per_sm < 1) return unimplemented("megakernel: a CTA does not fit on an SM");
  const int max_ctx =
      opt_.max_context > 0 ? opt_.max_context : std::min(cfg_.max_position > 0 ? cfg_.max_position : 262144, 262144);
  opt_.max_context = max_ctx;
  max_blocks_ = (max_ctx + model_.block_size() - 1) / model_.block_size();
  const int64_t R = kMaxRows, H = dims_.hidden, E = std::max(dims_.n_experts, 1), K = std::max(dims_.top_k, 1);
  const int64_t I = std::max(dims_.moe_ffn, 1), F = std::max(dims_.dense_ffn, 1), S = std::max(dims_.shared_ffn, 1);
  const int G = 2;  // KV groups: full and sliding at most
  MS_RETURN_IF_ERROR(x_.alloc(R * H));
  MS_RETURN_IF_ERROR(h_.alloc(R * H));
  MS_RETURN_IF_ERROR(hf_.alloc(R * H));
  MS_RETURN_IF_ERROR(qkv_.alloc(R * dims_.qkv_width));
  MS_RETURN_IF_ERROR(part_o_.alloc(size_t(R) * dims_.n_heads * kMaxSplits * dims_.head_dim));
  MS_RETURN_IF_ERROR(part_lse_.alloc(size_t(R) * dims_.n_heads * kMaxSplits));
  MS_RETURN_IF_ERROR(attn_out_.alloc(R * dims_.q_width));
  MS_RETURN_IF_ERROR(o_part_.alloc(size_t(dims_.n_kv_heads) * R * H));
  MS_RETURN_IF_ERROR(router_logits_.alloc(R * E));
  MS_RETURN_IF_ERROR(topk_ids_.alloc(R * K));
  MS_RETURN_IF_ERROR(topk_w_.alloc(R * K));
  MS_RETURN_IF_ERROR(plan_.alloc(1 + 3 * E + R * K));
  MS_RETURN_IF_ERROR(moe_act_.alloc(R * K * I));
  MS_RETURN_IF_ERROR(ybuf_.alloc(R * K * H));
  MS_RETURN_IF_ERROR(dense_act_.alloc(R * F));
  MS_RETURN_IF_ERROR(dense_part_.alloc(size_t(::ms::mk::down_slices(int(F))) * R * H));
  MS_RETURN_IF_ERROR(shared_act_.alloc(R * S));
  MS_RETURN_IF_ERROR(shared_part_.alloc(size_t(::ms::mk::down_slices(int(S))) * R * H));
  MS_RETURN_IF_ERROR(logits_.alloc(R * dims_.vocab));
  if (opt_.record_routing && dims_.n_experts > 0) {
    MS_RETURN_IF_ERROR(routing_log_.alloc(size_t(dims_.n_layers) * R * K));
    MS_RETURN_IF_ERROR(router_log_.alloc(size_t(dims_.n_layers) * R * E));
  }
  MS_RETURN_IF_ERROR(tokens_out_.alloc(R));
  MS_RETURN_IF_ERROR(logprobs_out_.alloc(R));
  MS_RETURN_IF_ERROR(tables_.alloc(size_t(R) * G * max_blocks_));
  MS_CUDA_RETURN(cudaMemset(tables_.get(), 0xff, tables_.bytes()));  // -1: no block
  MS_RETURN_IF_ERROR(meta_.alloc(1));
  MS_RETURN_IF_ERROR(meta_host_.alloc(1));
  MS_RETURN_IF_ERROR(table_host_.alloc(size_t(R) * G * max_blocks_));
  MS_RETURN_IF_ERROR(errbuf_.alloc(sizeof(mk::MkError) / 4 + 4));
  MS_CUDA_RETURN(cudaMemset(errbuf_.get(), 0, errbuf_.bytes()));
  MS_RETURN_IF_ERROR(err_host_.alloc(errbuf_.size()));
  // Two counter banks, each for the largest layout (the most rows): a step
  // zeroes the whole other bank, whatever its own row count.
  const size_t bank = size_t(::ms::mk::make_counter_layout(dims_, kMaxRows).words());
  MS_RETURN_IF_ERROR(counters_.alloc(2 * bank));
  MS_CUDA_RETURN(cudaMemset(counters_.get(), 0, counters_.bytes()));
  base_.bank_words = static_cast<int32_t>(bank);
  MS_CUDA_RETURN(cudaEventCreateWithFlags(&meta_copied_, cudaEventDisableTiming));
  MS_CUDA_RETURN(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  rows_.assign(kMaxRows, {});
  // Layer kinds now; the weight pointers and KV rows in bind_kv().
  std::vector<::ms::mk::LayerInfo> info_h = ::ms::mk::make_layer_info(cfg_);
  MS_RETURN_IF_ERROR(layer_info_.upload(info_h));

  mk::Params& p = base_;
  p.dims = dims_;
  p.layer_info = layer_info_.get();
  p.embed = model_.embed();
  p.lm_head = model_.lm_head();
  p.final_norm = model_.final_norm();
  p.inv_freq = model_.inv_freq();
  p.meta = meta_.get();
  p.tables = tables_.get();
  p.table_stride = max_blocks_;
  p.x = x_.get();
  p.h = h_.get();
  p.hf = hf_.get();
  p.qkv = qkv_.get();
  p.part_o = part_o_.get();
  p.part_lse = part_lse_.get();
  p.max_splits = kMaxSplits;
  p.attn_out = attn_out_.get();
  p.o_part = o_part_.get();
  p.router_logits = router_logits_.get();
  p.topk_ids = topk_ids_.get();
  p.topk_w = topk_w_.get();
  p.plan = plan_.get();
  p.moe_act = moe_act_.get();
  p.ybuf = ybuf_.get();
  p.dense_act = dense_act_.get();
  p.dense_part = dense_part_.get();
  p.shared_act = shared_act_.get();
  p.shared_part = shared_part_.get();
  p.logits = logits_.get();
  p.watchdog_ns = uint64_t(std::max<int64_t>(opt_.watchdog_ms, 0)) * 1000000ull;
  p.error = reinterpret_cast<mk::MkError*>(errbuf_.get());
  p.abort_flag = errbuf_.get() + sizeof(mk::MkError) / 4;
  p.routing_log = routing_log_.size() ? routing_log_.get() : nullptr;
  p.router_log = router_log_.size() ? router_log_.get() : nullptr;
  return Status::ok();
}

Status MkExecutor::bind_kv() {
  const KvSpec& kv = model_.kv_spec();
  if (model_.kv_elems() == 0) return internal_error("megakernel: the KV pool is not allocated");
  const int hd = dims_.head_dim, bs = model_.block_size();
  const uint64_t rows = model_.kv_elems() / hd;
  if (rows + kv.block_size >= uint64_t(INT32_MAX))
    return unimplemented("megakernel: KV pool of " + std::to_string(rows) + " rows exceeds the tensor map's int32 rows");
  MS_ASSIGN_OR_RETURN(EncodeTiledFn encode, encode_tiled());
  const cuuint64_t gdim[2] = {cuuint64_t(hd), cuuint64_t(rows)};
  const cuuint64_t gstride[1] = {cuuint64_t(hd) * 2};
  const cuuint32_t box[2] = {cuuint32_t(std::min(hd, 64)), cuuint32_t(std::min(bs, 64))};
  const cuuint32_t estride[2] = {1, 1};
  const CUresult r = encode(&kv_map_, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, model_.kv_pool(), gdim, gstride, box,
                            estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            hd >= 64 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return internal_error("megakernel: cuTensorMapEncodeTiled failed (" + std::to_string(r) + ")");
  std::vector<mk::LayerPtrs> ptrs(cfg_.n_layers);
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const DeviceLayer& L = model_.layer(l);
    mk::LayerPtrs& q = ptrs[l];
    auto bf = [](const DeviceBuffer<uint16_t>& b) -> const uint16_t* { return b.size() ? b.get() : nullptr; };
    auto f32 = [](const DeviceBuffer<float>& b) -> const float* { return b.size() ? b.get() : nullptr; };
    q.qkv_w = bf(L.qkv_w);
    q.qkv_b = f32(L.qkv_b);
    q.o_w = bf(L.o_w);
    q.o_b = f32(L.o_b);
    q.attn_norm = f32(L.attn_norm);
    q.ffn_norm = f32(L.ffn_norm);
    q.q_norm = f32(L.q_norm);
    q.k_norm = f32(L.k_norm);
    q.gate_up = bf(L.gate_up);
    q.down = bf(L.down);
    q.router = bf(L.router);
    q.experts_gate_up = bf(L.experts_gate_up);
    q.experts_down = bf(L.experts_down);
    q.shared_gate_up = bf(L.shared_gate_up);
    q.shared_down = bf(L.shared_down);
    q.k_cache = model_.kv_pool() + L.k_off;
    q.v_cache = model_.kv_pool() + L.v_off;
    q.k_row0 = int64_t(L.k_off / hd);
    q.v_row0 = int64_t(L.v_off / hd);
    q.kv_group = kv.layer_group[l];
  }
  MS_RETURN_IF_ERROR(layer_ptrs_.upload(ptrs));
  base_.layers = layer_ptrs_.get();
  base_.n_groups = 2;  // the table buffer's group stride (a model has one or two groups)
  base_.kv_rows = int64_t(rows);
  kv_bound_ = true;
  return Status::ok();
}

bool MkExecutor::accepts(const std::vector<SeqWork>& batch) const {
  if (batch.empty() || static_cast<int>(batch.size()) > kMaxRows || !kv_bound_) return false;
  for (const SeqWork& w : batch)
    if (w.tokens.size() != 1 || w.start_pos + 1 > opt_.max_context) return false;
  return true;
}

Result<MkExecutor::Cached*> MkExecutor::schedule_for(int rows, int context) {
  const auto key = std::make_pair(rows, context);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second.get();
  ::ms::mk::ScheduleOptions so;
  so.rows = rows;
  so.context = context;
  so.n_sm = n_sm_;
  so.barrier_between_phases = opt_.barrier_between_phases;
  so.order = opt_.tuning.order;
  so.qkv_run = opt_.tuning.qkv_run;
  so.o_run = opt_.tuning.o_run;
  so.attn_sm_percent = opt_.tuning.attn_percent_for(rows, context);
  so.attn_one_wave = opt_.tuning.attn_one_wave_for(rows, context);
  so.head_sms = opt_.tuning.head_sms_for(rows, context, n_sm_);
  so.oproj_sms = opt_.tuning.o_sms;
  so.static_pct = opt_.tuning.static_pct;
  ::ms::mk::apply_cost_set(&so, opt_.tuning.costs);
  so.plant_stuck_wait = opt_.plant_stuck_wait;
  MS_ASSIGN_OR_RETURN(::ms::mk::Schedule s, ::ms::mk::build_schedule(dims_, ::ms::mk::make_layer_info(cfg_), so));
  MS_RETURN_IF_ERROR(::ms::mk::check_schedule(s));
  auto c = std::make_unique<Cached>();
  c->schedule = std::move(s);
  MS_RETURN_IF_ERROR(c->instrs.upload(c->schedule.instrs));
  MS_RETURN_IF_ERROR(c->sm_begin.upload(c->schedule.sm_begin));
  if (opt_.record_timeline) MS_RETURN_IF_ERROR(c->timeline.alloc(c->schedule.instrs.size()));
  MS_LOG(Info) << "megakernel: schedule for " << rows << " rows, context " << context << ": "
               << c->schedule.instrs.size() << " instructions on " << n_sm_ << " SMs, attention splits "
               << c->schedule.splits_full << " / " << c->schedule.splits_sliding;
  Cached* raw = c.get();
  cache_.emplace(key, std::move(c));
  return raw;
}

// Uploads the table entries that differ from what the device holds for each
// row (a new sequence in a row: its whole table; a sequence that grew: the
// new entries; one that slid its window: the entries that became -1).
Status MkExecutor::stage_tables(const std::vector<SeqWork>& batch) {
  const int G = static_cast<int>(model_.kv_spec().groups.size());
  int32_t* stage = table_host_.get();
  size_t used = 0;
  for (size_t r = 0; r < batch.size(); ++r) {
    const SeqWork& w = batch[r];
    RowMirror& m = rows_[r];
    const bool same_seq = m.seq_id == w.seq_id;
    m.seq_id = w.seq_id;
    m.tables.resize(G);
    for (int g = 0; g < G; ++g) {
      const std::vector<int32_t>& t = w.block_tables[g];
      if (static_cast<int>(t.size()) > max_blocks_)
        return out_of_range("megakernel: block table of " + std::to_string(t.size()) + " entries, at most " +
                            std::to_string(max_blocks_));
      std::vector<int32_t>& have = m.tables[g];
      size_t first = 0;
      if (same_seq) {
        while (first < t.size() && first < have.size() && have[first] == t[first]) ++first;
      }
      if (first == t.size()) continue;
      const size_t n = t.size() - first;
      std::copy(t.begin() + first, t.end(), stage + used);
      int32_t* dst = tables_.get() + (int64_t(r) * 2 + g) * max_blocks_ + first;
      MS_CUDA_RETURN(
          cudaMemcpyAsync(dst, stage + used, n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
      used += n;
      have = t;
    }
  }
  return Status::ok();
}

Status MkExecutor::enqueue(const std::vector<SeqWork>& batch) {
  if (!failed_.is_ok()) return failed_;
  if (!accepts(batch)) return invalid_argument("megakernel: not a decode batch of 1.." + std::to_string(kMaxRows) + " rows");
  const int R = static_cast<int>(batch.size());
  int keys = 1;
  for (const SeqWork& w : batch) keys = std::max(keys, w.start_pos + 1);
  MS_ASSIGN_OR_RETURN(Cached* c, schedule_for(R, ::ms::mk::context_bucket(keys)));
  MS_CUDA_RETURN(cudaEventSynchronize(meta_copied_));  // the staging of the previous step was read
  mk::StepMeta& m = *meta_host_.get();
  for (int r = 0; r < kMaxRows; ++r) {
    m.tokens[r] = r < R ? batch[r].tokens[0] : 0;
    m.pos[r] = r < R ? batch[r].start_pos : 0;
  }
  MS_CUDA_RETURN(cudaMemcpyAsync(meta_.get(), &m, sizeof(mk::StepMeta), cudaMemcpyHostToDevice, stream_));
  MS_RETURN_IF_ERROR(stage_tables(batch));
  MS_CUDA_RETURN(cudaEventRecord(meta_copied_, stream_));
  mk::Params p = base_;
  p.instrs = c->instrs.get();
  p.sm_begin = c->sm_begin.get();
  p.n_sm = n_sm_;
  p.rows = R;
  p.ctr = c->schedule.counters;
  if (p.ctr.words() > base_.bank_words) return internal_error("megakernel: counter layout larger than its bank");
  const size_t bank = size_t(base_.bank_words);
  p.counters = counters_.get() + (epoch_ & 1) * bank;
  p.counters_next = counters_.get() + ((epoch_ + 1) & 1) * bank;
  p.timeline = opt_.record_timeline ? c->timeline.get() : nullptr;
  p.claim_batch_gu = opt_.tuning.gu_run(R);
  p.claim_batch_down = opt_.tuning.down_run(R);
  p.gate_gu = opt_.tuning.gu_gate;
  p.gate_down = opt_.tuning.down_gate;
  p.route_fast = opt_.tuning.route_fast;
  p.attn_ablate = opt_.tuning.attn_ablate;
  p.poll_ns = uint32_t(opt_.tuning.poll_ns);
  p.norm_direct = opt_.tuning.norm_direct;
  p.attn_pack = opt_.tuning.attn_pack;
  p.local_route = opt_.tuning.local_route;
  p.async_signal = opt_.tuning.async_signal;
  p.gemv_warps = opt_.tuning.gemv_warps;
  p.down_window = opt_.tuning.down_window;
  MS_RETURN_IF_ERROR(mk::launch_megakernel(p, kv_map_, stream_));
  MS_CUDA_RETURN(cudaEventRecord(done_, stream_));
  ++epoch_;
  last_rows_ = R;
  last_ = &c->schedule;
  last_cached_ = c;
  return Status::ok();
}

Status MkExecutor::finish() {
  if (!failed_.is_ok()) return failed_;
  // Bounded wait: the device watchdog ends a stuck step in watchdog_ms (x2
  // for stage waits); past 4x + 2 s the kernel itself is wedged.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(4 * opt_.watchdog_ms + 2000);
  while (true) {
    const cudaError_t q = cudaEventQuery(done_);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) {
      failed_ = cuda_status(q, "megakernel step", __FILE__, __LINE__);
      return failed_;
    }
    if (opt_.watchdog_ms > 0 && std::chrono::steady_clock::now() > deadline) {
      failed_ = internal_error("megakernel: the step did not finish within " + std::to_string(4 * opt_.watchdog_ms + 2000) +
                               " ms (the device is wedged)");
      return failed_;
    }
    // Spin (the engine thread has nothing else to do during a step; a
    // sleep here adds its granularity to every step), yielding the core.
    std::this_thread::yield();
  }
  MS_CUDA_RETURN(cudaMemcpy(err_host_.get(), errbuf_.get(), errbuf_.bytes(), cudaMemcpyDeviceToHost));
  mk::MkError e;
  std::memcpy(&e, err_host_.get(), sizeof(e));
  if (e.code != 0) {
    failed_ = internal_error(error_text(e, last_));
    failed_clean_ = true;
    MS_LOG(Error) << failed_.message();
    return failed_;
  }
  return Status::ok();
}

Status MkExecutor::step(const std::vector<SeqWork>& batch, StepResult* out) {
  MS_RETURN_IF_ERROR(validate_batch(model_.kv_spec(), cfg_, batch));
  MS_RETURN_IF_ERROR(enqueue(batch));
  MS_RETURN_IF_ERROR(finish());
  out->logits.assign(batch.size(), {});
  const size_t V = cfg_.vocab_size;
  for (size_t r = 0; r < batch.size(); ++r) {
    if (!batch[r].need_logits) continue;
    out->logits[r].resize(V);
    MS_CUDA_RETURN(cudaMemcpyAsync(out->logits[r].data(), logits_.get() + r * V, V * sizeof(float),
                                   cudaMemcpyDeviceToHost, stream_));
  }
  MS_CUDA_RETURN(cudaStreamSynchronize(stream_));
  return Status::ok();
}

Status MkExecutor::enqueue_greedy(const std::vector<SeqWork>& batch) {
  MS_RETURN_IF_ERROR(enqueue(batch));
  return launch_argmax(logits_.get(), static_cast<int>(batch.size()), cfg_.vocab_size, tokens_out_.get(),
                       logprobs_out_.get(), stream_);
}

Status MkExecutor::decode_greedy(const std::vector<SeqWork>& batch, std::vector<int32_t>* tokens,
                                 std::vector<float>* logprobs) {
  MS_RETURN_IF_ERROR(validate_batch(model_.kv_spec(), cfg_, batch));
  MS_RETURN_IF_ERROR(enqueue_greedy(batch));
  MS_RETURN_IF_ERROR(finish());
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

Status MkExecutor::last_routing(int layer, std::vector<int32_t>* ids, std::vector<float>* logits) {
  if (!opt_.record_routing) return invalid_argument("megakernel: record_routing is off");
  if (layer < 0 || layer >= cfg_.n_layers) return invalid_argument("megakernel: no layer " + std::to_string(layer));
  ids->clear();
  if (logits) logits->clear();
  if (!cfg_.layers[layer].moe || routing_log_.size() == 0) return Status::ok();
  MS_CUDA_RETURN(cudaStreamSynchronize(stream_));
  const size_t R = last_rows_, K = dims_.top_k, E = dims_.n_experts;
  ids->resize(R * K);
  MS_CUDA_RETURN(cudaMemcpy(ids->data(), routing_log_.get() + size_t(layer) * R * K, R * K * sizeof(int32_t),
                            cudaMemcpyDeviceToHost));
  if (logits) {
    logits->resize(R * E);
    MS_CUDA_RETURN(cudaMemcpy(logits->data(), router_log_.get() + size_t(layer) * R * E, R * E * sizeof(float),
                              cudaMemcpyDeviceToHost));
  }
  return Status::ok();
}

Status MkExecutor::timeline(std::vector<mk::TimelineEntry>* out) {
  if (!last_cached_ || !opt_.record_timeline) return invalid_argument("megakernel: no timeline recorded");
  MS_CUDA_RETURN(cudaStreamSynchronize(stream_));
  return last_cached_->timeline.download(out);
}

Status MkExecutor::download(const std::string& name, std::vector<float>* out) {
  MS_CUDA_RETURN(cudaStreamSynchronize(stream_));
  auto f32 = [&](const DeviceBuffer<float>& b) { return b.download(out); };
  auto bf = [&](const DeviceBuffer<uint16_t>& b) -> Status {
    std::vector<uint16_t> v;
    MS_RETURN_IF_ERROR(b.download(&v));
    out->resize(v.size());
    for (size_t i = 0; i < v.size(); ++i) (*out)[i] = bf16_to_f32(v[i]);
    return Status::ok();
  };
  if (name == "x") return f32(x_);
  if (name == "h") return bf(h_);
  if (name == "hf") return f32(hf_);
  if (name == "qkv") return f32(qkv_);
  if (name == "attn_out") return bf(attn_out_);
  if (name == "o_part") return f32(o_part_);
  if (name == "router_logits") return f32(router_logits_);
  if (name == "moe_act") return bf(moe_act_);
  if (name == "ybuf") return f32(ybuf_);
  if (name == "dense_act") return bf(dense_act_);
  if (name == "logits") return f32(logits_);
  return invalid_argument("megakernel: no buffer '" + name + "'");
}

}  // namespace ms::gpu
