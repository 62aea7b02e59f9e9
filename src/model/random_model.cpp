#include "model/random_model.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>

#include "model/init_random.h"

namespace ms {
namespace fs = std::filesystem;

Result<std::unique_ptr<LoadedModel>> random_model(const ModelConfig& cfg, uint64_t seed,
                                                  const std::string& scratch_dir) {
  static std::atomic<int> counter{0};
  std::error_code ec;
  fs::path base = scratch_dir;
  if (base.empty()) base = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path(ec);
  const fs::path dir = base / ("megaserve-random-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code e;
      fs::remove_all(p, e);
    }
  } cleanup{dir};
  InitRandomOptions opt;
  opt.seed = seed;
  MS_RETURN_IF_ERROR(write_random_checkpoint(cfg, dir.string(), opt).with_context("writing random weights to " +
                                                                                   dir.string()));
  auto m = std::make_unique<LoadedModel>();
  m->config = cfg;
  MS_ASSIGN_OR_RETURN(m->checkpoint, Checkpoint::open(dir.string()));
  MS_ASSIGN_OR_RETURN(m->weights, bind_weights(cfg, *m->checkpoint));
  return m;  // the mappings outlive the unlinked files
}

}  // namespace ms
