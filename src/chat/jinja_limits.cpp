// jinja_limits.cpp: the per-render budget (see jinja_limits.h).
#include "chat/jinja_limits.h"

#include "chat/jinja_value.h"

namespace ms::jinja {
namespace {

thread_local RenderBudget* t_current = nullptr;

std::string mib(size_t bytes) {
  if (bytes % (size_t(1) << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

}  // namespace

RenderBudget::RenderBudget(const RenderLimits& limits)
    : limits_(limits),
      deadline_(std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(limits.max_seconds))) {}

void RenderBudget::step(int64_t n) {
  const int64_t before = steps_;
  steps_ += n;
  if (steps_ > limits_.max_steps) {
    throw LimitError("template render limit: more than " + std::to_string(limits_.max_steps) +
                     " steps (an endless or very long loop?)");
  }
  if ((before >> 8) != (steps_ >> 8) && std::chrono::steady_clock::now() > deadline_) {
    throw LimitError("template render limit: rendering took longer than " + format_double(limits_.max_seconds) +
                     " s");
  }
}

void RenderBudget::enter() {
  if (depth_ >= limits_.max_eval_depth) {
    throw LimitError("template render limit: statements and expressions nested deeper than " +
                     std::to_string(limits_.max_eval_depth) + " levels");
  }
  ++depth_;
}

void RenderBudget::acquire(size_t bytes) {
  if (bytes > limits_.max_live_bytes || live_bytes_ > limits_.max_live_bytes - bytes) {
    throw LimitError("template render limit: more than " + mib(limits_.max_live_bytes) +
                     " of strings and lists alive at once");
  }
  live_bytes_ += bytes;
  if (live_bytes_ > peak_live_bytes_) peak_live_bytes_ = live_bytes_;
}

void RenderBudget::check_string(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    throw LimitError("template render limit: a string of " + std::to_string(bytes) + " bytes is over the limit of " +
                     mib(limits_.max_output_bytes));
  }
}

void RenderBudget::check_items(size_t items) const {
  if (items > limits_.max_items) {
    throw LimitError("template render limit: a list, dict or range of " + std::to_string(items) +
                     " items is over the limit of " + std::to_string(limits_.max_items));
  }
}

template <typename T>
static void drop_expired(std::vector<std::weak_ptr<T>>& v) {
  size_t k = 0;
  for (size_t i = 0; i < v.size(); ++i)
    if (!v[i].expired()) v[k++] = std::move(v[i]);
  v.resize(k);
}

void RenderBudget::track(const std::shared_ptr<Array>& a) {
  arrays_.push_back(a);
  compact_tracked();
}

void RenderBudget::track(const std::shared_ptr<Object>& o) {
  objects_.push_back(o);
  compact_tracked();
}

void RenderBudget::compact_tracked() {
  if (arrays_.size() + objects_.size() < compact_at_) return;
  drop_expired(arrays_);
  drop_expired(objects_);
  compact_at_ = std::max<size_t>(1024, 2 * (arrays_.size() + objects_.size()));
}

void RenderBudget::break_cycles() {
  // Clearing one container may free others (their entries just expire).
  for (auto& w : arrays_)
    if (auto a = w.lock()) a->clear();
  for (auto& w : objects_)
    if (auto o = w.lock()) o->clear();
  arrays_.clear();
  objects_.clear();
}

RenderBudget* RenderBudget::current() { return t_current; }

ScopedBudget::ScopedBudget(RenderBudget* budget) : previous_(t_current) { t_current = budget; }
ScopedBudget::~ScopedBudget() { t_current = previous_; }

void budget_step(int64_t n) {
  if (t_current) t_current->step(n);
}
void budget_check_string(size_t bytes) {
  if (t_current) t_current->check_string(bytes);
}
void budget_check_items(size_t items) {
  if (t_current) t_current->check_items(items);
}

}  // namespace ms::jinja
