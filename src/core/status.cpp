#include "tensorpc/status.h"

namespace tensorpc {

const char* to_string(StatusCode code) {
  switch (code) {
    case StatusCode::ok: return "ok";
    case StatusCode::invalid_argument: return "invalid argument";
    case StatusCode::out_of_memory: return "out of memory";
    case StatusCode::not_found: return "not found";
    case StatusCode::unsupported: return "unsupported";
    case StatusCode::io_error: return "I/O error";
    case StatusCode::protocol_error: return "protocol error";
    case StatusCode::internal: return "internal error";
    case StatusCode::unavailable: return "unavailable";
  }
  return "unknown status";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(tensorpc::to_string(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

}  // namespace tensorpc
