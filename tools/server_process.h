// ServerProcess: a tensorpc-server child process on a loopback port, for
// `tensorpc demo`. The destructor stops it (SIGTERM, then SIGKILL if it
// does not exit in time) and reaps it, so no path — error paths included —
// leaves a server running or a zombie behind; and a parent killed outright
// (a crash, SIGKILL) takes its servers with it (PR_SET_PDEATHSIG: the death
// of the thread that started them, so start them from one that outlives them).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tensorpc/status.h"

namespace tensorpc::tools {

class ServerProcess {
 public:
  // Starts `binary` with `args` plus `-p PORT` on a free loopback port, and
  // waits until the server prints that it listens there and the port accepts
  // connections (another process's listener on the port does not count). A
  // port taken before the server could bind it is replaced by another, up to
  // three times. Errors say why: the binary is missing, the server exited
  // (with the end of its output), or it did not accept within `timeout`.
  static StatusOr<std::unique_ptr<ServerProcess>> start(const std::string& binary, const std::vector<std::string>& args,
                                                        std::chrono::milliseconds timeout);
  // The same on `port`, once: a port another process holds is an error.
  static StatusOr<std::unique_ptr<ServerProcess>> start_on(const std::string& binary,
                                                           const std::vector<std::string>& args, uint16_t port,
                                                           std::chrono::milliseconds timeout);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  // SIGTERM and wait (SIGKILL after a few seconds); idempotent. Returns the
  // exit status as waitpid gives it, or -1 when already stopped.
  int stop();
  // The end of the server's output so far (stdout and stderr, its last 2,000
  // bytes), for error messages and tests.
  std::string output() const;

 private:
  ServerProcess(pid_t pid, uint16_t port, std::string log) : pid_(pid), port_(port), log_(std::move(log)) {}
  // All the server has written so far.
  std::string log_text() const;

  pid_t pid_;
  uint16_t port_;
  std::string log_;  // the server's stdout and stderr, removed by the destructor
};

// A port that was free a moment ago: bind 127.0.0.1:0, read the port, close.
// Another process could take it before the server binds (ServerProcess::start
// then tries another).
StatusOr<uint16_t> pick_free_port();

// The directory of the running executable (/proc/self/exe), where the other
// tools of the build sit.
std::string executable_dir();

}  // namespace tensorpc::tools
