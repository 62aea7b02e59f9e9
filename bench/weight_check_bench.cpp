// Throughput of the load-time NaN/Inf scan (src/model/weight_check.h) on a
// synthetic bf16 checkpoint, per thread count, from page cache (warm) and,
// with --cold, after evicting the file from the page cache (disk-bound).
//   g++ -std=c++20 -O2 -Isrc bench/weight_check_bench.cpp src/model/safetensors.cpp \
//       src/model/weight_check.cpp src/core/*.cpp -lpthread -o /tmp/wcb
//   /tmp/wcb --dir /dev/shm/wcb --gb 20 [--cold]
// Not run by ctest; results go to bench/results/.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "model/safetensors.h"
#include "model/weight_check.h"

int main(int argc, char** argv) {
  std::string dir = "/tmp/wcb";
  double gb = 4;
  bool cold = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) dir = argv[++i];
    else if (a == "--gb" && i + 1 < argc) gb = std::stod(argv[++i]);
    else if (a == "--cold") cold = true;
  }
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/model.safetensors";
  // 1 GiB tensors of finite random bf16 (exponent never all ones).
  const int64_t per = int64_t(1) << 29;  // elements
  const int n = std::max(1, static_cast<int>(gb * 1e9 / (2.0 * per) + 0.5));
  std::vector<ms::SafetensorsWriter::Decl> decls;
  for (int t = 0; t < n; ++t) decls.push_back({"t" + std::to_string(t), ms::DType::kBF16, {per}});
  auto t0 = std::chrono::steady_clock::now();
  uint64_t s = 0x9E3779B97F4A7C15ull;
  ms::Status w = ms::SafetensorsWriter::write(file, decls, [&](size_t, uint8_t* out, size_t bytes) {
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      const uint64_t v = s & 0xBFFFBFFFBFFFBFFFull;  // clear each lane's top exponent bit
      std::memcpy(out + i, &v, 8);
    }
  });
  if (!w.is_ok()) { std::fprintf(stderr, "%s\n", w.message().c_str()); return 1; }
  std::printf("wrote %d x 1 GiB bf16 tensors to %s in %.1f s\n", n, file.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  for (int threads : {1, 2, 4, 8, 16, 32}) {
    if (threads > hw) break;
    for (int rep = 0; rep < 2; ++rep) {
      if (cold) {
        int fd = open(file.c_str(), O_RDONLY);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
      }
      auto ck = ms::Checkpoint::open(dir);
      if (!ck.is_ok()) { std::fprintf(stderr, "%s\n", ck.status().message().c_str()); return 1; }
      ms::FiniteCheckStats st;
      ms::Status c = ms::check_finite(**ck, threads, &st);
      std::printf("%s threads %2d: %.2f GB in %.3f s = %.1f GB/s%s\n", cold ? "cold" : "warm", st.threads,
                  st.bytes / 1e9, st.seconds, st.bytes / 1e9 / st.seconds, c.is_ok() ? "" : " (NOT FINITE?)");
    }
  }
  std::filesystem::remove_all(dir);
  return 0;
}
