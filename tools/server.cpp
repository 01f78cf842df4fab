// tensorpc-server: serves this machine's devices to tensorpc clients.
//
// Parses flags (reading the key file, if any), maps --models DIR's GGUF
// files and indexes their tensors on a thread of its own (api/model_directory.h: the
// server serves meanwhile), starts a Server, prints the
// endpoint, its devices and whether it has a key, warns when it listens
// beyond loopback without one, and stops cleanly on SIGINT or SIGTERM. The
// signals are blocked in every thread (before any is started) and received by
// sigwait here, so no handler runs in the middle of a server thread's work.
#include "tensorpc/server.h"

#include <pthread.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>

#include "api/model_directory.h"
#include "awake_cores.h"
#include "cli_checks.h"
#include "core/format.h"
#include "device_spec.h"
#include "model/gguf/weight_digests.h"
#include "rpc/transport/socket.h"
#include "tensorpc/key.h"
#include "tensorpc/version.h"

namespace {

using tensorpc::format_bytes;
using tensorpc::tools::parse_byte_count;

std::string format_seconds(std::chrono::milliseconds t) {
  char s[32];
  std::snprintf(s, sizeof s, "%g s", static_cast<double>(t.count()) / 1000.0);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tensorpc-server: serves this machine's devices to tensorpc clients"};
  app.set_version_flag("--version", std::string("tensorpc-server ") + tensorpc::kProjectVersion + " (protocol " +
                                        tensorpc::kProtocolVersion + ")",
                       "print the version and the wire protocol's version, and exit");
  tensorpc::ServerOptions options;
  std::string cache_memory;
  std::string key_file;
  std::string session_memory;
  double io_timeout_s = std::chrono::duration<double>(options.io_timeout).count();
  double handshake_timeout_s = std::chrono::duration<double>(options.handshake_timeout).count();
  std::vector<std::string> device_texts;
  const auto byte_count = [](const std::string& s) {
    uint64_t v = 0;
    return parse_byte_count(s, v) ? std::string() : "not a byte count: " + s + " (try 4GiB or 512MiB)";
  };
  app.add_option("-H,--host", options.host, "address to listen on")->capture_default_str();
  app.add_option("-p,--port", options.port, "TCP port (0: the OS picks one)")->capture_default_str();
  app.add_option("--device", device_texts,
                 "a device to serve, repeatable, in order: cpu, cpu:THREADS or cpu:THREADS:LIMIT (e.g. cpu:4:8GiB), "
                 "named cpuI by its place; vulkan (every Vulkan device), vulkan:INDEX or vulkan:INDEX:LIMIT (e.g. "
                 "vulkan:0:8GiB; the same INDEX twice opens that GPU twice); default: one cpu with every core")
      ->check([](const std::string& s) {
        auto spec = tensorpc::tools::parse_device_spec(s);
        return spec.ok() ? std::string() : spec.status().message();
      });
  app.add_option("-t,--threads", options.threads, "threads of the default CPU device (0: every core)")
      ->check(tensorpc::tools::check_thread_count)
      ->capture_default_str();
  bool awake_cores = false;
  app.add_flag("--awake-cores", awake_cores, tensorpc::tools::kAwakeCoresHelp);
  bool pin_threads = false;
  app.add_flag("--pin-threads", pin_threads,
               "run thread i of every device on core i (for a machine whose cores the server has to itself)");
  app.add_option("--cache", options.cache_dir, "directory of the weights cache on disk (default: memory only)");
  std::string models_dir;
  app.add_option("--models", models_dir,
                 "a directory of GGUF files this server has: a client loading the same weights sends their "
                 "digests, not their bytes, and the server reads them from its file (checked against the digests)");
  app.add_option("--cache-memory", cache_memory, "bytes the in-memory weights cache may hold (e.g. 4GiB)")
      ->check(byte_count);
  app.add_option("--client-memory,--max-session-memory", session_memory,
                 "bytes one client connection may hold in buffers, across all devices (e.g. 8GiB; default: no "
                 "limit beyond the devices')")
      ->check(byte_count);
  app.add_option("--client-buffers,--max-session-buffers", options.max_session_buffers,
                 "live buffer handles one client connection may hold (0: no limit)")
      ->check(tensorpc::tools::whole_number(0, UINT32_MAX))
      ->capture_default_str();
  app.add_option("--stored-graphs,--client-graphs", options.stored_graphs,
                 "graphs, and as many plans, one client connection keeps to run again by id; past it the least "
                 "recently used is dropped and its client sends it again")
      ->check(tensorpc::tools::whole_number(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--io-timeout", io_timeout_s,
                 "seconds a started frame, an unread reply or a copy to another server may stall before the "
                 "connection is closed (0: never)")
      ->check(tensorpc::tools::finite_number("a number of seconds from 0 to 1000000",
                                             [](double x) { return x >= 0 && x <= 1e6; }))
      ->capture_default_str();
  app.add_option("--handshake-timeout", handshake_timeout_s,
                 "seconds a new connection has to finish its TLS handshake, HELLO and AUTH, however slowly its "
                 "bytes come, before it is closed (0: no limit)")
      ->check(tensorpc::tools::finite_number("a number of seconds from 0 to 1000000",
                                             [](double x) { return x >= 0 && x <= 1e6; }))
      ->capture_default_str();
  app.add_option("--max-pending", options.max_pending,
                 "connections still in that handshake at once; one more drops the oldest of them (never a "
                 "client already admitted; 0: no cap)")
      ->check(tensorpc::tools::whole_number(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--max-clients", options.max_clients,
                 "clients served at once; one more is refused with an error saying the server is full (0: no cap)")
      ->check(tensorpc::tools::whole_number(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--allow-peer", options.allowed_peers,
                 "HOST:PORT of a server this one may send tensors to when a client asks; repeatable "
                 "(default: any endpoint a client names)");
  app.add_option("--key-file", key_file,
                 "a file holding the cluster's pre-shared key: serve only clients that prove they hold it, and "
                 "prove it to other servers (default: no key)");
  auto* tls_cert = app.add_option("--tls-cert", options.tls.cert_file,
                                  "this server's certificate (PEM): speak only TLS 1.3 (default: plain TCP)");
  auto* tls_key = app.add_option("--tls-key", options.tls.key_file, "the private key of --tls-cert (PEM)");
  app.add_option("--tls-ca", options.tls.ca_file,
                 "CA certificates (PEM): clients must present a certificate that chains to them (mutual TLS), and so "
                 "must the servers this one sends to")
      ->needs(tls_cert);
  tls_cert->needs(tls_key);
  tls_key->needs(tls_cert);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  // Held until the process ends (the kernel drops the request with the file).
  const auto awake = tensorpc::tools::AwakeCores::request_if(awake_cores ? tensorpc::tools::kCpuLatencyPath : "");
  if (!awake.ok()) {
    std::fprintf(stderr, "tensorpc-server: --awake-cores: %s\n", awake.status().message().c_str());
    return 2;
  }
  if (!cache_memory.empty()) parse_byte_count(cache_memory, options.cache_memory_limit);
  if (!key_file.empty()) {
    auto key = tensorpc::read_key_file(key_file);
    if (!key.ok()) {
      std::fprintf(stderr, "tensorpc-server: --key-file: %s\n", key.status().message().c_str());
      return 2;
    }
    options.key = std::move(key).value();
  }
  if (!session_memory.empty()) parse_byte_count(session_memory, options.max_session_memory);
  options.io_timeout = std::chrono::milliseconds(static_cast<int64_t>(io_timeout_s * 1000 + 0.5));
  options.handshake_timeout = std::chrono::milliseconds(static_cast<int64_t>(handshake_timeout_s * 1000 + 0.5));
  std::vector<tensorpc::tools::DeviceSpec> specs;
  for (const std::string& text : device_texts) specs.push_back(tensorpc::tools::parse_device_spec(text).value());
  if (specs.empty()) {
    specs.push_back({.threads = options.threads});
  } else if (options.threads != 0) {
    std::fprintf(stderr,
                 "tensorpc-server: --threads applies to the default device only; with --device give "
                 "the threads in the spec (cpu:THREADS)\n");
    return 2;
  }

  // Block before any thread exists: every thread the server starts inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Made here rather than by Server::start so they can be listed below.
  auto devices = tensorpc::tools::make_devices(specs, pin_threads);
  if (!devices.ok()) {
    std::fprintf(stderr, "tensorpc-server: %s\n", devices.status().message().c_str());
    return 1;
  }
  options.devices = std::move(devices).value();
  std::shared_ptr<tensorpc::ModelDirectory> models;
  if (!models_dir.empty()) {
    auto opened = tensorpc::ModelDirectory::open(models_dir, tensorpc::WeightDigests::default_dir());
    if (!opened.ok()) {
      std::fprintf(stderr, "tensorpc-server: %s\n", opened.status().message().c_str());
      return 2;
    }
    models = std::move(opened).value();
    for (const std::string& why : models->skipped()) std::fprintf(stderr, "--models: skipped %s\n", why.c_str());
    options.local_weights = models;
  }
  auto server = tensorpc::Server::start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "tensorpc-server: %s\n", server.status().to_string().c_str());
    return 1;
  }
  std::printf("tensorpc-server listening on %s:%u\n", options.host.c_str(), server.value()->port());
  for (size_t i = 0; i < options.devices.size(); ++i) {
    auto memory = options.devices[i]->memory();
    const tensorpc::MemoryInfo mem = memory.ok() ? memory.value() : tensorpc::MemoryInfo{};
    std::printf("  device %zu: %s — %s, %s free of %s\n", i, options.devices[i]->name().c_str(),
                options.devices[i]->description().c_str(), format_bytes(mem.free).c_str(),
                format_bytes(mem.total).c_str());
  }
  std::printf("per session: %s in buffers, %s buffers, %zu stored graphs and plans; I/O timeout %s\n",
              options.max_session_memory ? format_bytes(options.max_session_memory).c_str() : "no limit",
              options.max_session_buffers ? std::to_string(options.max_session_buffers).c_str() : "no limit",
              options.stored_graphs,
              options.io_timeout.count() ? format_seconds(options.io_timeout).c_str() : "none");
  std::printf("connections: %s in their handshake for at most %s; %s clients at once\n",
              options.max_pending ? std::to_string(options.max_pending).c_str() : "any number",
              options.handshake_timeout.count() ? format_seconds(options.handshake_timeout).c_str() : "ever",
              options.max_clients ? std::to_string(options.max_clients).c_str() : "any number of");
  std::printf("weights cache: %s in memory%s%s\n", format_bytes(options.cache_memory_limit).c_str(),
              options.cache_dir.empty() ? "" : ", on disk in ", options.cache_dir.c_str());
  // Indexing runs beside the server, which meanwhile lets clients send what is not yet indexed.
  std::jthread indexer;
  if (models) {
    const auto c = models->counts();
    std::printf("models: %zu GGUF files in %s, %zu tensors (%s) read from disk when clients name them; indexing\n",
                c.files, models_dir.c_str(), c.tensors, format_bytes(static_cast<double>(c.bytes)).c_str());
    indexer = std::jthread([models](std::stop_token stop) {
      const auto start = std::chrono::steady_clock::now();
      models->index(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())), stop);
      if (stop.stop_requested()) return;
      std::printf("models: %zu tensors indexed in %.1f s\n", models->counts().indexed,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      std::fflush(stdout);
    });
  }
  std::printf("key: %s\n", key_file.empty() ? "none (every client is served)"
                                            : ("clients must prove the key in " + key_file).c_str());
  const bool tls = !options.tls.cert_file.empty();
  std::printf("tls: %s\n", !tls                           ? "none (bytes travel in the clear)"
                           : options.tls.ca_file.empty() ? "on (TLS 1.3)"
                                                         : "on (TLS 1.3), clients must present a certificate of the CA");
  if (awake_cores) std::printf("idle cores: kept awake (a 0 us CPU latency request, held while serving)\n");
  if (!tensorpc::rpc::is_loopback_host(options.host) && options.key.empty()) {
    std::fprintf(stderr,
                 "WARNING: listening on %s, not a loopback address, without a key: anyone who can reach this port "
                 "can use these devices and read and write their memory. Start with --key-file to serve only "
                 "clients that hold the cluster's key.\n",
                 options.host.c_str());
  }
  std::fflush(stdout);

  int received = 0;
  sigwait(&signals, &received);
  std::fprintf(stderr, "tensorpc-server: %s received, stopping\n", received == SIGINT ? "SIGINT" : "SIGTERM");
  server.value()->stop();
  return 0;
}
