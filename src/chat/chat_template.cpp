// chat_template.cpp: wraps jinja::Template, turning its internal exceptions
// into ms::Status.
#include "chat/chat_template.h"

#include <exception>

#include "chat/jinja_interpreter.h"

namespace ms {

static Status to_status(const jinja::JinjaError& e, const std::string& name, const char* what) {
  std::string msg = name + ": " + what + ": " + e.what();
  if (e.line() > 0) msg += " (template line " + std::to_string(e.line()) + ")";
  return invalid_argument(msg);
}

Result<ChatTemplate> ChatTemplate::create(const std::string& source, ChatTemplateOptions options) {
  const std::string name = options.name;
  try {
    ChatTemplate t;
    t.template_ = std::make_shared<const jinja::Template>(source, options.parse_limits);
    t.options_ = std::move(options);
    return t;
  } catch (const jinja::JinjaError& e) {
    return to_status(e, name, "syntax error");
  } catch (const std::exception& e) {
    return invalid_argument(name + ": syntax error: " + e.what());
  }
}

Result<std::string> ChatTemplate::render(const nlohmann::json& context) const { return render_impl(context); }
Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context) const { return render_impl(context); }

template <typename Json>
Result<std::string> ChatTemplate::render_impl(const Json& context) const {
  if (!template_) return internal_error("ChatTemplate used before create()");
  if (!context.is_object()) return invalid_argument("chat template context must be a JSON object");
  try {
    jinja::RenderOptions ro;
    ro.repr = options_.hf_js_repr ? jinja::ReprStyle::kHfJs : jinja::ReprStyle::kPython;
    ro.now = options_.now;
    // The budget outlives every value of the render (the context included),
    // so each one gives its bytes back before the budget goes.
    jinja::RenderBudget budget(options_.render_limits);
    jinja::ScopedBudget active(&budget);
    struct CycleBreaker {  // runs after ctx and every value of the render are released
      jinja::RenderBudget& b;
      ~CycleBreaker() { b.break_cycles(); }
    } breaker{budget};
    const jinja::Value ctx = jinja::Value::from_json(context);
    return template_->render(ctx, ro, budget);
  } catch (const jinja::TemplateRaised& e) {
    return invalid_argument(e.what());
  } catch (const jinja::LimitError& e) {
    Status s = to_status(e, options_.name, "render error");
    return resource_exhausted(s.message());
  } catch (const jinja::JinjaError& e) {
    return to_status(e, options_.name, "render error");
  } catch (const std::bad_alloc&) {
    return resource_exhausted(options_.name + ": render error: out of memory");
  } catch (const std::exception& e) {
    return invalid_argument(options_.name + ": render error: " + e.what());
  }
}

}  // namespace ms
