#include "server/stop_matcher.h"

#include <algorithm>

namespace ms::server {

std::string StopMatcher::feed(std::string_view text, bool* stopped) {
  *stopped = stopped_;
  if (stopped_) return {};
  held_.append(text);
  if (stops_.empty()) {
    std::string out;
    out.swap(held_);
    return out;
  }
  // Earliest complete match (ties: the longest stop string at that position).
  size_t best = std::string::npos;
  for (const auto& s : stops_) {
    size_t p = held_.find(s);
    if (p != std::string::npos && (best == std::string::npos || p < best ||
                                   (p == best && s.size() > matched_.size()))) {
      best = p;
      matched_ = s;
    }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    *stopped = true;
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // Hold the longest suffix that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    size_t max_k = std::min(s.size() - 1, held_.size());
    for (size_t k = max_k; k > hold; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  if (!stopped_) out.swap(held_);
  held_.clear();
  return out;
}

}  // namespace ms::server
