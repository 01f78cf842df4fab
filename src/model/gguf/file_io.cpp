// Files for the model layer: read-only mappings and atomic writes (see
// file_io.h). Every system call's failure becomes a Status naming the path
// and the reason.
#include "model/gguf/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace tensorpc {
namespace {

Status errno_status(const std::string& what, const std::string& path) {
  const int err = errno;
  const std::string msg = what + " '" + path + "': " + std::strerror(err);
  return err == ENOENT ? not_found(msg) : io_error(msg);
}

}  // namespace

void UniqueFd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

StatusOr<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return errno_status("cannot open", path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_status("cannot stat", path);
  if (!S_ISREG(st.st_mode)) return invalid_argument("'" + path + "' is not a regular file");

  std::unique_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<uint64_t>(st.st_size);
  f->identity_ = {.device = static_cast<uint64_t>(st.st_dev),
                  .inode = static_cast<uint64_t>(st.st_ino),
                  .size = f->size_,
                  .mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  if (f->size_ > 0) {
    // The descriptor is not needed once mapped: the mapping keeps the file.
    void* addr = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (addr == MAP_FAILED) return errno_status("cannot map", path);
    f->addr_ = addr;
  }
  return f;
}

MappedFile::~MappedFile() {
  if (addr_ != nullptr) ::munmap(addr_, size_);
}

StatusOr<std::vector<uint8_t>> read_small_file(const std::string& path, uint64_t limit) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (fd.get() < 0) return errno_status("cannot open", path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_status("cannot stat", path);
  if (!S_ISREG(st.st_mode)) return invalid_argument("'" + path + "' is not a regular file");
  if (static_cast<uint64_t>(st.st_size) > limit) {
    return invalid_argument("'" + path + "' holds more than " + std::to_string(limit) + " bytes");
  }
  // One byte more than fstat said, to see a file that grew meanwhile.
  const uint64_t expected = static_cast<uint64_t>(st.st_size);
  std::vector<uint8_t> bytes(static_cast<size_t>(expected) + 1);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("cannot read", path);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  if (done > expected) return io_error("'" + path + "' grew while it was read");
  bytes.resize(done);
  return bytes;
}

Status make_directories(const std::string& path, unsigned mode) {
  if (path.empty()) return invalid_argument("no directory to create");
  // Each prefix ending before a '/', then the whole path.
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string dir = path.substr(0, end);
    if (::mkdir(dir.c_str(), static_cast<mode_t>(mode)) != 0 && errno != EEXIST) {
      return errno_status("cannot create the directory", dir);
    }
    if (end == std::string::npos) break;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno_status("cannot stat", path);
  if (!S_ISDIR(st.st_mode)) return invalid_argument("'" + path + "' is not a directory");
  return Status();
}

StatusOr<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::create(const std::string& path) {
  std::unique_ptr<AtomicFileWriter> w(new AtomicFileWriter());
  w->path_ = path;
  w->temp_path_ = path + ".tmp-XXXXXX";
  // mkstemp: a fresh name no other writer of the same path can collide with.
  UniqueFd fd(::mkostemp(w->temp_path_.data(), O_CLOEXEC));
  if (fd.get() < 0) {
    const Status s = errno_status("cannot create a temporary file for", path);
    w->temp_path_.clear();  // nothing to remove
    return s;
  }
  w->fd_ = std::move(fd);
  return w;
}

AtomicFileWriter::~AtomicFileWriter() {
  fd_.reset();
  if (!committed_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
}

Status AtomicFileWriter::write(std::span<const uint8_t> bytes) {
  if (fd_.get() < 0) return internal_error("write to '" + path_ + "' after commit");
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_.get(), bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("cannot write", temp_path_);
    }
    bytes = bytes.subspan(static_cast<size_t>(n));
    written_ += static_cast<uint64_t>(n);
  }
#ifdef __linux__
  // Start writing back what is written so far, without waiting for it, every few MiB: the disk
  // then works while the writer makes the next bytes, and commit()'s fsync waits for the tail
  // only. (A hint: an error here is left for fsync to report.)
  constexpr uint64_t kWritebackBytes = uint64_t{8} << 20;
  if (written_ - started_ >= kWritebackBytes) {
    ::sync_file_range(fd_.get(), static_cast<off_t>(started_), static_cast<off_t>(written_ - started_),
                      SYNC_FILE_RANGE_WRITE);
    started_ = written_;
  }
#endif
  return Status();
}

Status AtomicFileWriter::commit() {
  if (fd_.get() < 0) return internal_error("commit of '" + path_ + "' twice");
  // Flushed before the rename, so a crash leaves the old file or the whole new one.
  if (::fsync(fd_.get()) != 0) return errno_status("cannot flush", temp_path_);
  // mkstemp creates 0600; a model file is readable by all, like most files.
  // (Not 0666 & ~umask: reading the umask means changing it, which races
  // with other threads.)
  if (::fchmod(fd_.get(), 0644) != 0) return errno_status("cannot set the mode of", temp_path_);
  if (::close(fd_.release()) != 0) return errno_status("cannot close", temp_path_);
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) return errno_status("cannot rename into", path_);
  committed_ = true;
  return Status();
}

}  // namespace tensorpc
