// Session's handshake (docs/protocol.md, "HELLO first" and "Keys"):
//   HELLO  versions; when the server has a key, the server's nonce;
//   AUTH   the client's nonce and proof of the key, answered by the server's
//          proof only when the client's was right.
// Until the handshake is over nothing else is served: admit() refuses every
// other command, and the connection is closed. The phase and the server's
// nonce are Session's own state.
#include "core/log.h"
#include "rpc/server/session.h"
#include "rpc/transport/auth.h"

namespace tensorpc::rpc {
namespace {

std::string version_string(uint32_t major, uint32_t minor, uint32_t patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

}  // namespace

Status Session::admit(Command command) const {
  const std::string name = name_of(command);
  switch (phase_) {
    case Phase::awaiting_hello:
      if (command == Command::hello) return Status();
      return protocol_error(name + " before HELLO: HELLO must be the first command on a connection");
    case Phase::awaiting_auth:
      if (command == Command::auth) return Status();
      return protocol_error(name + " before authentication: this server has a key, and AUTH must follow HELLO");
    case Phase::serving: return Status();  // a misplaced AUTH is on_auth's to refuse
  }
  return internal_error("unknown session phase");
}

Status Session::on_hello(WireReader& in, Reply& out) {
  HelloRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  if (req.major != kVersionMajor) {
    return unsupported("server speaks " + version_string(kVersionMajor, kVersionMinor, kVersionPatch) +
                       ", this client " + version_string(req.major, req.minor, req.patch) + ": major versions differ");
  }
  HelloReply reply;
  reply.server = env_.server_name;
  // A later HELLO is answered with the versions alone; the phase stays.
  if (phase_ != Phase::awaiting_hello) {
    encode(out.fields, reply);
    return Status();
  }
  const std::string who = "session " + std::to_string(id_) + ": " + channel_.peer() + ": ";
  log::info(who + "client \"" + req.client + "\" speaks " + version_string(req.major, req.minor, req.patch));
  const bool client_has_key = (req.features & kFeatureKey) != 0;
  keepalives_asked_ = (req.features & kFeatureKeepAlive) != 0;
  if (env_.key.empty()) {
    // The feature bit is ignored, as unknown ones are; the client sees none
    // in the reply and refuses this server itself.
    if (client_has_key) log::warn(who + "the client holds a key, but this server has none (no --key-file)");
    TENSORPC_RETURN_IF_ERROR(enter_serving());
    encode(out.fields, reply);
    return Status();
  }
  if (!client_has_key) {
    log::warn(who + "refused: the client has no key, and this server requires one");
    return invalid_argument(
        "this server requires a key, and the client has none: give the client the servers' key file "
        "(--key-file, or the environment variable TENSORPC_KEY_FILE)");
  }
  TENSORPC_ASSIGN_OR_RETURN(server_nonce_, fresh_nonce());
  phase_ = Phase::awaiting_auth;
  reply.features = kFeatureKey;
  reply.server_nonce = server_nonce_;
  encode(out.fields, reply);
  return Status();
}

Status Session::on_auth(WireReader& in, Reply& out) {
  if (env_.key.empty()) return protocol_error("AUTH to a server without a key: nothing to prove");
  if (phase_ != Phase::awaiting_auth) return protocol_error("AUTH on a connection already authenticated");
  AuthRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  TENSORPC_ASSIGN_OR_RETURN(const AuthProof expected,
                            auth_proof(env_.key, AuthRole::client, req.client_nonce, server_nonce_));
  if (!proof_matches(expected, req.client_proof)) {
    log::warn("session " + std::to_string(id_) + ": " + channel_.peer() +
              ": authentication failed (the client's proof does not match this server's key); closing");
    return invalid_argument("authentication failed: the client's key is not this server's key");
  }
  TENSORPC_ASSIGN_OR_RETURN(const AuthProof proof,
                            auth_proof(env_.key, AuthRole::server, req.client_nonce, server_nonce_));
  TENSORPC_RETURN_IF_ERROR(enter_serving());
  log::info("session " + std::to_string(id_) + ": " + channel_.peer() + ": authenticated");
  encode(out.fields, AuthReply{proof});
  return Status();
}

Status Session::enter_serving() {
  channel_.clear_deadline();
  if (env_.admission != nullptr && !env_.admission->admit()) {
    log::warn("session " + std::to_string(id_) + ": " + channel_.peer() + ": refused: " +
              std::to_string(env_.admission->max_clients()) + " clients are connected already (--max-clients)");
    return out_of_memory("the server is full: it serves at most " + std::to_string(env_.admission->max_clients()) +
                         " clients at once (tensorpc-server --max-clients), and that many are connected; try again "
                         "later");
  }
  admitted_.store(true, std::memory_order_release);
  phase_ = Phase::serving;
  if (keepalives_asked_) channel_.want_keepalives();
  return Status();
}

}  // namespace tensorpc::rpc
