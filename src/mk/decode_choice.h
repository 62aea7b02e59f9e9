// The decode path of a step when the server runs both (--decode-backend
// auto): per (decode rows, context bucket), the megakernel and the layered
// path are each timed on a few real steps (alternately, so both see the same
// stretch of the batch's life), and later steps take the one whose recent
// steps were faster. The other path is re-timed now and then on a fresh
// window of steps (the batch's make-up and the machine drift), and the
// choice only changes when the other path is faster by a margin, so two
// near-equal paths do not flip back and forth. The times are the steps' wall
// time as the engine sees it (launch, the GPU, sampling), so what is
// compared is the time per output token a user gets. Plain C++: the
// engine's GPU backend asks it, the tests drive it with made-up times.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ms::mk {

enum class DecodeChoice { kLayered = 0, kMegakernel = 1 };
const char* decode_choice_name(DecodeChoice c);

struct DecodeChooserOptions {
  int warmup = 1;           // first steps of a path at a key not counted (list build, graph capture)
  int samples = 5;          // recent steps per path whose median decides
  int explore_every = 500;  // steps on the chosen path before the other is re-timed
  // The choice changes only when the other path's median is this fraction
  // faster than the chosen one's (the first choice takes the faster).
  double switch_margin = 0.03;
};

class DecodeChooser {
 public:
  explicit DecodeChooser(DecodeChooserOptions o = {}) : opt_(o) {}

  // The path of the next decode step of `rows` rows whose longest key range
  // falls in context bucket `bucket`.
  DecodeChoice pick(int rows, int bucket);
  // A step at (rows, bucket) on `path` took `ms` of wall time. Returns a
  // line for the log when the key's choice is made or changes.
  std::optional<std::string> record(int rows, int bucket, DecodeChoice path, double ms);

  // Each timed key: rows, bucket, median ms per path (0: not yet timed), the choice.
  struct KeyState {
    int rows = 0, bucket = 0;
    double median_ms[2] = {0, 0};
    bool decided = false;
    DecodeChoice choice = DecodeChoice::kLayered;
  };
  std::vector<KeyState> state() const;

 private:
  struct PathStats {
    int seen = 0;                // steps recorded at this key (saturates)
    std::vector<double> recent;  // the last `samples` counted steps, oldest first
    double median() const;
  };
  struct Key {
    PathStats path[2];
    bool decided = false;
    DecodeChoice best = DecodeChoice::kLayered;
    int since_explore = 0;  // steps on `best` since the other path was last re-timed
    int exploring = 0;      // steps the other path still takes in its re-timing
  };
  bool timed(const PathStats& s) const {
    return s.seen >= opt_.warmup + opt_.samples && static_cast<int>(s.recent.size()) >= opt_.samples;
  }

  DecodeChooserOptions opt_;
  std::map<std::pair<int, int>, Key> keys_;
};

}  // namespace ms::mk
