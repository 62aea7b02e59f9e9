// jinja_limits.h: what a chat template may cost. Templates come from a
// checkpoint or --chat-template, i.e. from whoever published the model, and
// the values they walk come from clients; neither may crash or stall the
// server. Parsing bounds the nesting of the syntax tree (the parser, the
// renderer and the tree's destructor recurse once per level); rendering runs
// under a RenderBudget: call and evaluation depth, steps, wall-clock time,
// output size, the size of any one string or container, and the bytes of
// strings and containers alive at once. Every limit is an error that names it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ms::jinja {

class Value;
class Object;
using Array = std::vector<Value>;

struct ParseLimits {
  // Open constructs at once while parsing: ( [ { `not` unary signs, nested
  // {% %} blocks. The 70 real templates of tests/fixtures/templates need 12.
  int max_nesting = 100;
  // Depth of an expression tree; chains like a ~ b ~ c or x.a.b.c add one per
  // link. The real templates reach 27.
  int max_expr_depth = 256;
  // Template source size.
  size_t max_source_bytes = size_t(4) << 20;
};

struct RenderLimits {
  int max_call_depth = 64;      // nested macro / caller() calls
  int max_eval_depth = 512;     // statements + expressions being evaluated at once
  int max_value_depth = 256;    // nesting walked by repr, tojson, ==, <, JSON conversion
  int64_t max_steps = 20'000'000;  // statements, expressions, loop iterations, items built or scanned
  double max_seconds = 10;         // wall clock
  size_t max_output_bytes = size_t(32) << 20;  // the rendered text, and any one string
  size_t max_items = size_t(1) << 20;          // elements of any one list, dict or range
  size_t max_live_bytes = size_t(512) << 20;   // strings + container slots alive at once
};

// Thrown (as a JinjaError) when a limit is hit; the message names the limit.
// One per render, active on the rendering thread (ScopedBudget): Value
// constructors charge the bytes they allocate to it and release them when the
// value dies, so the accounting needs no plumbing through the filters. Values
// made outside a render (parsed literals) are not charged.
class RenderBudget {
 public:
  explicit RenderBudget(const RenderLimits& limits);

  const RenderLimits& limits() const { return limits_; }
  // One unit of work; every 256 units also checks the clock.
  void step(int64_t n = 1);
  // Bytes allocated / freed by values of this render.
  void acquire(size_t bytes);
  void release(size_t bytes) { live_bytes_ -= bytes; }
  // One more level of nested evaluation (statements, expressions, filters
  // that apply filters), past max_eval_depth a LimitError; see EvalDepth.
  void enter();
  void leave() { --depth_; }
  // Throws if a string of `bytes` or a container of `items` would be over the limits.
  void check_string(size_t bytes) const;
  void check_items(size_t items) const;

  // Lists and dicts made during the render. Values are reference counted, so
  // a list that contains itself, or a macro stored in the frame it closes
  // over, would never be freed: once the render is over, break_cycles()
  // empties every container still alive (nothing outside the render holds
  // them: its result is a string). Expired entries are dropped as the list
  // doubles, so it stays proportional to the containers alive.
  void track(const std::shared_ptr<Array>& a);
  void track(const std::shared_ptr<Object>& o);
  void break_cycles();

  int64_t steps() const { return steps_; }
  size_t live_bytes() const { return live_bytes_; }
  size_t peak_live_bytes() const { return peak_live_bytes_; }

  // The budget of the render running on this thread, or nullptr.
  static RenderBudget* current();

 private:
  friend class ScopedBudget;
  void compact_tracked();
  RenderLimits limits_;
  std::chrono::steady_clock::time_point deadline_;
  int64_t steps_ = 0;
  int depth_ = 0;  // EvalDepth levels open
  size_t live_bytes_ = 0, peak_live_bytes_ = 0;
  std::vector<std::weak_ptr<Array>> arrays_;
  std::vector<std::weak_ptr<Object>> objects_;
  size_t compact_at_ = 1024;
};

// Makes `budget` current on this thread for its lifetime (renders nest never;
// the previous one is restored anyway).
class ScopedBudget {
 public:
  explicit ScopedBudget(RenderBudget* budget);
  ~ScopedBudget();
  ScopedBudget(const ScopedBudget&) = delete;
  ScopedBudget& operator=(const ScopedBudget&) = delete;

 private:
  RenderBudget* previous_;
};

// RAII form of enter()/leave(); a no-op for a null budget (outside a render).
class EvalDepth {
 public:
  explicit EvalDepth(RenderBudget* budget) : budget_(budget) {
    if (budget_) budget_->enter();
  }
  ~EvalDepth() {
    if (budget_) budget_->leave();
  }
  EvalDepth(const EvalDepth&) = delete;
  EvalDepth& operator=(const EvalDepth&) = delete;

 private:
  RenderBudget* budget_;
};

// Free-function forms for the builtins: no-ops outside a render.
void budget_step(int64_t n = 1);
void budget_check_string(size_t bytes);
void budget_check_items(size_t items);

}  // namespace ms::jinja
