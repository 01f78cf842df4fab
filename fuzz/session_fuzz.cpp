// libFuzzer target: a whole client connection, as a server's session meets
// it. The input is the byte stream a client sends — frames of any command,
// SET_TENSOR payloads, graphs, execution plans (PLAN_STORE/PLAN_RUN),
// standing grants and WRITE_GRANTED — served by a real Session over a
// socketpair with two small CPU devices, a weights cache and the write
// grants of a server. Everything the session does must stay inside its
// buffers (ASan), and every buffer must be freed when the stream ends.
//
// Sends to other servers are refused (no peer connections), and a plan may
// wait at most 5 ms for bytes that never come, so no input stalls the run.
//
// Each input is served twice: by a server without a key, and by one with a
// key, where it meets the handshake a stranger meets (HELLO, AUTH with a
// proof it cannot know) and must get no further.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "core/log.h"
#include "rpc/server/session.h"
#include "rpc/server/weights_cache.h"
#include "rpc/server/write_grants.h"
#include "tensorpc/cpu_device.h"

namespace {

using namespace tensorpc;

struct Server {
  rpc::SessionCounters counters;
  rpc::WriteGrants grants;
  std::unique_ptr<rpc::WeightsCache> cache = rpc::WeightsCache::open(uint64_t{1} << 20, "").value();
  rpc::SessionEnv env;
  rpc::SessionEnv keyed_env;

  Server() {
    log::set_level(log::Level::error);  // a line per session would be most of the run
    for (const char* name : {"cpu0", "cpu1"}) {
      env.devices.push_back(std::make_shared<CpuDevice>(
          CpuDeviceOptions{.name = name, .threads = 1, .memory_limit = uint64_t{1} << 20}));
    }
    env.cache = cache.get();
    env.counters = &counters;
    env.max_frame = uint64_t{1} << 20;
    env.grants = &grants;
    env.peers = nullptr;  // COPY_TO_PEER and SEND_TO_PEER are refused
    env.endpoint = "fuzz:0";
    env.max_plan_wait_ms = 5;
    keyed_env = env;
    keyed_env.key = "the fuzzed server's key";
  }
};

Server& server() {
  static Server s;  // shared by every input, like a server by its sessions
  return s;
}

// Serves the client stream `data` with a session of `env`, to its end.
void serve(Server& s, const rpc::SessionEnv& env, const uint8_t* data, size_t size) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) std::abort();
  const int client = fds[1];
  // The client writes its bytes and half-closes; replies are read and
  // dropped so that the session never blocks on a full socket.
  std::thread writer([&] {
    size_t sent = 0;
    while (sent < size) {
      const ssize_t n = ::send(client, data + sent, size - sent, MSG_NOSIGNAL);
      if (n <= 0) break;  // the session closed the connection
      sent += static_cast<size_t>(n);
    }
    ::shutdown(client, SHUT_WR);
  });
  std::thread reader([&] {
    char sink[1 << 14];
    while (::recv(client, sink, sizeof sink, 0) > 0) {
    }
  });
  {
    rpc::Session session(rpc::Socket(fds[0]), env, /*id=*/1);
    session.run();
  }
  writer.join();
  reader.join();
  ::close(client);
  if (s.counters.live_buffers.load() != 0 || s.counters.buffer_bytes.load() != 0) {
    std::fprintf(stderr, "session_fuzz: %llu buffers (%llu bytes) outlived their session\n",
                 static_cast<unsigned long long>(s.counters.live_buffers.load()),
                 static_cast<unsigned long long>(s.counters.buffer_bytes.load()));
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Server& s = server();
  serve(s, s.env, data, size);
  serve(s, s.keyed_env, data, size);
  return 0;
}
