// What a hand-over between two processes costs on this machine before any
// runtime is involved: the round trip of a 24-byte message (a PING frame's
// size) between two processes over TCP on loopback, measured three ways in
// one run:
//   blocking   both ends sleep in recv() until the bytes come, so each
//              message wakes a sleeping thread — the way tensorpc's
//              sessions wait, and the way a decode step's hand-overs go;
//   awake      the same, while a lowest-priority (nice 19) spinner per core
//              keeps the cores from going idle, so a wake-up finds its core
//              running;
//   polling    both ends spin on a non-blocking recv(): no thread sleeps.
// On a virtual machine the first can cost several times the others: waking
// a halted virtual CPU goes through the hypervisor. A layer split over two
// processes crosses between them at least twice per generated token (the
// hidden state on, the next token back), so a token costs the local step
// plus at least one of these round trips; docs/performance.md uses the
// figures to tell what a split of a small model can reach.
//
// Usage: wakeup_bench [round trips per repetition (default 5000)]
// Reported: the median over 7 repetitions, and their spread.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kMessageBytes = 24;
constexpr int kRepetitions = 7;

enum class Mode { blocking, awake, polling };

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "wakeup_bench: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

// Reads exactly `n` bytes; false when the other end closed.
bool read_exactly(int fd, char* bytes, size_t n, bool poll) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::recv(fd, bytes + got, n - got, poll ? MSG_DONTWAIT : 0);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r == 0) {
      return false;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      fail("recv");
    }
  }
  return true;
}

void write_exactly(int fd, const char* bytes, size_t n) {
  size_t sent = 0;
  while (sent < n) {
    const ssize_t r = ::send(fd, bytes + sent, n - sent, MSG_NOSIGNAL);
    if (r < 0 && errno != EINTR) fail("send");
    if (r > 0) sent += static_cast<size_t>(r);
  }
}

void no_delay(int fd) {
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) fail("setsockopt");
}

// A child process spinning at the lowest priority until killed.
pid_t start_spinner() {
  const pid_t pid = ::fork();
  if (pid < 0) fail("fork");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the bench
    ::setpriority(PRIO_PROCESS, 0, 19);
    volatile unsigned long turns = 0;
    for (;;) turns = turns + 1;
  }
  return pid;
}

// Median and spread of the round trip, in microseconds, over kRepetitions
// of `count` round trips, with an echoing child process on the far end.
struct RoundTrip {
  double median = 0, low = 0, high = 0;
};
RoundTrip measure(Mode mode, int count) {
  const bool poll = mode == Mode::polling;
  std::vector<pid_t> spinners;
  if (mode == Mode::awake) {
    for (long i = 0; i < std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)); ++i) spinners.push_back(start_spinner());
  }
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) fail("socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    fail("listen on 127.0.0.1");
  }
  const pid_t echo = ::fork();
  if (echo < 0) fail("fork");
  if (echo == 0) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) fail("connect");
    no_delay(fd);
    char message[kMessageBytes];
    while (read_exactly(fd, message, sizeof message, poll)) write_exactly(fd, message, sizeof message);
    std::_Exit(0);
  }
  const int fd = ::accept(listener, nullptr, nullptr);
  if (fd < 0) fail("accept");
  ::close(listener);
  no_delay(fd);

  char message[kMessageBytes] = {};
  std::vector<double> us;
  for (int rep = 0; rep < kRepetitions; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < count; ++i) {
      write_exactly(fd, message, sizeof message);
      if (!read_exactly(fd, message, sizeof message, poll)) fail("the echoing process closed");
    }
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / count);
  }
  ::close(fd);
  ::waitpid(echo, nullptr, 0);
  for (pid_t p : spinners) {
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us.front(), us.back()};
}

}  // namespace

int main(int argc, char** argv) {
  const int count = argc > 1 ? std::atoi(argv[1]) : 5000;
  if (count < 1 || count > 10'000'000) {
    std::fprintf(stderr, "usage: wakeup_bench [round trips per repetition, 1 to 10000000]\n");
    return 2;
  }
  std::printf("round trip of a %zu-byte message between two processes, TCP on loopback\n", kMessageBytes);
  std::printf("(median of %d repetitions of %d, microseconds)\n\n", kRepetitions, count);
  const RoundTrip blocking = measure(Mode::blocking, count);
  const RoundTrip awake = measure(Mode::awake, count);
  const RoundTrip polling = measure(Mode::polling, count);
  const auto row = [&](const char* name, const RoundTrip& r) {
    std::printf("%-58s %7.1f us  [%.1f-%.1f]  %5.2fx\n", name, r.median, r.low, r.high, r.median / blocking.median);
  };
  row("blocking recv (each message wakes a sleeping thread)", blocking);
  row("blocking recv, cores kept busy by nice-19 spinners", awake);
  row("both ends polling (no thread sleeps)", polling);
  return 0;
}
