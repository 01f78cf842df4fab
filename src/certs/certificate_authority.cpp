// The certificate authority behind `tensorpc certs` (tools/tensorpc/certs.h)
// and the bench's TLS figures: a CA and the certificates it signs, made with
// OpenSSL.
#include "certs/certificate_authority.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>

namespace tensorpc {
namespace {

struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertDeleter {
  void operator()(X509* c) const { X509_free(c); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyDeleter>;
using Cert = std::unique_ptr<X509, CertDeleter>;

std::string openssl_error(const std::string& what) {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return what;
  char text[256];
  ERR_error_string_n(e, text, sizeof text);
  return what + ": " + text;
}

StatusOr<Key> new_key() {
  Key k(EVP_EC_gen("P-256"));
  if (!k) return internal_error(openssl_error("cannot make an ECDSA P-256 key"));
  return k;
}

// Version 3, a random serial, valid from an hour ago for `days`, subject
// CN `name`, `key`'s public half.
Status fill(X509* cert, const std::string& name, EVP_PKEY* key, int days) {
  uint8_t serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return internal_error(openssl_error("no random serial"));
  serial[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  const bool ok = bn != nullptr && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert)) != nullptr &&
                  X509_set_version(cert, 2) == 1 && X509_gmtime_adj(X509_getm_notBefore(cert), -3600) != nullptr &&
                  X509_gmtime_adj(X509_getm_notAfter(cert), int64_t{86400} * days) != nullptr &&
                  X509_NAME_add_entry_by_txt(X509_get_subject_name(cert), "CN", MBSTRING_UTF8,
                                             reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0) == 1 &&
                  X509_set_pubkey(cert, key) == 1;
  BN_free(bn);
  return ok ? Status() : internal_error(openssl_error("cannot fill in the certificate of " + name));
}

Status add_extension(X509* issuer, X509* cert, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return invalid_argument(openssl_error("bad certificate extension \"" + value + "\""));
  const int added = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return added == 1 ? Status() : internal_error(openssl_error("cannot add \"" + value + "\""));
}

// Writes through a FILE* opened on a descriptor made with `mode`, so a key
// is never readable by others, not even for a moment.
Status write_pem(const std::string& path, mode_t mode, const std::function<int(std::FILE*)>& write) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return io_error("cannot write " + path + ": " + std::strerror(errno));
  ::fchmod(fd, mode);  // an existing file keeps its old mode otherwise
  std::FILE* f = ::fdopen(fd, "w");
  if (f == nullptr) {
    ::close(fd);
    return io_error("cannot write " + path + ": " + std::strerror(errno));
  }
  const bool ok = write(f) == 1;
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) return io_error(openssl_error("cannot write " + path));
  return Status();
}

Status write_cert(X509* cert, const std::string& path) {
  return write_pem(path, 0644, [&](std::FILE* f) { return PEM_write_X509(f, cert); });
}
Status write_key(EVP_PKEY* key, const std::string& path) {
  return write_pem(path, 0600,
                   [&](std::FILE* f) { return PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr); });
}

template <typename T, typename D>
StatusOr<std::unique_ptr<T, D>> read_pem(const std::string& path,
                                         T* (*read)(std::FILE*, T**, pem_password_cb*, void*)) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return io_error("cannot read " + path + ": " + std::strerror(errno));
  T* object = read(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  if (object == nullptr) return invalid_argument(openssl_error(path + " is not what it should be"));
  return std::unique_ptr<T, D>(object);
}

// "IP:10.0.0.5" or "DNS:gpu-box" for one host; an error for text that is
// neither an address nor a plausible name.
StatusOr<std::string> alt_name(const std::string& host) {
  in6_addr a{};
  if (::inet_pton(AF_INET, host.c_str(), &a) == 1 || ::inet_pton(AF_INET6, host.c_str(), &a) == 1) {
    return "IP:" + host;
  }
  const bool plausible =
      !host.empty() && host.size() <= 253 &&
      host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-*") == std::string::npos;
  if (!plausible) return invalid_argument("\"" + host + "\" is neither an IP address nor a host name");
  return "DNS:" + host;
}

}  // namespace

StatusOr<std::string> ensure_ca(const std::string& dir, const std::string& name) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error("cannot make the directory " + dir + ": " + ec.message());
  const std::string ca_file = dir + "/ca.pem";
  if (std::filesystem::exists(ca_file)) return ca_file;
  TENSORPC_ASSIGN_OR_RETURN(Key key, new_key());
  Cert cert(X509_new());
  if (!cert) return internal_error(openssl_error("X509_new"));
  TENSORPC_RETURN_IF_ERROR(fill(cert.get(), name, key.get(), 3650));
  X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get()));
  TENSORPC_RETURN_IF_ERROR(add_extension(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE"));
  TENSORPC_RETURN_IF_ERROR(add_extension(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign"));
  TENSORPC_RETURN_IF_ERROR(add_extension(cert.get(), cert.get(), NID_subject_key_identifier, "hash"));
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) return internal_error(openssl_error("X509_sign"));
  // The key first: a ca.pem without its key would stop the next issue.
  TENSORPC_RETURN_IF_ERROR(write_key(key.get(), dir + "/ca.key"));
  TENSORPC_RETURN_IF_ERROR(write_cert(cert.get(), ca_file));
  return ca_file;
}

StatusOr<TlsOptions> issue_certificate(const std::string& dir, const std::string& stem,
                                       const std::vector<std::string>& hosts, int days) {
  if (hosts.empty()) return invalid_argument("a certificate needs at least one IP address or host name");
  if (stem.empty() || stem.find('/') != std::string::npos || stem == "ca") {
    return invalid_argument("\"" + stem + "\" cannot name a certificate file (not empty, no '/', not \"ca\")");
  }
  if (days < 1) return invalid_argument("a certificate must be valid for at least one day");
  std::string names;
  for (const std::string& host : hosts) {
    TENSORPC_ASSIGN_OR_RETURN(const std::string name, alt_name(host));
    names += (names.empty() ? "" : ",") + name;
  }
  auto ca_cert = read_pem<X509, CertDeleter>(dir + "/ca.pem", PEM_read_X509);
  if (!ca_cert.ok()) return ca_cert.status().with_context("the CA's certificate");
  auto ca_key = read_pem<EVP_PKEY, KeyDeleter>(dir + "/ca.key", PEM_read_PrivateKey);
  if (!ca_key.ok()) return ca_key.status().with_context("the CA's key");

  TENSORPC_ASSIGN_OR_RETURN(Key key, new_key());
  Cert cert(X509_new());
  if (!cert) return internal_error(openssl_error("X509_new"));
  X509* issuer = ca_cert.value().get();
  TENSORPC_RETURN_IF_ERROR(fill(cert.get(), hosts.front(), key.get(), days));
  X509_set_issuer_name(cert.get(), X509_get_subject_name(issuer));
  TENSORPC_RETURN_IF_ERROR(add_extension(issuer, cert.get(), NID_subject_alt_name, names));
  TENSORPC_RETURN_IF_ERROR(add_extension(issuer, cert.get(), NID_basic_constraints, "critical,CA:FALSE"));
  TENSORPC_RETURN_IF_ERROR(add_extension(issuer, cert.get(), NID_key_usage, "critical,digitalSignature"));
  TENSORPC_RETURN_IF_ERROR(add_extension(issuer, cert.get(), NID_ext_key_usage, "serverAuth,clientAuth"));
  TENSORPC_RETURN_IF_ERROR(add_extension(issuer, cert.get(), NID_authority_key_identifier, "keyid"));
  if (X509_sign(cert.get(), ca_key.value().get(), EVP_sha256()) == 0) {
    return internal_error(openssl_error("X509_sign"));
  }
  TlsOptions files{
      .ca_file = dir + "/ca.pem", .cert_file = dir + "/" + stem + ".pem", .key_file = dir + "/" + stem + ".key"};
  TENSORPC_RETURN_IF_ERROR(write_key(key.get(), files.key_file));
  TENSORPC_RETURN_IF_ERROR(write_cert(cert.get(), files.cert_file));
  return files;
}

}  // namespace tensorpc
