// Admission: how many of a server's connections are admitted clients, and
// the cap on them (ServerOptions::max_clients).
//
// A connection is pending from its accept until its handshake is over
// (HELLO, and AUTH when the server has a key); then it asks admit(), which
// refuses it when the cap is reached, and says leave() when it ends. Pending
// connections are capped by the server itself, which drops the oldest
// (server.cpp). Thread-safe: sessions admit and leave from their threads.
#pragma once

#include <cstddef>
#include <mutex>

#include "core/thread_annotations.h"

namespace tensorpc::rpc {

class Admission {
 public:
  explicit Admission(size_t max_clients) : max_clients_(max_clients) {}

  // True, counting the client, unless max_clients are admitted already
  // (0: no cap).
  bool admit() {
    MutexLock lock(mutex_);
    if (max_clients_ != 0 && admitted_ >= max_clients_) return false;
    ++admitted_;
    return true;
  }
  void leave() {
    MutexLock lock(mutex_);
    --admitted_;
  }
  size_t max_clients() const { return max_clients_; }

 private:
  const size_t max_clients_;
  Mutex mutex_;
  size_t admitted_ GUARDED_BY(mutex_) = 0;
};

}  // namespace tensorpc::rpc
