// megaserve: command-line entry point. Dispatches to subcommands.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace {

void print_usage() {
  std::fprintf(stderr,
               "usage: megaserve <command> [flags]\n"
               "commands:\n"
               "  serve        start the OpenAI-compatible HTTP server\n"
               "  generate     run a prompt through a model and print the continuation\n"
               "  bench        decode and serving benchmarks\n"
               "  init-random  write a random-weight checkpoint of a known shape\n"
               "  inspect      print a checkpoint's config and tensors\n"
               "run 'megaserve <command> --help' for a command's flags\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const auto& c : ms::cli::commands()) {
    if (cmd == c.name) return c.run(args);
  }
  std::fprintf(stderr, "megaserve: unknown command '%s'\n", cmd.c_str());
  print_usage();
  return 2;
}
