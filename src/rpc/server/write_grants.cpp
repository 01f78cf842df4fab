// WriteGrants: the registry of single-use write grants (write_grants.h).
#include "rpc/server/write_grants.h"

#include <openssl/rand.h>

#include <algorithm>

namespace tensorpc::rpc {

StatusOr<GrantToken> WriteGrants::issue(WriteGrant grant) {
  GrantToken token;
  MutexLock lock(mutex_);
  if (counts_[grant.session] >= kMaxGrantsPerSession) {
    return out_of_memory("this connection already holds " + std::to_string(kMaxGrantsPerSession) +
                         " unused write grants; use or let go of some first");
  }
  // A token another holder could guess would let it write into this buffer,
  // so it comes from the cryptographic generator; a collision with a live
  // token (2^-128) is still refused rather than overwriting one.
  do {
    if (RAND_bytes(token.data(), static_cast<int>(token.size())) != 1) {
      return internal_error("the random generator failed to make a write grant token");
    }
  } while (grants_.count(token) != 0);
  counts_[grant.session] += 1;
  grants_.emplace(token, std::move(grant));
  return token;
}

std::optional<WriteGrant> WriteGrants::take(const GrantToken& token) {
  MutexLock lock(mutex_);
  auto it = grants_.find(token);
  if (it == grants_.end()) return std::nullopt;
  if (it->second.arrivals) return it->second;  // standing: reused until revoked
  WriteGrant grant = std::move(it->second);
  grants_.erase(it);
  if (--counts_[grant.session] == 0) counts_.erase(grant.session);
  return grant;
}

std::optional<WriteGrant> WriteGrants::find_standing(const GrantToken& token, uint64_t session) const {
  MutexLock lock(mutex_);
  auto it = grants_.find(token);
  if (it == grants_.end() || !it->second.arrivals || it->second.session != session) return std::nullopt;
  return it->second;
}

void WriteGrants::revoke_session(uint64_t session) {
  MutexLock lock(mutex_);
  std::erase_if(grants_, [session](const auto& entry) { return entry.second.session == session; });
  counts_.erase(session);
}

uint64_t WriteGrants::largest_size() const {
  MutexLock lock(mutex_);
  uint64_t largest = 0;
  for (const auto& [token, grant] : grants_) largest = std::max(largest, grant.size);
  return largest;
}

}  // namespace tensorpc::rpc
