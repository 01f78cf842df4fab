// The GGUF files of `tensorpc-server --models DIR` (model_directory.h).
#include "api/model_directory.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <thread>

#include "model/gguf/weight_digests.h"
#include "rpc/wire/digest.h"

namespace tensorpc {

size_t ModelDirectory::DigestHash::operator()(const std::array<uint8_t, 32>& d) const {
  size_t h = 0;
  std::memcpy(&h, d.data(), sizeof h);  // a digest's bytes are already uniform
  return h;
}

StatusOr<std::shared_ptr<ModelDirectory>> ModelDirectory::open(const std::string& dir, std::string digest_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found("--models " + dir + ": not a directory");
  std::vector<std::string> paths;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".gguf" && it->is_regular_file(ec)) paths.push_back(it->path().string());
  }
  if (ec) return io_error("--models " + dir + ": " + ec.message());
  std::sort(paths.begin(), paths.end());
  std::shared_ptr<ModelDirectory> d(new ModelDirectory());
  d->digest_dir_ = std::move(digest_dir);
  for (const std::string& path : paths) {
    auto file = GgufFile::open(path);
    if (!file.ok()) {
      d->skipped_.push_back(file.status().message());
      continue;
    }
    d->files_.push_back(std::move(file).value());
  }
  return d;
}

void ModelDirectory::index(int threads, std::stop_token stop) {
  for (const std::unique_ptr<GgufFile>& file : files_) {
    if (stop.stop_requested()) return;
    WeightDigests digests =
        file->identity() != nullptr ? WeightDigests::open(digest_dir_, *file->identity()) : WeightDigests();
    const std::span<const GgufTensorInfo> tensors = file->tensors();
    std::vector<ContentDigest*> slots;
    for (const GgufTensorInfo& t : tensors) {
      slots.push_back(&digests.slot(file->data_offset() + t.offset, t.bytes.size()));
    }
    const size_t known = digests.known();
    std::atomic<size_t> next{0};
    const auto work = [&] {
      for (size_t i = next++; i < tensors.size() && !stop.stop_requested(); i = next++) {
        if (slots[i]->known) continue;
        *slots[i] =
            ContentDigest{.known = true, .sha256 = rpc::sha256(tensors[i].bytes.data(), tensors[i].bytes.size())};
      }
    };
    {
      std::vector<std::jthread> helpers;
      for (int t = 1; t < threads; ++t) helpers.emplace_back(work);
      work();
    }  // the helpers join here
    if (stop.stop_requested()) return;
    {
      MutexLock lock(mutex_);
      for (size_t i = 0; i < tensors.size(); ++i) by_digest_.emplace(slots[i]->sha256, tensors[i].bytes);
    }
    // Not saving costs the next start the hashing, nothing more.
    if (digests.known() > known) (void)digests.save();
  }
}

std::span<const uint8_t> ModelDirectory::find(const std::array<uint8_t, 32>& sha256, uint64_t size) const {
  MutexLock lock(mutex_);
  const auto it = by_digest_.find(sha256);
  if (it == by_digest_.end() || it->second.size() != size) return {};
  return it->second;
}

ModelDirectory::Counts ModelDirectory::counts() const {
  Counts c;
  c.files = files_.size();
  for (const std::unique_ptr<GgufFile>& f : files_) {
    c.tensors += f->tensors().size();
    for (const GgufTensorInfo& t : f->tensors()) c.bytes += t.bytes.size();
  }
  MutexLock lock(mutex_);
  c.indexed = by_digest_.size();
  return c;
}

}  // namespace tensorpc
