#include "cli/commands.h"

#include "server/serve_command.h"

namespace ms::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {
      {"serve", server::run_serve},
      {"init-random", cmd_init_random},
      {"generate", cmd_generate},
      {"inspect", cmd_inspect},
      {"bench", cmd_bench},
  };
  return kCommands;
}

}  // namespace ms::cli
