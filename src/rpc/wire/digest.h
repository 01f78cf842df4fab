// SHA-256 digests: how the protocol names tensor bytes (the weights cache,
// uploads by digest). Hashing is OpenSSL's EVP.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tensorpc::rpc {

using Sha256 = std::array<uint8_t, 32>;
std::string to_hex(const Sha256& digest);

// Hashes bytes as they arrive (update per chunk, finish once).
class Sha256Hasher {
 public:
  Sha256Hasher();
  ~Sha256Hasher();
  Sha256Hasher(const Sha256Hasher&) = delete;
  Sha256Hasher& operator=(const Sha256Hasher&) = delete;

  void update(const void* data, size_t size);
  Sha256 finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

Sha256 sha256(const void* data, size_t size);

}  // namespace tensorpc::rpc
