// Buffer tables and write grants: what lets one session write into a buffer
// of another session (a server-to-server copy, docs/protocol.md) safely.
//
// A session's buffers live in its BufferTable. Only the owning session's
// thread adds or removes entries; the session that serves a WRITE_GRANTED from
// another server reads it. So every change, and every lookup, holds the
// table's mutex, and entries are shared: a granted write keeps its buffer
// alive until it is done even if the owner frees it (or ends) meanwhile.
//
// WriteGrants is the server-wide registry of outstanding grants. A grant names
// exactly (handle, offset, size) of one session's table, under a token of 128
// random bits (OpenSSL RAND_bytes). take() removes it, so a token is used at
// most once; a session's grants are revoked when it ends, and the table itself
// is marked closed, so a grant can never outlive the session that made it.
//
// A standing grant (execution plans, protocol 1.2) is the same, except that
// take() leaves it in place: it is used again on every run of a plan until
// its session ends. Each completed write under it counts one arrival, which
// the granting session's WAIT_FOR step waits for.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/thread_annotations.h"
#include "rpc/wire/messages.h"
#include "tensorpc/device.h"

namespace tensorpc::rpc {

struct BufferEntry {
  std::unique_ptr<Buffer> buffer;
  uint32_t device = 0;
};

struct BufferTable {
  Mutex mutex;
  std::unordered_map<uint64_t, std::shared_ptr<BufferEntry>> entries GUARDED_BY(mutex);
  bool open GUARDED_BY(mutex) = true;  // false once the owning session has ended
};

// Writes completed under one standing grant. `arrived` grows with each; the
// granting session's WAIT_FOR consumes them (`seen`), so a wait returns once
// bytes came after the previous wait returned. A write under the grant that
// failed (its sender does not wait to hear) is kept in `failure`, so the
// wait fails at once with its reason instead of timing out. So does a wait
// whose bytes have not come when the connection that brought the grant's
// earlier bytes ends (`sender_gone`, until bytes arrive again): its sender, a
// server killed or cut off, will not send them.
struct GrantArrivals {
  std::mutex mutex;
  std::condition_variable changed;
  uint64_t arrived = 0;  // guarded by mutex
  uint64_t seen = 0;     // guarded by mutex; only the granting session moves it
  Status failure;        // guarded by mutex; the first failed write, until a wait reports it
  Status sender_gone;    // guarded by mutex; the last sender's connection ended, until the next arrival
};

struct WriteGrant {
  uint64_t session = 0;              // the granting session's id
  std::weak_ptr<BufferTable> table;  // its buffers
  uint64_t handle = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  std::shared_ptr<GrantArrivals> arrivals;  // set for standing grants only
};

// Outstanding grants a session may hold at once: a client that asks for
// grants and never uses them cannot grow the registry without bound.
inline constexpr size_t kMaxGrantsPerSession = 1024;

class WriteGrants {
 public:
  // Registers `grant` under a fresh random token.
  StatusOr<GrantToken> issue(WriteGrant grant);
  // Removes and returns the grant of `token`; nullopt when there is none
  // (never issued, already used, or revoked).
  std::optional<WriteGrant> take(const GrantToken& token);
  // The grant of `token` without using it up, when it is a standing grant of
  // `session`; nullopt otherwise.
  std::optional<WriteGrant> find_standing(const GrantToken& token, uint64_t session) const;
  // Drops every grant of `session` (it has ended).
  void revoke_session(uint64_t session);
  // The largest size among outstanding grants: bounds WRITE_GRANTED frames.
  uint64_t largest_size() const;

 private:
  mutable Mutex mutex_;
  std::map<GrantToken, WriteGrant> grants_ GUARDED_BY(mutex_);
  std::unordered_map<uint64_t, size_t> counts_ GUARDED_BY(mutex_);  // grants per session
};

}  // namespace tensorpc::rpc
