// Pre-shared keys: who may use a tensorpc server.
//
// A server started with a key (ServerOptions::key, `tensorpc-server
// --key-file`) serves only clients that prove they hold the same key, and
// proves in turn that it holds it; the key itself never crosses the wire
// (docs/protocol.md, "Keys"). The servers of one cluster share one key and
// prove it to each other too when they copy between themselves. A key is any
// non-empty bytes, kept in a file only its owner can read.
//
// A key authenticates; it does not encrypt. Bytes on the wire can still be
// read by anyone on the path unless the link is TLS as well (tensorpc/tls.h).
#pragma once

#include <cstddef>
#include <string>

#include "tensorpc/status.h"

namespace tensorpc {

// The environment variable naming a client's key file, read when
// RemoteOptions::key is unset.
inline constexpr const char* kKeyFileVariable = "TENSORPC_KEY_FILE";
// A key file holds at most this many bytes: a key is a short secret.
inline constexpr size_t kMaxKeyBytes = 4096;

// The key in `path`: its bytes, less one trailing newline ("\n" or "\r\n").
// A file that cannot be read, is empty (after that newline) or holds more
// than kMaxKeyBytes is an error naming the file.
StatusOr<std::string> read_key_file(const std::string& path);

}  // namespace tensorpc
