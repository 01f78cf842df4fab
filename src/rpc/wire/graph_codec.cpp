// Graphs on the wire (docs/protocol.md, "Graphs"): the client's encoder and
// the server's decoder, which validates every field before anything runs.
//
// Each tensor names its own bytes as (handle, offset), views included, so the
// server never follows view chains: it range-checks each tensor's span in its
// own buffer, and a kernel reads and writes only within the spans of its node
// and sources.
#include "rpc/wire/graph_codec.h"

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "core/validate.h"

namespace tensorpc::rpc {
namespace {

// type, ne[4], nb[4], op, params[8], src[3], flags, handle, offset.
constexpr size_t kTensorWireBytes = 4 + 4 * 8 + 4 * 8 + 4 + kMaxParams * 4 + kMaxSources * 4 + 4 + 8 + 8;

// Errors name the tensor by its index in the list.
std::string tensor_label(size_t i) { return "graph tensor " + std::to_string(i); }

// The list the encoder writes: the graph's leaves, then its nodes, each
// source before its users. A source the graph does not contain (computed
// earlier, or a view of a weight placed elsewhere) is written as a leaf just
// before its first user: this graph must read its bytes, not compute them.
struct WireList {
  std::vector<const Tensor*> tensors;
  std::vector<bool> as_leaf;
  std::unordered_map<const Tensor*, int32_t> index;
};

Status order_for_wire(const Graph& g, WireList& out) {
  std::unordered_set<const Tensor*> in_graph(g.leafs().begin(), g.leafs().end());
  in_graph.insert(g.nodes().begin(), g.nodes().end());
  const auto add = [&out](const Tensor* t, bool leaf) {
    out.index.emplace(t, static_cast<int32_t>(out.tensors.size()));
    out.tensors.push_back(t);
    out.as_leaf.push_back(leaf);
  };
  const auto add_with_sources = [&](const Tensor* t) -> Status {
    if (out.index.count(t)) return Status();
    for (const Tensor* s : t->src) {
      if (s == nullptr || out.index.count(s)) continue;
      if (in_graph.count(s)) {
        return invalid_argument("encode_graph: " + describe(*s) + " is used by " + describe(*t) +
                                " before the graph computes it");
      }
      add(s, true);
    }
    add(t, t->op == Op::none);
    return Status();
  };
  for (const Tensor* t : g.leafs()) TENSORPC_RETURN_IF_ERROR(add_with_sources(t));
  for (const Tensor* t : g.nodes()) TENSORPC_RETURN_IF_ERROR(add_with_sources(t));
  return Status();
}

// True when a and b are in the same buffer and their byte spans intersect.
bool bytes_overlap(const Tensor& a, const Tensor& b) {
  if (a.buffer != b.buffer) return false;
  const uint64_t a_span = a.nbytes(), b_span = b.nbytes();  // both range-checked: no overflow below
  if (a_span == 0 || b_span == 0) return false;
  return a.offset < b.offset + b_span && b.offset < a.offset + a_span;
}

// The buffer of an unplaced graph's tensors: as large as any tensor, with
// no bytes to read or write.
class StandInBuffer final : public Buffer {
 public:
  explicit StandInBuffer(Device* device) : device_(device) {}
  Device& device() const override { return *device_; }
  uint64_t size() const override { return UINT64_MAX; }
  Status set(const Tensor&, const void*, uint64_t, uint64_t) override { return unsupported("a stand-in"); }
  Status get(const Tensor&, void*, uint64_t, uint64_t) const override { return unsupported("a stand-in"); }
  Status clear(uint8_t) override { return unsupported("a stand-in"); }
  Status copy(const Tensor&, const Tensor&) override { return unsupported("a stand-in"); }

 private:
  Device* device_;
};

}  // namespace

Status encode_unplaced_node(WireWriter& w, const Tensor& node) {
  // Copies of the node and its sources (as leaves), each in bytes of its own.
  Context ctx;
  StandInBuffer stand_in(nullptr);
  uint64_t offset = 0;
  const auto place = [&](const Tensor& original) {
    Tensor* t = ctx.new_tensor(DType::f32, {1});
    *t = original;
    t->view_src = nullptr;
    t->view_offset = 0;
    t->buffer = &stand_in;
    t->offset = offset;
    t->data = nullptr;
    offset += (address_span(*t) + 255) / 256 * 256 + 256;
    return t;
  };
  Tensor* copy = place(node);
  for (Tensor*& s : copy->src) {
    if (s == nullptr) continue;
    s = place(*s);
    s->op = Op::none;
    for (Tensor*& ss : s->src) ss = nullptr;
  }
  Graph g;
  g.expand(copy);
  return encode_graph(w, g, [](const Buffer*) -> uint64_t { return 1; });
}

StatusOr<DecodedGraph> decode_unplaced_graph(WireReader& r, Device& device) {
  auto stand_in = std::make_unique<StandInBuffer>(&device);
  Buffer* buffer = stand_in.get();
  TENSORPC_ASSIGN_OR_RETURN(DecodedGraph decoded, decode_graph(r, [buffer](uint64_t handle) -> StatusOr<Buffer*> {
                              if (handle != 1) return not_found("an unplaced graph names only handle 1");
                              return buffer;
                            }));
  decoded.stand_in = std::move(stand_in);
  return decoded;
}

Status encode_graph(WireWriter& w, const Graph& g, const HandleOf& handle_of) {
  WireList list;
  TENSORPC_RETURN_IF_ERROR(order_for_wire(g, list));
  if (list.tensors.size() > kMaxGraphTensors) {
    return invalid_argument("encode_graph: " + std::to_string(list.tensors.size()) + " tensors, more than the " +
                            std::to_string(kMaxGraphTensors) + " a graph may have");
  }
  // Handles first, so a failure leaves w untouched.
  std::vector<uint64_t> handles(list.tensors.size());
  for (size_t i = 0; i < list.tensors.size(); ++i) {
    const Tensor& t = *list.tensors[i];
    if (t.buffer == nullptr) return invalid_argument("encode_graph: " + describe(t) + " is not placed in a buffer");
    handles[i] = handle_of(t.buffer);
    if (handles[i] == 0) {
      return invalid_argument("encode_graph: the buffer of " + describe(t) + " has no handle on this connection");
    }
  }

  w.bytes().reserve(w.size() + 4 + list.tensors.size() * kTensorWireBytes);
  w.u32(static_cast<uint32_t>(list.tensors.size()));
  for (size_t i = 0; i < list.tensors.size(); ++i) {
    const Tensor& t = *list.tensors[i];
    const bool leaf = list.as_leaf[i];
    w.u32(static_cast<uint32_t>(t.type));
    for (int64_t n : t.ne) w.i64(n);
    for (uint64_t s : t.nb) w.u64(s);
    w.u32(static_cast<uint32_t>(leaf ? Op::none : t.op));
    for (int32_t p : t.params) w.i32(leaf ? 0 : p);
    for (const Tensor* s : t.src) w.i32(leaf || s == nullptr ? -1 : list.index.at(s));
    w.u32(t.flags);
    w.u64(handles[i]);
    w.u64(t.offset);
  }
  return Status();
}

StatusOr<DecodedGraph> decode_graph(WireReader& r, const ResolveHandle& resolve) {
  const uint32_t n = r.u32();
  if (!r.ok()) return invalid_argument("graph: n_tensors is truncated");
  if (n > kMaxGraphTensors) {
    return invalid_argument("graph: n_tensors " + std::to_string(n) + " is more than the limit of " +
                            std::to_string(kMaxGraphTensors));
  }
  // Checked up front, so a forged count costs no allocation.
  if (r.remaining() / kTensorWireBytes < n) {
    return invalid_argument("graph: " + std::to_string(n) + " tensors need " + std::to_string(n * kTensorWireBytes) +
                            " bytes, only " + std::to_string(r.remaining()) + " remain");
  }

  DecodedGraph out;
  out.ctx = std::make_unique<Context>();
  std::vector<Tensor*> tensors;
  tensors.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    Tensor t;
    const uint32_t type_id = r.u32();
    for (int64_t& x : t.ne) x = r.i64();
    for (uint64_t& x : t.nb) x = r.u64();
    const uint32_t op_id = r.u32();
    for (int32_t& p : t.params) p = r.i32();
    int32_t src[kMaxSources];
    for (int32_t& s : src) s = r.i32();
    t.flags = r.u32();
    const uint64_t handle = r.u64();
    t.offset = r.u64();
    if (!r.ok()) return invalid_argument(tensor_label(i) + " is truncated");

    const std::optional<DType> type = dtype_from_id(type_id);
    if (!type) {
      return invalid_argument(tensor_label(i) + ": type " + gguf_type_name(type_id) + " (id " + std::to_string(type_id) +
                              ") is not one tensorpc runs");
    }
    t.type = *type;
    if (op_id >= kOpCount) return invalid_argument(tensor_label(i) + ": unknown op " + std::to_string(op_id));
    t.op = static_cast<Op>(op_id);
    if (Status s = validate_layout(t); !s.ok()) return s.with_context(tensor_label(i));

    for (int k = 0; k < kMaxSources; ++k) {
      if (src[k] == -1) continue;
      if (src[k] < 0 || static_cast<uint32_t>(src[k]) >= i) {
        return invalid_argument(tensor_label(i) + ": source " + std::to_string(k) + " is index " +
                                std::to_string(src[k]) + ", not -1 or an earlier tensor");
      }
      if (t.op == Op::none) return invalid_argument(tensor_label(i) + ": a leaf (op none) has a source");
      t.src[k] = tensors[static_cast<size_t>(src[k])];
    }

    StatusOr<Buffer*> resolved = resolve(handle);
    if (!resolved.ok()) {
      return Status(resolved.status().code(),
                    tensor_label(i) + ": buffer handle " + std::to_string(handle) + ": " + resolved.status().message());
    }
    Buffer* buffer = resolved.value();
    const uint64_t span = address_span(t);  // validate_layout made sure it does not overflow
    if (t.offset > buffer->size() || span > buffer->size() - t.offset) {
      return invalid_argument(tensor_label(i) + ": " + describe(t) + " spans " + std::to_string(span) +
                              " bytes at offset " + std::to_string(t.offset) + ", past the end of its buffer of " +
                              std::to_string(buffer->size()) + " bytes");
    }
    // Strides may overlap (a zero stride broadcasts), so the span does not
    // bound the element count; this does, and with it every kernel's work
    // and scratch (mul_mat converts all of b's rows into scratch).
    const auto blocks = static_cast<uint64_t>(t.ne[0] / block_size(t.type));
    uint64_t row, dense_bytes;  // nrows() cannot overflow after validate_layout
    if (__builtin_mul_overflow(blocks, block_bytes(t.type), &row) ||
        __builtin_mul_overflow(row, static_cast<uint64_t>(t.nrows()), &dense_bytes) || dense_bytes > buffer->size()) {
      return invalid_argument(tensor_label(i) + ": " + describe(t) + " has more elements than its buffer of " +
                              std::to_string(buffer->size()) + " bytes could hold");
    }
    // Kernels load elements and block scales as aligned values; strides were
    // checked by validate_layout, the start is checked here.
    if (t.offset % storage_alignment(t.type) != 0) {
      return invalid_argument(tensor_label(i) + ": offset " + std::to_string(t.offset) + " is not a multiple of the " +
                              name_of(t.type) + " alignment " + std::to_string(storage_alignment(t.type)));
    }
    t.buffer = buffer;
    t.data = buffer->host_base() ? static_cast<char*>(buffer->host_base()) + t.offset : nullptr;

    if (t.op != Op::none) {
      if (Status s = validate_node(t); !s.ok()) return s.with_context(tensor_label(i));
    }
    // A kernel writing bytes it is still reading gives results that depend
    // on thread timing (and cpy's memcpy is undefined on overlap). Context
    // never builds such a node and GraphAllocator never places one, so the
    // wire refuses it. Views write nothing and share bytes by design.
    if (t.op != Op::none && !is_view_op(t.op)) {
      for (int k = 0; k < kMaxSources; ++k) {
        if (t.src[k] != nullptr && bytes_overlap(t, *t.src[k])) {
          return invalid_argument(tensor_label(i) + ": " + name_of(t.op) + " writes bytes that its source " +
                                  std::to_string(k) + " (graph tensor " + std::to_string(src[k]) + ") reads");
        }
      }
    }

    // Context hands out descriptors only through its builders; the decoded
    // one replaces a placeholder wholesale.
    Tensor* slot = out.ctx->new_tensor(DType::f32, {1});
    *slot = std::move(t);
    tensors.push_back(slot);
  }

  // Every source is earlier in the list, so expanding in list order appends
  // each tensor as it comes: leaves and nodes keep the wire order.
  for (Tensor* t : tensors) out.graph.expand(t);
  return out;
}

}  // namespace tensorpc::rpc
