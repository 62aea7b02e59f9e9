#include "mk/schedule.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <sstream>

namespace ms::mk {
namespace {

constexpr int kMinStagesPerSplit = 2;  // a split still overlaps its loads

// Attention splits per (row, KV head) for rows attending up to `keys` keys:
// about one split per SM (attn_sm_percent of them) over all (row, head)
// pairs, at least two stages each.
int attention_splits(int keys, int rows, int n_kv, int n_sm, int attn_sm_percent, bool one_wave) {
  const int n_st = ceil_div(keys, kStageKeys) + 1;  // +1: stages are aligned to absolute positions
  const int sms = std::max(1, n_sm * attn_sm_percent / 100);
  const int want = one_wave ? std::max(1, sms / (rows * n_kv)) : ceil_div(sms, rows * n_kv);
  const int by_len = std::max(1, n_st / kMinStagesPerSplit);
  return std::clamp(std::min(want, by_len), 1, kMaxSplits);
}

// Places instructions in one global order, each on the SM that the cost
// model says finishes it first; per-SM lists keep the global order.
class Placer {
 public:
  Placer(const ScheduleOptions& opt, const CounterLayout& ctr)
      : opt_(opt), ctr_(ctr), busy_(opt.n_sm, 0.0), lists_(opt.n_sm), est_(opt.n_sm), ready_(ctr.total + 1, 0.0) {
    bw_sm_ = opt.device_bytes_per_ns / opt.n_sm;
  }

  double bw_sm() const { return bw_sm_; }
  double overhead() const { return opt_.instr_overhead_ns; }

  // Barrier ablation: every SM waits for the previous phase's instructions.
  void begin_phase(int layer, int phase) {
    if (!opt_.barrier_between_phases) return;
    if (have_phase_) {
      const double t = *std::max_element(busy_.begin(), busy_.end());
      for (int s = 0; s < opt_.n_sm; ++s) {
        Instruction b;
        b.op = Opcode::kBarrier;
        b.layer = static_cast<uint16_t>(layer);
        b.wait[0] = {phase_counter_, 0};  // target filled by finish()
        lists_[s].push_back(b);
        est_[s].push_back({busy_[s], t});
        busy_[s] = t;
      }
    }
    phase_counter_ = ctr_.phase(layer, phase);
    have_phase_ = true;
  }

  // The SMs that take everything but the serial head (ScheduleOptions::head_sms).
  int work_sms() const { return opt_.n_sm - opt_.head_sms; }
  static bool head_op(Opcode op) { return op == Opcode::kNorm || op == Opcode::kFinalNorm || op == Opcode::kRoute; }

  // Places `in` (cost in ns) and returns its SM.
  int place(Instruction in, double cost_ns) {
    if (opt_.barrier_between_phases && have_phase_) in.signal[1] = phase_counter_;
    double r = 0;
    for (const Wait& w : in.wait)
      if (w.counter != kNoCounter && w.counter < ready_.size()) r = std::max(r, ready_[w.counter]);
    const bool head = opt_.head_sms > 0 && head_op(in.op);
    int lo = head ? work_sms() : 0;
    const int hi = opt_.head_sms > 0 && !head ? work_sms() : opt_.n_sm;
    if (in.op == Opcode::kOProj && opt_.oproj_sms > 0) lo = std::max(0, work_sms() - opt_.oproj_sms);
    int best = lo;
    double best_t = 0;
    for (int s = lo; s < hi; ++s) {
      const double t = std::max(busy_[s], r) + cost_ns;
      if (s == lo || t < best_t) {
        best = s;
        best_t = t;
      }
    }
    est_[best].push_back({best_t - cost_ns, best_t});
    busy_[best] = best_t;
    for (uint32_t c : in.signal)
      if (c != kNoCounter) ready_[c] = std::max(ready_[c], best_t);
    lists_[best].push_back(in);
    return best;
  }

  // One instruction on every SM (claims, the LM head's ranges). start: the
  // estimated start when the caller has advanced the SM's busy time itself
  // (claims: fill / split_static), else negative.
  void place_on(int sm, Instruction in, double cost_ns, double start = -1) {
    if (opt_.barrier_between_phases && have_phase_) in.signal[1] = phase_counter_;
    double r = 0;
    for (const Wait& w : in.wait)
      if (w.counter != kNoCounter && w.counter < ready_.size()) r = std::max(r, ready_[w.counter]);
    const double begin = std::max(busy_[sm], r);
    busy_[sm] = begin + cost_ns;
    est_[sm].push_back({start >= 0 ? start : begin, busy_[sm]});
    for (uint32_t c : in.signal)
      if (c != kNoCounter) ready_[c] = std::max(ready_[c], busy_[sm]);
    lists_[sm].push_back(in);
  }

  // Water-filling estimate of dynamically claimed work: `bytes` spread over
  // the SMs free from `ready` on; returns when it is all done.
  double fill(double ready, double bytes) {
    const int n = work_sms();  // the claiming SMs
    std::vector<double> a(n);
    for (int s = 0; s < n; ++s) a[s] = std::max(busy_[s], ready);
    std::vector<double> sorted = a;
    std::sort(sorted.begin(), sorted.end());
    double t = sorted[0], left = bytes;
    for (int i = 0; i < n && left > 0; ++i) {
      const double next = i + 1 < n ? sorted[i + 1] : INFINITY;
      const double cap = (next - t) * (i + 1) * bw_sm_;
      if (cap >= left) {
        t += left / ((i + 1) * bw_sm_);
        left = 0;
      } else {
        left -= cap;
        t = next;
      }
    }
    for (int s = 0; s < n; ++s)
      if (a[s] < t) busy_[s] = t;
    return t;
  }
  // Statically placed expert tiles: n tiles of tile_ns each over the
  // claiming SMs free from `ready` on, one at a time on the SM that would
  // finish it first; then one contiguous range of tile indices per SM, the
  // SMs free earliest taking the lowest (the first expert slots). Returns
  // (first tile, count) per claiming SM, updates their busy times and sets
  // *end to when the last of them ends.
  std::vector<std::pair<int, int>> split_static(double ready, int n, double tile_ns, double* end) {
    const int S = work_sms();
    std::vector<double> a(S), t(S);
    for (int s = 0; s < S; ++s) a[s] = t[s] = std::max(busy_[s], ready);
    std::vector<int> count(S, 0);
    for (int k = 0; k < n; ++k) {
      int best = 0;
      for (int s = 1; s < S; ++s)
        if (t[s] < t[best]) best = s;
      t[best] += tile_ns;
      ++count[best];
    }
    std::vector<int> order(S);
    for (int s = 0; s < S; ++s) order[s] = s;
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return a[x] < a[y]; });
    std::vector<std::pair<int, int>> range(S);
    int next = 0;
    *end = ready;
    for (int s : order) {
      range[s] = {next, count[s]};
      next += count[s];
      if (count[s] > 0) {
        busy_[s] = t[s];
        *end = std::max(*end, t[s]);
      }
    }
    return range;
  }
  double ready(uint32_t c) const { return ready_[c]; }
  void set_ready(uint32_t c, double t) { ready_[c] = std::max(ready_[c], t); }
  double makespan() const { return *std::max_element(busy_.begin(), busy_.end()); }
  double busy(int sm) const { return busy_[sm]; }
  std::vector<std::vector<Instruction>>& lists() { return lists_; }
  // The cost model's (start, end) of each placed instruction, per SM list.
  const std::vector<std::vector<std::pair<double, double>>>& estimates() const { return est_; }

 private:
  const ScheduleOptions& opt_;
  const CounterLayout& ctr_;
  double bw_sm_ = 1;
  std::vector<double> busy_;
  std::vector<std::vector<Instruction>> lists_;
  std::vector<std::vector<std::pair<double, double>>> est_;
  std::vector<double> ready_;
  bool have_phase_ = false;
  uint32_t phase_counter_ = kNoCounter;
};

Instruction make(Opcode op, int layer) {
  Instruction in;
  in.op = op;
  in.layer = static_cast<uint16_t>(layer);
  return in;
}

Instruction gemv(Opcode op, int layer, int tile0, int n_tiles, int kslice, uint32_t wait_ctr, uint32_t signal) {
  Instruction in = make(op, layer);
  in.gemv.tile0 = tile0;
  in.gemv.n_tiles = n_tiles;
  in.gemv.kslice = kslice;
  in.wait[0] = {wait_ctr, 0};
  in.signal[0] = signal;
  return in;
}

// Expected distinct experts routed by `rows` rows picking top_k of E at random.
double expected_experts(const Dims& d, int rows) {
  return d.n_experts * (1.0 - std::pow(1.0 - double(d.top_k) / d.n_experts, rows));
}

enum Phase { kPNorm, kPRouter, kPRoute, kPQkv, kPAttn, kPCombine, kPOProj, kPNorm2, kPDenseGu, kPDenseDown, kPGu, kPDown };
static_assert(kPDown < kPhasesPerLayer);

class Builder {
 public:
  Builder(const Dims& d, const std::vector<LayerInfo>& layers, const ScheduleOptions& opt, Schedule* s)
      : d_(d), layers_(layers), opt_(opt), s_(s), ctr_(s->counters), p_(opt, s->counters) {}

  void build() {
    const int L = d_.n_layers;
    for (int l = 0; l < L; ++l) {
      if (d_.parallel_block) {
        norm(l, /*second=*/false);
        const bool moe = layers_[l].moe;
        if (moe) router_route(l, ctr_.norm(l));
        attention_chain(l, /*with_oproj=*/false);
        switch (moe ? opt_.order : ListOrder::kOProjFirst) {
          case ListOrder::kOProjFirst:
            oproj(l);
            ffn_static(l, ctr_.norm(l));
            if (moe) claims(l, true, true);
            break;
          case ListOrder::kClaimsFirst:
            claims(l, true, true);
            oproj(l);
            ffn_static(l, ctr_.norm(l));
            break;
          case ListOrder::kOProjBetween:
            claims(l, true, false);
            oproj(l);
            ffn_static(l, ctr_.norm(l));
            claims(l, false, true);
            break;
        }
      } else {
        norm(l, false);
        attention_chain(l);
        norm(l, /*second=*/true);
        if (layers_[l].moe) router_route(l, ctr_.norm2(l));
        ffn_static(l, ctr_.norm2(l));
        if (layers_[l].moe) claims(l, true, true);
      }
    }
    final_and_head();
  }

 private:
  // The counter the norm after layer l waits on for the FFN's output.
  uint32_t ffn_done(int l) const { return layers_[l].moe ? ctr_.down_done(l) : ctr_.dense_down(l); }

  void norm(int l, bool second) {
    p_.begin_phase(l, second ? kPNorm2 : kPNorm);
    for (int r = 0; r < opt_.rows; ++r) {
      Instruction in = make(Opcode::kNorm, l);
      in.rows.row = r;
      if (second) {
        in.flags |= kFlagNormSecond;
        in.wait[0] = {ctr_.oproj(l), 0};
        in.signal[0] = ctr_.norm2(l);
      } else {
        if (l > 0 && d_.parallel_block) {
          in.wait[0] = {ctr_.oproj(l - 1), 0};
          in.wait[1] = {ffn_done(l - 1), 0};
        } else if (l > 0) {
          in.wait[0] = {ffn_done(l - 1), 0};
        }
        in.signal[0] = ctr_.norm(l);
      }
      p_.place(in, opt_.fitted_costs ? opt_.norm_ns : 1.5 * p_.overhead());
    }
  }

  void router_route(int l, uint32_t input) {
    p_.begin_phase(l, kPRouter);
    const double tile_bytes = double(kTileRows) * d_.hidden * 2;
    for (int t = 0; t < router_tiles(d_); ++t)
      p_.place(gemv(Opcode::kRouter, l, t, 1, 0, input, ctr_.router(l)),
               opt_.fitted_costs ? opt_.router_ns : tile_bytes / p_.bw_sm() + p_.overhead());
    p_.begin_phase(l, kPRoute);
    Instruction in = make(Opcode::kRoute, l);
    in.wait[0] = {ctr_.router(l), 0};
    in.signal[0] = ctr_.route(l);
    if (opt_.plant_stuck_wait && !planted_) {
      in.wait[1] = {stuck_counter(), 1};
      planted_ = true;
    }
    p_.place(in, opt_.fitted_costs ? opt_.route_ns : 2 * p_.overhead());
  }

  uint32_t stuck_counter() const { return ctr_.never(); }

  // QKV, attention, combine and (with_oproj) the O-projection of layer l.
  void attention_chain(int l, bool with_oproj = true) {
    const Dims& d = d_;
    p_.begin_phase(l, kPQkv);
    const double tile_bytes = double(kTileRows) * d.hidden * 2;
    // Group by group, so the first groups' attention can start while the
    // last groups' QKV tiles still stream.
    for (int g = 0; g < d.n_kv_heads; ++g)
      for (int part = 0; part < 3; ++part) {
        const RowRange rr = qkv_group_rows(d, g, part);
        const int t_end = ceil_div(rr.end, kTileRows);
        for (int t = rr.begin / kTileRows; t < t_end; t += opt_.qkv_run) {  // run in 1..64 (build_schedule)
          const int n = std::min(opt_.qkv_run, t_end - t);
          Instruction in = gemv(Opcode::kQkv, l, t, n, 0, ctr_.norm(l), ctr_.qkv(l, g));
          if (!planted_ && opt_.plant_stuck_wait && d.n_experts == 0) {
            in.wait[1] = {stuck_counter(), 1};
            planted_ = true;
          }
          p_.place(in, n * tile_bytes / p_.bw_sm() + p_.overhead());
        }
      }
    p_.begin_phase(l, kPAttn);
    const int n_splits = layers_[l].sliding ? s_->splits_sliding : s_->splits_full;
    const int full_keys = std::max(1, int(opt_.context * opt_.bucket_keys));
    const int keys = layers_[l].sliding ? std::min(full_keys, d.sliding_window) : full_keys;
    const double stage_bytes = 2.0 * kStageKeys * d.head_dim * 2;
    const double split_stages = double(ceil_div(keys, kStageKeys) + 1) / n_splits;
    for (int r = 0; r < opt_.rows; ++r)
      for (int g = 0; g < d.n_kv_heads; ++g)
        for (int sp = 0; sp < n_splits; ++sp) {
          Instruction in = make(Opcode::kAttention, l);
          in.attn = {r, g, sp, n_splits};
          in.wait[0] = {ctr_.qkv(l, g), 0};
          in.signal[0] = ctr_.attn(l, r, g);
          p_.place(in, split_stages * stage_bytes / p_.bw_sm() + p_.overhead() +
                           (opt_.fitted_costs ? opt_.attention_extra_ns : 0.0));
        }
    p_.begin_phase(l, kPCombine);
    for (int r = 0; r < opt_.rows; ++r)
      for (int g = 0; g < d.n_kv_heads; ++g) {
        Instruction in = make(Opcode::kAttnCombine, l);
        in.attn = {r, g, 0, n_splits};
        in.wait[0] = {ctr_.attn(l, r, g), 0};
        in.signal[0] = ctr_.combine(l, g);
        p_.place(in, opt_.fitted_costs ? opt_.combine_ns : 1.5 * p_.overhead());
      }
    if (with_oproj) oproj(l);
  }

  void oproj(int l) {
    const Dims& d = d_;
    p_.begin_phase(l, kPOProj);
    const double o_bytes = double(kTileRows) * d.group * d.head_dim * 2;
    const int run = opt_.o_run;  // 1..64 (build_schedule)
    for (int g = 0; g < o_slices(d); ++g)
      for (int t = 0; t < o_tiles(d); t += run) {
        const int n = std::min(run, o_tiles(d) - t);
        p_.place(gemv(Opcode::kOProj, l, t, n, g, ctr_.combine(l, g), ctr_.oproj(l)),
                 n * o_bytes / p_.bw_sm() + p_.overhead());
      }
  }

  // The dense FFN of a dense layer, or the shared expert of an MoE layer.
  void ffn_static(int l, uint32_t input) {
    const bool moe = layers_[l].moe;
    const int width = moe ? d_.shared_ffn : d_.dense_ffn;
    if (width == 0) return;
    const uint16_t flag = moe ? kFlagShared : 0;
    const uint32_t gu_ctr = moe ? ctr_.shared_gu(l) : ctr_.dense_gu(l);
    const uint32_t down_ctr = moe ? ctr_.down_done(l) : ctr_.dense_down(l);
    p_.begin_phase(l, kPDenseGu);
    const double pair_bytes = double(kTileRows) * d_.hidden * 2;
    for (int t = 0; t < pair_tiles(width); ++t) {
      Instruction in = gemv(Opcode::kDenseGateUp, l, t, 1, 0, input, gu_ctr);
      in.flags |= flag;
      p_.place(in, pair_bytes / p_.bw_sm() + p_.overhead());
    }
    p_.begin_phase(l, kPDenseDown);
    for (int j = 0; j < down_slices(width); ++j) {
      const RowRange cols = down_slice_cols(width, j);
      const double bytes = double(kTileRows) * (cols.end - cols.begin) * 2;
      for (int t = 0; t < down_tiles(d_); ++t) {
        Instruction in = gemv(Opcode::kDenseDown, l, t, 1, j, gu_ctr, down_ctr);
        in.flags |= flag;
        p_.place(in, bytes / p_.bw_sm() + p_.overhead());
      }
    }
  }

  // The gate/up and / or the down claim instruction of layer l on every SM
  // (an SM whose instruction would run no tile gets none: all static, none
  // placed on it).
  void claims(int l, bool gate_up, bool down) {
    const Dims& d = d_;
    const double n_exp = expected_experts(d, opt_.rows);
    const double route_t = p_.ready(ctr_.route(l));
    // Static tiles: whole experts of the top_k that every routing has; with
    // all of them at one row (exactly top_k experts) nothing is claimed.
    const int static_experts = opt_.static_pct * d.top_k / 100;
    const bool all_static = opt_.rows == 1 && static_experts == d.top_k;
    auto one_queue = [&](Opcode op, int tpe, double tile_bytes, double ready, int dyn_claims) -> double {
      const int n_static = static_experts * tpe;
      std::vector<double> start(p_.work_sms());
      for (int s = 0; s < p_.work_sms(); ++s) start[s] = std::max(p_.busy(s), ready);
      std::vector<std::pair<int, int>> ranges(p_.work_sms(), {0, 0});
      double static_end = ready;
      const double rate = op == Opcode::kExpertGateUp ? opt_.expert_gu_rate : opt_.expert_down_rate;
      if (n_static > 0) ranges = p_.split_static(ready, n_static, tile_bytes / (p_.bw_sm() * rate), &static_end);
      const double left = std::max(0.0, n_exp * tpe - n_static) * tile_bytes / rate;
      const double done = std::max(static_end, left > 0 ? p_.fill(ready, left) : ready);
      for (int s = 0; s < p_.work_sms(); ++s) {
        Instruction in = make(op, l);
        in.claim.static_tile0 = ranges[s].first;
        in.claim.static_n = ranges[s].second;
        in.claim.static_total = n_static;
        in.claim.max_claims = ranges[s].second + (all_static ? 0 : dyn_claims);
        if (in.claim.max_claims == 0) continue;
        in.wait[0] = {ctr_.route(l), 1};
        if (op == Opcode::kExpertGateUp) {
          in.signal[0] = ctr_.gu_done(l, 0);  // + slot, per tile
        } else {
          in.flags |= kFlagWait1PlusSlot;
          in.wait[1] = {ctr_.gu_done(l, 0), expert_gu_tiles(d)};
          in.signal[0] = ctr_.down_done(l);  // per tile
        }
        p_.place_on(s, in, 0, start[s]);
      }
      return done;
    };
    if (gate_up) {
      p_.begin_phase(l, kPGu);
      gu_done_t_ = one_queue(Opcode::kExpertGateUp, expert_gu_tiles(d), 2.0 * kPairCols * d.hidden * 2,
                             route_t + p_.overhead(), s_->gu_claims);
    }
    if (down) {
      p_.begin_phase(l, kPDown);
      const double down_done = one_queue(Opcode::kExpertDown, expert_down_tiles(d), double(d.down_rows) * d.moe_ffn * 2,
                                         route_t + 2 * p_.overhead(), s_->down_claims);
      p_.set_ready(ctr_.down_done(l), std::max(gu_done_t_, down_done));
    }
  }

  void final_and_head() {
    const int L = d_.n_layers;
    p_.begin_phase(L, kPNorm);
    for (int r = 0; r < opt_.rows; ++r) {
      Instruction in = make(Opcode::kFinalNorm, L);
      in.rows.row = r;
      if (d_.parallel_block) {
        in.wait[0] = {ctr_.oproj(L - 1), 0};
        in.wait[1] = {ffn_done(L - 1), 0};
      } else {
        in.wait[0] = {ffn_done(L - 1), 0};
      }
      in.signal[0] = ctr_.final_norm_done();
      p_.place(in, opt_.fitted_costs ? opt_.norm_ns : 1.5 * p_.overhead());
    }
    p_.begin_phase(L, kPQkv);
    // Balanced contiguous vocabulary ranges, one instruction per SM.
    const int n = lm_tiles(d_), S = opt_.n_sm;
    const double tile_bytes = double(kTileRows) * d_.hidden * 2;
    for (int s = 0; s < S; ++s) {
      const int b = int(int64_t(n) * s / S), e = int(int64_t(n) * (s + 1) / S);
      if (e <= b) continue;
      Instruction in = gemv(Opcode::kLmHead, L, b, e - b, 0, ctr_.final_norm_done(), kNoCounter);
      p_.place_on(s, in, (e - b) * tile_bytes / p_.bw_sm() + p_.overhead());
    }
    s_->estimated_ns = p_.makespan();
  }

 public:
  // Static targets: the number of instructions signalling each counter. The
  // per-tile signals of claim instructions are dynamic: "down done" waits
  // also count kRoute's +1 (it adds 1 - routed experts x down tiles), and
  // the per-expert gate/up counters were given their targets at creation.
  void finish() {
    std::vector<int32_t> count(ctr_.total + 1, 0);
    auto& lists = p_.lists();
    for (const auto& list : lists)
      for (const Instruction& in : list)
        for (int i = 0; i < 2; ++i) {
          const uint32_t c = in.signal[i];
          if (c == kNoCounter) continue;
          const bool per_tile = i == 0 && (in.op == Opcode::kExpertGateUp || in.op == Opcode::kExpertDown);
          if (!per_tile) ++count[c];
        }
    std::vector<bool> is_down_done(ctr_.total + 1, false);
    for (int l = 0; l < d_.n_layers; ++l)
      if (layers_[l].moe) is_down_done[ctr_.down_done(l)] = true;
    for (auto& list : lists)
      for (Instruction& in : list)
        for (int i = 0; i < 2; ++i) {
          Wait& w = in.wait[i];
          if (w.counter == kNoCounter || w.counter == stuck_counter()) continue;
          if (i == 1 && (in.flags & kFlagWait1PlusSlot)) continue;  // per-expert: set at creation
          if (in.op == Opcode::kExpertGateUp || in.op == Opcode::kExpertDown) continue;  // route: target 1
          w.target = count[w.counter] + (is_down_done[w.counter] ? 1 : 0);
        }
    s_->sm_begin.assign(1, 0);
    s_->instrs.clear();
    s_->est_start_ns.clear();
    s_->est_end_ns.clear();
    for (size_t sm = 0; sm < lists.size(); ++sm) {
      s_->instrs.insert(s_->instrs.end(), lists[sm].begin(), lists[sm].end());
      s_->sm_begin.push_back(static_cast<uint32_t>(s_->instrs.size()));
      for (const auto& [b, e] : p_.estimates()[sm]) {
        s_->est_start_ns.push_back(float(b));
        s_->est_end_ns.push_back(float(e));
      }
    }
  }

 private:
  const Dims& d_;
  const std::vector<LayerInfo>& layers_;
  const ScheduleOptions& opt_;
  Schedule* s_;
  const CounterLayout& ctr_;
  Placer p_;
  bool planted_ = false;
  double gu_done_t_ = 0;  // cost model: when the last gate/up claims of the layer end
};

}  // namespace

void apply_cost_set(ScheduleOptions* o, int set) {
  const ScheduleOptions def;
  o->fitted_costs = set != 0;
  o->norm_ns = def.norm_ns;
  o->router_ns = def.router_ns;
  o->route_ns = def.route_ns;
  o->combine_ns = def.combine_ns;
  o->attention_extra_ns = def.attention_extra_ns;
  o->expert_gu_rate = def.expert_gu_rate;
  o->expert_down_rate = def.expert_down_rate;
  o->bucket_keys = def.bucket_keys;
  if (set != 2) return;
  // 9c2b8a8, bs 1 / 8K (bucket 16K), layers 5-44, medians from each
  // instruction's wait to its end: router tile 3.65 us, route 7.39,
  // combine 4.83, attention split (two 64-key stages in a sliding layer)
  // 8.26 against the model's 6.21; the claim loops streamed ~27 (gate/up)
  // and ~20 GB/s (down) an SM against the 34.8 of 4.6 TB/s over 132 SMs.
  // A bucket serves key ranges in (bucket / 2, bucket].
  o->router_ns = 3700;
  o->route_ns = 7400;
  o->combine_ns = 4800;
  o->attention_extra_ns = 5600;
  o->expert_gu_rate = 0.78;
  o->expert_down_rate = 0.57;
  o->bucket_keys = 0.75;
}

const char* opcode_name(Opcode op) {
  switch (op) {
    case Opcode::kNop: return "nop";
    case Opcode::kNorm: return "norm";
    case Opcode::kQkv: return "qkv";
    case Opcode::kAttention: return "attention";
    case Opcode::kAttnCombine: return "attn_combine";
    case Opcode::kOProj: return "o_proj";
    case Opcode::kRouter: return "router";
    case Opcode::kRoute: return "route";
    case Opcode::kExpertGateUp: return "expert_gate_up";
    case Opcode::kExpertDown: return "expert_down";
    case Opcode::kDenseGateUp: return "dense_gate_up";
    case Opcode::kDenseDown: return "dense_down";
    case Opcode::kFinalNorm: return "final_norm";
    case Opcode::kLmHead: return "lm_head";
    case Opcode::kBarrier: return "barrier";
  }
  return "unknown";
}

const char* list_order_name(ListOrder o) {
  switch (o) {
    case ListOrder::kOProjFirst: return "oproj_first";
    case ListOrder::kClaimsFirst: return "claims_first";
    case ListOrder::kOProjBetween: return "oproj_between";
  }
  return "unknown";
}

Result<ListOrder> parse_list_order(const std::string& name) {
  for (ListOrder o : {ListOrder::kOProjFirst, ListOrder::kClaimsFirst, ListOrder::kOProjBetween})
    if (name == list_order_name(o)) return o;
  return invalid_argument("unknown megakernel list order '" + name + "' (known: oproj_first, claims_first, oproj_between)");
}

int context_bucket(int keys) {
  int b = 1024;
  while (b < keys) b *= 2;
  return b;
}

Result<Schedule> build_schedule(const Dims& d, const std::vector<LayerInfo>& layers, const ScheduleOptions& opt) {
  if (opt.rows < 1 || opt.rows > kMaxRows)
    return invalid_argument("megakernel schedule: rows " + std::to_string(opt.rows) + " outside 1.." +
                            std::to_string(kMaxRows));
  if (opt.context < 1) return invalid_argument("megakernel schedule: context must be positive");
  if (opt.n_sm < 1) return invalid_argument("megakernel schedule: n_sm must be positive");
  if (opt.head_sms < 0 || opt.head_sms > opt.n_sm / 2)
    return invalid_argument("megakernel schedule: head_sms " + std::to_string(opt.head_sms) + " outside 0.." +
                            std::to_string(opt.n_sm / 2));
  if (opt.oproj_sms < 0) return invalid_argument("megakernel schedule: oproj_sms must not be negative");
  if (opt.static_pct < 0 || opt.static_pct > 100)
    return invalid_argument("megakernel schedule: static_pct " + std::to_string(opt.static_pct) + " outside 0..100");
  if (opt.qkv_run < 1 || opt.qkv_run > 64 || opt.o_run < 1 || opt.o_run > 64)
    return invalid_argument("megakernel schedule: qkv_run and o_run must be in 1..64");
  if (static_cast<int>(layers.size()) != d.n_layers)
    return invalid_argument("megakernel schedule: layer info for " + std::to_string(layers.size()) + " of " +
                            std::to_string(d.n_layers) + " layers");
  if (d.n_kv_heads < 1 || d.group < 1 || d.hidden < kTileRows)
    return invalid_argument("megakernel schedule: bad model dimensions");
  Schedule s;
  s.opt = opt;
  s.dims = d;
  s.layers = layers;
  s.counters = make_counter_layout(d, opt.rows);
  s.splits_full = attention_splits(opt.context, opt.rows, d.n_kv_heads, opt.n_sm, opt.attn_sm_percent, opt.attn_one_wave);
  s.splits_sliding = d.sliding_window > 0 ? attention_splits(std::min(opt.context, d.sliding_window), opt.rows,
                                                             d.n_kv_heads, opt.n_sm, opt.attn_sm_percent, opt.attn_one_wave)
                                          : s.splits_full;
  if (d.n_experts > 0) {
    const int slots = max_expert_slots(d, opt.rows), sms = opt.n_sm - opt.head_sms;  // claim instructions a layer
    s.gu_claims = static_cast<int>(std::ceil(opt.claim_factor * slots * expert_gu_tiles(d) / sms));
    s.down_claims = static_cast<int>(std::ceil(opt.claim_factor * slots * expert_down_tiles(d) / sms));
    s.gu_claims = std::max(s.gu_claims, ceil_div(slots * expert_gu_tiles(d), sms));
    s.down_claims = std::max(s.down_claims, ceil_div(slots * expert_down_tiles(d), sms));
  }
  Builder b(d, layers, opt, &s);
  b.build();
  b.finish();
  return s;
}

std::string describe(const Instruction& in) {
  std::ostringstream o;
  o << "L" << in.layer << " " << opcode_name(in.op);
  switch (in.op) {
    case Opcode::kNorm:
    case Opcode::kFinalNorm:
      o << " row " << in.rows.row << ((in.flags & kFlagNormSecond) ? " (second)" : "");
      break;
    case Opcode::kAttention:
      o << " row " << in.attn.row << " kv " << in.attn.kv_head << " split " << in.attn.split << "/"
        << in.attn.n_splits;
      break;
    case Opcode::kAttnCombine:
      o << " row " << in.attn.row << " kv " << in.attn.kv_head << " of " << in.attn.n_splits << " splits";
      break;
    case Opcode::kExpertGateUp:
    case Opcode::kExpertDown:
      if (in.claim.static_n > 0)
        o << " tiles " << in.claim.static_tile0 << ".." << in.claim.static_tile0 + in.claim.static_n - 1 << " then";
      o << " up to " << in.claim.max_claims << " tiles";
      break;
    case Opcode::kRoute:
    case Opcode::kBarrier:
    case Opcode::kNop:
      break;
    default:
      o << " tiles " << in.gemv.tile0 << "+" << in.gemv.n_tiles;
      if (in.op == Opcode::kOProj || in.op == Opcode::kDenseDown) o << " slice " << in.gemv.kslice;
      if (in.flags & kFlagShared) o << " (shared)";
      break;
  }
  return o.str();
}

namespace {

Status bad(const Instruction& in, int sm, const std::string& what) {
  return internal_error("megakernel schedule: SM " + std::to_string(sm) + " " + describe(in) + ": " + what);
}

// check_schedule's coverage counts: each unit of work's key (opcode, layer,
// and three fields) packed into 64 bits, sorted once, counted by binary
// search. (A std::map of tuples made check_schedule the schedule tests'
// slowest part, and ~10x slower again under AddressSanitizer.)
class Coverage {
 public:
  // False where a field does not fit its bits: an out-of-range instruction.
  bool add(Opcode op, int layer, int a, int b, int c) {
    uint64_t k;
    if (!pack(op, layer, a, b, c, &k)) return false;
    keys_.push_back(k);
    return true;
  }
  void seal() { std::sort(keys_.begin(), keys_.end()); }
  int count(Opcode op, int layer, int a, int b, int c) const {
    uint64_t k;
    if (!pack(op, layer, a, b, c, &k)) return 0;
    const auto [lo, hi] = std::equal_range(keys_.begin(), keys_.end(), k);
    return static_cast<int>(hi - lo);
  }
  size_t distinct() const {
    size_t n = 0;
    for (size_t i = 0; i < keys_.size(); ++i) n += i == 0 || keys_[i] != keys_[i - 1];
    return n;
  }

 private:
  // opcode 6 bits, layer 10, a 24, b 16, c 8.
  static bool pack(Opcode op, int layer, int a, int b, int c, uint64_t* k) {
    if (layer < 0 || layer >= (1 << 10) || a < 0 || a >= (1 << 24) || b < 0 || b >= (1 << 16) || c < 0 || c >= (1 << 8))
      return false;
    *k = uint64_t(op) << 58 | uint64_t(layer) << 48 | uint64_t(a) << 24 | uint64_t(b) << 8 | uint64_t(c);
    return true;
  }
  std::vector<uint64_t> keys_;
};

}  // namespace

Status check_schedule(const Schedule& s) {
  const Dims& d = s.dims;
  const CounterLayout& c = s.counters;
  const int R = s.opt.rows, L = d.n_layers;
  if (s.sm_begin.empty() || s.sm_begin.front() != 0 || s.sm_begin.back() != s.instrs.size())
    return internal_error("megakernel schedule: SM ranges do not cover the instruction list");
  for (size_t i = 1; i < s.sm_begin.size(); ++i)
    if (s.sm_begin[i] < s.sm_begin[i - 1]) return internal_error("megakernel schedule: SM ranges out of order");
  // Coverage: how many times each unit of work appears.
  Coverage seen;
  std::vector<int32_t> signals(c.total + 1, 0);
  std::vector<int> claims_gu(L, 0), claims_down(L, 0);  // claimable tiles (the static ones apart)
  std::map<std::pair<int, int>, std::vector<int>> static_hits;  // (op, layer): runs per static tile
  for (int sm = 0; sm < s.n_sm(); ++sm) {
    for (const Instruction& in : s.sm_list(sm)) {
      if (static_cast<int>(in.op) <= 0 || static_cast<int>(in.op) >= kNumOpcodes) return bad(in, sm, "bad opcode");
      if (in.layer > L) return bad(in, sm, "layer out of range");
      for (const Wait& w : in.wait)
        if (w.counter != kNoCounter && w.counter > uint32_t(c.total)) return bad(in, sm, "wait counter out of range");
      for (int i = 0; i < 2; ++i) {
        const uint32_t sc = in.signal[i];
        if (sc == kNoCounter) continue;
        if (sc >= uint32_t(c.total)) return bad(in, sm, "signal counter out of range");
        const bool per_tile = i == 0 && (in.op == Opcode::kExpertGateUp || in.op == Opcode::kExpertDown);
        if (!per_tile) ++signals[sc];
      }
      auto tiles = [&](int n_tiles) -> Status {
        if (in.gemv.n_tiles < 1 || in.gemv.tile0 < 0 || in.gemv.tile0 + in.gemv.n_tiles > n_tiles)
          return bad(in, sm, "tiles outside [0, " + std::to_string(n_tiles) + ")");
        for (int t = in.gemv.tile0; t < in.gemv.tile0 + in.gemv.n_tiles; ++t)
          if (!seen.add(in.op, in.layer, t, in.gemv.kslice, (in.flags & kFlagShared) ? 1 : 0))
            return bad(in, sm, "fields out of range");
        return Status::ok();
      };
      const bool head_op = in.op == Opcode::kFinalNorm || in.op == Opcode::kLmHead;
      if (in.op != Opcode::kBarrier && head_op != (in.layer == L)) return bad(in, sm, "opcode in the wrong layer block");
      switch (in.op) {
        case Opcode::kNorm:
        case Opcode::kFinalNorm:
          if (in.rows.row < 0 || in.rows.row >= R) return bad(in, sm, "row out of range");
          if (!seen.add(in.op, in.layer, in.rows.row, (in.flags & kFlagNormSecond) ? 1 : 0, 0))
            return bad(in, sm, "fields out of range");
          break;
        case Opcode::kQkv:
          MS_RETURN_IF_ERROR(tiles(qkv_tiles(d)));
          for (int t = in.gemv.tile0; t < in.gemv.tile0 + in.gemv.n_tiles; ++t)
            if (qkv_row_group(d, t * kTileRows) != qkv_row_group(d, std::min(t * kTileRows + kTileRows, d.qkv_width) - 1) ||
                in.signal[0] != c.qkv(in.layer, qkv_row_group(d, t * kTileRows)))
              return bad(in, sm, "QKV tile spans two KV groups or signals the wrong group");
          break;
        case Opcode::kOProj:
          if (in.gemv.kslice < 0 || in.gemv.kslice >= o_slices(d)) return bad(in, sm, "k-slice out of range");
          MS_RETURN_IF_ERROR(tiles(o_tiles(d)));
          break;
        case Opcode::kRouter:
          if (!s.layers[in.layer].moe) return bad(in, sm, "router in a dense layer");
          MS_RETURN_IF_ERROR(tiles(router_tiles(d)));
          break;
        case Opcode::kDenseGateUp:
        case Opcode::kDenseDown: {
          const bool shared = in.flags & kFlagShared;
          if (shared != bool(s.layers[in.layer].moe)) return bad(in, sm, "dense FFN / shared expert mismatch");
          const int width = shared ? d.shared_ffn : d.dense_ffn;
          if (in.op == Opcode::kDenseGateUp) {
            MS_RETURN_IF_ERROR(tiles(pair_tiles(width)));
          } else {
            if (in.gemv.kslice < 0 || in.gemv.kslice >= down_slices(width)) return bad(in, sm, "k-slice out of range");
            MS_RETURN_IF_ERROR(tiles(down_tiles(d)));
          }
          break;
        }
        case Opcode::kLmHead:
          MS_RETURN_IF_ERROR(tiles(lm_tiles(d)));
          break;
        case Opcode::kAttention:
        case Opcode::kAttnCombine: {
          const AttnFields& a = in.attn;
          if (a.row < 0 || a.row >= R || a.kv_head < 0 || a.kv_head >= d.n_kv_heads || a.n_splits != s.splits(in.layer) ||
              (in.op == Opcode::kAttention && (a.split < 0 || a.split >= a.n_splits)))
            return bad(in, sm, "row / head / split out of range");
          if (!seen.add(in.op, in.layer, a.row, a.kv_head, in.op == Opcode::kAttention ? a.split : 0))
            return bad(in, sm, "fields out of range");
          break;
        }
        case Opcode::kRoute:
          if (!s.layers[in.layer].moe) return bad(in, sm, "route in a dense layer");
          if (!seen.add(in.op, in.layer, 0, 0, 0)) return bad(in, sm, "fields out of range");
          break;
        case Opcode::kExpertGateUp:
        case Opcode::kExpertDown:
        {
          if (!s.layers[in.layer].moe) return bad(in, sm, "expert claims in a dense layer");
          const ClaimFields& cf = in.claim;
          const int tpe = in.op == Opcode::kExpertGateUp ? expert_gu_tiles(d) : expert_down_tiles(d);
          if (cf.max_claims < 1) return bad(in, sm, "no claims");
          if (cf.static_n < 0 || cf.static_n > cf.max_claims || cf.static_tile0 < 0 ||
              cf.static_tile0 + cf.static_n > cf.static_total || cf.static_total > d.top_k * tpe)
            return bad(in, sm, "static tiles outside the " + std::to_string(d.top_k) + " experts every routing has");
          std::vector<int>& hits = static_hits[{int(in.op), in.layer}];
          if (hits.empty()) hits.assign(size_t(cf.static_total) + 1, 0);  // the last entry: the total, once
          if (int(hits.size()) != cf.static_total + 1) return bad(in, sm, "static totals differ within the layer");
          for (int t = cf.static_tile0; t < cf.static_tile0 + cf.static_n; ++t) ++hits[t];
          (in.op == Opcode::kExpertGateUp ? claims_gu : claims_down)[in.layer] += cf.max_claims - cf.static_n;
          break;
        }
        case Opcode::kBarrier:
        case Opcode::kNop:
          break;
      }
    }
  }
  seen.seal();
  auto expect = [&](Opcode op, int layer, int a, int b, int cc, const char* what) -> Status {
    const int n = seen.count(op, layer, a, b, cc);
    if (n != 1)
      return internal_error("megakernel schedule: layer " + std::to_string(layer) + " " + what + " " +
                            std::to_string(a) + "/" + std::to_string(b) + "/" + std::to_string(cc) + " appears " +
                            std::to_string(n) + " times (want 1)");
    return Status::ok();
  };
  size_t units = 0;
  for (int l = 0; l <= L; ++l) {
    const bool head = l == L;
    for (int r = 0; r < R; ++r) {
      MS_RETURN_IF_ERROR(expect(head ? Opcode::kFinalNorm : Opcode::kNorm, l, r, 0, 0, "norm row"));
      ++units;
      if (!head && !d.parallel_block) {
        MS_RETURN_IF_ERROR(expect(Opcode::kNorm, l, r, 1, 0, "second norm row"));
        ++units;
      }
    }
    if (head) {
      for (int t = 0; t < lm_tiles(d); ++t, ++units) MS_RETURN_IF_ERROR(expect(Opcode::kLmHead, l, t, 0, 0, "LM-head tile"));
      continue;
    }
    for (int t = 0; t < qkv_tiles(d); ++t, ++units) MS_RETURN_IF_ERROR(expect(Opcode::kQkv, l, t, 0, 0, "QKV tile"));
    for (int g = 0; g < o_slices(d); ++g)
      for (int t = 0; t < o_tiles(d); ++t, ++units) MS_RETURN_IF_ERROR(expect(Opcode::kOProj, l, t, g, 0, "O tile"));
    for (int r = 0; r < R; ++r)
      for (int g = 0; g < d.n_kv_heads; ++g) {
        for (int sp = 0; sp < s.splits(l); ++sp, ++units)
          MS_RETURN_IF_ERROR(expect(Opcode::kAttention, l, r, g, sp, "attention split"));
        MS_RETURN_IF_ERROR(expect(Opcode::kAttnCombine, l, r, g, 0, "combine"));
        ++units;
      }
    const bool moe = s.layers[l].moe;
    const int width = moe ? d.shared_ffn : d.dense_ffn;
    const int shared = moe ? 1 : 0;
    if (width > 0) {
      for (int t = 0; t < pair_tiles(width); ++t, ++units)
        MS_RETURN_IF_ERROR(expect(Opcode::kDenseGateUp, l, t, 0, shared, "FFN gate/up tile"));
      for (int j = 0; j < down_slices(width); ++j)
        for (int t = 0; t < down_tiles(d); ++t, ++units)
          MS_RETURN_IF_ERROR(expect(Opcode::kDenseDown, l, t, j, shared, "FFN down tile"));
    }
    if (moe) {
      for (int t = 0; t < router_tiles(d); ++t, ++units) MS_RETURN_IF_ERROR(expect(Opcode::kRouter, l, t, 0, 0, "router tile"));
      MS_RETURN_IF_ERROR(expect(Opcode::kRoute, l, 0, 0, 0, "route"));
      ++units;
      const int slots = max_expert_slots(d, R);
      for (const auto& [op, claimable] : {std::pair{Opcode::kExpertGateUp, claims_gu[l]},
                                          std::pair{Opcode::kExpertDown, claims_down[l]}}) {
        const int tpe = op == Opcode::kExpertGateUp ? expert_gu_tiles(d) : expert_down_tiles(d);
        auto it = static_hits.find({int(op), l});
        const int n_static = it == static_hits.end() ? 0 : int(it->second.size()) - 1;
        for (int t = 0; t < n_static; ++t)
          if (it->second[t] != 1)
            return internal_error("megakernel schedule: layer " + std::to_string(l) + " " + opcode_name(op) +
                                  ": static tile " + std::to_string(t) + " placed " + std::to_string(it->second[t]) +
                                  " times (want 1)");
        if (n_static + claimable < slots * tpe)
          return internal_error("megakernel schedule: layer " + std::to_string(l) +
                                ": claim capacity below the largest expert queue");
      }
    }
  }
  if (units != seen.distinct()) return internal_error("megakernel schedule: instructions outside the model's work");
  // Static targets equal the instructions that signal the counter.
  std::vector<char> down_done_counter(size_t(c.total) + 1, 0);  // an MoE layer's down-done counter
  for (int l = 0; l < L; ++l)
    if (s.layers[l].moe) down_done_counter[c.down_done(l)] = 1;
  for (int sm = 0; sm < s.n_sm(); ++sm)
    for (const Instruction& in : s.sm_list(sm))
      for (int i = 0; i < 2; ++i) {
        const Wait& w = in.wait[i];
        if (w.counter == kNoCounter) continue;
        if (w.counter == c.never()) {
          if (!s.opt.plant_stuck_wait) return bad(in, sm, "waits on the never-signalled counter");
          continue;
        }
        if (in.op == Opcode::kExpertGateUp || in.op == Opcode::kExpertDown) {
          const int want = i == 0 ? 1 : expert_gu_tiles(d);
          if (w.target != want || (i == 0 && w.counter != c.route(in.layer)))
            return bad(in, sm, "claim waits must be route >= 1 and gate/up done >= tiles per expert");
          continue;
        }
        const int want = signals[w.counter] + down_done_counter[w.counter];
        if (w.target != want || want == 0)
          return bad(in, sm, "waits for " + std::to_string(w.target) + " signals of counter " +
                                 std::to_string(w.counter) + ", which " + std::to_string(signals[w.counter]) +
                                 " instructions signal");
      }
  return Status::ok();
}

}  // namespace ms::mk
