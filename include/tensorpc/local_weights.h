// LocalWeights: weights a tensorpc server can read from its own disk instead
// of receiving them (ServerOptions::local_weights in tensorpc/server.h).
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace tensorpc {

// Weights a server can read from its own disk instead of receiving them
// (`tensorpc-server --models DIR`): when a client names bytes by their
// SHA-256 (the weights cache's question) and the cache lacks them, the
// server asks this source, checks what it gets against the digest as it
// copies it, and answers "found" only when it matches — so a source that is
// wrong, or a file changed since it was read, costs the client the sending
// of those bytes, never a wrong tensor. Thread-safe: every session may ask
// at once.
class LocalWeights {
 public:
  virtual ~LocalWeights() = default;
  // The bytes whose SHA-256 the source believes is `sha256`, `size` of them,
  // valid while the source lives; empty when it has none.
  virtual std::span<const uint8_t> find(const std::array<uint8_t, 32>& sha256, uint64_t size) const = 0;
};

}  // namespace tensorpc
