// FrameChannel: the server's end of one client connection, as frames.
//
// It owns the socket and everything about the frame being served: its
// header, its payload (read whole, or streamed by the handler that asked for
// it), draining what must be skipped so the next frame is found, and the
// reply. It also keeps whether the connection is to close after this frame,
// and why it ended, for the session's last log line.
//
// Only the session's own thread uses it, except shutdown(), which another
// thread may call to wake a blocked read (Server::stop); the socket's mutex
// orders that against the close at the end of the session.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/thread_annotations.h"
#include "rpc/transport/socket.h"
#include "rpc/transport/tls.h"
#include "rpc/wire/digest.h"
#include "rpc/wire/messages.h"

namespace tensorpc::rpc {

// What a handler returns besides its status: reply fields, and bulk bytes
// sent after them without copying (GET_TENSOR).
struct FrameReply {
  WireWriter fields;
  std::span<const uint8_t> bulk;
  std::vector<uint8_t> bulk_storage;  // when the bytes are not host-addressable
};

class FrameChannel {
 public:
  // `who` names the session in log lines ("session 7").
  FrameChannel(Socket socket, std::string who, std::chrono::milliseconds io_timeout);
  FrameChannel(const FrameChannel&) = delete;
  FrameChannel& operator=(const FrameChannel&) = delete;

  const std::string& peer() const { return peer_; }  // the client's address
  // The TLS handshake that starts every connection of a TLS server, bounded
  // by `timeout`; on failure the connection is closed after a short drain.
  Status start_tls(const TlsContext& ctx, std::chrono::milliseconds timeout);
  // Every wait ends by `at` (the handshake's deadline), failing with `what`
  // after it; clear_deadline() lifts it.
  void set_deadline(std::chrono::steady_clock::time_point at, std::string what) {
    socket_.set_deadline(at, std::move(what));
  }
  void clear_deadline() { socket_.clear_deadline(); }
  // From another thread: wakes a blocked read, so the session ends soon.
  void shutdown();
  // At the session's end.
  void close();

  // Reads the next frame's header; false when the connection has ended (its
  // reason recorded). `may_idle`: the wait for the frame's first byte is not
  // bounded by the I/O timeout (an admitted client may idle).
  bool next_frame(bool may_idle);
  const FrameHeader& current() const { return current_; }
  // Reads the current frame's whole payload (payload()).
  Status read_payload();
  std::span<const uint8_t> payload() const { return payload_; }
  // Reads and discards `length` payload bytes.
  Status drain(uint64_t length);
  // Reads and discards `n` payload bytes, then returns `why`; a failure to
  // read ends the connection.
  Status fail_draining(uint64_t n, Status why);
  // Reads the fixed fields that lead a streamed payload (SET_TENSOR,
  // WRITE_GRANTED) and checks exactly req.size bytes of data follow; on a
  // mismatch the rest of the payload is drained so the next frame is found.
  template <typename Request>
  Status read_streamed_fields(const char* command, size_t fixed_size, Request& req);
  // Receives `size` payload bytes into dst, hashing them as they come when
  // `hasher` is set.
  Status receive(uint8_t* dst, uint64_t size, Sha256Hasher* hasher);
  // The reply to the current frame: the status, then (when ok) the reply's
  // fields and bulk bytes. A small reply is held while the client's next
  // frame is already here, and goes out in one write with the reply after
  // it: a client that sent several requests at once (runs by id, then a
  // read) wakes once for their replies. Held replies are sent before the
  // channel waits for a frame, or serves one that has no reply.
  Status send_reply(const Status& status, const FrameReply& reply);
  // Keep-alives (kFeatureKeepAlive). The session's thread holds the socket
  // for its I/O from hold_socket() to release_socket(), and lends it while
  // a handler works (lend_socket() to take_socket_back()): only then may
  // keep_alive(), from another thread, write a KEEPALIVE frame, once the
  // client has heard nothing for kKeepAliveInterval.
  void hold_socket() { io_mutex_.lock(); }
  void release_socket() { io_mutex_.unlock(); }
  void lend_socket();
  void take_socket_back();
  // From then on this client gets keep-alives (after its handshake).
  void want_keepalives() { keepalives_.store(true, std::memory_order_release); }
  // From another thread: a KEEPALIVE when one is due and the socket is lent.
  void keep_alive(std::chrono::steady_clock::time_point now);

  // Replies to the current frame now, before its work is done (a run by id
  // that was found: the rest of its outcome is kept like a one-way
  // command's). The frame gets no other reply.
  Status reply_early();
  bool replied_early() const { return replied_early_; }
  // Done with the current frame: a huge payload's memory is given back.
  void end_frame();

  // The connection closes after this frame's reply.
  void close_after_reply() { closing_ = true; }
  // The connection closes after this frame, for `reason`.
  void end(std::string reason);
  // When the connection is closing and its end has no reason yet, `reason`.
  void explain_end(const std::string& reason);
  bool closing() const { return closing_; }
  const std::string& end_reason() const { return end_reason_; }

 private:
  Socket socket_;
  Mutex socket_mutex_;  // shutdown() from another thread vs. the close at the session's end
  const std::string who_;
  const std::string peer_;
  // Sends the held replies; false (the connection ended) when that fails.
  bool flush_held();
  void sent_now();  // a frame went out: keep-alives count from here

  // What the session's thread holds for the socket's I/O, but lends while a
  // handler works (see lend_socket). A plain mutex: it is held across calls.
  std::mutex io_mutex_;
  std::atomic<bool> keepalives_{false};
  std::atomic<int64_t> lent_since_ns_{0};  // 0: not lent
  std::atomic<int64_t> last_sent_ns_{0};

  FrameHeader current_;  // the frame being served
  std::vector<uint8_t> held_;  // encoded replies not sent yet (send_reply)
  static constexpr size_t kMaxHeldBytes = 4096;
  std::vector<uint8_t> payload_;
  bool closing_ = false;  // end the connection after this frame's reply
  bool replied_early_ = false;  // the current frame was answered by reply_early()
  std::string end_reason_ = "connection closed by peer";
};

}  // namespace tensorpc::rpc
