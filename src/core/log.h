// Minimal leveled logging to stderr, thread-safe, with a global level.
#pragma once

#include <sstream>
#include <string>

namespace ms {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_line(LogLevel level, const std::string& message);

class LogMessage {
 public:
  explicit LogMessage(LogLevel level) : level_(level) {}
  ~LogMessage() { log_line(level_, stream_.str()); }
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace ms

#define MS_LOG(level)                                       \
  if (::ms::LogLevel::k##level < ::ms::log_level()) {       \
  } else                                                    \
    ::ms::LogMessage(::ms::LogLevel::k##level).stream()
