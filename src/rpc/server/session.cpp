// Session: one connection's life and frame loop (session.h).
//
// The loop reads a header, enforces the frame rules (magic, command, payload
// limit, HELLO first, then AUTH when the server has a key), reads the payload
// (except SET_TENSOR and WRITE_GRANTED, which stream their bytes straight
// into the buffer) and calls the command's handler through kCommands. A
// handler returns a Status and fills a Reply; the loop turns both into one
// reply frame, or — for NO_REPLY frames — keeps the first error for the next
// SYNCHRONIZE.
#include "rpc/server/session.h"

#include <algorithm>
#include <vector>

#include "core/log.h"

namespace tensorpc::rpc {
namespace {

// A one-way computation: skipped while an earlier one-way command's error is pending.
bool skips_after_failure(const FrameHeader& h) {
  if ((h.flags & kFlagNoReply) == 0) return false;
  return h.command == Command::graph_compute || h.command == Command::graph_recompute || h.command == Command::plan_run;
}

// A run of a stored graph or plan by its id.
bool runs_by_id(Command command) { return command == Command::graph_recompute || command == Command::plan_run; }


}  // namespace

Session::Session(Socket socket, const SessionEnv& env, uint64_t id)
    : env_(env),
      id_(id),
      channel_(std::move(socket), "session " + std::to_string(id), env.io_timeout),
      buffers_(env),
      work_(env.stored_graphs),
      peers_(env) {}

Session::~Session() { release_all(); }

void Session::run() {
  const std::string who = "session " + std::to_string(id_) + ": ";
  log::info(who + channel_.peer() + " connected");
  channel_.hold_socket();  // lent only while a handler works (keep-alives)
  try {
    // The TLS handshake, HELLO and AUTH together end by the handshake
    // deadline, however slowly their bytes come (enter_serving lifts it):
    // before it is admitted, a peer cannot hold the session's thread long.
    if (env_.handshake_timeout.count() > 0) {
      channel_.set_deadline(std::chrono::steady_clock::now() + env_.handshake_timeout,
                            "the handshake (TLS, HELLO, AUTH) did not finish within " +
                                std::to_string(env_.handshake_timeout.count()) + " ms (--handshake-timeout)");
    }
    const Status handshake = env_.tls ? channel_.start_tls(*env_.tls, env_.io_timeout) : Status();
    while (handshake.ok() && serve_frame()) {
    }
  } catch (const std::exception& e) {
    // Handlers turn their own failures into replies; this is the last guard
    // that keeps one connection's failure from ending the process.
    channel_.end(std::string("internal error: ") + e.what());
    log::error(who + channel_.end_reason());
  }
  const SessionBuffers::Held held = buffers_.held();
  if (admitted_.load(std::memory_order_acquire) && env_.admission != nullptr) env_.admission->leave();
  tell_fed_grants();
  release_all();
  channel_.close();
  channel_.release_socket();
  log::info(who + channel_.peer() + " ended (" + channel_.end_reason() + "); freed " + std::to_string(held.buffers) +
            " buffers, " + std::to_string(held.bytes) + " bytes");
}

void Session::tell_fed_grants() {
  const Status gone = io_error("the connection from " + channel_.peer() + " that brought these bytes before ended (" +
                               channel_.end_reason() + ")");
  for (const std::weak_ptr<GrantArrivals>& fed : fed_) {
    const std::shared_ptr<GrantArrivals> a = fed.lock();
    if (!a) continue;
    std::lock_guard<std::mutex> lock(a->mutex);
    a->sender_gone = gone;
    a->changed.notify_all();
  }
  fed_.clear();
}

void Session::keep_alive(std::chrono::steady_clock::time_point now) { channel_.keep_alive(now); }

void Session::shutdown() {
  stopping_.store(true, std::memory_order_release);
  channel_.shutdown();
}

void Session::release_all() {
  work_.clear();  // they point into the buffers
  buffers_.release_all(id_);
  peers_.clear();
}

// ---- the frame loop -------------------------------------------------------------

bool Session::serve_frame() {
  // An admitted client may idle between frames for as long as it likes; a
  // connection still in its handshake gets the I/O timeout for its next
  // frame too, so connections that never say HELLO (or AUTH) cannot pile up.
  if (!channel_.next_frame(/*may_idle=*/phase_ == Phase::serving)) return false;
  const FrameHeader& current = channel_.current();
  const Command command = current.command;
  const char* name = name_of(command);
  if (current.payload_length > payload_limit(command)) {
    channel_.end(std::string(name) + " frame of " + std::to_string(current.payload_length) +
                 " bytes is over the limit of " + std::to_string(payload_limit(command)));
    log::warn("session " + std::to_string(id_) + ": " + channel_.end_reason() + "; closing");
    return false;
  }
  const CommandSpec& spec = kCommands[static_cast<uint16_t>(command)];
  // Anything else comes from a client that has read its runs' replies.
  if (!runs_by_id(command) && !only_reads(command)) skipping_runs_ = false;
  Status s;
  if (!spec.streams_payload) {
    s = channel_.read_payload();
    if (!s.ok()) {
      channel_.end(s.message());
      return false;
    }
  }
  Reply reply;
  Status result = admit(command);
  if (!result.ok()) {
    channel_.end(result.message());
    // A streamed payload is still unread. It is small before the handshake
    // (payload_limit), so it is taken, lest closing on it reset the
    // connection before the refusal is read.
    if (spec.streams_payload) (void)channel_.drain(current.payload_length);
    if (phase_ == Phase::awaiting_auth) {
      log::warn("session " + std::to_string(id_) + ": " + channel_.peer() + ": " + channel_.end_reason() + "; closing");
    }
  } else if (!pending_.ok() && ((current.flags & kFlagSync) != 0 || skips_after_failure(current))) {
    // SYNC: the pending error is the reply, and the command does not run.
    // Without SYNC, a one-way computation after a failed one-way command
    // does not run either: its inputs may be what failed, and a result
    // computed from them must not pass for a good one (the pending error
    // stands until SYNCHRONIZE).
    if ((current.flags & kFlagSync) != 0) {
      result = pending_;
      pending_ = Status();
    }
    if (spec.streams_payload) {
      s = channel_.drain(current.payload_length);
      if (!s.ok()) {
        channel_.end(s.message());
        return false;
      }
    }
  } else {
    WireReader in(channel_.payload());
    bool threw = true;
    // A handler that does not read the socket lends it, so a client waiting
    // through a long computation gets keep-alives.
    const bool lend = !spec.streams_payload;
    if (lend) channel_.lend_socket();
    try {
      result = (this->*spec.handler)(in, reply);
      threw = false;
    } catch (const std::bad_alloc&) {
      result = out_of_memory("the server ran out of host memory serving this request");
    } catch (const Error& e) {
      result = e.status();
    } catch (const std::exception& e) {
      result = internal_error(e.what());
    }
    if (lend) channel_.take_socket_back();
    // A streaming handler that threw may have left its payload half read.
    if (threw && spec.streams_payload) channel_.close_after_reply();
    // A failed handshake ends the connection: nothing else may follow it.
    if (!result.ok() && (command == Command::hello || command == Command::auth)) channel_.close_after_reply();
    if (!result.ok() && result.message().rfind(name, 0) != 0) result = result.with_context(name);
  }
  if (!result.ok()) {
    log::debug("session " + std::to_string(id_) + ": " + result.to_string());
    channel_.explain_end(result.message());
  }
  if (channel_.replied_early()) {
    // Answered when its work was found; the work's own failure waits like
    // a one-way command's.
    if (!result.ok() && pending_.ok()) pending_ = result;
  } else if ((current.flags & kFlagNoReply) != 0 && !channel_.closing()) {
    if (!result.ok() && pending_.ok()) pending_ = result;
  } else {
    // A reply that carries a buffer's bytes must be ordered before a granted
    // write into that buffer which the reply leads to (the client's next
    // step may have another server write there); the writing session looks
    // the buffer up under the table's lock, so the send holds it. (Taking it
    // after the send would do for the kernel, which has copied the bytes by
    // then, but not for a race detector that records the read when the call
    // returns: one rule for every build.)
    if (!reply.bulk.empty()) {
      MutexLock lock(buffers_.table()->mutex);
      s = channel_.send_reply(result, reply);
    } else {
      s = channel_.send_reply(result, reply);
    }
    if (!s.ok()) {
      channel_.end(s.message());
      return false;
    }
  }
  channel_.end_frame();
  return !channel_.closing();
}

uint64_t Session::payload_limit(Command command) const {
  // Before the handshake is over only HELLO and AUTH are served, and both are
  // small: a peer not yet admitted cannot make the server read a large frame.
  if (phase_ != Phase::serving) return kMaxHelloRequestSize;
  if (command == Command::set_tensor) {
    return std::max(env_.max_frame, buffers_.largest_buffer() + kSetTensorFixedSize);
  }
  // A granted write is as large as the grant, whoever's buffer it names.
  if (command == Command::write_granted && env_.grants != nullptr) {
    return std::max(env_.max_frame, env_.grants->largest_size() + kWriteGrantedFixedSize);
  }
  return env_.max_frame;
}

// ---- runs by id -------------------------------------------------------------------

// A run by id flagged SYNC that wants a reply is answered as soon as its
// graph or plan is found (from 1.9): its client learns at once that nothing
// needs sending again, and the run's own outcome waits like a one-way
// command's.
StatusOr<StoredGraph*> Session::graph_to_run(uint64_t id, uint32_t device) {
  const bool sync = (channel_.current().flags & kFlagSync) != 0;
  if (sync && skipping_runs_) return not_found("graph " + std::to_string(id) + " " + kSkippedRun);
  auto g = work_.use_graph(id, device);
  if (!g.ok() && g.status().code() == StatusCode::not_found) skipping_runs_ = sync;
  if (g.ok() && sync && answers_early()) TENSORPC_RETURN_IF_ERROR(channel_.reply_early());
  return g;
}

StatusOr<StoredPlan*> Session::plan_to_run(uint64_t id) {
  const bool sync = (channel_.current().flags & kFlagSync) != 0;
  if (sync && skipping_runs_) return not_found("plan " + std::to_string(id) + " " + kSkippedRun);
  auto p = work_.use_plan(id);
  if (!p.ok()) skipping_runs_ = sync;
  if (p.ok() && sync && answers_early()) TENSORPC_RETURN_IF_ERROR(channel_.reply_early());
  return p;
}

bool Session::answers_early() const { return (channel_.current().flags & kFlagNoReply) == 0; }

// ---- steps that need more than one part -------------------------------------------

Status Session::receive_into(BufferEntry& entry, uint64_t offset, uint64_t size, Sha256Hasher* hasher) {
  uint8_t* dst = static_cast<uint8_t*>(entry.buffer->host_base());
  std::vector<uint8_t> staging;
  if (dst == nullptr) {
    staging.resize(size);
    dst = staging.data();
  } else {
    dst += offset;
  }
  TENSORPC_RETURN_IF_ERROR(channel_.receive(dst, size, hasher));
  if (!staging.empty()) return write_bytes(entry, offset, staging.data(), size);
  return Status();
}

}  // namespace tensorpc::rpc
