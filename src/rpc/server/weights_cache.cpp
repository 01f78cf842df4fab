// WeightsCache: see weights_cache.h.
#include "rpc/server/weights_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/log.h"

namespace tensorpc::rpc {

namespace {

bool is_digest_name(const std::string& name) {
  if (name.size() != 64) return false;
  for (const char c : name)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

Status write_whole(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error(std::string("write: ") + std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status();
}

}  // namespace

StatusOr<std::unique_ptr<WeightsCache>> WeightsCache::open(uint64_t memory_limit, std::string dir) {
  std::unique_ptr<WeightsCache> cache(new WeightsCache(memory_limit, dir));
  if (dir.empty()) return cache;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error("weights cache: cannot create " + dir + ": " + ec.message());
  MutexLock lock(cache->mutex_);  // nobody else sees the cache yet, but on_disk_ is guarded
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (is_digest_name(name)) {
      cache->on_disk_.insert(name);
    } else if (name.rfind(".tmp-", 0) == 0) {
      std::filesystem::remove(e.path(), ec);  // left by a crash mid-write
    }
  }
  if (ec) return io_error("weights cache: cannot list " + dir + ": " + ec.message());
  WeightsCache* c = cache.get();
  cache->writer_ = std::thread([c] { c->write_loop(); });
  return cache;
}

WeightsCache::~WeightsCache() {
  {
    MutexLock lock(write_mutex_);
    stopping_ = true;
  }
  write_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

void WeightsCache::write_loop() {
  for (;;) {
    std::pair<std::string, Bytes> next;
    {
      MutexLock lock(write_mutex_);
      while (pending_.empty() && !stopping_) write_cv_.wait(write_mutex_);
      if (pending_.empty()) return;  // stopping, and every write done
      next = std::move(pending_.front());
      pending_.pop_front();
      writing_ = true;
    }
    write_file(next.first, *next.second);
    {
      MutexLock lock(write_mutex_);
      writing_ = false;
      pending_bytes_ -= next.second->size();
    }
    write_cv_.notify_all();
  }
}

void WeightsCache::flush() {
  MutexLock lock(write_mutex_);
  while (!pending_.empty() || writing_) write_cv_.wait(write_mutex_);
}

WeightsCache::Bytes WeightsCache::find(const Sha256& digest) {
  const std::string key = to_hex(digest);
  {
    MutexLock lock(mutex_);
    if (const Bytes* held = memory_.find(key)) {
      ++hits_;
      return *held;
    }
    if (on_disk_.count(key) == 0) return nullptr;
  }
  // Read and re-hash without the lock: other sessions keep using the cache.
  Bytes bytes = read_file(digest, key);
  if (bytes == nullptr) return nullptr;
  MutexLock lock(mutex_);
  remember(key, bytes);
  ++hits_;
  return bytes;
}

void WeightsCache::insert(const Sha256& digest, std::vector<uint8_t> bytes) {
  const std::string key = to_hex(digest);
  auto shared = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  bool write = false;
  {
    MutexLock lock(mutex_);
    write = !dir_.empty() && on_disk_.count(key) == 0;
    remember(key, shared);
  }
  if (!write) return;
  const uint64_t size = shared->size();
  {
    MutexLock lock(write_mutex_);
    // One write larger than the bound waits for an empty queue, then goes alone.
    while (pending_bytes_ > 0 && pending_bytes_ + size > kMaxPendingBytes) write_cv_.wait(write_mutex_);
    pending_.emplace_back(key, std::move(shared));
    pending_bytes_ += size;
  }
  write_cv_.notify_all();
}

void WeightsCache::remember(const std::string& key, Bytes bytes) {
  if (memory_.find(key) != nullptr) return;  // now the most recently used
  const uint64_t size = bytes->size();
  if (size > memory_limit_) return;
  while (memory_bytes_ + size > memory_limit_) {
    auto victim = memory_.pop_oldest();
    if (!victim) break;
    memory_bytes_ -= victim->second->size();
  }
  memory_.put(key, std::move(bytes));
  memory_bytes_ += size;
}

WeightsCache::Bytes WeightsCache::read_file(const Sha256& digest, const std::string& key) {
  const std::string path = path_of(key);
  auto forget = [&](const std::string& why) {
    log::warn("weights cache: " + path + " " + why + "; removed, treated as a miss");
    std::error_code ec;
    std::filesystem::remove(path, ec);
    MutexLock lock(mutex_);
    on_disk_.erase(key);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    MutexLock lock(mutex_);
    on_disk_.erase(key);
    return nullptr;
  }
  struct stat st {};
  auto bytes = std::make_shared<std::vector<uint8_t>>();
  bool ok = ::fstat(fd, &st) == 0;
  if (ok) {
    bytes->resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < bytes->size()) {
      const ssize_t n = ::read(fd, bytes->data() + got, bytes->size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    ok = got == bytes->size();
  }
  ::close(fd);
  if (!ok) {
    forget("could not be read whole");
    return nullptr;
  }
  if (sha256(bytes->data(), bytes->size()) != digest) {
    forget("does not match its hash (corrupted)");
    return nullptr;
  }
  return bytes;
}

void WeightsCache::write_file(const std::string& key, const std::vector<uint8_t>& bytes) {
  const std::string tmp =
      dir_ + "/.tmp-" + key + "-" + std::to_string(::getpid()) + "-" + std::to_string(temp_counter_.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    log::warn("weights cache: cannot create " + tmp + ": " + std::strerror(errno) + "; kept in memory only");
    return;
  }
  Status s = write_whole(fd, bytes.data(), bytes.size());
  // fsync before rename: the name must never point at bytes not yet on disk.
  if (s.ok() && ::fsync(fd) != 0) s = io_error(std::string("fsync: ") + std::strerror(errno));
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), path_of(key).c_str()) != 0) {
    s = io_error(std::string("rename: ") + std::strerror(errno));
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    log::warn("weights cache: cannot store " + key + ": " + s.message() + "; kept in memory only");
    return;
  }
  MutexLock lock(mutex_);
  on_disk_.insert(key);
}

uint64_t WeightsCache::entries() const {
  MutexLock lock(mutex_);
  uint64_t n = on_disk_.size();
  for (const auto& [key, entry] : memory_)
    if (on_disk_.count(key) == 0) ++n;
  return n;
}

uint64_t WeightsCache::memory_bytes() const {
  MutexLock lock(mutex_);
  return memory_bytes_;
}

}  // namespace tensorpc::rpc
