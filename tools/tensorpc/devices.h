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

// The client options of the commands' --key-file flag: the key in
// `key_file`; with no flag (empty), the key is left to TENSORPC_KEY_FILE.
// A file that cannot be used is an error naming it.
StatusOr<RemoteOptions> remote_options(const std::string& key_file);

// Prints the table to `out` and one line per unreachable server to `err`
// (the servers that answer are still listed), connecting with `options`'
// key. Returns the exit code: 0, or 1 when a server could not be listed.
int list_devices_command(const std::vector<std::string>& endpoints, std::FILE* out, std::FILE* err,
                         const RemoteOptions& options = {});

// Adds the `devices` subcommand to app; when it runs, its exit code goes to
// *exit_code.
void add_devices_command(CLI::App& app, int* exit_code);

}  // namespace tensorpc::tools
