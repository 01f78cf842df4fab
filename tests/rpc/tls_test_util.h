// Certificates for the TLS tests: a certificate authority of the test's own
// (made by `tensorpc certs`' code, src/certs/certificate_authority.h) in a
// temporary directory that goes with the object, and certificates it signs.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "certs/certificate_authority.h"
#include "tensorpc/tls.h"

namespace tensorpc::test {

class TestCa {
 public:
  // A new CA whose certificate is ca_file().
  explicit TestCa(const std::string& name = "tensorpc test CA") {
    char tmpl[] = "/tmp/tensorpc-tls-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    auto ca = ensure_ca(dir_, name);
    if (!ca.ok()) throw std::runtime_error(ca.status().to_string());
    ca_file_ = ca.value();
  }
  ~TestCa() { std::filesystem::remove_all(dir_); }
  TestCa(const TestCa&) = delete;
  TestCa& operator=(const TestCa&) = delete;

  const std::string& ca_file() const { return ca_file_; }

  // A certificate signed by this CA for `hosts` (IP addresses and DNS
  // names), with its key: all three files of the result are set.
  TlsOptions issue(const std::string& name, const std::vector<std::string>& hosts) {
    auto files = issue_certificate(dir_, name, hosts);
    if (!files.ok()) throw std::runtime_error(files.status().to_string());
    return files.value();
  }

 private:
  std::string dir_;
  std::string ca_file_;
};

}  // namespace tensorpc::test
