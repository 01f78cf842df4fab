// The proofs of the pre-shared-key handshake (docs/protocol.md, "Keys").
//
// When a server has a key, HELLO and AUTH prove to each side that the other
// holds it. Each side contributes a fresh random nonce; each proves by an
// HMAC-SHA-256 under the key over a fixed context label, its own role and
// both nonces:
//
//   proof(role) = HMAC-SHA-256(key, "tensorpc-auth-v1" || u8 role || client_nonce || server_nonce)
//
// The key never crosses the wire. A proof is good for one connection only
// (the other side's nonce is new each time, so a recorded transcript does
// not replay), and a client's proof is never a server's (the role differs,
// so a proof cannot be reflected back to the side that made it).
//
// Also here: where a client's key comes from (RemoteOptions::key, or the file
// named by TENSORPC_KEY_FILE).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "rpc/wire/messages.h"
#include "tensorpc/status.h"

namespace tensorpc::rpc {

// Who proves. Its byte is part of the proof's input.
enum class AuthRole : uint8_t { client = 1, server = 2 };

// The label that opens every proof's input, so a tensorpc proof is never
// mistaken for an HMAC made by the same key for another purpose.
inline constexpr std::string_view kAuthLabel = "tensorpc-auth-v1";

// kAuthNonceSize bytes from the cryptographic generator (OpenSSL RAND_bytes);
// an internal error when it fails.
StatusOr<AuthNonce> fresh_nonce();

// proof(role) of the formula above, for a key of 1 to kMaxKeyBytes bytes;
// an internal error when HMAC fails (never a proof that could match).
StatusOr<AuthProof> auth_proof(std::string_view key, AuthRole role, const AuthNonce& client_nonce,
                               const AuthNonce& server_nonce);

// True when `presented` equals `expected`, compared in constant time (how
// many leading bytes matched is not revealed by how long it takes).
bool proof_matches(const AuthProof& expected, const AuthProof& presented);

// The key a client proves: `chosen` when set (an empty string: no key);
// otherwise the key in the file named by TENSORPC_KEY_FILE, or no key when
// that variable is unset or empty. A file that cannot be used, or a key of
// more than kMaxKeyBytes, is an error naming what was wrong.
StatusOr<std::string> client_key(const std::optional<std::string>& chosen);

}  // namespace tensorpc::rpc
