// Session's handlers of server-to-server copies (docs/protocol.md, "Copies
// between servers"):
//   GRANT_WRITE    the destination's client asks for a single-use token that
//                  lets one write land in exactly (handle, offset, size);
//   COPY_TO_PEER   the source's client asks its server to send a range of its
//                  buffer to the destination under that token;
//   WRITE_GRANTED  the source server's frame to the destination: token, then
//                  the bytes, received straight into the granted buffer.
// The bytes thus go from server to server; each client learns only that the
// copy is done (or why it failed). The connections to other servers are
// PeerLinks'; the grants are the server's WriteGrants, on this session's
// buffer table (SessionBuffers).
#include <mutex>
#include <optional>

#include "rpc/server/session.h"

namespace tensorpc::rpc {

StatusOr<GrantToken> Session::issue_grant(uint64_t handle, uint64_t offset, uint64_t size, const char* what,
                                          std::shared_ptr<GrantArrivals> arrivals) {
  if (env_.grants == nullptr) return unsupported("this server does not take copies from other servers");
  // Checked now, so the client learns of a bad range before any bytes move.
  TENSORPC_RETURN_IF_ERROR(buffers_.find_range(handle, offset, size, what).status());
  return env_.grants->issue(WriteGrant{.session = id_,
                                       .table = buffers_.table(),
                                       .handle = handle,
                                       .offset = offset,
                                       .size = size,
                                       .arrivals = std::move(arrivals)});
}

Status Session::on_grant_write(WireReader& in, Reply& out) {
  GrantWriteRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  TENSORPC_ASSIGN_OR_RETURN(const GrantToken token,
                            issue_grant(req.handle, req.offset, req.size, "GRANT_WRITE:", nullptr));
  encode(out.fields, GrantWriteReply{token});
  return Status();
}

Status Session::on_copy_to_peer(WireReader& in, Reply&) {
  CopyToPeerRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  return send_to_peer(req.src_handle, req.src_offset, req.size, req.endpoint, req.token, /*wait_for_reply=*/true);
}

Status Session::send_to_peer(uint64_t src_handle, uint64_t src_offset, uint64_t size, const std::string& endpoint,
                             const GrantToken& token, bool wait_for_reply) {
  const std::string route =
      "copy of " + std::to_string(size) + " bytes from " + env_.endpoint + " to " + endpoint + ": ";
  auto src = buffers_.find_range(src_handle, src_offset, size, "COPY_TO_PEER: source");
  if (!src.ok()) return Status(src.status().code(), route + src.status().message());
  auto connection = peers_.get(endpoint);
  if (!connection.ok()) return Status(connection.status().code(), route + connection.status().message());

  // Sent from the buffer itself when it is host memory, else staged once.
  std::span<const uint8_t> bytes;
  std::vector<uint8_t> staging;
  if (const void* base = src.value()->buffer->host_base()) {
    bytes = std::span<const uint8_t>(static_cast<const uint8_t*>(base) + src_offset, size);
  } else {
    staging.resize(size);
    TENSORPC_RETURN_IF_ERROR(read_bytes(*src.value(), src_offset, staging.data(), size));
    bytes = staging;
  }
  WireWriter fields;
  encode(fields, WriteGrantedRequest{.token = token, .size = size});
  const Connection::Request request{
      .command = Command::write_granted, .fields = fields.bytes(), .bulk = bytes, .timeout = env_.io_timeout};
  if (!wait_for_reply) {
    // A plan's send: the destination's WAIT_FOR learns of the arrival, or of
    // a refused write (GrantArrivals::failure), so no round trip is spent here.
    const Status sent = connection.value()->send_one_way(request);
    // The bytes are out of the buffer now; a peer that answers with bytes
    // granted into the same memory (the allocator reuses a tensor's memory
    // once it is sent) does so only after reading them: an order through
    // the other server that ThreadSanitizer cannot see (on_write_granted).
    happens_before(src.value());
    return sent.ok() ? sent : Status(sent.code(), route + sent.message());
  }
  // Waits for the destination's status: the client's reply means "written".
  // io_timeout bounds the wait: a destination that stalls must not hold this session.
  auto reply = connection.value()->call(request);
  happens_before(src.value());
  if (!reply.ok()) return Status(reply.status().code(), route + reply.status().message());
  if (!reply.value().empty()) {
    return protocol_error(route + "the WRITE_GRANTED reply has " + std::to_string(reply.value().size()) +
                          " unexpected bytes");
  }
  return Status();
}

// Streams its payload like SET_TENSOR. Whatever is wrong with the token, the
// bytes are drained (so the connection stays usable) and nothing is written.
Status Session::on_write_granted(WireReader&, Reply&) {
  WriteGrantedRequest req;
  TENSORPC_RETURN_IF_ERROR(channel_.read_streamed_fields("WRITE_GRANTED", kWriteGrantedFixedSize, req));
  const uint64_t data = req.size;
  const std::string refused = "write refused by " + env_.endpoint + ": ";
  // Taken (so used up) on first presentation, whether or not it fits: a
  // token can be tried once, never probed.
  std::optional<WriteGrant> grant = env_.grants ? env_.grants->take(req.token) : std::nullopt;
  if (!grant) {
    return channel_.fail_draining(data, invalid_argument(refused + "unknown token (never granted, already used, or its "
                                                                   "granting connection has ended)"));
  }
  // Under a standing grant the sender may not wait for this reply: the
  // granting session's WAIT_FOR is told instead.
  const auto record = [&](Status s) {
    if (!s.ok() && grant->arrivals) {
      std::lock_guard<std::mutex> lock(grant->arrivals->mutex);
      if (grant->arrivals->failure.ok()) grant->arrivals->failure = s;
      grant->arrivals->changed.notify_all();
    }
    return s;
  };
  if (req.size == 0 && grant->size != 0 && grant->arrivals) {
    // No bytes under a standing grant of some: the sender's run failed before
    // this send (Session::tell_unsent), and its WAIT_FOR need not wait.
    (void)record(io_error("the plan run that sends these bytes failed before sending them"));
    return Status();
  }
  if (grant->size != req.size) {
    return channel_.fail_draining(
        data, record(invalid_argument(refused + "the token grants " + std::to_string(grant->size) + " bytes, not " +
                                      std::to_string(req.size))));
  }
  // Shared ownership for the write: the granting session may free the buffer
  // or end meanwhile, and the bytes must still land in live memory.
  std::shared_ptr<BufferTable> table = grant->table.lock();
  std::shared_ptr<BufferEntry> entry;
  if (table) {
    MutexLock lock(table->mutex);
    if (table->open) {
      auto it = table->entries.find(grant->handle);
      if (it != table->entries.end()) entry = it->second;
    }
  }
  if (!entry) {
    return channel_.fail_draining(
        data, record(not_found(refused + "the granted buffer was freed, or its connection has ended")));
  }
  happens_after(entry.get());  // after this buffer's bytes were sent to a peer (send_to_peer)
  Status s = record(receive_into(*entry, grant->offset, req.size, nullptr));
  // The table's lock orders these bytes before the granting session's next
  // use of the buffer (it looks its buffers up under the same lock).
  { MutexLock lock(table->mutex); }
  if (!s.ok()) {
    channel_.end(s.message());
    return s;
  }
  // A standing grant's WAIT_FOR learns that this run's bytes are in place;
  // its mutex orders the bytes before the waiter's use of them.
  if (grant->arrivals) {
    {
      std::lock_guard<std::mutex> lock(grant->arrivals->mutex);
      grant->arrivals->arrived += 1;
      grant->arrivals->sender_gone = Status();
      grant->arrivals->changed.notify_all();
    }
    remember_fed(grant->arrivals);
  }
  return Status();
}

// A plan sends to a handful of standing grants; entries whose grant is gone
// make room, so the list stays as small as what this connection still feeds.
void Session::remember_fed(const std::shared_ptr<GrantArrivals>& arrivals) {
  for (const std::weak_ptr<GrantArrivals>& fed : fed_) {
    if (fed.lock() == arrivals) return;
  }
  std::erase_if(fed_, [](const std::weak_ptr<GrantArrivals>& fed) { return fed.expired(); });
  fed_.push_back(arrivals);
}

}  // namespace tensorpc::rpc
