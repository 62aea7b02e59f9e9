// gzip / zlib compression of test payloads (zlib's deflate), for the tests of
// the server's bounded request-body decoding.
#pragma once

#include <zlib.h>

#include <string>

namespace ms::server::testing {

// gzip_header false: the zlib format (HTTP's "deflate").
inline std::string compress(const std::string& data, bool gzip_header = true) {
  z_stream s{};
  deflateInit2(&s, 9, Z_DEFLATED, gzip_header ? 15 + 16 : 15, 9, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&s, data.size()) + 64, '\0');
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  s.avail_in = static_cast<uInt>(data.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  deflate(&s, Z_FINISH);
  out.resize(out.size() - s.avail_out);
  deflateEnd(&s);
  return out;
}

}  // namespace ms::server::testing
