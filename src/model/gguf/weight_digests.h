// WeightDigests: the SHA-256 of each tensor of one model file, remembered so
// that loading the same, unchanged file again hashes nothing.
//
// A remote buffer asks its server's weights cache for tensors by digest
// (Buffer::set_tensors and ContentDigest, tensorpc/device.h); it computes the
// digests it is not given and fills them in. This class only keeps those
// 32-byte values, keyed by where the tensor's bytes lie in the file (offset
// from the file's first byte, and size); it computes nothing.
//
// With a directory, the digests persist in one small file per file identity
// (device, inode, size, mtime: FileIdentity, file_io.h), named
// `<dev>-<ino>-<size>-<mtime_ns>.digests`, so a file rewritten, replaced or
// touched never finds its old bytes' digests. The store file is read once, in
// open(); one that is missing, unreadable, malformed, truncated, of another
// format version or of another identity is ignored (the memo starts empty).
// save() writes it atomically (AtomicFileWriter), creating the directory
// (mode 0700) when missing. A store that cannot be written costs only the
// hashing next time: after the first failure the memo keeps to memory.
//
// Format, version 1, text:
//   tensorpc weight digests 1
//   file <dev> <ino> <size> <mtime_ns>
//   <offset> <size> <64 hex digits>     (one line per tensor)
//   end <number of tensor lines>
//
// Ownership and threads: the model that holds a WeightDigests owns it; a
// ContentDigest& from slot() stays valid as long as the WeightDigests does.
// Not thread-safe: one load at a time uses it.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>

#include "model/gguf/file_io.h"
#include "tensorpc/device.h"
#include "tensorpc/status.h"

namespace tensorpc {

class WeightDigests {
 public:
  // Kept in memory only.
  WeightDigests() = default;
  // Backed by the store of `identity` in `dir` (empty: in memory only), whose
  // digests are read now.
  static WeightDigests open(const std::string& dir, const FileIdentity& identity);
  // $TENSORPC_DIGEST_DIR when set (the value `off`: none, so ""), else
  // $XDG_CACHE_HOME/tensorpc/digests, else $HOME/.cache/tensorpc/digests,
  // else "".
  static std::string default_dir();
  // The store file's name for `identity`.
  static std::string file_name(const FileIdentity& identity);

  // The digest of bytes [offset, offset + size) of the file; a new one is
  // unknown.
  ContentDigest& slot(uint64_t offset, uint64_t size);
  // How many digests are known.
  size_t known() const;
  // Writes every known digest to the store file. Nothing to do in memory
  // only; after a failure (returned, and kept in save_failure()) the memo
  // stays in memory only.
  Status save();
  // Why the store could not be written, if it could not (ok otherwise).
  const Status& save_failure() const { return save_failure_; }
  // The store file, "" when in memory only.
  const std::string& path() const { return path_; }

 private:
  // Parses a store file's bytes; false (and nothing taken) when they are not
  // a whole version-1 store of identity_.
  bool parse(std::span<const uint8_t> bytes);
  std::string encode() const;

  std::string dir_;
  std::string path_;
  FileIdentity identity_;
  std::map<std::pair<uint64_t, uint64_t>, ContentDigest> digests_;  // (offset, size) → digest
  Status save_failure_;
};

}  // namespace tensorpc
