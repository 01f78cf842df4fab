// ModelDirectory: the GGUF files of `tensorpc-server --models DIR` as the
// server's LocalWeights (tensorpc/server.h): each tensor's bytes in those
// files, found by their SHA-256. A client that loads a model whose file this
// server has too sends the tensors' digests (as it does for the weights
// cache) and no bytes; the server copies them from its own file, checking
// them against the digest as it copies, and a tensor it lacks or whose bytes
// no longer match is sent by the client as before.
//
// open() lists the *.gguf files of DIR (not its subfolders) and maps them;
// a file that is not a GGUF file is skipped, and said so. index() hashes
// every tensor, the files in turn, each on every thread it is given; a
// file's digests are read from and saved to the digest memo (WeightDigests,
// the store clients keep too), so a file indexed or loaded before on this
// machine is not hashed again. find() answers from what is indexed so far:
// the server serves while it indexes, and a tensor not yet indexed is sent.
//
// Ownership: the directory owns its mappings; find()'s views live as long
// as it does. find() is thread-safe, also during index().
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <stop_token>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/thread_annotations.h"
#include "model/gguf/gguf.h"
#include "tensorpc/local_weights.h"

namespace tensorpc {

class ModelDirectory : public LocalWeights {
 public:
  // The *.gguf files of `dir`, mapped; `digest_dir` keeps their digests
  // (WeightDigests::default_dir(); "" keeps them in memory only). An error
  // when `dir` is not a readable directory.
  static StatusOr<std::shared_ptr<ModelDirectory>> open(const std::string& dir, std::string digest_dir);

  // Hashes every tensor not yet known, on `threads` threads, until done or
  // `stop` is requested.
  void index(int threads, std::stop_token stop = {});

  std::span<const uint8_t> find(const std::array<uint8_t, 32>& sha256, uint64_t size) const override;

  struct Counts {
    size_t files = 0;    // GGUF files mapped
    size_t tensors = 0;  // tensors in them
    uint64_t bytes = 0;  // their bytes
    size_t indexed = 0;  // tensors find() knows
  };
  Counts counts() const;
  // The files skipped by open(), each with why ("x.gguf: not a GGUF file ...").
  const std::vector<std::string>& skipped() const { return skipped_; }

 private:
  struct DigestHash {
    size_t operator()(const std::array<uint8_t, 32>& d) const;
  };

  std::string digest_dir_;
  std::vector<std::unique_ptr<GgufFile>> files_;
  std::vector<std::string> skipped_;
  mutable Mutex mutex_;
  std::unordered_map<std::array<uint8_t, 32>, std::span<const uint8_t>, DigestHash> by_digest_ GUARDED_BY(mutex_);
};

}  // namespace tensorpc
