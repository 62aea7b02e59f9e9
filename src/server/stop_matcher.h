// Stop strings matched on detokenized text. Text is released only when it can
// no longer be part of a stop string: a suffix that is a prefix of some stop
// string is held back until the next piece decides it, so no text past or
// inside a stop string ever reaches the client.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ms::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Appends `text`; returns what may be emitted now. When a stop string
  // completes, *stopped becomes true and the text before it is returned; the
  // matcher then ignores further input.
  std::string feed(std::string_view text, bool* stopped);
  // End of generation: releases the held text (empty after a stop).
  std::string flush();
  bool stopped() const { return stopped_; }
  // Which stop string matched ("" if none).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  std::string matched_;
  bool stopped_ = false;
};

}  // namespace ms::server
