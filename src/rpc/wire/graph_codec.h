// Graphs on the wire: encoding on the client, decoding and validation on the
// server (docs/protocol.md, "Graphs").
//
// The client sends every tensor of a graph (leaves and nodes) in dependency
// order, each naming its bytes as (buffer handle, offset). The server decodes
// into a Context of its own, resolves handles through a callback (which also
// checks the handle belongs to the session and the device), and validates
// everything before anything runs.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "rpc/wire/wire.h"
#include "tensorpc/context.h"
#include "tensorpc/device.h"
#include "tensorpc/graph.h"

namespace tensorpc::rpc {

inline constexpr uint32_t kMaxGraphTensors = 65536;

// Handle of the buffer a tensor lives in, on the client side: each remote
// buffer knows its handle.
using HandleOf = std::function<uint64_t(const Buffer*)>;

// Writes g's leaves and nodes. Every tensor must be placed in a buffer for
// which handle_of gives a non-zero handle.
Status encode_graph(WireWriter& w, const Graph& g, const HandleOf& handle_of);

// Resolves a handle to a buffer of the device the graph runs on; an unknown
// or foreign handle is an error saying why.
using ResolveHandle = std::function<StatusOr<Buffer*>(uint64_t handle)>;

// A graph decoded on the server: owns its descriptors (and, for an
// unplaced graph, the stand-in buffer they point into).
struct DecodedGraph {
  std::unique_ptr<Context> ctx;
  Graph graph;
  std::unique_ptr<Buffer> stand_in{};
};

// Reads a graph and validates it completely: types, shapes against strides,
// ranges within buffers, handles, sources earlier in the list, ops on the
// allow-list and each op's shape rule. Any failure is an invalid_argument
// naming the tensor index and the reason, except an unknown handle, which is
// not_found (docs/protocol.md, "Handles") with the resolver's reason. The
// graph's leaves and nodes keep the wire order; outputs() is empty (the
// tensors carry their kFlagOutput flags).
StatusOr<DecodedGraph> decode_graph(WireReader& r, const ResolveHandle& resolve);

// SUPPORTS (1.11): `node` and its sources as leaves, unplaced — a graph
// whose every tensor names handle 1, each at offsets of its own, so that
// only the descriptors (types, shapes, strides, op, params) say anything.
// The same node always gives the same bytes, whatever its buffers.
Status encode_unplaced_node(WireWriter& w, const Tensor& node);
// Reads such a graph for `device`, validated as decode_graph validates, its
// tensors in a stand-in buffer of `device` that holds no bytes.
StatusOr<DecodedGraph> decode_unplaced_graph(WireReader& r, Device& device);

}  // namespace tensorpc::rpc
