// WeightsCache: the server's content-addressed store of tensor bytes.
//
// Keys are SHA-256 digests of the bytes they name. Entries live in memory
// under a least-recently-used byte limit and, when a directory is given, on
// disk as files named by the hex digest. Files are written to a temporary
// name, fsynced and renamed into place, so a crash never leaves a partial
// file under a real name; a file is re-hashed every time it is read, and one
// whose content does not match its name is logged, removed and treated as a
// miss. Callers insert only bytes they hashed themselves (Sha256Hasher), so
// an entry is always stored under the hash of its true content.
//
// Disk writes run on a thread of the cache's own: insert() hands the bytes
// over (they are in memory meanwhile, unless larger than its limit) and
// returns, so a session receiving weights keeps receiving while the last
// ones are written. At most kMaxPendingBytes wait; past that insert() waits
// for the writer. The destructor finishes the writes that wait.
//
// Thread-safe: every session of a server shares one cache.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/lru.h"
#include "core/thread_annotations.h"
#include "rpc/wire/digest.h"
#include "tensorpc/status.h"

namespace tensorpc::rpc {

class WeightsCache {
 public:
  using Bytes = std::shared_ptr<const std::vector<uint8_t>>;

  // Creates `dir` when it is given and missing; fails when it cannot.
  static StatusOr<std::unique_ptr<WeightsCache>> open(uint64_t memory_limit, std::string dir);
  WeightsCache(const WeightsCache&) = delete;
  WeightsCache& operator=(const WeightsCache&) = delete;

  // The bytes stored under `digest`, or null. A hit counts in hits().
  Bytes find(const Sha256& digest);
  // Stores bytes whose SHA-256 the caller computed. Bytes larger than the
  // memory limit go to disk only (or nowhere without a directory).
  void insert(const Sha256& digest, std::vector<uint8_t> bytes);
  // Returns once every write handed over so far is on disk (or failed).
  void flush();
  ~WeightsCache();

  static constexpr uint64_t kMaxPendingBytes = uint64_t{512} << 20;

  uint64_t entries() const;  // distinct digests held, in memory or on disk
  uint64_t hits() const { return hits_.load(); }
  uint64_t memory_bytes() const;

 private:
  WeightsCache(uint64_t memory_limit, std::string dir) : memory_limit_(memory_limit), dir_(std::move(dir)) {}
  void remember(const std::string& key, Bytes bytes) REQUIRES(mutex_);
  void write_loop();
  Bytes read_file(const Sha256& digest, const std::string& key);
  void write_file(const std::string& key, const std::vector<uint8_t>& bytes);
  std::string path_of(const std::string& key) const { return dir_ + "/" + key; }

  const uint64_t memory_limit_;
  const std::string dir_;
  mutable Mutex mutex_;
  LruStore<std::string, Bytes> memory_ GUARDED_BY(mutex_);  // by hex digest
  std::unordered_set<std::string> on_disk_ GUARDED_BY(mutex_);
  uint64_t memory_bytes_ GUARDED_BY(mutex_) = 0;
  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> temp_counter_{0};

  // The writes handed over: (hex digest, bytes), oldest first.
  Mutex write_mutex_;
  std::condition_variable_any write_cv_;  // work came, work was done, or stopping
  std::deque<std::pair<std::string, Bytes>> pending_ GUARDED_BY(write_mutex_);
  uint64_t pending_bytes_ GUARDED_BY(write_mutex_) = 0;
  bool writing_ GUARDED_BY(write_mutex_) = false;  // the writer holds one taken off pending_
  bool stopping_ GUARDED_BY(write_mutex_) = false;
  std::thread writer_;  // started by open() when there is a directory
};

}  // namespace tensorpc::rpc
