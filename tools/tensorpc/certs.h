// `tensorpc certs`: a cluster's own certificate authority and the
// certificates it signs (src/certs/certificate_authority.h), for TLS between
// tensorpc servers and clients: `tensorpc certs DIR --host H…` makes the CA
// in DIR once, then a certificate for the hosts named.
#pragma once

namespace CLI {
class App;
}

namespace tensorpc::tools {

// Adds the `certs` subcommand; when it runs, its exit code goes to *exit_code.
void add_certs_command(CLI::App& app, int* exit_code);

}  // namespace tensorpc::tools
