// The table of megaserve subcommands; each lives in its own cmd_<name>.cpp.
#pragma once

#include <string>
#include <vector>

namespace ms::cli {

struct Command {
  const char* name;
  int (*run)(const std::vector<std::string>& args);
};

int cmd_init_random(const std::vector<std::string>& args);
int cmd_generate(const std::vector<std::string>& args);
int cmd_inspect(const std::vector<std::string>& args);
int cmd_bench(const std::vector<std::string>& args);

const std::vector<Command>& commands();

}  // namespace ms::cli
