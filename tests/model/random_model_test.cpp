// Random weights generated on the CPU for --load-format dummy on the ref
// backend: the same bytes as the checkpoint `init-random --seed N` writes,
// and the scratch files are gone once the weights are mapped.
#include "model/random_model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "model/init_random.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

TEST(RandomModel, SameWeightsAsInitRandomAndNoFilesLeft) {
  const fs::path root = fs::temp_directory_path() / ("ms_random_model_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "scratch");
  auto cfg = preset_config(Arch::kQwen3Moe, "tiny");
  ASSERT_TRUE(cfg.is_ok());
  InitRandomOptions o;
  o.seed = 5;
  ASSERT_TRUE(write_random_checkpoint(*cfg, (root / "ckpt").string(), o).is_ok());
  auto disk = load_model((root / "ckpt").string());
  ASSERT_TRUE(disk.is_ok()) << disk.status().message();

  auto mem = random_model(*cfg, 5, (root / "scratch").string());
  ASSERT_TRUE(mem.is_ok()) << mem.status().message();
  EXPECT_TRUE(fs::is_empty(root / "scratch"));  // unlinked, still mapped
  const auto& a = (*mem)->checkpoint->tensors();
  const auto& b = (*disk)->checkpoint->tensors();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : b) {
    auto it = a.find(name);
    ASSERT_NE(it, a.end()) << name;
    ASSERT_EQ(it->second.nbytes, t.nbytes) << name;
    EXPECT_EQ(0, std::memcmp(it->second.data, t.data, t.nbytes)) << name;
  }
  EXPECT_EQ((*mem)->weights.layers.size(), size_t(cfg->n_layers));

  auto other = random_model(*cfg, 6, (root / "scratch").string());
  ASSERT_TRUE(other.is_ok());
  const TensorInfo* e5 = (*mem)->checkpoint->find("model.embed_tokens.weight");
  const TensorInfo* e6 = (*other)->checkpoint->find("model.embed_tokens.weight");
  ASSERT_TRUE(e5 && e6);
  EXPECT_NE(0, std::memcmp(e5->data, e6->data, e5->nbytes));  // the seed matters
  fs::remove_all(root);
}

TEST(RandomModel, UnwritableScratchIsAnError) {
  auto cfg = preset_config(Arch::kLlama, "tiny");
  ASSERT_TRUE(cfg.is_ok());
  auto m = random_model(*cfg, 1, "/proc/no-such-dir");
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("random weights"), std::string::npos) << m.status().message();
}

}  // namespace
}  // namespace ms
