// The tensorpc server (include/tensorpc/server.h): a listener, an accept
// thread, and one thread per session.
//
// A session is pending until its handshake is over (Session::admitted). At
// most max_pending are: the accept thread drops the oldest pending one to
// make room for a new connection, never an admitted one, so strangers that
// connect and say nothing (or trickle) hold a bounded number of threads, each
// for at most the handshake deadline. Admitted clients are capped by
// Admission (max_clients), which refuses the handshake of one too many.
//
// Sessions live in a list the accept thread owns together with stop(): a
// finished session frees its buffers on its own thread at once (so stats fall
// as soon as a client goes), and its thread is joined the next time a client
// connects, or at stop().
#include "tensorpc/server.h"

#include <condition_variable>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

#include "core/log.h"
#include "rpc/server/session.h"
#include "rpc/transport/socket.h"
#include "rpc/transport/tls.h"
#include "rpc/server/weights_cache.h"
#include "rpc/server/write_grants.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/key.h"
#include "tensorpc/endpoint.h"

namespace tensorpc {
namespace {

using rpc::Session;
using rpc::Socket;

class TcpServer final : public Server {
 public:
  TcpServer(Socket listener, rpc::SessionEnv env, std::unique_ptr<rpc::WeightsCache> cache,
            std::unique_ptr<rpc::SessionCounters> counters, const std::string& host, const ServerOptions& options)
      : listener_(std::move(listener)),
        port_(listener_.local_port()),
        cache_(std::move(cache)),
        local_weights_(options.local_weights),
        counters_(std::move(counters)),
        admission_(options.max_clients),
        max_pending_(options.max_pending),
        env_(with_shared_parts(std::move(env), host, port_)) {
    accept_thread_ = std::thread([this] { accept_loop(); });
    keepalive_thread_ = std::thread([this] { keepalive_loop(); });
  }
  ~TcpServer() override { stop(); }

  uint16_t port() const override { return port_; }

  ServerStats stats() const override {
    ServerStats s;
    s.sessions = live_sessions_.load();
    s.live_buffers = counters_->live_buffers.load();
    s.buffer_bytes = counters_->buffer_bytes.load();
    s.cache_entries = cache_->entries();
    s.cache_hits = cache_->hits();
    s.compute_ns = counters_->compute_ns.load();
    s.peer_wait_ns = counters_->peer_wait_ns.load();
    s.dropped_pending = dropped_pending_.load();
    s.local_weight_hits = counters_->local_weight_hits.load();
    s.local_weight_bytes = counters_->local_weight_bytes.load();
    s.local_weight_mismatches = counters_->local_weight_mismatches.load();
    return s;
  }

  void stop() override {
    MutexLock stop_lock(stop_mutex_);  // concurrent stop() calls wait for the first
    {
      MutexLock lock(mutex_);
      if (stopped_) return;
      stopping_ = true;
      listener_.shutdown();  // wakes accept()
    }
    ticker_cv_.notify_all();
    accept_thread_.join();
    keepalive_thread_.join();
    std::list<Slot> slots;
    {
      MutexLock lock(mutex_);
      slots.swap(slots_);
    }
    for (Slot& slot : slots) slot.session->shutdown();
    for (Slot& slot : slots) slot.thread.join();
    listener_.close();
    cache_->flush();  // the weights the sessions received are on disk when stop() returns
    {
      MutexLock lock(mutex_);
      stopped_ = true;
    }
    stopped_cv_.notify_all();
    log::info("server on port " + std::to_string(port_) + " stopped");
  }

  void wait() override {
    MutexLock lock(mutex_);
    while (!stopped_) stopped_cv_.wait(mutex_);
  }

 private:
  struct Slot {
    std::unique_ptr<Session> session;
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done = std::make_shared<std::atomic<bool>>(false);
    bool dropped = false;  // shut down to make room for a newer pending one
  };

  // Completes env with what the server owns for all its sessions.
  rpc::SessionEnv with_shared_parts(rpc::SessionEnv env, const std::string& host, uint16_t port) {
    env.grants = &grants_;
    env.peers = &peers_;
    env.admission = &admission_;
    env.endpoint = Endpoint{host, port}.to_string();
    return env;
  }

  void accept_loop() {
    uint64_t next_id = 1;
    for (;;) {
      auto client = listener_.accept();
      {
        MutexLock lock(mutex_);
        if (stopping_) return;  // the accepted socket, if any, closes here
      }
      if (!client.ok()) {
        // Out of descriptors and the like: keep serving once it clears.
        log::warn("accept failed: " + client.status().message());
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      reap_finished();
      drop_oldest_pending();
      Slot slot;
      slot.session = std::make_unique<Session>(std::move(client).value(), env_, next_id++);
      Session* session = slot.session.get();
      auto done = slot.done;
      live_sessions_ += 1;
      slot.thread = std::thread([this, session, done] {
        session->run();
        live_sessions_ -= 1;
        done->store(true);
      });
      MutexLock lock(mutex_);
      slots_.push_back(std::move(slot));
    }
  }

  // Twice a keep-alive interval, each session busy for a client that
  // asked for keep-alives is given one when due (FrameChannel::keep_alive).
  void keepalive_loop() {
    MutexLock lock(mutex_);
    while (!stopping_) {
      ticker_cv_.wait_for(mutex_, rpc::kKeepAliveInterval / 2);
      const auto now = std::chrono::steady_clock::now();
      for (Slot& slot : slots_) {
        if (!slot.done->load()) slot.session->keep_alive(now);
      }
    }
  }

  // Makes room for one more pending session: while max_pending are pending,
  // the oldest is shut down (its thread ends soon and is reaped later).
  void drop_oldest_pending() {
    if (max_pending_ == 0) return;
    MutexLock lock(mutex_);
    std::vector<Slot*> pending;
    for (Slot& slot : slots_) {
      if (!slot.dropped && !slot.done->load() && !slot.session->admitted()) pending.push_back(&slot);
    }
    for (size_t i = 0; i + max_pending_ <= pending.size(); ++i) {  // oldest first: slots_ is in accept order
      pending[i]->dropped = true;
      pending[i]->session->shutdown();
      ++dropped_pending_;
      log::warn("dropped the oldest connection still in its handshake: " + std::to_string(pending.size()) +
                " are (--max-pending " + std::to_string(max_pending_) + ")");
    }
  }

  // Joins the threads of sessions that have ended.
  void reap_finished() {
    std::list<Slot> finished;
    {
      MutexLock lock(mutex_);
      for (auto it = slots_.begin(); it != slots_.end();) {
        auto next = std::next(it);
        if (it->done->load()) finished.splice(finished.end(), slots_, it);
        it = next;
      }
    }
    for (Slot& slot : finished) slot.thread.join();
  }

  Socket listener_;
  const uint16_t port_;
  std::unique_ptr<rpc::WeightsCache> cache_;
  std::shared_ptr<const LocalWeights> local_weights_;  // env_.local_weights points into it
  std::unique_ptr<rpc::SessionCounters> counters_;
  rpc::WriteGrants grants_;     // every session's write grants
  rpc::ConnectionCache peers_;  // connections to other servers, for COPY_TO_PEER
  rpc::Admission admission_;    // admitted clients, capped
  const size_t max_pending_;
  const rpc::SessionEnv env_;   // sessions hold a reference to it
  std::atomic<uint64_t> live_sessions_{0};
  std::atomic<uint64_t> dropped_pending_{0};

  Mutex stop_mutex_ ACQUIRED_BEFORE(mutex_);
  mutable Mutex mutex_;
  std::condition_variable_any stopped_cv_;
  std::condition_variable_any ticker_cv_;  // wakes keepalive_loop at stop()
  std::list<Slot> slots_ GUARDED_BY(mutex_);
  bool stopping_ GUARDED_BY(mutex_) = false;
  bool stopped_ GUARDED_BY(mutex_) = false;
  std::thread accept_thread_;
  std::thread keepalive_thread_;
};

}  // namespace

StatusOr<std::unique_ptr<Server>> Server::start(ServerOptions options) {
  if (options.devices.empty()) {
    options.devices.push_back(
        std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu0", .threads = options.threads}));
  }
  for (const auto& dev : options.devices) {
    if (dev == nullptr) return invalid_argument("Server::start: a device in ServerOptions::devices is null");
  }
  if (options.key.size() > kMaxKeyBytes) {
    return invalid_argument("Server::start: the key is " + std::to_string(options.key.size()) +
                            " bytes long, more than the limit of " + std::to_string(kMaxKeyBytes));
  }
  if (options.handshake_timeout.count() < 0) {
    return invalid_argument("Server::start: handshake_timeout of " + std::to_string(options.handshake_timeout.count()) +
                            " ms is negative");
  }
  if (options.io_timeout.count() < 0) {
    return invalid_argument("Server::start: io_timeout of " + std::to_string(options.io_timeout.count()) +
                            " ms is negative");
  }
  std::vector<std::string> allowed_peers;
  for (const std::string& peer : options.allowed_peers) {
    auto parsed = parse_endpoint(peer);
    if (!parsed.ok()) return parsed.status().with_context("Server::start: allowed peer \"" + peer + "\"");
    allowed_peers.push_back(parsed.value().to_string());
  }
  std::shared_ptr<const rpc::TlsContext> tls;
  const bool use_tls = !options.tls.cert_file.empty() || !options.tls.key_file.empty();
  if (use_tls) {
    auto made = rpc::TlsContext::for_server(options.tls);
    if (!made.ok()) return made.status().with_context("Server::start");
    tls = std::move(made).value();
  } else if (!options.tls.ca_file.empty()) {
    return invalid_argument("Server::start: a TLS CA file without a certificate and key: a server uses TLS only "
                            "with its own certificate (--tls-cert, --tls-key)");
  }
  TENSORPC_ASSIGN_OR_RETURN(auto cache, rpc::WeightsCache::open(options.cache_memory_limit, options.cache_dir));
  TENSORPC_ASSIGN_OR_RETURN(Socket listener, Socket::listen(options.host, options.port));

  auto counters = std::make_unique<rpc::SessionCounters>();
  rpc::SessionEnv env;
  env.devices = options.devices;
  env.cache = cache.get();
  env.local_weights = options.local_weights.get();
  env.counters = counters.get();
  env.key = options.key;
  env.tls = tls;
  // Explicit, so that the environment of the server's process plays no part.
  env.peer_credentials = {.key = options.key, .tls = use_tls ? options.tls : TlsOptions{}};
  env.max_session_memory = options.max_session_memory;
  env.max_session_buffers = options.max_session_buffers;
  env.stored_graphs = options.stored_graphs;
  env.io_timeout = options.io_timeout;
  env.handshake_timeout = options.handshake_timeout;
  env.allowed_peers = std::move(allowed_peers);
  auto server = std::make_unique<TcpServer>(std::move(listener), std::move(env), std::move(cache), std::move(counters),
                                            options.host, options);
  log::info("listening on " + options.host + ":" + std::to_string(server->port()) + " with " +
            std::to_string(options.devices.size()) + " device(s)" +
            (options.key.empty() ? ", no key" : ", clients must prove the key") + (use_tls ? ", TLS" : ""));
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace tensorpc
