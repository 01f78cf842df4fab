// Session's handlers of the weights cache (docs/protocol.md, "Weights cache"):
//   SET_TENSOR_HASH    one (handle, offset, size, sha256): the server writes
//                      the bytes it has cached under that hash, or says it
//                      has none;
//   SET_TENSOR_HASHES  the same for up to kMaxHashEntries entries in one round
//                      trip, answering which were found.
// Bytes enter the cache only through SET_TENSOR with the CACHE flag
// (session_commands.cpp), hashed by the server as they arrive.
#include <algorithm>
#include <string>

#include "core/log.h"
#include "rpc/server/session.h"

namespace tensorpc::rpc {
namespace {

// A request with bad entries names at most this many of them.
constexpr size_t kMaxReportedEntries = 8;

}  // namespace

StatusOr<bool> Session::fill_from_cache(BufferEntry& entry, const SetTensorHashRequest& e) {
  WeightsCache::Bytes bytes = env_.cache != nullptr ? env_.cache->find(e.sha256) : nullptr;
  // A size that does not match is the client's mistake; it sends the bytes.
  if (bytes != nullptr && bytes->size() == e.size) {
    TENSORPC_RETURN_IF_ERROR(write_bytes(entry, e.offset, bytes->data(), e.size));
    return true;
  }
  return fill_from_local_weights(entry, e);
}

// Copied a slice at a time, each hashed as it goes: the digest is checked on
// the bytes written, so a file changed after it was indexed is caught.
StatusOr<bool> Session::fill_from_local_weights(BufferEntry& entry, const SetTensorHashRequest& e) {
  if (env_.local_weights == nullptr || e.size == 0) return false;
  const std::span<const uint8_t> bytes = env_.local_weights->find(e.sha256, e.size);
  if (bytes.size() != e.size) return false;
  constexpr uint64_t kSlice = uint64_t{4} << 20;
  Sha256Hasher hasher;
  for (uint64_t at = 0; at < e.size; at += kSlice) {
    const uint64_t n = std::min(kSlice, e.size - at);
    hasher.update(bytes.data() + at, n);
    TENSORPC_RETURN_IF_ERROR(write_bytes(entry, e.offset + at, bytes.data() + at, n));
  }
  if (hasher.finish() != e.sha256) {
    // What was written is overwritten by the bytes the client now sends.
    env_.counters->local_weight_mismatches++;
    log::warn("local weights: the " + std::to_string(e.size) + " bytes offered for " + to_hex(e.sha256) +
              " do not match that digest (their file changed?); the client sends them");
    return false;
  }
  env_.counters->local_weight_hits++;
  env_.counters->local_weight_bytes += e.size;
  return true;
}

Status Session::on_set_tensor_hash(WireReader& in, Reply& out) {
  SetTensorHashRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  TENSORPC_ASSIGN_OR_RETURN(auto* entry, buffers_.find_range(req.handle, req.offset, req.size, "SET_TENSOR_HASH:"));
  TENSORPC_ASSIGN_OR_RETURN(const bool found, fill_from_cache(*entry, req));
  encode(out.fields, SetTensorHashReply{.found = found});
  return Status();
}

// Every entry is checked before any is written, so a request with a bad
// entry changes nothing; its error names each bad entry by index (the first
// kMaxReportedEntries) and carries the first one's code.
Status Session::on_set_tensor_hashes(WireReader& in, Reply& out) {
  SetTensorHashesRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  std::vector<BufferEntry*> targets;
  targets.reserve(req.entries.size());
  Status first_bad;
  std::string errors;
  size_t bad = 0;
  for (size_t i = 0; i < req.entries.size(); ++i) {
    const SetTensorHashRequest& e = req.entries[i];
    const std::string what = "entry " + std::to_string(i) + ":";
    auto target = buffers_.find_range(e.handle, e.offset, e.size, what.c_str());
    if (target.ok()) {
      targets.push_back(target.value());
      continue;
    }
    if (first_bad.ok()) first_bad = target.status();
    if (bad++ < kMaxReportedEntries) {
      const std::string why = target.status().message();
      if (!errors.empty()) errors += "; ";
      if (why.rfind(what, 0) != 0) errors += what + " ";
      errors += why;
    }
  }
  if (bad > kMaxReportedEntries) errors += "; and " + std::to_string(bad - kMaxReportedEntries) + " more";
  if (bad > 0) {
    return Status(first_bad.code(), std::to_string(bad) + " of " + std::to_string(req.entries.size()) +
                                        " entries are invalid, and none was written: " + errors);
  }
  SetTensorHashesReply reply;
  reply.found.resize(req.entries.size());
  for (size_t i = 0; i < req.entries.size(); ++i) {
    auto found = fill_from_cache(*targets[i], req.entries[i]);
    if (!found.ok()) return found.status().with_context("entry " + std::to_string(i));
    reply.found[i] = found.value();
  }
  encode(out.fields, reply);
  return Status();
}

}  // namespace tensorpc::rpc
