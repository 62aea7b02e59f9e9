// chat_template.cpp: wraps jinja::Template, turning its internal exceptions
// into ms::Status.
#include "chat/chat_template.h"

#include <exception>

#include "chat/jinja_interpreter.h"

namespace ms {

static Status to_status(const jinja::JinjaError& e, const char* what) {
  std::string msg = std::string(what) + ": " + e.what();
  if (e.line() > 0) msg += " (template line " + std::to_string(e.line()) + ")";
  return invalid_argument(msg);
}

Result<ChatTemplate> ChatTemplate::create(const std::string& source, ChatTemplateOptions options) {
  try {
    ChatTemplate t;
    t.template_ = std::make_shared<const jinja::Template>(source);
    t.options_ = std::move(options);
    return t;
  } catch (const jinja::JinjaError& e) {
    return to_status(e, "chat template syntax error");
  } catch (const std::exception& e) {
    return invalid_argument(std::string("chat template syntax error: ") + e.what());
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
    return template_->render(jinja::Value::from_json(context), ro);
  } catch (const jinja::TemplateRaised& e) {
    return invalid_argument(e.what());
  } catch (const jinja::JinjaError& e) {
    return to_status(e, "chat template error");
  } catch (const std::exception& e) {
    return invalid_argument(std::string("chat template error: ") + e.what());
  }
}

}  // namespace ms
