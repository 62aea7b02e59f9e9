#include "mk/machine.h"

#include <bit>
#include <random>
#include <sstream>
#include <string>

namespace ms::mk {
namespace {

bool is_claim(Opcode op) { return op == Opcode::kExpertGateUp || op == Opcode::kExpertDown; }

struct SmState {
  size_t pc = 0;      // index into the SM's list
  int claims = 0;     // claims made by the current claim instruction
  int held = -1;      // claimed tile not yet run
  bool exhausted = false;
};

class Machine {
 public:
  Machine(const Schedule& s, const MachineOps& ops) : s_(s), ops_(ops), c_(s.counters), d_(s.dims) {
    counters_.assign(c_.words(), 0);
    sm_.assign(s.n_sm(), {});
    n_active_.assign(d_.n_layers, -1);
    tiles_per_sm_.assign(s.n_sm(), 0);
    runnable_.assign((s.n_sm() + 63) / 64, 0);
    blocked_on_.assign(s.n_sm(), kNoCounter);
    waiters_.assign(c_.words(), {});
    seen_.assign(s.n_sm(), 0);
  }

  Status run(const MachineOptions& opt, MachineStats* stats) {
    const int n = s_.n_sm();
    std::mt19937_64 rng(opt.seed);
    int rr = 0;
    int64_t units = 0;
    refresh_all();
    while (true) {
      if (n_runnable_ == 0) {
        for (int sm = 0; sm < n; ++sm)
          if (!done(sm)) return deadlock();
        break;
      }
      int sm;
      if (opt.seed == 0) {
        sm = next_runnable(rr);
        if (sm < 0) sm = next_runnable(0);
        rr = sm + 1;
      } else {
        sm = nth_runnable(std::uniform_int_distribution<size_t>(0, size_t(n_runnable_) - 1)(rng));
      }
      MS_RETURN_IF_ERROR(step(sm));
      refresh(sm);
      ++units;
    }
    if (stats) {
      stats->units = units;
      stats->tiles_per_sm = tiles_per_sm_;
      stats->routed_experts.assign(d_.n_layers, 0);
      for (int l = 0; l < d_.n_layers; ++l) stats->routed_experts[l] = std::max(0, n_active_[l]);
    }
    return Status::ok();
  }

 private:
  const Instruction& cur(int sm) const { return s_.sm_list(sm)[sm_[sm].pc]; }
  bool done(int sm) const { return sm_[sm].pc >= s_.sm_list(sm).size(); }
  bool satisfied(const Wait& w) const {
    return w.counter == kNoCounter || static_cast<int32_t>(counters_[w.counter]) >= w.target;
  }
  int tiles_per_expert(Opcode op) const { return op == Opcode::kExpertGateUp ? expert_gu_tiles(d_) : expert_down_tiles(d_); }
  uint32_t claim_counter(const Instruction& in) const {
    return in.op == Opcode::kExpertGateUp ? c_.gu_claim(in.layer) : c_.down_claim(in.layer);
  }
  // The wait blocking SM sm's next unit, or null.
  const Wait* blocking(int sm, Wait* scratch) const {
    const Instruction& in = cur(sm);
    if (!is_claim(in.op)) {
      for (const Wait& w : in.wait)
        if (!satisfied(w)) return &w;
      return nullptr;
    }
    if (!satisfied(in.wait[0])) return &in.wait[0];
    const SmState& st = sm_[sm];
    if (st.held >= 0 && in.op == Opcode::kExpertDown) {
      const int slot = st.held / tiles_per_expert(in.op);
      *scratch = {in.wait[1].counter + ((in.flags & kFlagWait1PlusSlot) ? uint32_t(slot) : 0u), in.wait[1].target};
      if (!satisfied(*scratch)) return scratch;
    }
    return nullptr;
  }
  bool can_step(int sm) const {
    Wait scratch;
    return blocking(sm, &scratch) == nullptr;
  }

  Status step(int sm) {
    const Instruction& in = cur(sm);
    SmState& st = sm_[sm];
    if (!is_claim(in.op)) {
      if (in.op == Opcode::kRoute) {
        if (!ops_.route) return internal_error("machine: no route callback for an MoE schedule");
        MS_ASSIGN_OR_RETURN(const int n_active, ops_.route(sm, in));
        if (n_active < 1 || n_active > max_expert_slots(d_, s_.opt.rows))
          return internal_error("machine: route returned " + std::to_string(n_active) + " routed experts");
        n_active_[in.layer] = n_active;
        bump(c_.down_done(in.layer), 1 - n_active * expert_down_tiles(d_));
      } else if (ops_.run) {
        if (Status st = ops_.run(sm, in); !st.is_ok()) return st.with_context(describe(in));
      }
      finish(sm, in);
      return Status::ok();
    }
    if (st.held >= 0) {  // run the claimed tile
      const int tpe = tiles_per_expert(in.op), slot = st.held / tpe, tile = st.held % tpe;
      if (ops_.tile)
        if (Status st2 = ops_.tile(sm, in, slot, tile); !st2.is_ok()) return st2.with_context(describe(in));
      bump(in.signal[0] + (in.op == Opcode::kExpertGateUp ? uint32_t(slot) : 0u), 1);
      ++tiles_per_sm_[sm];
      st.held = -1;
      ++st.claims;
      return Status::ok();
    }
    if (st.claims == in.claim.max_claims || st.exhausted) {
      finish(sm, in);
      return Status::ok();
    }
    const int n_active = n_active_[in.layer];
    if (n_active < 0) return internal_error("machine: claim before the layer's route");
    if (st.claims < in.claim.static_n) {  // the instruction's static range first (ClaimFields)
      st.held = in.claim.static_tile0 + st.claims;
      return Status::ok();
    }
    const uint32_t cc = claim_counter(in);
    const int t = in.claim.static_total + static_cast<int>(counters_[cc]);
    bump(cc, 1);
    if (t >= n_active * tiles_per_expert(in.op)) {
      st.exhausted = true;
    } else {
      st.held = t;
    }
    return Status::ok();
  }

  // Instruction-level signals, then the next instruction.
  void finish(int sm, const Instruction& in) {
    for (int i = 0; i < 2; ++i) {
      const uint32_t c = in.signal[i];
      if (c == kNoCounter || (i == 0 && is_claim(in.op))) continue;  // claims signal per tile
      bump(c, 1);
    }
    sm_[sm] = SmState{sm_[sm].pc + 1};
  }

  // The runnable set is kept up to date instead of asking every SM after
  // every unit: an SM's blocking wait changes only when the SM steps or
  // when the counter it waits on changes (bump). It chooses exactly as a
  // scan of all SMs would (the k-th runnable SM in ascending order).
  void set_runnable(int sm, bool on) {
    uint64_t& w = runnable_[sm / 64];
    const uint64_t bit = uint64_t(1) << (sm % 64);
    if (bool(w & bit) == on) return;
    w ^= bit;
    n_runnable_ += on ? 1 : -1;
  }
  // Re-derives SM sm's state: done, runnable, or waiting on one counter
  // (registered in that counter's waiters_ list; an SM that moved on leaves
  // a stale entry behind, skipped when the counter changes).
  void refresh(int sm) {
    Wait scratch;
    const Wait* w = done(sm) ? nullptr : blocking(sm, &scratch);
    set_runnable(sm, !done(sm) && w == nullptr);
    const uint32_t c = w ? w->counter : kNoCounter;
    if (c != kNoCounter && c != blocked_on_[sm]) waiters_[c].push_back(sm);
    blocked_on_[sm] = c;
  }
  void refresh_all() {
    for (auto& v : waiters_) v.clear();
    for (int sm = 0; sm < s_.n_sm(); ++sm) {
      blocked_on_[sm] = kNoCounter;
      refresh(sm);
    }
  }
  void bump(uint32_t c, int delta) {
    counters_[c] += uint32_t(delta);
    if (delta < 0) {  // a lowered counter (the route's bias) may block a runnable SM: rare, ask every SM
      refresh_all();
      return;
    }
    woken_.clear();
    woken_.swap(waiters_[c]);
    ++bump_seq_;
    for (int sm : woken_) {
      if (blocked_on_[sm] != c || seen_[sm] == bump_seq_) continue;  // stale or repeated entry
      seen_[sm] = bump_seq_;
      blocked_on_[sm] = kNoCounter;  // its entry is gone with the swap
      refresh(sm);
    }
  }
  int next_runnable(int from) const {
    for (int w = from / 64; w < int(runnable_.size()); ++w) {
      uint64_t bits = runnable_[w];
      if (w == from / 64) bits &= ~uint64_t(0) << (from % 64);
      if (bits) return w * 64 + std::countr_zero(bits);
    }
    return -1;
  }
  int nth_runnable(size_t k) const {
    for (int w = 0; w < int(runnable_.size()); ++w) {
      const uint64_t bits = runnable_[w];
      const size_t c = size_t(std::popcount(bits));
      if (k >= c) {
        k -= c;
        continue;
      }
      uint64_t b = bits;
      for (size_t i = 0; i < k; ++i) b &= b - 1;
      return w * 64 + std::countr_zero(b);
    }
    return -1;
  }

  Status deadlock() const {
    std::ostringstream o;
    o << "megakernel schedule deadlock: no SM can proceed;";
    int shown = 0;
    for (int sm = 0; sm < s_.n_sm() && shown < 8; ++sm) {
      if (done(sm)) continue;
      Wait scratch;
      const Wait* w = blocking(sm, &scratch);
      if (!w) continue;
      o << " SM " << sm << " at " << describe(cur(sm)) << " waits on counter " << w->counter << " (value "
        << static_cast<int32_t>(counters_[w->counter]) << ", target " << w->target << ");";
      ++shown;
    }
    return internal_error(o.str());
  }

  const Schedule& s_;
  const MachineOps& ops_;
  const CounterLayout& c_;
  const Dims& d_;
  std::vector<uint32_t> counters_;
  std::vector<SmState> sm_;
  std::vector<int> n_active_;
  std::vector<int> tiles_per_sm_;
  std::vector<uint64_t> runnable_;            // bit per SM
  int n_runnable_ = 0;
  std::vector<uint32_t> blocked_on_;          // the counter each waiting SM is registered on
  std::vector<std::vector<int>> waiters_;     // per counter: SMs registered on it (some stale)
  std::vector<int> woken_;                    // bump's scratch
  std::vector<uint64_t> seen_;                // per SM: the last bump that refreshed it
  uint64_t bump_seq_ = 0;
};

}  // namespace

Status run_machine(const Schedule& s, const MachineOps& ops, const MachineOptions& opt, MachineStats* stats) {
  Machine m(s, ops);
  return m.run(opt, stats);
}

}  // namespace ms::mk
