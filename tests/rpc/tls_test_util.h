// Certificates for the TLS tests: a certificate authority of the test's own
// and certificates it signs, written as PEM files into a temporary directory
// that goes with the object. Keys are ECDSA P-256, made fresh each time.
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "tensorpc/tls.h"

namespace tensorpc::test {

class TestCa {
 public:
  // A self-signed CA whose certificate is ca_file().
  explicit TestCa(const std::string& name = "tensorpc test CA") : key_(new_key()), cert_(X509_new()) {
    char tmpl[] = "/tmp/tensorpc-tls-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    fill(cert_.get(), name, key_.get(), nullptr, 1);
    X509_set_issuer_name(cert_.get(), X509_get_subject_name(cert_.get()));
    add_extension(cert_.get(), cert_.get(), NID_basic_constraints, "critical,CA:TRUE");
    add_extension(cert_.get(), cert_.get(), NID_key_usage, "critical,keyCertSign,cRLSign");
    sign(cert_.get(), key_.get());
    ca_file_ = dir_ + "/ca.pem";
    write_cert(cert_.get(), ca_file_);
  }
  ~TestCa() { std::filesystem::remove_all(dir_); }
  TestCa(const TestCa&) = delete;
  TestCa& operator=(const TestCa&) = delete;

  const std::string& ca_file() const { return ca_file_; }
  const std::string& dir() const { return dir_; }

  // A certificate signed by this CA for `subject_alt_names` (OpenSSL's
  // syntax: "IP:127.0.0.1,DNS:localhost"), with its key: cert_file and
  // key_file of the result are set, ca_file is this CA's.
  TlsOptions issue(const std::string& name, const std::string& subject_alt_names) {
    Key key = new_key();
    Cert cert(X509_new());
    fill(cert.get(), name, key.get(), cert_.get(), ++serial_);
    add_extension(cert_.get(), cert.get(), NID_subject_alt_name, subject_alt_names.c_str());
    add_extension(cert_.get(), cert.get(), NID_basic_constraints, "critical,CA:FALSE");
    add_extension(cert_.get(), cert.get(), NID_ext_key_usage, "serverAuth,clientAuth");
    sign(cert.get(), key_.get());
    TlsOptions files{.ca_file = ca_file_,
                     .cert_file = dir_ + "/" + name + ".pem",
                     .key_file = dir_ + "/" + name + ".key"};
    write_cert(cert.get(), files.cert_file);
    write_key(key.get(), files.key_file);
    return files;
  }

 private:
  struct KeyDeleter {
    void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
  };
  struct CertDeleter {
    void operator()(X509* c) const { X509_free(c); }
  };
  using Key = std::unique_ptr<EVP_PKEY, KeyDeleter>;
  using Cert = std::unique_ptr<X509, CertDeleter>;

  static Key new_key() {
    Key k(EVP_EC_gen("P-256"));
    if (!k) throw std::runtime_error("EVP_EC_gen failed");
    return k;
  }
  // Subject CN `name`, issuer `issuer`'s subject (when given), a day of
  // validity from an hour ago, and `key`'s public half.
  static void fill(X509* cert, const std::string& name, EVP_PKEY* key, X509* issuer, long serial) {
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), serial);
    X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
    X509_gmtime_adj(X509_getm_notAfter(cert), 86400);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(cert), "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
    if (issuer != nullptr) X509_set_issuer_name(cert, X509_get_subject_name(issuer));
    X509_set_pubkey(cert, key);
  }
  static void add_extension(X509* issuer, X509* cert, int nid, const char* value) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    if (ext == nullptr) throw std::runtime_error(std::string("bad certificate extension ") + value);
    X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
  }
  static void sign(X509* cert, EVP_PKEY* key) {
    if (X509_sign(cert, key, EVP_sha256()) == 0) throw std::runtime_error("X509_sign failed");
  }
  static void write_cert(X509* cert, const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr || PEM_write_X509(f, cert) != 1) throw std::runtime_error("cannot write " + path);
    std::fclose(f);
  }
  static void write_key(EVP_PKEY* key, const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr || PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
      throw std::runtime_error("cannot write " + path);
    }
    std::fclose(f);
  }

  Key key_;
  Cert cert_;
  std::string dir_;
  std::string ca_file_;
  long serial_ = 1;
};

}  // namespace tensorpc::test
