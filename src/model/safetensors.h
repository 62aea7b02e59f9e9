// Safetensors checkpoints: a reader that mmaps every shard (no copy in RAM)
// and validates headers, dtypes, shapes and offsets against the file size, and
// a writer for init-random. Errors name the file and the tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace ms {

struct TensorInfo {
  std::string name;
  std::string file;            // path of the shard holding it
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mmapped shard
  uint64_t file_offset = 0;       // of data in the shard (direct reads bypass the mapping)
  size_t nbytes = 0;

  int64_t numel() const;
  std::string shape_str() const;  // "[64, 128]"
};

class MappedFile;

// A checkpoint directory (config.json + model.safetensors or shards listed in
// model.safetensors.index.json), all shards mapped read-only.
class Checkpoint {
 public:
  static Result<std::unique_ptr<Checkpoint>> open(const std::string& dir,
                                                  const std::function<void(const std::string&)>& progress = {});
  ~Checkpoint();

  const std::string& dir() const { return dir_; }
  const TensorInfo* find(const std::string& name) const;
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  Checkpoint() = default;
  Status add_file(const std::string& path);

  std::string dir_;
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::map<std::string, TensorInfo> tensors_;
  uint64_t total_bytes_ = 0;
};

// Streaming writer: tensors are appended in order; the header is sized up
// front, so the caller declares all tensors first, then fills each one.
class SafetensorsWriter {
 public:
  struct Decl {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  // fill(decl_index, out_bytes) writes the tensor's bytes.
  using Filler = std::function<void(size_t, uint8_t*, size_t)>;
  static Status write(const std::string& path, const std::vector<Decl>& decls, const Filler& fill,
                      const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
};

Result<DType> parse_safetensors_dtype(const std::string& s);

// Largest JSON header accepted (real checkpoints: ~100 KB per shard).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100u << 20;

// Parses a safetensors file image (u64 little-endian header length, JSON
// header, data) and checks every entry's dtype, shape and data range against
// the image's size. `data` pointers point into `bytes`; `path` labels errors.
Result<std::vector<TensorInfo>> parse_safetensors(const uint8_t* bytes, size_t size, const std::string& path);

}  // namespace ms
