// Keeping idle cores awake (awake_cores.h).
#include "awake_cores.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

namespace tensorpc::tools {

StatusOr<AwakeCores> AwakeCores::request(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    std::string why = std::strerror(error);
    if (error == ENOENT) why += " (this kernel takes no CPU latency requests)";
    if (error == EACCES || error == EPERM) why += " (asking the kernel to keep cores awake needs root)";
    return io_error("cannot keep idle cores awake: " + path + ": " + why);
  }
  // The kernel's interface: a 32-bit number of microseconds, in binary.
  const int32_t microseconds = 0;
  const ssize_t wrote = ::write(fd, &microseconds, sizeof microseconds);
  if (wrote != static_cast<ssize_t>(sizeof microseconds)) {
    const std::string why = wrote < 0 ? std::strerror(errno) : "a short write";
    ::close(fd);
    return io_error("cannot keep idle cores awake: writing " + path + ": " + why);
  }
  return AwakeCores(fd);
}

StatusOr<std::optional<AwakeCores>> AwakeCores::request_if(const std::string& path) {
  if (path.empty()) return std::optional<AwakeCores>();
  TENSORPC_ASSIGN_OR_RETURN(AwakeCores held, request(path));
  return std::optional<AwakeCores>(std::move(held));
}

AwakeCores::AwakeCores(AwakeCores&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

AwakeCores& AwakeCores::operator=(AwakeCores&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

AwakeCores::~AwakeCores() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace tensorpc::tools
