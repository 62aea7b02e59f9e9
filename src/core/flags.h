// A small command-line flag parser: `--name value` or `--name=value`, and
// boolean `--name`. Unknown flags and bad values are errors naming the flag.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace ms {

class Flags {
 public:
  // Declares a flag with its help text; `boolean` flags take no value.
  Flags& add(const std::string& name, const std::string& help, const std::string& default_value = "",
             bool boolean = false);
  Status parse(const std::vector<std::string>& args);

  bool has(const std::string& name) const;  // given on the command line
  std::string str(const std::string& name) const;
  Result<int64_t> integer(const std::string& name, int64_t lo, int64_t hi) const;
  Result<double> number(const std::string& name, double lo, double hi) const;
  bool boolean(const std::string& name) const;
  bool help_requested() const { return help_; }
  std::string usage(const std::string& command) const;

 private:
  struct Spec {
    std::string help, def;
    bool boolean = false;
  };
  std::map<std::string, Spec> specs_;
  std::vector<std::string> order_;
  std::map<std::string, std::string> values_;
  bool help_ = false;
};

// "1,2,3" -> {1, 2, 3}; errors name the flag.
Result<std::vector<int64_t>> parse_int_list(const std::string& flag, const std::string& text);

}  // namespace ms
