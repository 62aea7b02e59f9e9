#include "mk/decode_choice.h"

#include <algorithm>
#include <cstdio>

namespace ms::mk {

const char* decode_choice_name(DecodeChoice c) { return c == DecodeChoice::kMegakernel ? "megakernel" : "layered"; }

double DecodeChooser::PathStats::median() const {
  if (recent.empty()) return 0.0;
  std::vector<double> v = recent;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

DecodeChoice DecodeChooser::pick(int rows, int bucket) {
  Key& k = keys_[{rows, bucket}];
  const int mk = static_cast<int>(DecodeChoice::kMegakernel), ly = static_cast<int>(DecodeChoice::kLayered);
  if (!timed(k.path[mk])) return DecodeChoice::kMegakernel;
  if (!timed(k.path[ly])) return DecodeChoice::kLayered;
  if (k.exploring > 0) return k.best == DecodeChoice::kMegakernel ? DecodeChoice::kLayered : DecodeChoice::kMegakernel;
  return k.best;
}

std::optional<std::string> DecodeChooser::record(int rows, int bucket, DecodeChoice path, double ms) {
  Key& k = keys_[{rows, bucket}];
  PathStats& s = k.path[static_cast<int>(path)];
  if (s.seen++ >= opt_.warmup) {
    s.recent.push_back(ms);
    if (static_cast<int>(s.recent.size()) > opt_.samples) s.recent.erase(s.recent.begin());
  }
  if (k.decided) {
    if (path == k.best) {
      if (++k.since_explore >= opt_.explore_every) {
        k.since_explore = 0;
        k.exploring = opt_.explore_steps;
      }
    } else if (k.exploring > 0) {
      --k.exploring;
    }
  }
  const PathStats &mk = k.path[static_cast<int>(DecodeChoice::kMegakernel)],
                  &ly = k.path[static_cast<int>(DecodeChoice::kLayered)];
  if (!timed(mk) || !timed(ly)) return std::nullopt;
  const double m = mk.median(), l = ly.median();
  const DecodeChoice best = m < l ? DecodeChoice::kMegakernel : DecodeChoice::kLayered;
  const bool changed = !k.decided || best != k.best;
  k.best = best;
  k.decided = true;
  if (!changed) return std::nullopt;
  k.since_explore = 0;  // a new choice: the other path's re-timing starts over
  k.exploring = 0;
  char line[200];
  std::snprintf(line, sizeof(line),
                "decode auto: %d rows, context bucket %d: megakernel %.3f ms, layered %.3f ms -> %s", rows, bucket, m,
                l, decode_choice_name(best));
  return std::string(line);
}

std::vector<DecodeChooser::KeyState> DecodeChooser::state() const {
  std::vector<KeyState> out;
  for (const auto& [key, k] : keys_) {
    KeyState st;
    st.rows = key.first;
    st.bucket = key.second;
    for (int p = 0; p < 2; ++p) st.median_ms[p] = k.path[p].median();
    st.decided = k.decided;
    st.choice = k.best;
    out.push_back(st);
  }
  return out;
}

}  // namespace ms::mk
