// SHA-256 hashing (OpenSSL EVP): see digest.h.
#include "rpc/wire/digest.h"

#include <openssl/evp.h>

#include "tensorpc/status.h"

namespace tensorpc::rpc {

struct Sha256Hasher::Impl {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~Impl() { EVP_MD_CTX_free(ctx); }
};

Sha256Hasher::Sha256Hasher() : impl_(std::make_unique<Impl>()) {
  // Only allocation can fail here; without a context no hash can be made at all.
  if (impl_->ctx == nullptr || EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr) != 1) {
    throw Error(internal_error("SHA-256: OpenSSL could not create a digest context"));
  }
}

Sha256Hasher::~Sha256Hasher() = default;

void Sha256Hasher::update(const void* data, size_t size) {
  if (size > 0) EVP_DigestUpdate(impl_->ctx, data, size);
}

Sha256 Sha256Hasher::finish() {
  Sha256 out{};
  unsigned int n = 0;
  EVP_DigestFinal_ex(impl_->ctx, out.data(), &n);
  return out;
}

Sha256 sha256(const void* data, size_t size) {
  Sha256Hasher h;
  h.update(data, size);
  return h.finish();
}

std::string to_hex(const Sha256& digest) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  s.reserve(64);
  for (const uint8_t b : digest) {
    s += hex[b >> 4];
    s += hex[b & 0xf];
  }
  return s;
}

}  // namespace tensorpc::rpc
