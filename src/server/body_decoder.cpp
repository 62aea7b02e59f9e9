#include "server/body_decoder.h"

#include <zlib.h>

#include <algorithm>

#include "server/http_message.h"

namespace ms::server {

bool parse_content_coding(std::string_view h, ContentCoding* out) {
  while (!h.empty() && (h.front() == ' ' || h.front() == '\t')) h.remove_prefix(1);
  while (!h.empty() && (h.back() == ' ' || h.back() == '\t')) h.remove_suffix(1);
  if (h.empty() || iequals(h, "identity")) {
    *out = ContentCoding::kIdentity;
  } else if (iequals(h, "gzip") || iequals(h, "x-gzip")) {
    *out = ContentCoding::kGzip;
  } else if (iequals(h, "deflate")) {
    *out = ContentCoding::kDeflate;
  } else {
    return false;
  }
  return true;
}

struct BodyDecoder::Zlib {
  z_stream s{};
  bool ok = false;
};

BodyDecoder::BodyDecoder(ContentCoding coding, size_t max_bytes, std::string* out)
    : coding_(coding), max_bytes_(max_bytes), out_(out) {
  if (coding_ == ContentCoding::kIdentity) return;
  z_ = std::make_unique<Zlib>();
  // 15 + 32: zlib detects a gzip or zlib header by itself; HTTP's "deflate"
  // is the zlib format (RFC 9110 8.4.1.2).
  z_->ok = inflateInit2(&z_->s, 15 + 32) == Z_OK;
}

BodyDecoder::~BodyDecoder() {
  if (z_ && z_->ok) inflateEnd(&z_->s);
}

BodyDecoder::Result BodyDecoder::feed(std::string_view data) {
  if (coding_ == ContentCoding::kIdentity) {
    if (data.size() > max_bytes_ - std::min(max_bytes_, out_->size())) return Result::kTooLarge;
    out_->append(data);
    return Result::kOk;
  }
  if (!z_->ok) return Result::kCorrupt;
  if (data.empty()) return Result::kOk;
  if (ended_) return Result::kCorrupt;  // bytes after the end of the compressed stream
  z_->s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z_->s.avail_in = static_cast<uInt>(data.size());
  char buf[16384];
  // Runs until the input is used up and inflate has no output pending (it
  // filled the whole buffer last time: there may be more).
  do {
    z_->s.next_out = reinterpret_cast<Bytef*>(buf);
    z_->s.avail_out = sizeof buf;
    int rc = inflate(&z_->s, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) return Result::kCorrupt;
    size_t produced = sizeof buf - z_->s.avail_out;
    if (produced > max_bytes_ - std::min(max_bytes_, out_->size())) return Result::kTooLarge;
    out_->append(buf, produced);
    if (rc == Z_STREAM_END) {
      ended_ = true;
      return z_->s.avail_in > 0 ? Result::kCorrupt : Result::kOk;
    }
    if (rc == Z_BUF_ERROR && produced == 0) break;  // needs more input
  } while (z_->s.avail_in > 0 || z_->s.avail_out == 0);
  return Result::kOk;
}

BodyDecoder::Result BodyDecoder::finish() {
  if (coding_ == ContentCoding::kIdentity) return Result::kOk;
  return ended_ ? Result::kOk : Result::kCorrupt;
}

}  // namespace ms::server
