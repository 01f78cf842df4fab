// PeerLinks: a session's connections to other servers (peer_links.h).
#include "rpc/server/peer_links.h"

#include <algorithm>

#include "tensorpc/endpoint.h"

namespace tensorpc::rpc {

Status PeerLinks::check_allowed(const std::string& endpoint) const {
  if (env_.allowed_peers.empty()) return Status();
  TENSORPC_ASSIGN_OR_RETURN(const Endpoint parsed, parse_endpoint(endpoint));
  const std::string name = parsed.to_string();
  if (std::find(env_.allowed_peers.begin(), env_.allowed_peers.end(), name) == env_.allowed_peers.end()) {
    return invalid_argument(name + " is not among the peers this server may send to (its --allow-peer list)");
  }
  return Status();
}

StatusOr<std::shared_ptr<Connection>> PeerLinks::get(const std::string& endpoint) {
  if (auto it = links_.find(endpoint); it != links_.end() && !it->second->broken()) return it->second;
  if (env_.peers == nullptr) return unsupported("this server does not copy to other servers");
  TENSORPC_RETURN_IF_ERROR(check_allowed(endpoint));
  // All servers of a cluster share one key (this server proves its own) and,
  // with TLS, one CA.
  const auto open_timeout = env_.io_timeout.count() > 0 ? std::min(env_.io_timeout, kOpenTimeout) : kOpenTimeout;
  TENSORPC_ASSIGN_OR_RETURN(std::shared_ptr<Connection> connection,
                            env_.peers->get(endpoint, env_.peer_credentials, open_timeout));
  links_[endpoint] = connection;
  return connection;
}

}  // namespace tensorpc::rpc
