// A model of the consumer ring's handshake (round 14 design check, CPU): a
// loader and eight consumer warps over S ring positions with mbarrier
// semantics (full / empty barriers waited on by phase parity; each load
// completes some time after the loader issues it), running a list of
// instructions: plain ones (every warp reads every position, as the GEMV
// and attention instructions do) and claim loops, either as shipped (every
// warp passes every position; the end is a position whose header says -1)
// or with the owner-only release docs/megakernel.md proposes (warp w waits
// only on its own tiles' positions and releases them alone, arriving with a
// count of eight). Random interleavings, every enabled step equally likely;
// checked: no deadlock, no parity wait satisfied by the wrong phase (ABA),
// every tile consumed once by its owner with its own data, the sides
// agreeing on the ring's position after each instruction.
//
// What the model found in the owner-only design (before any kernel code):
// a warp can wait on a position two or more uses ahead of its barrier's
// phase (an owner's tiles are eight apart; a warp out of a loop runs ahead
// of the loop's slower owners), where a parity wait passes on the wrong
// phase: every wait first reads a per-position count of the loads the
// loader issued (a monotonic word in shared memory) until it covers the
// use, after which the parity is exact. And the loop's end cannot be one
// shared word: the loader can end two loops before a slow warp looks
// (loops with no tiles use no positions), so each loop's tile count is kept
// per instruction. The faults below show the model catches both.
//
// Round 17's split tiles (gu_split / gemv_split, branch next/round17): the
// shipped protocol with two-position tiles whose chunk 0 runs on warp
// 2 (k % 4) and chunk 1 on the next warp, which after the tile waits for the
// first's tag and reads its accumulator slot. The first warp writes its slot
// while it holds the tile's first position and its tag after passing the
// second; the kernel relies on the ring's depth (kStages <= warps - 2) for
// the slot not to be rewritten by the pair's next tile before the read. The
// model checks that at every depth up to 6 and catches it at 7 and 8.
#include <gtest/gtest.h>

#include <array>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int kWarps = 8;
constexpr int kMaxChunks = 8;  // positions a tile at most (the model's programs use 1 or 2)

struct Instr {
  enum Kind { kPlain, kLoopAll, kLoopOwner, kLoopSplit } kind;
  int positions = 0;  // kPlain: positions it reads
  int tiles = 0;      // loops: tiles the queue hands out
  int chunks = 1;     // loops: positions a tile
};

struct Position {
  int issued = 0;    // loads the loader issued (a monotonic word in shared memory)
  bool in_flight = false;  // an issued load not yet complete (the copy engine's)
  int loads = 0;     // full barrier: completed phases
  int releases = 0;  // empty barrier: completed phases
  int pending = kWarps;  // empty barrier: arrivals left in the current phase
  int tag = -1;      // what the data is (instruction, tile, chunk), -1: none
  int header = -1;   // tile, -1: the loop's end
};

int tag_of(int instr, int tile, int chunk) { return (instr * 1000 + tile) * 8 + chunk; }

// Deliberate faults, so the tests can show the model catches them.
enum class Fault {
  kNone,
  kOneEndWord,            // one shared end word for every loop (the loader may pass a slow warp's loop end)
  kPlainReleaseCountsAll, // a plain instruction's releases arrive with the owner's count
  kParityOnly             // owners wait on the full barrier's parity without the issued count first
};

// The result: empty on success, else what went wrong.
std::string run_model(int S, const std::vector<Instr>& prog, uint64_t seed, Fault fault = Fault::kNone) {
  std::vector<Position> pos(S);
  bool has_owner = false;
  for (const Instr& in : prog) has_owner = has_owner || in.kind == Instr::kLoopOwner;
  std::mt19937_64 rng(seed);
  // Loader state.
  struct Loader {
    int instr = 0, i = 0;  // global position counter
    int tile = 0, chunk = 0;
    bool done = false;
  } L;
  // The owner-only loops' end words: the tiles handed out, per instruction
  // of the list (-1: not ended yet). With Fault::kOneEndWord, one word
  // (instruction + 1, tiles) that each loop's end overwrites.
  std::vector<int> end_of(prog.size(), -1);
  int end_instr = 0, end_tiles = 0;
  struct Warp {
    int instr = 0, i = 0, k = 0, chunk = 0;
    bool holding = false, done = false, start = true;
    int base = 0;  // the instruction's first position (loops)
    int publish = -1, gather = -1;  // split loops: the tile whose handoff is this warp's next step
  };
  // Split loops: per warp pair, the tile whose chunk-0 sums the first
  // warp's accumulator slot holds, and its tag ((instruction, tile) + 1:
  // the kernel resets the tags behind a barrier before each loop).
  std::array<int, kWarps / 2> slot{}, split_tag{};
  slot.fill(-1);
  std::array<Warp, kWarps> W{};
  std::vector<std::vector<int>> consumed(prog.size());
  for (size_t n = 0; n < prog.size(); ++n) consumed[n].assign(std::max(prog[n].tiles, 1) * kMaxChunks, 0);
  auto full_ok = [&](int i) {  // a consumer's parity wait for use i / S of position i % S
    const Position& p = pos[i % S];
    return p.loads % 2 == (i / S + 1) % 2;
  };
  auto empty_ok = [&](int i) {  // the loader's wait: use i / S - 1 released
    const Position& p = pos[i % S];
    return i / S == 0 || p.releases % 2 == (i / S) % 2;
  };
  auto arrive = [&](int i, int count) {
    Position& p = pos[i % S];
    p.pending -= count;
    if (p.pending < 0) return false;  // arrivals past a completed phase
    if (p.pending == 0) {
      ++p.releases;
      p.pending = kWarps;
    }
    return true;
  };
  // Loader position counter at each instruction's start (the consumers
  // must agree on it).
  std::vector<int> loader_base(prog.size() + 1, -1);
  loader_base[0] = 0;
  constexpr int kMaxSteps = 1'000'000;
  bool finished = false;
  for (int steps = 0; steps < kMaxSteps && !finished; ++steps) {
    // The enabled steps: the loader's next publish, each warp's next move.
    std::vector<int> en;
    auto loader_step = [&](bool apply) -> bool {
      if (L.done) return false;
      const Instr& in = prog[L.instr];
      const bool loop = in.kind != Instr::kPlain;
      // Owner-only loop out of tiles: write the end word (no position).
      if (in.kind == Instr::kLoopOwner && L.tile == in.tiles) {
        if (apply) {
          end_of[L.instr] = in.tiles;
          end_instr = L.instr + 1;
          end_tiles = in.tiles;
          ++L.instr;
          L.tile = L.chunk = 0;
          loader_base[L.instr] = L.i;
          if (L.instr == static_cast<int>(prog.size())) L.done = true;
        }
        return true;
      }
      if (!empty_ok(L.i)) return false;
      if (!apply) return true;
      Position& p = pos[L.i % S];
      if (p.releases != L.i / S || p.in_flight) return false;  // ABA: flagged below
      const bool end = (in.kind == Instr::kLoopAll || in.kind == Instr::kLoopSplit) && L.tile == in.tiles;
      p.header = end ? -1 : L.tile;
      p.tag = tag_of(L.instr, loop ? L.tile : L.i - loader_base[L.instr], L.chunk);
      ++p.issued;
      p.in_flight = true;  // completes later (a step of its own)
      ++L.i;
      if (!loop) {
        if (L.i - loader_base[L.instr] == in.positions) {
          ++L.instr;
          loader_base[L.instr] = L.i;
        }
      } else if (end) {
        ++L.instr;
        L.tile = L.chunk = 0;
        loader_base[L.instr] = L.i;
      } else if (++L.chunk == in.chunks) {
        L.chunk = 0;
        ++L.tile;
      }
      if (L.instr == static_cast<int>(prog.size())) L.done = true;
      return true;
    };
    std::string err;
    auto warp_step = [&](int w, bool apply) -> bool {
      Warp& x = W[w];
      if (x.done) return false;
      const Instr& in = prog[x.instr];
      if (x.start) {  // the instruction's first position
        // A split loop ends with the consumers' barrier (op_claims, and an
        // instruction's signal): no warp starts the next instruction before
        // every warp is done with the loop (its last gather included).
        if (x.instr > 0 && prog[x.instr - 1].kind == Instr::kLoopSplit)
          for (const Warp& o : W)
            if (!o.done && o.instr < x.instr) return false;
        if (apply) {
          x.base = x.i;
          x.start = false;
          x.k = in.kind == Instr::kLoopOwner ? w : 0;
          x.chunk = 0;
          if (in.kind == Instr::kLoopOwner) x.i = x.base + w * in.chunks;  // its first tile's position
        }
        return true;
      }
      if (x.publish >= 0) {  // the pair's first warp: its tag after the tile
        if (apply) {
          split_tag[x.publish % (kWarps / 2)] = tag_of(x.instr, x.publish, 0) + 1;
          x.publish = -1;
        }
        return true;
      }
      if (x.gather >= 0) {  // the pair's second warp: wait for the tag, read the slot
        const int j = x.gather % (kWarps / 2);
        if (split_tag[j] != tag_of(x.instr, x.gather, 0) + 1) return false;
        if (apply) {
          if (slot[j] != tag_of(x.instr, x.gather, 0))
            err = "split: warp " + std::to_string(w) + " read pair " + std::to_string(j) + "'s slot for tile " +
                  std::to_string(x.gather) + " of instruction " + std::to_string(x.instr) + " holding another";
          x.gather = -1;
        }
        return true;
      }
      auto finish = [&](int next_i) {
        x.i = next_i;
        if (loader_base[x.instr] >= 0 && loader_base[x.instr] != x.base)
          err = "warp " + std::to_string(w) + " started instruction " + std::to_string(x.instr) + " elsewhere";
        ++x.instr;
        x.start = true;
        if (x.instr == static_cast<int>(prog.size())) x.done = true;
      };
      if (x.holding) {  // release the held position
        if (!apply) return true;
        const int count =
            in.kind == Instr::kLoopOwner || (in.kind == Instr::kPlain && fault == Fault::kPlainReleaseCountsAll) ? kWarps
                                                                                                                  : 1;
        if (!arrive(x.i, count)) err = "too many arrivals at position " + std::to_string(x.i);
        x.holding = false;
        if (in.kind == Instr::kLoopSplit && (x.i - x.base) % 2 == 1) {  // the tile's second position
          const int tile = (x.i - x.base) / 2, j = tile % (kWarps / 2);
          if (w == 2 * j) x.publish = tile;
          if (w == 2 * j + 1) x.gather = tile;
        }
        ++x.i;
        if (in.kind == Instr::kPlain) {
          if (x.i - x.base == in.positions) finish(x.i);
        } else if (in.kind == Instr::kLoopOwner) {
          if (++x.chunk == in.chunks) {
            x.chunk = 0;
            x.k += kWarps;
            x.i = x.base + x.k * in.chunks;  // the next own tile's first position
          }
        }
        return true;
      }
      if (in.kind == Instr::kLoopOwner && x.chunk == 0) {
        const int T = fault == Fault::kOneEndWord ? (end_instr == x.instr + 1 ? end_tiles : -1) : end_of[x.instr];
        if (T >= 0 && x.k >= T) {
          if (apply) finish(x.base + T * in.chunks);  // out of tiles: everyone agrees where the loop ended
          return true;
        }
      }
      // With owner-only loops a warp's next position can be two or more
      // uses ahead of the phase its barrier is in (an owner's tiles are
      // eight apart; a warp out of a loop goes on past its slower owners'
      // last positions), where a parity wait is ambiguous: every wait first
      // waits until the loader has issued that use. The shipped protocol
      // (every warp passes every position in order) needs no such step.
      if (has_owner && fault != Fault::kParityOnly && pos[x.i % S].issued < x.i / S + 1) return false;
      if (!full_ok(x.i)) return false;
      if (!apply) return true;
      const Position& p = pos[x.i % S];
      if (p.loads != x.i / S + 1) {
        err = "warp " + std::to_string(w) + ": parity wait satisfied by phase " + std::to_string(p.loads) +
              " for use " + std::to_string(x.i / S + 1);
        return true;
      }
      if (in.kind == Instr::kPlain) {
        if (p.tag != tag_of(x.instr, x.i - x.base, 0)) err = "plain data overwritten";
        x.holding = true;
      } else if (in.kind == Instr::kLoopAll || in.kind == Instr::kLoopSplit) {
        if (p.header < 0) {  // the end: release it and go on
          if (!arrive(x.i, 1)) err = "too many arrivals";
          finish(x.i + 1);
          return true;
        }
        const int tile = p.header, chunk = (x.i - x.base) % in.chunks;
        if (p.tag != tag_of(x.instr, tile, chunk)) err = "loop data overwritten";
        if (in.kind == Instr::kLoopSplit) {
          const int j = tile % (kWarps / 2);
          if (w == 2 * j + chunk) ++consumed[x.instr][tile * kMaxChunks + chunk];
          if (w == 2 * j && chunk == 0) slot[j] = tag_of(x.instr, tile, 0);  // its sums, written while it holds the position
        } else if (tile % kWarps == w) {
          ++consumed[x.instr][tile * kMaxChunks + chunk];
        }
        x.holding = true;
      } else {
        if (p.header != x.k || p.tag != tag_of(x.instr, x.k, x.chunk))
          err = "owner " + std::to_string(w) + " read tile " + std::to_string(p.header) + " for its " +
                std::to_string(x.k);
        ++consumed[x.instr][x.k * kMaxChunks + x.chunk];
        x.holding = true;
      }
      return true;
    };
    if (loader_step(false)) en.push_back(-1);
    for (int w = 0; w < kWarps; ++w)
      if (warp_step(w, false)) en.push_back(w);
    for (int q = 0; q < S; ++q)
      if (pos[q].in_flight) en.push_back(100 + q);  // a load completing
    if (en.empty()) {
      bool all = L.done;
      for (const Warp& x : W) all = all && x.done;
      if (!all) return "deadlock (loader at instruction " + std::to_string(L.instr) + ")";
      finished = true;
      continue;
    }
    const int pick = en[std::uniform_int_distribution<size_t>(0, en.size() - 1)(rng)];
    if (pick >= 100) {
      pos[pick - 100].in_flight = false;
      ++pos[pick - 100].loads;
    } else if (pick < 0) {
      if (!loader_step(true)) return "loader: empty barrier satisfied by the wrong phase";
    } else {
      warp_step(pick, true);
    }
    if (!err.empty()) return err;
  }
  if (!finished) return "not finished in " + std::to_string(kMaxSteps) + " steps";
  for (size_t n = 0; n < prog.size(); ++n)
    if (prog[n].kind != Instr::kPlain)
      for (int k = 0; k < prog[n].tiles; ++k)
        for (int ch = 0; ch < prog[n].chunks; ++ch)
          if (consumed[n][k * kMaxChunks + ch] != 1)
            return "instruction " + std::to_string(n) + " tile " + std::to_string(k) + " chunk " +
                   std::to_string(ch) + " consumed " + std::to_string(consumed[n][k * kMaxChunks + ch]) + " times";
  for (const Warp& x : W)
    if (x.i != W[0].i) return "the warps disagree on the ring's position at the end";
  if (W[0].i != L.i) return "the loader and the warps disagree on the ring's position at the end";
  return "";
}

std::vector<Instr> random_program(std::mt19937_64& rng, Instr::Kind loop_kind) {
  std::vector<Instr> prog;
  const int n = std::uniform_int_distribution<int>(2, 6)(rng);
  for (int i = 0; i < n; ++i) {
    Instr in;
    if (rng() % 2) {
      in.kind = Instr::kPlain;
      in.positions = std::uniform_int_distribution<int>(1, 7)(rng);
    } else {
      in.kind = loop_kind;
      in.tiles = std::uniform_int_distribution<int>(0, 20)(rng);
      in.chunks = loop_kind == Instr::kLoopSplit ? 2 : std::uniform_int_distribution<int>(1, 2)(rng);
    }
    prog.push_back(in);
  }
  return prog;
}

void check_many(Instr::Kind loop_kind) {
  std::mt19937_64 rng(loop_kind == Instr::kLoopOwner ? 14 : 13);
  for (int trial = 0; trial < 3000; ++trial) {
    const int S = std::uniform_int_distribution<int>(2, 6)(rng);
    const std::vector<Instr> prog = random_program(rng, loop_kind);
    const std::string err = run_model(S, prog, rng());
    ASSERT_EQ(err, "") << "trial " << trial << ", " << S << " positions, " << prog.size() << " instructions";
  }
}

TEST(RingProtocol, EveryWarpPassesEveryPosition) { check_many(Instr::kLoopAll); }

TEST(RingProtocol, OwnerOnlyReleaseWithIssuedCountsAndEndWords) { check_many(Instr::kLoopOwner); }

// Split tiles at every ring depth the kernel allows (kStages <= 6 with eight
// warps), and the model catches the slot's early rewrite at 7 and 8.
TEST(RingProtocol, SplitTilesHandOffWithinTheRingsDepth) {
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 3000; ++trial) {
    const int S = std::uniform_int_distribution<int>(2, kWarps - 2)(rng);
    const std::vector<Instr> prog = random_program(rng, Instr::kLoopSplit);
    const std::string err = run_model(S, prog, rng());
    ASSERT_EQ(err, "") << "trial " << trial << ", " << S << " positions";
  }
  for (int S : {kWarps - 1, kWarps}) {
    std::string err;
    for (int trial = 0; trial < 3000 && err.empty(); ++trial) {
      const std::vector<Instr> prog = random_program(rng, Instr::kLoopSplit);
      err = run_model(S, prog, rng());
    }
    EXPECT_NE(err.find("split: "), std::string::npos) << S << " positions: " << err;
  }
}

// The model finds what it should: each fault below is reported on some
// interleaving (a model that passed them would prove nothing).
// The first error over random programs, empty if none.
std::string caught(Fault fault, Instr::Kind loop_kind) {
  std::mt19937_64 rng(21 + static_cast<int>(fault));
  for (int trial = 0; trial < 3000; ++trial) {
    const int S = std::uniform_int_distribution<int>(2, 6)(rng);
    const std::vector<Instr> prog = random_program(rng, loop_kind);
    const std::string err = run_model(S, prog, rng(), fault);
    if (!err.empty()) return err;
  }
  return "";
}

TEST(RingProtocol, TheModelCatchesOneEndWordForEveryLoop) {
  // Two owner-only loops with no tiles in a row: the loader ends both
  // before a slow warp looked, and the second end hides the first.
  const std::vector<Instr> prog = {{Instr::kLoopOwner, 0, 0, 1}, {Instr::kLoopOwner, 0, 0, 1}, {Instr::kPlain, 2, 0, 1}};
  std::string err;
  // A slow warp left waiting in the first loop either waits forever or
  // reads a later instruction's data at the position it waits on.
  for (uint64_t seed = 1; seed < 50 && err.empty(); ++seed) err = run_model(4, prog, seed, Fault::kOneEndWord);
  EXPECT_TRUE(err.find("deadlock") != std::string::npos || err.find(" read tile ") != std::string::npos) << err;
  err = caught(Fault::kOneEndWord, Instr::kLoopOwner);
  EXPECT_TRUE(err.find("deadlock") != std::string::npos || err.find(" read tile ") != std::string::npos) << err;
}

TEST(RingProtocol, TheModelCatchesAParityWaitTwoUsesAhead) {
  const std::string err = caught(Fault::kParityOnly, Instr::kLoopOwner);
  EXPECT_TRUE(err.find("parity wait") != std::string::npos || err.find(" read tile ") != std::string::npos ||
              err.find("overwritten") != std::string::npos)
      << err;
}

TEST(RingProtocol, TheModelCatchesAnEarlyRelease) {
  const std::string err = caught(Fault::kPlainReleaseCountsAll, Instr::kLoopAll);
  EXPECT_TRUE(err.find("overwritten") != std::string::npos || err.find("too many arrivals") != std::string::npos ||
              err.find("parity wait") != std::string::npos)
      << err;
}

}  // namespace
