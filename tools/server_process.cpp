// Child tensorpc-server processes (server_process.h).
#include "server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace tensorpc::tools {
namespace {

// A socket fd closed on every path out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

bool accepts_connections(uint16_t port) {
  Fd s{::socket(AF_INET, SOCK_STREAM, 0)};
  if (s.fd < 0) return false;
  const sockaddr_in a = loopback(port);
  return ::connect(s.fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
}

}  // namespace

StatusOr<uint16_t> pick_free_port() {
  Fd s{::socket(AF_INET, SOCK_STREAM, 0)};
  if (s.fd < 0) return io_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in a = loopback(0);
  if (::bind(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    return io_error(std::string("bind 127.0.0.1:0: ") + std::strerror(errno));
  }
  socklen_t len = sizeof a;
  if (::getsockname(s.fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return io_error(std::string("getsockname: ") + std::strerror(errno));
  }
  return ntohs(a.sin_port);
}

std::string executable_dir() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::start(const std::string& binary,
                                                              const std::vector<std::string>& args,
                                                              std::chrono::milliseconds timeout) {
  if (::access(binary.c_str(), X_OK) != 0) {
    return not_found("cannot run " + binary + ": " + std::strerror(errno) + " (build the tensorpc-server target)");
  }
  // The port picked can be taken by another process before the server binds
  // it; the server then exits saying so, and another port is tried.
  constexpr int kTries = 3;
  Status failed;
  for (int attempt = 0; attempt < kTries; ++attempt) {
    TENSORPC_ASSIGN_OR_RETURN(const uint16_t port, pick_free_port());
    auto started = start_on(binary, args, port, timeout);
    if (started.ok() || started.status().message().find("Address already in use") == std::string::npos) {
      return started;
    }
    failed = started.status();
  }
  return failed;
}

StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::start_on(const std::string& binary,
                                                                 const std::vector<std::string>& args, uint16_t port,
                                                                 std::chrono::milliseconds timeout) {
  char log_template[] = "/tmp/tensorpc-server-XXXXXX";
  const int log_fd = ::mkstemp(log_template);
  if (log_fd < 0) return io_error(std::string("mkstemp: ") + std::strerror(errno));

  // argv is built before fork: the child only calls async-signal-safe functions.
  std::vector<std::string> all = {binary, "-p", std::to_string(port)};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    ::unlink(log_template);
    return io_error(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // A parent that dies without its destructor running (a crash, SIGKILL)
    // takes the server with it; checked again in case it died before the call.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(log_fd);
  // Owned from here: every return below stops and reaps the child.
  std::unique_ptr<ServerProcess> p(new ServerProcess(pid, port, log_template));

  // Ready when the server itself says it listens on the port ("… listening
  // on HOST:PORT") and the port accepts: an open port alone could be another
  // process's.
  std::string on_port = ":";  // appended, not `":" + …`: GCC 12 -O3 warns falsely (-Wrestrict) on that
  on_port += std::to_string(port);
  const auto says_listening = [&](const std::string& log) {
    for (size_t at = log.find("listening on "); at != std::string::npos; at = log.find("listening on ", at + 1)) {
      const size_t end = log.find('\n', at);
      if (end == std::string::npos) return false;
      if (log.compare(end - on_port.size(), on_port.size(), on_port) == 0) return true;
    }
    return false;
  };
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      p->pid_ = -1;  // reaped
      const std::string how = WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                                : "was killed by signal " + std::to_string(WTERMSIG(status));
      return io_error(binary + " on port " + std::to_string(p->port_) + " " + how +
                      " before accepting connections; its output:\n" + p->output());
    }
    if (says_listening(p->log_text()) && accepts_connections(p->port_)) return p;
    if (std::chrono::steady_clock::now() > deadline) {
      return io_error(binary + " did not accept connections on " + p->endpoint() + " within " +
                      std::to_string(timeout.count()) + " ms; its output:\n" + p->output());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int ServerProcess::stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int status = 0;
  // A stopping server joins its session threads; a few seconds is plenty,
  // and after that the demo must not hang on it.
  for (int i = 0; i < 250; ++i) {
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

ServerProcess::~ServerProcess() {
  stop();
  ::unlink(log_.c_str());
}

std::string ServerProcess::log_text() const {
  std::ifstream in(log_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ServerProcess::output() const {
  std::string s = log_text();
  if (s.size() > 2000) s = "…" + s.substr(s.size() - 2000);
  return s;
}

}  // namespace tensorpc::tools
