// RemoteBuffer's sets through the server's weights cache (docs/protocol.md,
// "Weights cache"): the client hashes the bytes (unless the caller knows
// their digest already, TensorBytes::digest), asks the server about many
// ranges in one SET_TENSOR_HASHES round trip — the server fills each range it
// has from its cache — and sends only the bytes of the ranges it lacks, with
// the CACHE flag, so the next load finds them. Hashing the next batch
// overlaps the server's work on the last.
#include <algorithm>
#include <atomic>
#include <future>
#include <mutex>
#include <numeric>
#include <thread>

#include "rpc/client/remote_buffer.h"
#include "rpc/client/remote_device.h"
#include "rpc/wire/digest.h"

namespace tensorpc::rpc {
namespace {

// The ranges of one SET_TENSOR_HASHES: up to kMaxHashEntries, and about
// this many bytes to hash, so that hashing the next batch (~10 ms on two
// cores) overlaps the server's filling of this one, and a load costs a round
// trip per 16 MiB hashed. Ranges whose digest is known count no bytes: a
// reload with every digest known asks about up to kMaxHashEntries ranges per
// round trip.
constexpr uint64_t kPipelineBytes = uint64_t{16} << 20;

// A hashing thread is started for every this many bytes at the most (SHA-256
// runs at 0.5–2 GB/s a core, so a thread gets milliseconds of work, and a
// batch up to 4 threads).
constexpr uint64_t kBytesPerHashThread = uint64_t{4} << 20;

// The SHA-256 of every input into `out` (same index), the largest inputs
// first on up to hardware_concurrency threads when there is enough to hash.
Status sha256_all(std::span<const std::span<const uint8_t>> inputs, std::span<Sha256> out) {
  const uint64_t total =
      std::accumulate(inputs.begin(), inputs.end(), uint64_t{0}, [](uint64_t n, auto in) { return n + in.size(); });
  const uint64_t threads = std::min<uint64_t>({std::max(1u, std::thread::hardware_concurrency()), inputs.size(),
                                               std::max<uint64_t>(1, total / kBytesPerHashThread)});
  std::vector<size_t> order(inputs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return inputs[a].size() > inputs[b].size(); });
  std::atomic<size_t> next{0};
  std::mutex failure_mutex;
  Status failure;
  auto work = [&] {
    for (size_t k = next++; k < order.size(); k = next++) {
      const size_t i = order[k];
      try {
        out[i] = sha256(inputs[i].data(), inputs[i].size());
      } catch (const Error& e) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (failure.ok()) failure = e.status();
      }
    }
  };
  {
    std::vector<std::jthread> helpers;
    for (uint64_t t = 1; t < threads; ++t) helpers.emplace_back(work);
    work();
  }  // the helpers join here
  return failure;
}

}  // namespace

Status RemoteBuffer::set_tensors(std::span<const TensorBytes> writes) {
  // Every tensor is checked before anything is sent.
  for (const TensorBytes& w : writes) {
    TENSORPC_RETURN_IF_ERROR(check_range(*w.tensor, 0, w.tensor->nbytes(), "set_tensors"));
  }
  std::vector<CachedRange> cached;
  cached.reserve(writes.size());
  for (const TensorBytes& w : writes) {
    const uint64_t size = w.tensor->nbytes();
    if (through_cache(*w.tensor, size)) {
      cached.push_back({.server_offset = w.tensor->offset,
                        .src = static_cast<const uint8_t*>(w.data),
                        .size = size,
                        .digest = w.digest});
    } else {
      TENSORPC_RETURN_IF_ERROR(set(*w.tensor, w.data, 0, size));
    }
  }
  return set_cached(cached);
}

// Batch by batch, and while the server fills one from its cache (or takes
// its missing bytes), the next is hashed here.
Status RemoteBuffer::set_cached(std::span<const CachedRange> ranges) {
  std::vector<Sha256> digests(ranges.size());
  std::future<Status> in_flight;  // the previous batch's send_batch; ends before `digests`
  for (size_t first = 0, n = 0; first < ranges.size(); first += n) {
    uint64_t to_hash = 0;
    for (n = 0; first + n < ranges.size() && n < kMaxHashEntries && to_hash < kPipelineBytes; ++n) {
      if (!ranges[first + n].digest_known()) to_hash += ranges[first + n].size;
    }
    const std::span<const CachedRange> batch = ranges.subspan(first, n);
    const std::span<Sha256> batch_digests = std::span<Sha256>(digests).subspan(first, n);
    TENSORPC_RETURN_IF_ERROR(digest_batch(batch, batch_digests));
    if (in_flight.valid()) TENSORPC_RETURN_IF_ERROR(in_flight.get());
    if (first + n == ranges.size()) return send_batch(batch, batch_digests);  // nothing left to overlap
    in_flight =
        std::async(std::launch::async, [this, batch, batch_digests] { return send_batch(batch, batch_digests); });
  }
  return Status();
}

Status RemoteBuffer::digest_batch(std::span<const CachedRange> batch, std::span<Sha256> out) {
  std::vector<std::span<const uint8_t>> inputs;
  std::vector<size_t> hashed;  // index in batch of each input
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].digest_known()) {
      out[i] = batch[i].digest->sha256;
    } else {
      inputs.emplace_back(batch[i].src, batch[i].size);
      hashed.push_back(i);
    }
  }
  if (inputs.empty()) return Status();
  std::vector<Sha256> computed(inputs.size());
  TENSORPC_RETURN_IF_ERROR(sha256_all(inputs, computed));
  for (size_t k = 0; k < hashed.size(); ++k) {
    const CachedRange& r = batch[hashed[k]];
    out[hashed[k]] = computed[k];
    if (r.digest != nullptr) *r.digest = ContentDigest{.known = true, .sha256 = computed[k]};
  }
  return Status();
}

Status RemoteBuffer::send_batch(std::span<const CachedRange> batch, std::span<const Sha256> digests) {
  TENSORPC_ASSIGN_OR_RETURN(const std::vector<bool> found, ask_cache(batch, digests));
  for (size_t i = 0; i < batch.size(); ++i) {
    if (found[i]) continue;
    // One frame whatever the size, so the server can hash exactly the bytes
    // the client hashed (the server raises its frame limit for large buffers).
    TENSORPC_RETURN_IF_ERROR(send_set(batch[i].server_offset, batch[i].src, batch[i].size, kFlagCache));
  }
  return Status();
}

StatusOr<std::vector<bool>> RemoteBuffer::ask_cache(std::span<const CachedRange> batch,
                                                    std::span<const Sha256> digests) {
  std::vector<SetTensorHashRequest> entries;
  entries.reserve(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    entries.push_back(
        {.handle = handle_, .offset = batch[i].server_offset, .size = batch[i].size, .sha256 = digests[i]});
  }
  if (connection_->server_hello().minor < kSetTensorHashesMinor) {
    std::vector<bool> found;
    for (const SetTensorHashRequest& e : entries) {
      SetTensorHashReply reply;
      TENSORPC_RETURN_IF_ERROR(connection_->call(Command::set_tensor_hash, e, reply, device_->reply_timeout()));
      found.push_back(reply.found);
    }
    return found;
  }
  SetTensorHashesReply reply;
  TENSORPC_RETURN_IF_ERROR(connection_->call(Command::set_tensor_hashes, SetTensorHashesRequest{std::move(entries)},
                                             reply, device_->reply_timeout()));
  if (reply.found.size() != batch.size()) {
    return Status(StatusCode::protocol_error, "SET_TENSOR_HASHES to " + connection_->endpoint() +
                                                  ": the reply answers " + std::to_string(reply.found.size()) +
                                                  " entries, the request asked " + std::to_string(batch.size()));
  }
  return std::move(reply.found);
}

}  // namespace tensorpc::rpc
