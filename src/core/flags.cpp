#include "core/flags.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace ms {

Flags& Flags::add(const std::string& name, const std::string& help, const std::string& default_value, bool boolean) {
  specs_[name] = {help, default_value, boolean};
  order_.push_back(name);
  return *this;
}

Status Flags::parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a == "--help" || a == "-h") {
      help_ = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) return invalid_argument("unexpected argument '" + a + "' (flags start with --)");
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = specs_.find(name);
    if (it == specs_.end()) return invalid_argument("unknown flag --" + name);
    if (it->second.boolean) {
      if (has_value && value != "true" && value != "false")
        return invalid_argument("flag --" + name + " takes no value (or =true/=false)");
      values_[name] = has_value ? value : "true";
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) return invalid_argument("flag --" + name + " needs a value");
      value = args[++i];
    }
    values_[name] = value;
  }
  return Status::ok();
}

bool Flags::has(const std::string& name) const { return values_.count(name) > 0; }

std::string Flags::str(const std::string& name) const {
  auto it = values_.find(name);
  if (it != values_.end()) return it->second;
  auto s = specs_.find(name);
  return s == specs_.end() ? "" : s->second.def;
}

Result<int64_t> Flags::integer(const std::string& name, int64_t lo, int64_t hi) const {
  std::string v = str(name);
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || errno != 0 || *end != '\0')
    return invalid_argument("flag --" + name + ": '" + v + "' is not an integer");
  if (x < lo || x > hi)
    return invalid_argument("flag --" + name + ": " + v + " is out of range [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "]");
  return static_cast<int64_t>(x);
}

Result<double> Flags::number(const std::string& name, double lo, double hi) const {
  std::string v = str(name);
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || errno != 0 || *end != '\0') return invalid_argument("flag --" + name + ": '" + v + "' is not a number");
  if (x < lo || x > hi) return invalid_argument("flag --" + name + ": " + v + " is out of range");
  return x;
}

bool Flags::boolean(const std::string& name) const { return str(name) == "true"; }

std::string Flags::usage(const std::string& command) const {
  std::ostringstream s;
  s << "usage: megaserve " << command << " [flags]\n";
  for (const auto& n : order_) {
    const Spec& sp = specs_.at(n);
    s << "  --" << n << (sp.boolean ? "" : " VALUE") << "\n      " << sp.help;
    if (!sp.def.empty() && !sp.boolean) s << " (default: " << sp.def << ")";
    s << "\n";
  }
  return s.str();
}

Result<std::vector<int64_t>> parse_int_list(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b == std::string::npos) return invalid_argument("flag --" + flag + ": empty entry in '" + text + "'");
    item = item.substr(b, e - b + 1);
    int64_t mult = 1;
    if (!item.empty() && (item.back() == 'K' || item.back() == 'k')) {
      mult = 1024;
      item.pop_back();
    }
    char* end = nullptr;
    errno = 0;
    long long x = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || errno || *end) return invalid_argument("flag --" + flag + ": '" + item + "' is not an integer");
    out.push_back(x * mult);
  }
  if (out.empty()) return invalid_argument("flag --" + flag + ": empty list");
  return out;
}

}  // namespace ms
