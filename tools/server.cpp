// tensorpc-server: serves this machine's devices to tensorpc clients.
//
// Parses flags, starts a Server, prints the endpoint and its devices, and
// stops cleanly on SIGINT or SIGTERM. The signals are blocked in every thread
// (before any is started) and received by sigwait here, so no handler runs
// in the middle of a server thread's work.
#include "tensorpc/server.h"

#include <pthread.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdio>
#include <string>
#include <utility>

#include "rpc/socket.h"
#include "tensorpc/cpu_device.h"

namespace {

// "4GiB", "512M", "1e9", "1024": bytes, with binary or decimal suffixes.
bool parse_bytes(const std::string& text, uint64_t& out) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (...) {
    return false;
  }
  std::string suffix = text.substr(pos);
  for (char& c : suffix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!suffix.empty() && suffix.back() == 'b') suffix.pop_back();
  static const std::pair<const char*, double> kScales[] = {
      {"", 1},           {"k", 1e3},           {"m", 1e6},
      {"g", 1e9},        {"t", 1e12},          {"ki", 1024.0},
      {"mi", 1048576.0}, {"gi", 1073741824.0}, {"ti", 1099511627776.0},
  };
  double scale = 0;
  for (const auto& [name, factor] : kScales)
    if (suffix == name) scale = factor;
  if (scale == 0) return false;
  const double bytes = value * scale;
  if (!(bytes >= 0) || bytes >= 1.8e19) return false;
  out = static_cast<uint64_t>(bytes);
  return true;
}

std::string format_bytes(uint64_t b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f GiB", static_cast<double>(b) / (1024.0 * 1024 * 1024));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tensorpc-server: serves this machine's devices to tensorpc clients"};
  tensorpc::ServerOptions options;
  std::string cache_memory;
  app.add_option("-H,--host", options.host, "address to listen on")->capture_default_str();
  app.add_option("-p,--port", options.port, "TCP port (0: the OS picks one)")->capture_default_str();
  app.add_option("-t,--threads", options.threads, "threads of the CPU device (0: every core)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--cache", options.cache_dir, "directory of the weights cache on disk (default: memory only)");
  app.add_option("--cache-memory", cache_memory, "bytes the in-memory weights cache may hold (e.g. 4GiB)")
      ->check([](const std::string& s) {
        uint64_t v = 0;
        return parse_bytes(s, v) ? std::string() : "not a byte count: " + s + " (try 4GiB or 512MiB)";
      });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (!cache_memory.empty()) parse_bytes(cache_memory, options.cache_memory_limit);

  // Block before any thread exists: every thread the server starts inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // The default device, made here rather than by Server::start so it can be listed below.
  options.devices.push_back(
      std::make_shared<tensorpc::CpuDevice>(tensorpc::CpuDeviceOptions{.name = "cpu0", .threads = options.threads}));
  auto server = tensorpc::Server::start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "tensorpc-server: %s\n", server.status().to_string().c_str());
    return 1;
  }
  std::printf("tensorpc-server listening on %s:%u\n", options.host.c_str(), server.value()->port());
  for (size_t i = 0; i < options.devices.size(); ++i) {
    const auto mem = options.devices[i]->memory();
    std::printf("  device %zu: %s — %s, %s free of %s\n", i, options.devices[i]->name().c_str(),
                options.devices[i]->description().c_str(), format_bytes(mem.free).c_str(),
                format_bytes(mem.total).c_str());
  }
  std::printf("weights cache: %s in memory%s%s\n", format_bytes(options.cache_memory_limit).c_str(),
              options.cache_dir.empty() ? "" : ", on disk in ", options.cache_dir.c_str());
  if (!tensorpc::rpc::is_loopback_host(options.host)) {
    std::fprintf(stderr,
                 "WARNING: listening on %s, not a loopback address. tensorpc has no authentication: anyone who "
                 "can reach this port can use these devices and read and write their memory.\n",
                 options.host.c_str());
  }
  std::fflush(stdout);

  int received = 0;
  sigwait(&signals, &received);
  std::fprintf(stderr, "tensorpc-server: %s received, stopping\n", received == SIGINT ? "SIGINT" : "SIGTERM");
  server.value()->stop();
  return 0;
}
