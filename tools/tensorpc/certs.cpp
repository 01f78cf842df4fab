// `tensorpc certs` (certs.h): the command line over the certificate authority of src/certs.
#include "tensorpc/certs.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "certs/certificate_authority.h"
#include "cli_checks.h"

namespace tensorpc::tools {

void add_certs_command(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "certs", "make a cluster's CA (once) and a certificate for a server or client, for --tls-cert/--tls-ca");
  struct Args {
    std::string dir;
    std::vector<std::string> hosts;
    std::string stem;
    int days = 825;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("dir", a->dir, "directory of the CA (ca.pem, ca.key; made when missing) and certificates")
      ->required();
  cmd->add_option("--host", a->hosts,
                  "an IP address or host name the certificate is for, as clients will connect to it (repeatable)")
      ->required();
  cmd->add_option("--name", a->stem, "file name of the certificate, NAME.pem and NAME.key (default: the first host)");
  cmd->add_option("--days", a->days, "days the certificate is valid")
      ->check(whole_number(1, 36500))
      ->capture_default_str();
  cmd->callback([a, exit_code] {
    auto ca = ensure_ca(a->dir);
    auto files = ca.ok() ? issue_certificate(a->dir, a->stem.empty() ? a->hosts.front() : a->stem, a->hosts, a->days)
                         : StatusOr<TlsOptions>(ca.status());
    if (!files.ok()) {
      std::fprintf(stderr, "tensorpc certs: %s\n", files.status().message().c_str());
      *exit_code = 1;
      return;
    }
    const TlsOptions& f = files.value();
    std::printf("CA:          %s (its key %s/ca.key signs certificates: keep it off the servers)\n",
                f.ca_file.c_str(), a->dir.c_str());
    std::printf("certificate: %s\nkey:         %s\n", f.cert_file.c_str(), f.key_file.c_str());
    std::printf("use it:      --tls-cert %s --tls-key %s (tensorpc-server; or a client, for servers with --tls-ca)\n",
                f.cert_file.c_str(), f.key_file.c_str());
    std::printf("trust it:    --tls-ca %s (clients, or TENSORPC_TLS_CA; servers that send to others or want client "
                "certificates)\n",
                f.ca_file.c_str());
    *exit_code = 0;
  });
}

}  // namespace tensorpc::tools
