// The handshake's proofs and nonces (auth.h) and key files (tensorpc/key.h).
#include "rpc/transport/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "tensorpc/key.h"

namespace tensorpc {

StatusOr<std::string> read_key_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot read the key file " + path + ": " + std::strerror(errno));
  std::string key(kMaxKeyBytes + 1, '\0');
  in.read(key.data(), static_cast<std::streamsize>(key.size()));
  if (in.bad()) return io_error("cannot read the key file " + path + ": " + std::strerror(errno));
  key.resize(static_cast<size_t>(in.gcount()));
  if (key.size() > kMaxKeyBytes) {
    return invalid_argument("the key file " + path + " holds more than " + std::to_string(kMaxKeyBytes) +
                            " bytes; a key is a short secret (e.g. 32 random bytes, hex-encoded)");
  }
  if (!key.empty() && key.back() == '\n') {
    key.pop_back();
    if (!key.empty() && key.back() == '\r') key.pop_back();
  }
  if (key.empty()) return invalid_argument("the key file " + path + " is empty; a key must hold at least one byte");
  return key;
}

}  // namespace tensorpc

namespace tensorpc::rpc {

StatusOr<AuthNonce> fresh_nonce() {
  AuthNonce nonce;
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) {
    return internal_error("the random generator failed to make an authentication nonce");
  }
  return nonce;
}

StatusOr<AuthProof> auth_proof(std::string_view key, AuthRole role, const AuthNonce& client_nonce,
                               const AuthNonce& server_nonce) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return internal_error("a key of " + std::to_string(key.size()) + " bytes cannot make a proof");
  }
  uint8_t input[kAuthLabel.size() + 1 + 2 * kAuthNonceSize];
  uint8_t* p = input;
  std::memcpy(p, kAuthLabel.data(), kAuthLabel.size());
  p += kAuthLabel.size();
  *p++ = static_cast<uint8_t>(role);
  std::memcpy(p, client_nonce.data(), client_nonce.size());
  p += client_nonce.size();
  std::memcpy(p, server_nonce.data(), server_nonce.size());

  AuthProof proof{};
  unsigned int length = 0;
  // A failure must never leave a predictable proof (all zeros) to compare against.
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), input, sizeof input, proof.data(), &length) ==
          nullptr ||
      length != proof.size()) {
    return internal_error("HMAC-SHA-256 failed while making an authentication proof");
  }
  return proof;
}

bool proof_matches(const AuthProof& expected, const AuthProof& presented) {
  return CRYPTO_memcmp(expected.data(), presented.data(), expected.size()) == 0;
}

StatusOr<std::string> client_key(const std::optional<std::string>& chosen) {
  if (chosen) {
    if (chosen->size() > kMaxKeyBytes) {
      return invalid_argument("the key is " + std::to_string(chosen->size()) + " bytes long, more than the limit of " +
                              std::to_string(kMaxKeyBytes));
    }
    return *chosen;
  }
  const char* path = std::getenv(kKeyFileVariable);
  if (path == nullptr || *path == '\0') return std::string();
  auto key = read_key_file(path);
  if (!key.ok()) return key.status().with_context(kKeyFileVariable);
  return key;
}

}  // namespace tensorpc::rpc
