// `tensorpc devices` (devices.h): the local CPU from a CpuDevice, the local
// Vulkan devices from the Vulkan loader (or why there are none), each
// server's devices from one LIST_DEVICES round trip (name, kind, free and
// total memory and description as the server reports them).
#include "tensorpc/devices.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>

#include "cli_checks.h"
#include "core/format.h"
#include "rpc/client/remote_device.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/key.h"
#ifdef TENSORPC_HAVE_VULKAN
#include "tensorpc/vulkan_device.h"
#endif

namespace tensorpc::tools {
namespace {

struct Row {
  std::string name, kind, free, total, endpoint;
  std::string description{};  // empty for the local CPU
};

const char* kind_name(uint32_t kind) {
  return kind <= static_cast<uint32_t>(DeviceKind::remote) ? to_string(static_cast<DeviceKind>(kind)) : "?";
}

// A row per local Vulkan device; empty, with `why` set, when there is none.
std::vector<Row> local_vulkan_rows(std::string& why) {
#ifdef TENSORPC_HAVE_VULKAN
  std::vector<Row> rows;
  auto devices = vulkan_devices();
  if (!devices.ok()) {
    why = devices.status().message();
    return rows;
  }
  for (const VulkanDeviceInfo& d : devices.value()) {
    rows.push_back({"vulkan:" + std::to_string(d.index), kind_name(static_cast<uint32_t>(DeviceKind::gpu)),
                    format_bytes(d.memory.free), format_bytes(d.memory.total), "local",
                    d.name + ", driver " + d.driver});
  }
  return rows;
#else
  why = "this build has no Vulkan device (configured without libvulkan-dev and glslc, or with -DTENSORPC_VULKAN=OFF)";
  return {};
#endif
}

}  // namespace

std::vector<std::string> split_endpoints(const std::vector<std::string>& lists) {
  std::vector<std::string> out;
  for (const std::string& list : lists) {
    for (size_t start = 0; start <= list.size();) {
      const size_t comma = std::min(list.find(',', start), list.size());
      if (comma > start) out.push_back(list.substr(start, comma - start));
      start = comma + 1;
    }
  }
  return out;
}

void add_client_flags(CLI::App& cmd, ClientFlags& flags) {
  cmd.add_option("--key-file", flags.key_file, "the servers' key file (default: the file named by TENSORPC_KEY_FILE)");
  cmd.add_option("--tls-ca", flags.tls_ca,
                 "connect with TLS, trusting servers whose certificates chain to this CA file (PEM) (default: "
                 "TENSORPC_TLS_CA; unset: plain TCP)");
  cmd.add_option("--tls-cert", flags.tls_cert,
                 "this client's certificate (PEM), for servers that ask for one (default: TENSORPC_TLS_CERT)");
  cmd.add_option("--tls-key", flags.tls_key, "the private key of --tls-cert (PEM) (default: TENSORPC_TLS_KEY)");
  cmd.add_option("--timeout", flags.timeout_s,
                 "seconds to wait for a server that says nothing before failing with an error naming it (a "
                 "server computing says so four times a second; 0: wait forever)")
      ->check(tensorpc::tools::finite_number("a number of seconds from 0 to 1000000",
                                             [](double x) { return x >= 0 && x <= 1e6; }))
      ->capture_default_str();
}

StatusOr<RemoteOptions> remote_options(const ClientFlags& flags) {
  RemoteOptions options;
  options.reply_timeout = std::chrono::milliseconds(static_cast<int64_t>(flags.timeout_s * 1000 + 0.5));
  if (!flags.key_file.empty()) {
    auto key = read_key_file(flags.key_file);
    if (!key.ok()) return key.status().with_context("--key-file");
    options.key = std::move(key).value();
  }
  if (!flags.tls_ca.empty() || !flags.tls_cert.empty() || !flags.tls_key.empty()) {
    TlsOptions tls{.ca_file = flags.tls_ca, .cert_file = flags.tls_cert, .key_file = flags.tls_key};
    auto checked = client_tls(tls);
    if (!checked.ok()) return checked.status().with_context("--tls-ca, --tls-cert, --tls-key");
    if (!checked.value()) return invalid_argument("--tls-cert and --tls-key need --tls-ca: the CA the servers' certificates chain to");
    options.tls = std::move(tls);
  }
  return options;
}

int list_devices_command(const std::vector<std::string>& endpoints, std::FILE* out, std::FILE* err,
                         const RemoteOptions& options) {
  std::vector<Row> rows = {{"NAME", "KIND", "FREE", "TOTAL", "ENDPOINT", "DESCRIPTION"}};
  {
    CpuDevice cpu(CpuDeviceOptions{.threads = 1});  // one thread: only its memory is read
    const MemoryInfo mem = cpu.memory().value();  // a CPU device always knows
    rows.push_back(
        {"cpu", kind_name(static_cast<uint32_t>(cpu.kind())), format_bytes(mem.free), format_bytes(mem.total), "local"});
  }
  std::string no_vulkan;
  for (Row& row : local_vulkan_rows(no_vulkan)) rows.push_back(std::move(row));
  int exit_code = 0;
  for (const std::string& endpoint : split_endpoints(endpoints)) {
    auto devices = rpc::list_devices(endpoint, options);
    if (!devices.ok()) {
      std::fprintf(err, "tensorpc devices: cannot list the devices of %s: %s\n", endpoint.c_str(),
                   devices.status().to_string().c_str());
      exit_code = 1;
      continue;
    }
    for (const rpc::DeviceInfo& d : devices.value()) {
      rows.push_back({endpoint + "/" + d.name, kind_name(d.kind), format_bytes(d.free), format_bytes(d.total), endpoint,
                      d.description});
    }
  }
  size_t width[5] = {0, 0, 0, 0, 0};
  for (const Row& r : rows) {
    width[0] = std::max(width[0], r.name.size());
    width[1] = std::max(width[1], r.kind.size());
    width[2] = std::max(width[2], r.free.size());
    width[3] = std::max(width[3], r.total.size());
    width[4] = std::max(width[4], r.endpoint.size());
  }
  for (const Row& r : rows) {
    std::fprintf(out, "%-*s  %-*s  %*s  %*s  %-*s  %s\n", static_cast<int>(width[0]), r.name.c_str(),
                 static_cast<int>(width[1]), r.kind.c_str(), static_cast<int>(width[2]), r.free.c_str(),
                 static_cast<int>(width[3]), r.total.c_str(), static_cast<int>(width[4]), r.endpoint.c_str(),
                 r.description.c_str());
  }
  if (!no_vulkan.empty()) std::fprintf(out, "no local Vulkan device: %s\n", no_vulkan.c_str());
  std::fflush(out);
  return exit_code;
}

void add_devices_command(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "devices", "list the local CPU, the local Vulkan devices and every device of the given servers");
  auto endpoints = std::make_shared<std::vector<std::string>>();
  auto flags = std::make_shared<ClientFlags>();
  cmd->add_option("--rpc", *endpoints, "servers to ask, host:port[,host:port…] (repeatable)");
  add_client_flags(*cmd, *flags);
  cmd->callback([endpoints, flags, exit_code] {
    auto options = remote_options(*flags);
    if (!options.ok()) {
      std::fprintf(stderr, "tensorpc devices: %s\n", options.status().message().c_str());
      *exit_code = 1;
      return;
    }
    *exit_code = list_devices_command(*endpoints, stdout, stderr, options.value());
  });
}

}  // namespace tensorpc::tools
