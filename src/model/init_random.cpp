#include "model/init_random.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/safetensors.h"
#include "model/weights.h"

namespace ms {

namespace {

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Approximately normal: sum of 4 uniforms (Irwin-Hall), scaled to unit variance.
// Cheap enough to fill 60 GB at disk speed.
float approx_normal(uint64_t& s) {
  uint64_t r = splitmix64(s);
  float a = static_cast<float>(r & 0xffff), b = static_cast<float>((r >> 16) & 0xffff);
  float c = static_cast<float>((r >> 32) & 0xffff), d = static_cast<float>(r >> 48);
  float sum = (a + b + c + d) / 65536.0f - 2.0f;  // mean 0, variance 4/12
  return sum * 1.7320508f;
}

uint64_t hash_name(const std::string& n) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : n) h = (h ^ ch) * 1099511628211ull;
  return h;
}

}  // namespace

Status write_random_checkpoint(const ModelConfig& cfg, const std::string& dir, const InitRandomOptions& opt) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return not_found(dir + ": cannot create directory (" + ec.message() + ")");
  {
    std::ofstream out(dir + "/config.json");
    out << cfg.to_json().dump(2) << "\n";
    if (!out) return internal_error(dir + "/config.json: write failed");
  }
  std::vector<TensorDecl> layout = checkpoint_layout(cfg);
  uint64_t total = 0;
  for (const auto& t : layout) {
    uint64_t n = 2;
    for (auto d : t.shape) n *= static_cast<uint64_t>(d);
    total += n;
  }
  // Group tensors into shards.
  std::vector<std::vector<size_t>> shards(1);
  uint64_t cur = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    uint64_t n = 2;
    for (auto d : layout[i].shape) n *= static_cast<uint64_t>(d);
    if (cur > 0 && cur + n > opt.shard_bytes) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(i);
    cur += n;
  }
  uint64_t done = 0;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    std::string fname = shards.size() == 1 ? "model.safetensors"
                                           : "model-" + std::string(5 - std::to_string(s + 1).size(), '0') +
                                                 std::to_string(s + 1) + "-of-" +
                                                 std::string(5 - std::to_string(shards.size()).size(), '0') +
                                                 std::to_string(shards.size()) + ".safetensors";
    std::vector<SafetensorsWriter::Decl> decls;
    for (size_t i : shards[s]) {
      decls.push_back({layout[i].name, DType::kBF16, layout[i].shape});
      weight_map[layout[i].name] = fname;
    }
    auto fill = [&](size_t k, uint8_t* out, size_t nbytes) {
      const TensorDecl& t = layout[shards[s][k]];
      uint16_t* o = reinterpret_cast<uint16_t*>(out);
      size_t n = nbytes / 2;
      if (t.init == TensorDecl::Init::kOnes) {
        for (size_t i = 0; i < n; ++i) o[i] = f32_to_bf16(1.0f);
      } else {
        uint64_t st = opt.seed * 0x2545f4914f6cdd1dull ^ hash_name(t.name);
        for (size_t i = 0; i < n; ++i) o[i] = f32_to_bf16(opt.stddev * approx_normal(st));
      }
      done += nbytes;
      if (opt.progress) opt.progress(done, total);
    };
    MS_RETURN_IF_ERROR(SafetensorsWriter::write(dir + "/" + fname, decls, fill));
  }
  if (shards.size() > 1) {
    nlohmann::json idx = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    std::ofstream out(dir + "/model.safetensors.index.json");
    out << idx.dump(2) << "\n";
    if (!out) return internal_error(dir + "/model.safetensors.index.json: write failed");
  }
  return Status::ok();
}

}  // namespace ms
