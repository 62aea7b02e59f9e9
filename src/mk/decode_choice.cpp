#include "mk/decode_choice.h"

#include <algorithm>
#include <climits>
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

namespace {
DecodeChoice other(DecodeChoice c) {
  return c == DecodeChoice::kMegakernel ? DecodeChoice::kLayered : DecodeChoice::kMegakernel;
}
}  // namespace

DecodeChoice DecodeChooser::pick(int rows, int bucket) {
  Key& k = keys_[{rows, bucket}];
  const PathStats &mk = k.path[static_cast<int>(DecodeChoice::kMegakernel)],
                  &ly = k.path[static_cast<int>(DecodeChoice::kLayered)];
  if (!k.decided) {
    // Timing both: alternately, the one with fewer steps first (ties: the megakernel).
    if (timed(mk) && !timed(ly)) return DecodeChoice::kLayered;
    if (timed(ly) && !timed(mk)) return DecodeChoice::kMegakernel;
    return ly.seen < mk.seen ? DecodeChoice::kLayered : DecodeChoice::kMegakernel;
  }
  return k.exploring > 0 ? other(k.best) : k.best;
}

std::optional<std::string> DecodeChooser::record(int rows, int bucket, DecodeChoice path, double ms) {
  Key& k = keys_[{rows, bucket}];
  PathStats& s = k.path[static_cast<int>(path)];
  if (s.seen >= opt_.warmup) {
    s.recent.push_back(ms);
    if (static_cast<int>(s.recent.size()) > opt_.samples) s.recent.erase(s.recent.begin());
  }
  if (s.seen < INT_MAX) ++s.seen;
  const PathStats &mk = k.path[static_cast<int>(DecodeChoice::kMegakernel)],
                  &ly = k.path[static_cast<int>(DecodeChoice::kLayered)];
  bool decide = false;
  if (!k.decided) {
    decide = timed(mk) && timed(ly);
  } else if (path == k.best) {
    if (k.exploring == 0 && ++k.since_explore >= opt_.explore_every) {
      // Re-time the other path on a fresh window (its old samples are from
      // another stretch of the batch's life).
      k.since_explore = 0;
      k.exploring = opt_.samples;
      k.path[static_cast<int>(other(k.best))].recent.clear();
    }
  } else if (k.exploring > 0 && --k.exploring == 0) {
    decide = true;  // the other path's fresh window is full
  }
  if (!decide) return std::nullopt;
  const double m = mk.median(), l = ly.median();
  DecodeChoice best = m < l ? DecodeChoice::kMegakernel : DecodeChoice::kLayered;
  if (k.decided && best != k.best) {
    const double cur = k.best == DecodeChoice::kMegakernel ? m : l, alt = best == DecodeChoice::kMegakernel ? m : l;
    if (alt > cur * (1.0 - opt_.switch_margin)) best = k.best;  // within the margin: keep the choice
  }
  const bool changed = !k.decided || best != k.best;
  k.best = best;
  k.decided = true;
  if (!changed) return std::nullopt;
  k.since_explore = 0;
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
