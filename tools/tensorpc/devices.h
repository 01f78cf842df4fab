// `tensorpc devices`: every device a program could use — the local CPU and
// each device of each server named with --rpc — as one table.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "tensorpc/rpc_client.h"
#include "tensorpc/status.h"

namespace CLI {
class App;
}

namespace tensorpc::tools {

// Splits "a:1,b:2" (and repeated --rpc flags) into endpoints; empty items are dropped.
std::vector<std::string> split_endpoints(const std::vector<std::string>& lists);

// The flags of every command that talks to servers, on how to reach them:
// the cluster's key file and the TLS files. Empty: left to the environment
// (TENSORPC_KEY_FILE; TENSORPC_TLS_CA, _CERT, _KEY).
struct ClientFlags {
  std::string key_file = {};
  std::string tls_ca = {};
  std::string tls_cert = {};
  std::string tls_key = {};
  double timeout_s = 30;  // --timeout: RemoteOptions::reply_timeout, in seconds; 0: none
};
// Adds --key-file, --tls-ca, --tls-cert, --tls-key and --timeout to `cmd`,
// into `flags`.
void add_client_flags(CLI::App& cmd, ClientFlags& flags);

// The client options those flags ask for. A key file that cannot be used, or
// TLS files that do not go together, is an error naming the flag.
StatusOr<RemoteOptions> remote_options(const ClientFlags& flags);

// Prints the table to `out` (the local CPU, each local Vulkan device with its
// driver — or, below the table, why there is none — then each server's
// devices) and one line per unreachable server to `err`
// (the servers that answer are still listed), connecting with `options`'
// key. Returns the exit code: 0, or 1 when a server could not be listed.
int list_devices_command(const std::vector<std::string>& endpoints, std::FILE* out, std::FILE* err,
                         const RemoteOptions& options = {});

// Adds the `devices` subcommand to app; when it runs, its exit code goes to
// *exit_code.
void add_devices_command(CLI::App& app, int* exit_code);

}  // namespace tensorpc::tools
