// Checkpoint loading: single file and sharded, and every kind of bad
// checkpoint gives an error naming the file and the tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "model/init_random.h"
#include "model/model_loader.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ms_ckpt_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    cfg_ = *preset_config(Arch::kQwen3Moe, "tiny");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(uint64_t shard_bytes = uint64_t(1) << 40) {
    InitRandomOptions o;
    o.seed = 7;
    o.shard_bytes = shard_bytes;
    ASSERT_TRUE(write_random_checkpoint(cfg_, dir_.string(), o).is_ok());
  }

  // Rewrites model.safetensors with `edit` applied to the tensor list.
  void rewrite(const std::function<void(std::vector<SafetensorsWriter::Decl>&)>& edit) {
    auto ck = Checkpoint::open(dir_.string());
    ASSERT_TRUE(ck.is_ok());
    std::vector<SafetensorsWriter::Decl> decls;
    std::map<std::string, std::vector<uint8_t>> data;
    for (const auto& [name, t] : (*ck)->tensors()) {
      decls.push_back({name, t.dtype, t.shape});
      data[name].assign(t.data, t.data + t.nbytes);
    }
    ck->reset();
    edit(decls);
    ASSERT_TRUE(SafetensorsWriter::write((dir_ / "model.safetensors").string(), decls,
                                         [&](size_t i, uint8_t* out, size_t n) {
                                           auto it = data.find(decls[i].name);
                                           for (size_t k = 0; k < n; ++k)
                                             out[k] = it != data.end() && k < it->second.size() ? it->second[k] : 1;
                                         })
                    .is_ok());
  }

  Status load_status() {
    auto m = load_model(dir_.string());
    return m.is_ok() ? Status::ok() : m.status();
  }

  void expect_error(const std::string& a, const std::string& b = "") {
    Status s = load_status();
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find(a), std::string::npos) << s.message();
    if (!b.empty()) {
      EXPECT_NE(s.message().find(b), std::string::npos) << s.message();
    }
  }

  fs::path dir_;
  ModelConfig cfg_;
};

TEST_F(CheckpointTest, LoadsSingleFileAndShards) {
  write();
  ASSERT_TRUE(load_status().is_ok()) << load_status().to_string();
  fs::remove_all(dir_);
  write(/*shard_bytes=*/40000);
  EXPECT_TRUE(fs::exists(dir_ / "model.safetensors.index.json"));
  auto m = load_model(dir_.string());
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ((*m)->weights.layers.size(), size_t(cfg_.n_layers));
}

TEST_F(CheckpointTest, MissingDirectoryConfigAndWeights) {
  expect_error(dir_.string());
  write();
  fs::remove(dir_ / "model.safetensors");
  expect_error("no model.safetensors");
  fs::remove(dir_ / "config.json");
  expect_error("config.json");
}

TEST_F(CheckpointTest, MissingTensor) {
  write();
  rewrite([](auto& d) {
    d.erase(std::remove_if(d.begin(), d.end(), [](auto& x) { return x.name == "model.layers.1.self_attn.k_proj.weight"; }),
            d.end());
  });
  expect_error("missing tensor 'model.layers.1.self_attn.k_proj.weight'");
}

TEST_F(CheckpointTest, WrongShape) {
  write();
  rewrite([](auto& d) {
    for (auto& x : d)
      if (x.name == "model.layers.2.mlp.experts.3.up_proj.weight") x.shape = {31, 64};
  });
  expect_error("model.layers.2.mlp.experts.3.up_proj.weight", "expected [32, 64]");
}

TEST_F(CheckpointTest, WrongDtype) {
  write();
  rewrite([](auto& d) {
    for (auto& x : d)
      if (x.name == "model.norm.weight") x.dtype = DType::kI32;
  });
  expect_error("model.norm.weight", "I32");
}

TEST_F(CheckpointTest, UnknownTensor) {
  write();
  rewrite([](auto& d) { d.push_back({"model.layers.0.self_attn.rogue.weight", DType::kBF16, {4}}); });
  expect_error("unknown tensor 'model.layers.0.self_attn.rogue.weight'", "model.safetensors");
}

TEST_F(CheckpointTest, TruncatedShard) {
  write();
  auto p = dir_ / "model.safetensors";
  fs::resize_file(p, fs::file_size(p) - 100);
  expect_error("model.safetensors", "truncated");
}

TEST_F(CheckpointTest, CorruptHeader) {
  write();
  auto p = dir_ / "model.safetensors";
  {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.write("#garbage#", 9);
  }
  expect_error("model.safetensors", "corrupt header");
  {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    uint64_t huge = uint64_t(1) << 40;
    f.write(reinterpret_cast<const char*>(&huge), 8);
  }
  expect_error("model.safetensors", "header length");
  fs::resize_file(p, 3);
  expect_error("model.safetensors", "truncated");
}

TEST_F(CheckpointTest, ShardIndexProblems) {
  write(40000);
  auto idx = dir_ / "model.safetensors.index.json";
  std::ifstream in(idx);
  nlohmann::json j = nlohmann::json::parse(in);
  in.close();
  // A shard listed in the index that does not exist.
  auto j2 = j;
  j2["weight_map"]["model.norm.weight"] = "model-99999-of-99999.safetensors";
  std::ofstream(idx) << j2.dump();
  expect_error("model-99999-of-99999.safetensors");
  // A path escaping the directory.
  j2 = j;
  j2["weight_map"]["model.norm.weight"] = "../evil.safetensors";
  std::ofstream(idx) << j2.dump();
  expect_error("outside the directory");
  std::ofstream(idx) << "{not json";
  expect_error("model.safetensors.index.json", "corrupt index");
}

TEST_F(CheckpointTest, AcceptsFusedExpertLayout) {
  // transformers-5 style fused experts: gate_up_proj (E, 2I, H), down_proj (E, H, I).
  write();
  auto before = load_model(dir_.string());
  ASSERT_TRUE(before.is_ok());
  std::vector<float> gate3 = (*before)->weights.layers[1].experts[3].gate.to_f32();
  std::vector<float> up3 = (*before)->weights.layers[1].experts[3].up.to_f32();
  const int E = cfg_.n_experts, I = cfg_.moe_ffn, H = cfg_.hidden;
  auto ck = Checkpoint::open(dir_.string());
  std::vector<SafetensorsWriter::Decl> decls;
  std::vector<std::vector<uint8_t>> blobs;
  for (const auto& [name, t] : (*ck)->tensors()) {
    if (name.find(".experts.") != std::string::npos) continue;
    decls.push_back({name, t.dtype, t.shape});
    blobs.emplace_back(t.data, t.data + t.nbytes);
  }
  for (int l = 0; l < cfg_.n_layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
    std::vector<uint8_t> gu, dn;
    for (int e = 0; e < E; ++e) {
      auto* g = (*ck)->find(p + std::to_string(e) + ".gate_proj.weight");
      auto* u = (*ck)->find(p + std::to_string(e) + ".up_proj.weight");
      auto* d = (*ck)->find(p + std::to_string(e) + ".down_proj.weight");
      gu.insert(gu.end(), g->data, g->data + g->nbytes);
      gu.insert(gu.end(), u->data, u->data + u->nbytes);
      dn.insert(dn.end(), d->data, d->data + d->nbytes);
    }
    decls.push_back({p + "gate_up_proj", DType::kBF16, {E, 2 * I, H}});
    blobs.push_back(gu);
    decls.push_back({p + "down_proj", DType::kBF16, {E, H, I}});
    blobs.push_back(dn);
  }
  before->reset();
  ck->reset();
  ASSERT_TRUE(SafetensorsWriter::write((dir_ / "model.safetensors").string(), decls,
                                       [&](size_t i, uint8_t* out, size_t n) { std::memcpy(out, blobs[i].data(), n); })
                  .is_ok());
  auto after = load_model(dir_.string());
  ASSERT_TRUE(after.is_ok()) << after.status().to_string();
  EXPECT_EQ((*after)->weights.layers[1].experts[3].gate.to_f32(), gate3);
  EXPECT_EQ((*after)->weights.layers[1].experts[3].up.to_f32(), up3);
}

}  // namespace
}  // namespace ms
