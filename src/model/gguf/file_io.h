// The model layer's contact with the operating system's files: a read-only
// mapping of a whole file (with the identity of the version mapped), a small
// file read whole, directories made, and a file written atomically (to a
// temporary name, renamed over the target only when complete). Each owns its
// descriptor and mapping and releases them in its destructor.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensorpc/status.h"

namespace tensorpc {

// Closes a file descriptor when it goes out of scope.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

// Which version of which file: the device and inode name the file, its size
// and modification time (nanoseconds since the epoch) the version. A file
// rewritten, replaced or touched has another identity.
struct FileIdentity {
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;

  bool operator==(const FileIdentity&) const = default;
};

// A whole regular file mapped read-only. An empty file maps to an empty span.
class MappedFile {
 public:
  static StatusOr<std::unique_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {static_cast<const uint8_t*>(addr_), size_}; }
  const std::string& path() const { return path_; }
  // The file as open() found it (fstat of the descriptor mapped).
  const FileIdentity& identity() const { return identity_; }

 private:
  MappedFile() = default;

  std::string path_;
  FileIdentity identity_;
  void* addr_ = nullptr;  // null for an empty file
  uint64_t size_ = 0;
};

// The bytes of the regular file at `path`, read (not mapped, so another
// process truncating it cannot fault the reader); invalid_argument when it
// holds more than `limit` bytes.
StatusOr<std::vector<uint8_t>> read_small_file(const std::string& path, uint64_t limit);

// Creates directory `path` and every missing parent with `mode` (existing
// ones are left as they are).
Status make_directories(const std::string& path, unsigned mode);

// Writes a new file at `path` atomically: bytes go to a temporary file in
// the same directory, which commit() flushes and renames over `path`. If
// commit() is never reached (an error, an exception), the destructor removes
// the temporary file and `path` is untouched.
class AtomicFileWriter {
 public:
  static StatusOr<std::unique_ptr<AtomicFileWriter>> create(const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  Status write(std::span<const uint8_t> bytes);
  Status commit();

 private:
  AtomicFileWriter() = default;

  std::string path_;
  std::string temp_path_;
  UniqueFd fd_;
  bool committed_ = false;
  uint64_t written_ = 0;  // bytes written so far
  uint64_t started_ = 0;  // of them, those whose writeback was started
};

}  // namespace tensorpc
