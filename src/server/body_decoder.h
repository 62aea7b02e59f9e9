// Undoing a request's Content-Encoding (gzip, deflate) as the body arrives,
// with the decoded size bounded: a 1 MB gzip body can inflate to gigabytes,
// so the output is counted as it is produced and decoding stops at the limit
// instead of after the whole body is in memory.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace ms::server {

enum class ContentCoding { kIdentity, kGzip, kDeflate };

// Parses a Content-Encoding header value ("", "identity", "gzip", "x-gzip",
// "deflate"); false for anything else, including lists of codings.
bool parse_content_coding(std::string_view header, ContentCoding* out);

class BodyDecoder {
 public:
  enum class Result { kOk, kTooLarge, kCorrupt };

  // Appends decoded bytes to *out, which may hold at most max_bytes.
  BodyDecoder(ContentCoding coding, size_t max_bytes, std::string* out);
  ~BodyDecoder();
  BodyDecoder(const BodyDecoder&) = delete;
  BodyDecoder& operator=(const BodyDecoder&) = delete;

  // Feeds the next piece of the encoded body.
  Result feed(std::string_view data);
  // After the last piece: kCorrupt if the compressed stream is truncated.
  Result finish();

 private:
  struct Zlib;
  ContentCoding coding_;
  size_t max_bytes_;
  std::string* out_;
  std::unique_ptr<Zlib> z_;
  bool ended_ = false;  // the compressed stream ended (further input is corrupt)
};

}  // namespace ms::server
