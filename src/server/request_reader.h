// Parses one HTTP/1.x request from the bytes of a connection with every
// limit applied while the bytes arrive, never after: the request line and
// headers together (bytes), the number of header fields, the body as read
// (Content-Length, chunked) and the body as decoded (gzip / deflate). The
// syntax is Boost.Beast's parser (basic_parser: RFC 9112 framing, chunked
// coding, Content-Length validation); this class collects what it reports
// into an HttpRequest and says which status a refused request gets.
#pragma once

#include <boost/beast/http/basic_parser.hpp>
#include <memory>
#include <string>

#include "server/body_decoder.h"
#include "server/http_message.h"

namespace ms::server {

struct RequestLimits {
  size_t max_header_bytes = size_t(32) << 10;  // request line + header fields
  int max_headers = 128;                       // header fields
  size_t max_body_bytes = size_t(4) << 20;     // body as received and as decoded
};

// Why a request was refused: the status and the message of its error body.
struct Rejection {
  int status = 0;  // 0: none
  std::string message;
  std::string code;
};

class RequestReader : public boost::beast::http::basic_parser<true> {
 public:
  using error_code = boost::beast::error_code;

  explicit RequestReader(const RequestLimits& limits);

  HttpRequest& request() { return req_; }
  const HttpRequest& request() const { return req_; }
  // The client sent "Expect: 100-continue" and waits for it before the body.
  bool expects_continue() const { return expect_continue_; }
  // Set when the parser stopped on a limit or a bad field (the parse error
  // then only says "stopped").
  const Rejection& rejection() const { return rejection_; }

  // The answer to a request whose parse failed with `ec` (limits, bad
  // syntax, timeouts); status 0 when the connection should just be closed
  // (the client went away, or closed between requests).
  Rejection rejection_for(const error_code& ec) const;

 private:
  void reject(int status, std::string message, std::string code, error_code& ec);

  void on_request_impl(boost::beast::http::verb, boost::beast::string_view method, boost::beast::string_view target,
                       int version, error_code& ec) override;
  void on_response_impl(int, boost::beast::string_view, int, error_code& ec) override;
  void on_field_impl(boost::beast::http::field, boost::beast::string_view name, boost::beast::string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code& ec) override;
  void on_body_init_impl(const boost::optional<std::uint64_t>& content_length, error_code& ec) override;
  std::size_t on_body_impl(boost::beast::string_view body, error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t size, boost::beast::string_view extensions, error_code& ec) override;
  std::size_t on_chunk_body_impl(std::uint64_t remain, boost::beast::string_view body, error_code& ec) override;
  void on_finish_impl(error_code& ec) override;

  std::size_t decode(boost::beast::string_view body, error_code& ec);

  RequestLimits limits_;
  HttpRequest req_;
  Rejection rejection_;
  ContentCoding coding_ = ContentCoding::kIdentity;
  std::unique_ptr<BodyDecoder> decoder_;
  bool expect_continue_ = false;
};

}  // namespace ms::server
