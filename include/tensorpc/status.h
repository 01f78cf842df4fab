// Status: the result of every tensorpc operation that can fail.
//
// A Status is either ok or carries a code and a message that says what went
// wrong in words a user can act on ("mul_mat: a is [64, 3] and b is [32, 1]:
// ne[0] must match"). StatusOr<T> carries a value or a failed Status.
// Graph building reports misuse by throwing Error, which wraps a Status; every
// other layer returns Status values. There is no third way to fail.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace tensorpc {

enum class StatusCode {
  ok = 0,
  invalid_argument = 1,  // the caller asked for something malformed
  out_of_memory = 2,     // a device or limit could not hold the request
  not_found = 3,         // a handle, key or file that does not exist
  unsupported = 4,       // valid, but this device or version cannot do it
  io_error = 5,          // the operating system or the network failed
  protocol_error = 6,    // a peer broke the wire protocol
  internal = 7,          // a bug in tensorpc
  // A server the work needs was lost and nothing could take its place yet:
  // the same request may succeed later. Never sent over the wire.
  unavailable = 8,
};

const char* to_string(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::ok; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid_argument: <message>", or "ok".
  std::string to_string() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::ok;
  std::string message_;
};

inline Status invalid_argument(std::string msg) { return {StatusCode::invalid_argument, std::move(msg)}; }
inline Status out_of_memory(std::string msg) { return {StatusCode::out_of_memory, std::move(msg)}; }
inline Status not_found(std::string msg) { return {StatusCode::not_found, std::move(msg)}; }
inline Status unsupported(std::string msg) { return {StatusCode::unsupported, std::move(msg)}; }
inline Status io_error(std::string msg) { return {StatusCode::io_error, std::move(msg)}; }
inline Status protocol_error(std::string msg) { return {StatusCode::protocol_error, std::move(msg)}; }
inline Status internal_error(std::string msg) { return {StatusCode::internal, std::move(msg)}; }
inline Status unavailable(std::string msg) { return {StatusCode::unavailable, std::move(msg)}; }

// The exception form of a failed Status, thrown by graph building and by
// StatusOr::value() on a failed result.
class Error : public std::runtime_error {
 public:
  explicit Error(Status status) : std::runtime_error(status.to_string()), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}            // NOLINT: implicit by design
  StatusOr(Status status) : v_(std::move(status)) {       // NOLINT: implicit by design
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::internal, "StatusOr made from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  // The value; throws Error when there is none.
  T& value() & {
    if (!ok()) throw Error(std::get<Status>(v_));
    return std::get<T>(v_);
  }
  // By value, so `for (x : f().value())` does not dangle.
  T value() && {
    if (!ok()) throw Error(std::get<Status>(v_));
    return std::move(std::get<T>(v_));
  }
  T& operator*() & { return value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<T, Status> v_;
};

// Returns early from a function returning Status (or StatusOr) when `expr` failed.
#define TENSORPC_RETURN_IF_ERROR(expr)          \
  do {                                          \
    ::tensorpc::Status status_ = (expr);        \
    if (!status_.ok()) return status_;          \
  } while (0)

// TENSORPC_ASSIGN_OR_RETURN(lhs, expr): evaluates the StatusOr `expr` once and
// returns its Status early when it failed, else moves the value into `lhs`
// (`auto x`, `const Foo& y`, or an existing variable). Several statements, so
// never the body of an unbraced if or loop.
#define TENSORPC_ASSIGN_OR_RETURN(lhs, ...) \
  TENSORPC_ASSIGN_OR_RETURN_IMPL_(TENSORPC_STATUS_CONCAT_(tensorpc_statusor_, __COUNTER__), lhs, __VA_ARGS__)

#define TENSORPC_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, ...) \
  auto statusor = (__VA_ARGS__);                            \
  if (!statusor.ok()) return statusor.status();             \
  lhs = std::move(statusor).value()
#define TENSORPC_STATUS_CONCAT_(a, b) TENSORPC_STATUS_CONCAT_INNER_(a, b)
#define TENSORPC_STATUS_CONCAT_INNER_(a, b) a##b

}  // namespace tensorpc
