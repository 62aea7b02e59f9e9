#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/json_parse.h"

namespace ms {

using nlohmann::json;
namespace fs = std::filesystem;

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::shape_str() const {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

Result<DType> parse_safetensors_dtype(const std::string& s) {
  if (s == "F32") return DType::kF32;
  if (s == "F16") return DType::kF16;
  if (s == "BF16") return DType::kBF16;
  if (s == "I32") return DType::kI32;
  if (s == "I64") return DType::kI64;
  if (s == "U8") return DType::kU8;
  return unimplemented("dtype " + s + " is not supported (supported: F32, F16, BF16, I32, I64, U8)");
}

class MappedFile {
 public:
  static Result<std::unique_ptr<MappedFile>> open(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return not_found(path + ": cannot open (" + std::strerror(errno) + ")");
    struct stat st {};
    if (fstat(fd, &st) != 0) {
      ::close(fd);
      return internal_error(path + ": fstat failed");
    }
    auto f = std::unique_ptr<MappedFile>(new MappedFile());
    f->path_ = path;
    f->size_ = static_cast<size_t>(st.st_size);
    if (f->size_ > 0) {
      void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        return internal_error(path + ": mmap failed (" + std::strerror(errno) + ")");
      }
      f->data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
    return f;
  }
  ~MappedFile() {
    if (data_) munmap(const_cast<uint8_t*>(data_), size_);
  }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

Checkpoint::~Checkpoint() = default;

Result<std::vector<TensorInfo>> parse_safetensors(const uint8_t* bytes, size_t size, const std::string& path) {
  if (size < 8) return data_loss(path + ": truncated (no safetensors header)");
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes, 8);
  if (hlen > size - 8 || hlen > kMaxSafetensorsHeaderBytes)
    return data_loss(path + ": corrupt header (header length " + std::to_string(hlen) + " exceeds the file size " +
                     std::to_string(size) + ")");
  std::string_view hdr(reinterpret_cast<const char*>(bytes) + 8, hlen);
  auto parsed = parse_json(hdr);
  if (!parsed.is_ok()) return data_loss(path + ": corrupt header (" + parsed.status().message() + ")");
  const json& h = *parsed;
  if (!h.is_object()) return data_loss(path + ": corrupt header (not a JSON object)");
  const uint8_t* base = bytes + 8 + hlen;
  const uint64_t data_size = size - 8 - hlen;
  std::vector<TensorInfo> out;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") continue;
    std::string where = path + ": tensor '" + name + "'";
    auto dtype = v.is_object() ? v.find("dtype") : v.end();
    auto shape = v.is_object() ? v.find("shape") : v.end();
    auto offsets = v.is_object() ? v.find("data_offsets") : v.end();
    if (!v.is_object() || dtype == v.end() || shape == v.end() || offsets == v.end() || !dtype->is_string() ||
        !shape->is_array() || !offsets->is_array() || offsets->size() != 2)
      return data_loss(where + ": malformed header entry");
    TensorInfo t;
    t.name = name;
    t.file = path;
    auto dt = parse_safetensors_dtype(dtype->get<std::string>());
    if (!dt.is_ok()) return dt.status().with_context(where);
    t.dtype = *dt;
    // The byte count is computed with overflow checks: a shape whose product
    // wraps around could otherwise match a tiny data range.
    uint64_t nbytes = dtype_size(t.dtype);
    for (const json& d : *shape) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return data_loss(where + ": bad shape");
      t.shape.push_back(d.get<int64_t>());
      if (__builtin_mul_overflow(nbytes, static_cast<uint64_t>(t.shape.back()), &nbytes))
        return data_loss(where + ": shape " + t.shape_str() + " overflows");
    }
    const json& b_j = (*offsets)[0];
    const json& e_j = (*offsets)[1];
    if (!b_j.is_number_unsigned() || !e_j.is_number_unsigned()) return data_loss(where + ": bad data_offsets");
    uint64_t b = b_j.get<uint64_t>(), e = e_j.get<uint64_t>();
    if (b > e) return data_loss(where + ": data_offsets are reversed");
    if (e > data_size)
      return data_loss(where + ": data ends at byte " + std::to_string(e) + " but the file holds " +
                       std::to_string(data_size) + " data bytes (truncated shard?)");
    if (e - b != nbytes)
      return data_loss(where + ": byte size " + std::to_string(e - b) + " does not match dtype " +
                       dtype_name(t.dtype) + " and shape " + t.shape_str());
    t.data = base + b;
    t.file_offset = 8 + hlen + b;
    t.nbytes = e - b;
    out.push_back(std::move(t));
  }
  return out;
}

Status Checkpoint::add_file(const std::string& path) {
  MS_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  MS_ASSIGN_OR_RETURN(std::vector<TensorInfo> infos, parse_safetensors(file->data(), file->size(), path));
  for (TensorInfo& t : infos) {
    if (tensors_.count(t.name)) return data_loss(path + ": tensor '" + t.name + "': tensor appears twice in the checkpoint");
    total_bytes_ += t.nbytes;
    std::string name = t.name;
    tensors_.emplace(std::move(name), std::move(t));
  }
  files_.push_back(std::move(file));
  return Status::ok();
}

Result<std::unique_ptr<Checkpoint>> Checkpoint::open(const std::string& dir,
                                                      const std::function<void(const std::string&)>& progress) {
  auto ck = std::unique_ptr<Checkpoint>(new Checkpoint());
  ck->dir_ = dir;
  if (!fs::is_directory(dir)) return not_found(dir + ": not a directory");
  std::string index = dir + "/model.safetensors.index.json";
  std::string single = dir + "/model.safetensors";
  if (fs::exists(index)) {
    auto parsed = read_json_file(index);
    json j = parsed.is_ok() ? std::move(parsed.value()) : json();
    if (!parsed.is_ok() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      return data_loss(index + ": corrupt index (needs a weight_map object)");
    std::set<std::string> shards;
    for (auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string()) return data_loss(index + ": weight_map entry for '" + name + "' is not a file name");
      std::string fname = file;
      if (fname.find('/') != std::string::npos || fname.find("..") != std::string::npos)
        return data_loss(index + ": weight_map entry for '" + name + "' points outside the directory");
      shards.insert(fname);
    }
    size_t i = 0;
    for (const auto& s : shards) {
      if (progress) progress("mapping shard " + std::to_string(++i) + "/" + std::to_string(shards.size()) + ": " + s);
      MS_RETURN_IF_ERROR(ck->add_file(dir + "/" + s));
    }
    for (auto& [name, file] : j["weight_map"].items()) {
      auto it = ck->tensors_.find(name);
      if (it == ck->tensors_.end())
        return data_loss(index + ": tensor '" + name + "' is listed for " + file.get<std::string>() + " but not in it");
      if (fs::path(it->second.file).filename() != file.get<std::string>())
        return data_loss(index + ": tensor '" + name + "' is listed for " + file.get<std::string>() + " but found in " +
                         it->second.file);
    }
  } else if (fs::exists(single)) {
    MS_RETURN_IF_ERROR(ck->add_file(single));
  } else {
    return not_found(dir + ": no model.safetensors or model.safetensors.index.json");
  }
  return ck;
}

const TensorInfo* Checkpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Status SafetensorsWriter::write(const std::string& path, const std::vector<Decl>& decls, const Filler& fill,
                                const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  std::vector<uint64_t> sizes;
  for (const auto& d : decls) {
    uint64_t n = dtype_size(d.dtype);
    for (int64_t x : d.shape) n *= static_cast<uint64_t>(x);
    h[d.name] = {{"dtype", dtype_name(d.dtype)}, {"shape", d.shape}, {"data_offsets", {off, off + n}}};
    sizes.push_back(n);
    off += n;
  }
  std::string hs = h.dump();
  while ((hs.size() + 8) % 8) hs.push_back(' ');  // align data to 8 bytes
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return not_found(path + ": cannot create (" + std::strerror(errno) + ")");
  uint64_t hlen = hs.size();
  bool ok = std::fwrite(&hlen, 8, 1, f) == 1 && std::fwrite(hs.data(), 1, hs.size(), f) == hs.size();
  std::vector<uint8_t> buf;
  for (size_t i = 0; ok && i < decls.size(); ++i) {
    buf.resize(sizes[i]);
    fill(i, buf.data(), buf.size());
    ok = std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return internal_error(path + ": write failed (disk full?)");
  return Status::ok();
}

}  // namespace ms
