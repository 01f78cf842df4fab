// PeerLinks: one session's connections to other servers, for the copies it
// sends them (COPY_TO_PEER, a plan's SEND_TO_PEER).
//
// A connection is taken from the server's ConnectionCache on first use,
// proving this server's key (and with TLS, its certificate), and kept for
// the session's life; a broken one is replaced on the next use. Only the
// endpoints the server allows (--allow-peer; any when none is given) are
// reached. Only the session's own thread uses it.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "rpc/server/session_env.h"
#include "rpc/transport/connection.h"

namespace tensorpc::rpc {

class PeerLinks {
 public:
  explicit PeerLinks(const SessionEnv& env) : env_(env) {}
  PeerLinks(const PeerLinks&) = delete;
  PeerLinks& operator=(const PeerLinks&) = delete;

  // The connection to the server at `endpoint`, opened on first use.
  StatusOr<std::shared_ptr<Connection>> get(const std::string& endpoint);
  // Whether a send to `endpoint` is allowed (SessionEnv::allowed_peers).
  Status check_allowed(const std::string& endpoint) const;
  // The session has ended: its connections are let go.
  void clear() { links_.clear(); }

 private:
  const SessionEnv& env_;
  std::unordered_map<std::string, std::shared_ptr<Connection>> links_;  // by endpoint
};

}  // namespace tensorpc::rpc
