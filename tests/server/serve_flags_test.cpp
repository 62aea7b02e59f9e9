// The flags of issue 13 on `megaserve serve`: defaults (--backend auto, the
// KV cache sized by the backend, --gpu-memory-utilization 0.9,
// --load-format auto) and bad values named.
#include <gtest/gtest.h>

#include "server/serve_command.h"

namespace ms::server {
namespace {

const std::string kModel = std::string(MEGASERVE_SOURCE_DIR) + "/models/configs/north-mini-code";

TEST(ServeFlags, Defaults) {
  bool help = false;
  auto c = parse_serve_args({"--model", kModel}, &help);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->backend, "auto");
  EXPECT_EQ(c->device, -1);
  EXPECT_EQ(c->kv_cache_mb, 0);
  EXPECT_DOUBLE_EQ(c->gpu_memory_utilization, 0.9);
  EXPECT_EQ(c->load_format, "auto");
  EXPECT_EQ(c->served_model_name, "north-mini-code");
  EXPECT_NE(c->summary().find("backend=auto device=-1"), std::string::npos);
  EXPECT_NE(c->summary().find("kv_cache_mb=auto"), std::string::npos);
}

TEST(ServeFlags, Values) {
  bool help = false;
  auto c = parse_serve_args({"--model", kModel, "--backend", "layered", "--device", "1", "--gpu-memory-utilization",
                             "0.5", "--kv-cache-mb", "2048", "--load-format", "dummy", "--seed", "7"},
                            &help);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->backend, "cuda");
  EXPECT_EQ(c->device, 1);
  EXPECT_DOUBLE_EQ(c->gpu_memory_utilization, 0.5);
  EXPECT_EQ(c->kv_cache_mb, 2048);
  EXPECT_EQ(c->load_format, "dummy");
  EXPECT_EQ(c->seed, 7u);
  // Decode on whichever path measured faster for the step's shape unless told.
  auto def = parse_serve_args({"--model", kModel}, &help);
  ASSERT_TRUE(def.is_ok());
  EXPECT_EQ(def->decode_backend, "auto");
  for (const char* path : {"layered", "megakernel", "auto"}) {
    auto d = parse_serve_args({"--model", kModel, "--decode-backend", path}, &help);
    ASSERT_TRUE(d.is_ok()) << path << ": " << d.status().message();
    EXPECT_EQ(d->decode_backend, path);
  }
}

TEST(ServeFlags, BadValuesNameTheFlag) {
  bool help = false;
  for (const auto& [args, flag] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--backend", "tpu"}, "--backend"},
           {{"--device", "-1"}, "device"},
           {{"--device", "x"}, "device"},
           {{"--gpu-memory-utilization", "0"}, "gpu-memory-utilization"},
           {{"--gpu-memory-utilization", "1.5"}, "gpu-memory-utilization"},
           {{"--kv-cache-mb", "0"}, "kv-cache-mb"},
           {{"--load-format", "pt"}, "--load-format"},
           {{"--decode-backend", "fast"}, "--decode-backend"}}) {
    std::vector<std::string> a = {"--model", kModel};
    a.insert(a.end(), args.begin(), args.end());
    auto c = parse_serve_args(a, &help);
    ASSERT_FALSE(c.is_ok()) << args[0] << " " << args[1];
    EXPECT_NE(c.status().message().find(flag), std::string::npos) << c.status().message();
  }
}

}  // namespace
}  // namespace ms::server
