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
// Thread-safe: every session of a server shares one cache.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/lru.h"
#include "core/thread_annotations.h"
#include "tensorpc/status.h"
#include "rpc/wire/digest.h"

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

  uint64_t entries() const;  // distinct digests held, in memory or on disk
  uint64_t hits() const { return hits_.load(); }
  uint64_t memory_bytes() const;

 private:
  WeightsCache(uint64_t memory_limit, std::string dir) : memory_limit_(memory_limit), dir_(std::move(dir)) {}
  void remember(const std::string& key, Bytes bytes) REQUIRES(mutex_);
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
};

}  // namespace tensorpc::rpc
