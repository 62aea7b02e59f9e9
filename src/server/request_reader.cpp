#include "server/request_reader.h"

#include <boost/asio/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <algorithm>

namespace ms::server {

namespace http = boost::beast::http;
using boost::beast::string_view;

namespace {

std::string kib(size_t bytes) { return std::to_string(bytes >> 10) + " KiB"; }

std::string trimmed(string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return std::string(v);
}

}  // namespace

RequestReader::RequestReader(const RequestLimits& limits) : limits_(limits) {
  header_limit(static_cast<std::uint32_t>(limits_.max_header_bytes));
  body_limit(limits_.max_body_bytes);
  eager(true);
}

void RequestReader::reject(int status, std::string message, std::string code, error_code& ec) {
  rejection_ = {status, std::move(message), std::move(code)};
  ec = http::error::bad_value;  // stops the parse; rejection_ says why
}

Rejection RequestReader::rejection_for(const error_code& ec) const {
  if (rejection_.status != 0) return rejection_;
  if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
      ec == boost::asio::error::eof || ec == boost::asio::error::connection_reset ||
      ec == boost::asio::error::operation_aborted || ec == boost::asio::error::broken_pipe) {
    return {};
  }
  if (ec == boost::beast::error::timeout) {
    return {408, "The request was not received in time", "request_timeout"};
  }
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
    return {431, "The request line and headers are over the limit of " + kib(limits_.max_header_bytes),
            "headers_too_large"};
  }
  if (ec == http::error::body_limit) {
    return {413, "Request body is over the limit of " + std::to_string(limits_.max_body_bytes) + " bytes",
            "payload_too_large"};
  }
  if (ec == http::error::bad_content_length || ec == http::error::multiple_content_length) {
    return {400, "Invalid Content-Length header", "invalid_content_length"};
  }
  if (ec == http::error::bad_transfer_encoding) {
    return {400, "Invalid Transfer-Encoding header (or one together with Content-Length)",
            "invalid_transfer_encoding"};
  }
  if (ec == http::error::bad_version) {
    return {505, "Only HTTP/1.0 and HTTP/1.1 are supported", "http_version_not_supported"};
  }
  if (ec == http::error::bad_chunk || ec == http::error::bad_chunk_extension) {
    return {400, "Malformed chunked request body", "invalid_chunk"};
  }
  return {400, "Malformed HTTP request (" + ec.message() + ")", "bad_request"};
}

void RequestReader::on_request_impl(http::verb, string_view method, string_view target, int version,
                                    error_code& ec) {
  req_.method = std::string(method);
  req_.target = std::string(target);
  req_.path = req_.target.substr(0, req_.target.find('?'));
  req_.version = version;
  if (version != 10 && version != 11) {
    ec = http::error::bad_version;
  }
}

void RequestReader::on_response_impl(int, string_view, int, error_code& ec) { ec = http::error::bad_status; }

void RequestReader::on_field_impl(http::field, string_view name, string_view value, error_code& ec) {
  if (static_cast<int>(req_.headers.size()) >= limits_.max_headers) {
    return reject(431, "The request has more than " + std::to_string(limits_.max_headers) + " header fields",
                  "too_many_headers", ec);
  }
  req_.headers.emplace_back(std::string(name), std::string(value));
}

void RequestReader::on_header_impl(error_code& ec) {
  req_.keep_alive = keep_alive();
  std::string te = trimmed(req_.header("Transfer-Encoding"));
  if (req_.has_header("Transfer-Encoding") && !iequals(te, "chunked")) {
    return reject(501, "Transfer-Encoding '" + te + "' is not supported (only chunked)",
                  "unsupported_transfer_encoding", ec);
  }
  const std::string ce = req_.header("Content-Encoding");
  if (!parse_content_coding(ce, &coding_)) {
    return reject(415, "Content-Encoding '" + ce + "' is not supported (use gzip, deflate or identity)",
                  "unsupported_content_encoding", ec);
  }
  if (req_.has_header("Expect")) {
    if (!iequals(trimmed(req_.header("Expect")), "100-continue")) {
      return reject(417, "Only 'Expect: 100-continue' is supported", "expectation_failed", ec);
    }
    expect_continue_ = req_.version >= 11;
  }
}

void RequestReader::on_body_init_impl(const boost::optional<std::uint64_t>& content_length, error_code&) {
  // Memory follows the bytes that arrive, not what the client announces: a
  // Content-Length (at most max_body_bytes here) reserves at most 64 KiB.
  if (content_length && coding_ == ContentCoding::kIdentity) {
    req_.body.reserve(static_cast<size_t>(std::min<std::uint64_t>(*content_length, 64 << 10)));
  }
  decoder_ = std::make_unique<BodyDecoder>(coding_, limits_.max_body_bytes, &req_.body);
}

std::size_t RequestReader::decode(string_view body, error_code& ec) {
  switch (decoder_->feed({body.data(), body.size()})) {
    case BodyDecoder::Result::kOk: return body.size();
    case BodyDecoder::Result::kTooLarge:
      reject(413, "Request body decodes to more than the limit of " + std::to_string(limits_.max_body_bytes) +
                      " bytes",
             "payload_too_large", ec);
      return 0;
    case BodyDecoder::Result::kCorrupt:
      reject(400, "The request body is not valid " + req_.header("Content-Encoding") + " data",
             "invalid_content_encoding", ec);
      return 0;
  }
  return 0;
}

std::size_t RequestReader::on_body_impl(string_view body, error_code& ec) { return decode(body, ec); }

void RequestReader::on_chunk_header_impl(std::uint64_t, string_view, error_code&) {}

std::size_t RequestReader::on_chunk_body_impl(std::uint64_t, string_view body, error_code& ec) {
  return decode(body, ec);
}

void RequestReader::on_finish_impl(error_code& ec) {
  if (decoder_ && decoder_->finish() != BodyDecoder::Result::kOk) {
    reject(400, "The request body is truncated " + req_.header("Content-Encoding") + " data",
           "invalid_content_encoding", ec);
  }
}

}  // namespace ms::server
