// Status and Result<T>: how errors cross module boundaries in megaserve.
// No exception crosses the engine thread, a CUDA call site or the HTTP layer;
// functions that can fail return Status (no value) or Result<T> (value or error).
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace ms {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // caller's input is malformed or out of range
  kNotFound,          // file, tensor, model, token ... does not exist
  kUnimplemented,     // a valid setting the engine does not implement
  kOutOfRange,        // e.g. prompt longer than the context
  kResourceExhausted, // KV blocks, queue slots, memory
  kDataLoss,          // truncated or corrupt file
  kInternal,          // a bug or a device fault
  kUnavailable,       // shutting down, unhealthy
  kCancelled,
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: <message>"
  std::string to_string() const;
  // Prefixes context, e.g. status.with_context("loading model.safetensors").
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).is_ok()); }

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ms

#define MS_CONCAT_INNER(a, b) a##b
#define MS_CONCAT(a, b) MS_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` failed.
#define MS_RETURN_IF_ERROR(expr)              \
  do {                                        \
    ::ms::Status ms_status_ = (expr);         \
    if (!ms_status_.is_ok()) return ms_status_; \
  } while (0)

// MS_ASSIGN_OR_RETURN(auto x, make_x()): unwraps a Result or returns its error.
#define MS_ASSIGN_OR_RETURN(lhs, expr) MS_ASSIGN_OR_RETURN_IMPL(MS_CONCAT(ms_result_, __LINE__), lhs, expr)
#define MS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.is_ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
