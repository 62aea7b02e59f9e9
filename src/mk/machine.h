// The megakernel's execution model on the CPU: runs a schedule's per-SM
// instruction lists with the dependency counters and the claim queues, one
// unit of work at a time (an instruction, a claim, or one claimed tile), in
// an interleaving chosen among the SMs that can proceed: round robin, or
// seeded random to explore orders. The work itself is left to callbacks:
// the interpreter (src/ref/mk_vm) does the reference math in them; the
// schedule tests pass none and check that every interleaving finishes.
//
// A state in which no SM can proceed before all lists are done is a
// deadlock, reported with the wait each blocked SM is stuck on (the same
// diagnosis the device watchdog gives).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/status.h"
#include "mk/schedule.h"

namespace ms::mk {

struct MachineOps {
  // Every opcode but kRoute and the claim instructions (may be empty).
  std::function<Status(int sm, const Instruction& in)> run;
  // kRoute: computes the layer's routing; returns the number of routed
  // experts (the claim queues hold that many experts' tiles). Required for
  // MoE models.
  std::function<Result<int>(int sm, const Instruction& in)> route;
  // One claimed tile of kExpertGateUp / kExpertDown: routed-expert slot and
  // the tile's index inside the expert (may be empty).
  std::function<Status(int sm, const Instruction& in, int slot, int tile)> tile;
};

struct MachineOptions {
  uint64_t seed = 0;  // 0: round robin over the SMs; else a random runnable SM per unit
};

struct MachineStats {
  int64_t units = 0;                  // units of work executed
  std::vector<int> tiles_per_sm;      // claimed expert tiles each SM ran
  std::vector<int> routed_experts;    // per layer (0 for dense layers)
};

Status run_machine(const Schedule& s, const MachineOps& ops, const MachineOptions& opt, MachineStats* stats = nullptr);

}  // namespace ms::mk
