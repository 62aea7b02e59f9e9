#include "engine/request.h"

#include <chrono>

namespace ms {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "none";
}

void RequestChannel::push_token(TokenEvent e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back({std::move(e), std::nullopt});
  }
  cv_.notify_all();
}

void RequestChannel::push_finish(FinishEvent e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++finished_;
    items_.push_back({std::nullopt, std::move(e)});
  }
  cv_.notify_all();
}

std::vector<RequestChannel::Item> RequestChannel::pop_all(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !items_.empty(); });
  std::vector<Item> out(std::make_move_iterator(items_.begin()), std::make_move_iterator(items_.end()));
  items_.clear();
  return out;
}

bool RequestChannel::finished_all(int n) const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_ >= n;
}

}  // namespace ms
