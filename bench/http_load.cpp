// A keep-alive HTTP/1.1 load generator for `tensorpc serve`'s front: one
// thread, epoll over non-blocking sockets, nothing beyond POSIX and the
// standard library, so that it costs the shared cores little and measures the
// front rather than a client library.
//
// Each of CONNECTIONS clients sends one request and reads the whole answer
// (Content-Length, chunked, or up to the close) before sending the next; a
// connection the server closes is opened again. Answers that end within the
// WARMUP seconds are not counted; those that end within the SECONDS after are.
// With --slowloris S, S connections are opened before the clients: each sends
// the start of a completion request, then one more header byte every two
// seconds and never ends its headers (opened again when the server closes it).
// A front that gives each connection a thread of a fixed pool runs out of
// threads; one that limits the time to read a request's headers does not.
//
// Usage: http_load --port PORT [--host 127.0.0.1] [--request health|completion]
//                  [--connections 100] [--seconds 5] [--warmup 1] [--slowloris 0] [--server-pid 0]
// Prints `name: value` lines (bench/http_front.py reads them): ok_per_second
// (2xx answers a second), other (answers of other statuses, and which),
// errors (failed connects, resets, answers cut off), in_flight and
// oldest_wait_s (requests sent and not answered at the end, and the longest
// wait among them: a stalled front), p50_ms and p99_ms (the 2xx answers' latency,
// the connect included when a connection was opened for the request),
// slowloris_open (open at the end) and cpu_percent (this program's user and
// system time over the counted seconds, in percent of one core; with
// --server-pid PID, server_cpu_percent the same of that process).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kTrickleEvery = std::chrono::seconds(2);
constexpr auto kReopenAfterError = std::chrono::milliseconds(100);  // a refused connect is not retried in a spin
constexpr auto kTickEvery = std::chrono::milliseconds(10);
// Connections are opened a few at a time, and a closed one again the same way
// unless the server closed it after an answer: a burst of connects overflows a
// short listen backlog, and the dropped ones wait a second or more to retry.
constexpr size_t kConnectingAtOnce = 4;
constexpr auto kOpeningAtMost = std::chrono::seconds(10);
constexpr std::string_view kSlowStart = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
constexpr std::string_view kSlowHeader = "X-Pad: 1\r\n";  // sent a byte at a time, over and over

struct Options {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string request = "health";
  int connections = 100;
  double seconds = 5;
  double warmup = 1;
  int slowloris = 0;
  int server_pid = 0;  // the server's process, whose CPU time is reported too
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "http_load: %s\nusage: http_load --port PORT [--host 127.0.0.1] [--request health|completion]\n"
               "                 [--connections 100] [--seconds 5] [--warmup 1] [--slowloris 0] [--server-pid 0]\n",
               why.c_str());
  std::exit(2);
}

Options parse_options(int argc, char** argv) {
  Options o;
  const std::map<std::string, std::string*> texts{{"--host", &o.host}, {"--request", &o.request}};
  const std::map<std::string, int*> counts{{"--port", &o.port},
                                           {"--connections", &o.connections},
                                           {"--slowloris", &o.slowloris},
                                           {"--server-pid", &o.server_pid}};
  const std::map<std::string, double*> times{{"--seconds", &o.seconds}, {"--warmup", &o.warmup}};
  for (int i = 1; i < argc; i += 2) {
    const std::string name = argv[i];
    if (i + 1 >= argc) usage("no value for " + name);
    if (texts.contains(name)) *texts.at(name) = argv[i + 1];
    if (counts.contains(name)) *counts.at(name) = std::atoi(argv[i + 1]);
    if (times.contains(name)) *times.at(name) = std::atof(argv[i + 1]);
    if (!texts.contains(name) && !counts.contains(name) && !times.contains(name)) usage("unknown option " + name);
  }
  if (o.port <= 0 || o.port > 65535) usage("--port is needed (1 to 65535)");
  if (o.request != "health" && o.request != "completion") usage("--request is health or completion");
  if (o.connections <= 0 || o.seconds <= 0 || o.warmup < 0 || o.slowloris < 0) usage("a count or time is out of range");
  return o;
}

std::string request_text(const Options& o) {
  if (o.request == "health") return "GET /health HTTP/1.1\r\nHost: " + o.host + "\r\n\r\n";
  const std::string body = R"({"prompt":"In the beginning","max_tokens":1})";
  return "POST /v1/completions HTTP/1.1\r\nHost: " + o.host +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A complete answer at the front of what a connection has read.
struct Answer {
  int status = 0;      // 0: not an HTTP answer
  size_t length = 0;   // bytes, head and body
  bool close = false;  // the server closes the connection after it
};

// The answer at the front of `in`, or nullopt while it is incomplete. `eof`:
// the server has closed, which ends a body with neither length nor chunks.
std::optional<Answer> parse_answer(const std::string& in, bool eof) {
  const size_t head_end = in.find("\r\n\r\n");
  if (head_end == std::string::npos) return std::nullopt;
  if (in.compare(0, 5, "HTTP/") != 0) return Answer{.status = 0, .length = in.size(), .close = true};
  Answer a{.status = std::atoi(in.c_str() + in.find(' ') + 1)};
  std::string head = in.substr(0, head_end + 2);
  std::transform(head.begin(), head.end(), head.begin(), [](unsigned char c) { return std::tolower(c); });
  a.close = head.find("\r\nconnection: close") != std::string::npos;
  const size_t body = head_end + 4;
  const size_t length_at = head.find("\r\ncontent-length:");
  const size_t encoding_at = head.find("\r\ntransfer-encoding:");
  if (a.status / 100 == 1 || a.status == 204 || a.status == 304) {
    a.length = body;
  } else if (length_at != std::string::npos) {
    a.length = body + std::strtoull(head.c_str() + length_at + 17, nullptr, 10);
  } else if (encoding_at != std::string::npos &&
             head.find("chunked", encoding_at) < head.find("\r\n", encoding_at + 2)) {
    size_t at = body;
    for (;;) {  // chunks: a hexadecimal size line, the bytes, CRLF; the last has size 0
      const size_t line_end = in.find("\r\n", at);
      if (line_end == std::string::npos) return std::nullopt;
      const size_t size = std::strtoull(in.c_str() + at, nullptr, 16);
      at = line_end + 2;
      if (size == 0) break;
      at += size + 2;
      if (at > in.size()) return std::nullopt;
    }
    for (;;) {  // trailers, up to an empty line
      const size_t line_end = in.find("\r\n", at);
      if (line_end == std::string::npos) return std::nullopt;
      const bool empty = line_end == at;
      at = line_end + 2;
      if (empty) break;
    }
    a.length = at;
  } else {
    if (!eof) return std::nullopt;
    a.length = in.size();
    a.close = true;
  }
  if (a.length > in.size()) return std::nullopt;
  return a;
}

// A file descriptor, closed when dropped; closing also takes it out of the epoll set.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Socket& operator=(Socket&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

struct Connection {
  Socket socket;
  bool slow = false;        // a slowloris connection
  bool open = false;        // connected
  bool want_out = false;    // EPOLLOUT is armed
  std::string out;          // bytes not yet sent
  std::string in;           // bytes read, not yet a whole answer
  bool waiting = false;     // a request is in flight
  Clock::time_point asked;  // when it was started
  Clock::time_point due;    // closed: when to open again; slow and open: when to send the next byte
  size_t trickled = 0;      // header bytes a slow connection has sent after its start
};

// User and system time of this process, or with `pid` > 0 of that one (/proc; 0 when it cannot be read).
double cpu_seconds(int pid = 0) {
  if (pid <= 0) {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
  }
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (stat.rfind(')') == std::string::npos) return 0;
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));  // from the third field, the state
  std::string field;
  for (int i = 3; i < 14; ++i) fields >> field;
  double user = 0, system = 0;
  fields >> user >> system;  // fields 14 and 15, in clock ticks
  return (user + system) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

class Load {
 public:
  Load(const Options& o, sockaddr_in server) : o_(o), server_(server), request_(request_text(o)) {
    epoll_ = Socket(::epoll_create1(0));
    if (epoll_.fd() < 0) usage(std::string("epoll_create1: ") + std::strerror(errno));
    connections_.resize(static_cast<size_t>(o.slowloris + o.connections));
    for (int i = 0; i < o.slowloris; ++i) connections_[static_cast<size_t>(i)].slow = true;
  }

  // The slow connections open, then the clients (each bounded in time, a
  // front that never accepts them included), the warm-up, the counted seconds.
  void run() {
    opening_until_ = static_cast<size_t>(o_.slowloris);
    poll_until(Clock::now() + kOpeningAtMost, true);
    opening_until_ = connections_.size();
    poll_until(Clock::now() + kOpeningAtMost, true);
    poll_until(Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.warmup)));
    counting_ = true;
    const double cpu_before = cpu_seconds(), server_before = cpu_seconds(o_.server_pid);
    const Clock::time_point begin = Clock::now();
    poll_until(begin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.seconds)));
    counting_ = false;
    const double wall = std::chrono::duration<double>(Clock::now() - begin).count();
    report(wall, cpu_seconds() - cpu_before, cpu_seconds(o_.server_pid) - server_before);
  }

 private:
  void open(size_t i, Clock::time_point now) {
    Connection& c = connections_[i];
    const bool slow = c.slow;
    c = Connection();
    c.slow = slow;
    c.socket = Socket(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
    connecting_ += c.socket.fd() >= 0;
    const int one = 1;
    ::setsockopt(c.socket.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    epoll_event e{.events = EPOLLIN | EPOLLOUT, .data = {.u64 = i}};
    if (c.socket.fd() < 0 ||
        (::connect(c.socket.fd(), reinterpret_cast<const sockaddr*>(&server_), sizeof server_) != 0 &&
         errno != EINPROGRESS) ||
        ::epoll_ctl(epoll_.fd(), EPOLL_CTL_ADD, c.socket.fd(), &e) != 0) {
      return close(i, now, true);
    }
    c.want_out = true;
    c.out = c.slow ? std::string(kSlowStart) : request_;
    c.waiting = !c.slow;
    c.asked = now;
    c.due = now + kTrickleEvery;
  }

  void close(size_t i, Clock::time_point now, bool error) {
    Connection& c = connections_[i];
    if (error && counting_) ++errors_;
    if (c.slow && c.open) ++reopened_;
    if (c.socket.fd() >= 0 && !c.open) --connecting_;
    c.socket = Socket();
    c.open = false;
    c.due = now + (error ? Clock::duration(kReopenAfterError) : Clock::duration::zero());
    if (!c.slow && !error) open(i, now);
  }

  void send_out(size_t i, Clock::time_point now) {
    Connection& c = connections_[i];
    while (!c.out.empty()) {
      const ssize_t n = ::send(c.socket.fd(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return arm(i, true);
      if (n < 0 && errno != EINTR) return close(i, now, true);
      if (n > 0) c.out.erase(0, static_cast<size_t>(n));
    }
    arm(i, false);
  }

  // Whether epoll reports the socket writable too: only while bytes wait to be sent.
  void arm(size_t i, bool out) {
    Connection& c = connections_[i];
    if (c.want_out == out) return;
    epoll_event e{.events = EPOLLIN | (out ? EPOLLOUT : 0u), .data = {.u64 = i}};
    ::epoll_ctl(epoll_.fd(), EPOLL_CTL_MOD, c.socket.fd(), &e);
    c.want_out = out;
  }

  // Reads what has come; each whole answer is counted and the next request sent.
  void receive(size_t i, Clock::time_point now) {
    Connection& c = connections_[i];
    char buffer[65536];
    bool eof = false;
    for (;;) {
      const ssize_t n = ::recv(c.socket.fd(), buffer, sizeof buffer, 0);
      if (n > 0 && !c.slow) c.in.append(buffer, static_cast<size_t>(n));
      if (n == 0) eof = true;
      if (n == 0 || (n < 0 && errno != EINTR)) break;
    }
    if (eof && c.slow) return close(i, now, false);
    if (!eof && errno != EAGAIN && errno != EWOULDBLOCK) return close(i, now, true);
    while (std::optional<Answer> a = parse_answer(c.in, eof)) {
      c.in.erase(0, a->length);
      if (counting_) count(a->status, now - c.asked);
      c.waiting = false;
      if (a->close || a->status == 0) return close(i, now, a->status == 0);
      c.out = request_;
      c.waiting = true;
      c.asked = now;
      send_out(i, now);
      if (c.socket.fd() < 0) return;
    }
    if (eof) close(i, now, c.waiting || !c.in.empty());
  }

  void count(int status, Clock::duration latency) {
    if (status / 100 == 2) {
      latencies_ms_.push_back(std::chrono::duration<double, std::milli>(latency).count());
    } else {
      ++other_[status];
    }
  }

  // Slow connections' next bytes, and closed connections opened again.
  void tick(Clock::time_point now) {
    for (size_t i = 0; i < connections_.size(); ++i) {
      Connection& c = connections_[i];
      if (c.due > now) continue;
      if (c.socket.fd() < 0) {
        if (i < opening_until_ && connecting_ < kConnectingAtOnce) open(i, now);
      } else if (c.slow && c.open) {
        c.out += kSlowHeader[c.trickled++ % kSlowHeader.size()];
        c.due += kTrickleEvery;
        send_out(i, now);
      }
    }
  }

  // Runs the connections until `end`, or until all that may open are open.
  void poll_until(Clock::time_point end, bool until_open = false) {
    epoll_event events[256];
    Clock::time_point ticked{};
    for (Clock::time_point now = Clock::now(); now < end && !(until_open && all_open()); now = Clock::now()) {
      const auto wait = std::min<Clock::duration>(end - now, kTickEvery);
      const int n = ::epoll_wait(epoll_.fd(), events, 256,
                                 static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wait).count()));
      now = Clock::now();
      for (int k = 0; k < n; ++k) {
        const size_t i = events[k].data.u64;
        Connection& c = connections_[i];
        if (!c.open && (events[k].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
          int error = 0;
          socklen_t size = sizeof error;
          ::getsockopt(c.socket.fd(), SOL_SOCKET, SO_ERROR, &error, &size);
          if (error != 0) {
            close(i, now, true);
            continue;
          }
          c.open = true;
          --connecting_;
        }
        if (events[k].events & EPOLLOUT) send_out(i, now);
        if (c.socket.fd() >= 0 && (events[k].events & (EPOLLIN | EPOLLERR | EPOLLHUP))) receive(i, now);
      }
      if (now - ticked >= kTickEvery) tick(ticked = now);
    }
  }

  bool all_open() const {
    return std::all_of(connections_.begin(), connections_.begin() + static_cast<std::ptrdiff_t>(opening_until_),
                       [](const Connection& c) { return c.open && c.out.empty(); });
  }

  void report(double wall, double cpu, double server_cpu) {
    const Clock::time_point now = Clock::now();
    size_t in_flight = 0, slow_open = 0;
    double oldest = 0;
    for (const Connection& c : connections_) {
      slow_open += c.slow && c.open;
      if (!c.slow && c.waiting) {
        ++in_flight;
        oldest = std::max(oldest, std::chrono::duration<double>(now - c.asked).count());
      }
    }
    std::string statuses;
    uint64_t other = 0;
    for (const auto& [status, n] : other_) {
      statuses += ' ' + std::to_string(status) + 'x' + std::to_string(n);
      other += n;
    }
    std::sort(latencies_ms_.begin(), latencies_ms_.end());
    const auto percentile = [&](double q) {
      if (latencies_ms_.empty()) return std::string("-");
      char text[32];
      std::snprintf(text, sizeof text, "%.3f",
                    latencies_ms_[std::min(latencies_ms_.size() - 1, static_cast<size_t>(q * latencies_ms_.size()))]);
      return std::string(text);
    };
    std::printf("request: %s, %d connections, %.1f s counted after %.1f s\n", o_.request.c_str(), o_.connections, wall,
                o_.warmup);
    std::printf("ok_per_second: %.1f\nok: %zu\n", static_cast<double>(latencies_ms_.size()) / wall,
                latencies_ms_.size());
    std::printf("other: %llu%s\n", static_cast<unsigned long long>(other), statuses.c_str());
    std::printf("errors: %llu\n", static_cast<unsigned long long>(errors_));
    std::printf("in_flight: %zu\noldest_wait_s: %.1f\n", in_flight, oldest);
    std::printf("p50_ms: %s\np99_ms: %s\n", percentile(0.50).c_str(), percentile(0.99).c_str());
    std::printf("slowloris_open: %zu of %d (closed by the server %llu times)\n", slow_open, o_.slowloris,
                static_cast<unsigned long long>(reopened_));
    std::printf("cpu_percent: %.0f\n", 100 * cpu / wall);
    if (o_.server_pid > 0) std::printf("server_cpu_percent: %.0f\n", 100 * server_cpu / wall);
  }

  const Options& o_;
  const sockaddr_in server_;
  const std::string request_;
  Socket epoll_;
  std::vector<Connection> connections_;  // the slow ones, then the clients
  size_t opening_until_ = 0;             // closed connections before this index are opened again
  size_t connecting_ = 0;                // connects started and not yet done
  bool counting_ = false;
  std::vector<double> latencies_ms_;  // of the counted 2xx answers
  std::map<int, uint64_t> other_;     // counted answers of other statuses, by status
  uint64_t errors_ = 0;
  uint64_t reopened_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  sockaddr_in server{};
  server.sin_family = AF_INET;
  server.sin_port = htons(static_cast<uint16_t>(o.port));
  if (::inet_pton(AF_INET, o.host.c_str(), &server.sin_addr) != 1) usage("--host takes an IPv4 address");
  // Every connection is a descriptor: take all the process may have.
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  if (files.rlim_cur < static_cast<rlim_t>(o.connections + o.slowloris + 16)) {
    usage("too many connections for the limit on open files (" + std::to_string(files.rlim_cur) + ")");
  }
  Load(o, server).run();
}
