// The frame header, the reply status, and the one generic encoder and one
// generic decoder of every message of docs/protocol.md: each walks the
// message's field list (visit_fields, messages.h), so a message's layout and
// bounds are written once, in its declaration.
//
// The decoder remembers the first field that could not be read and why, so
// every failure names the message and the field ("HELLO request: field
// 'client' is truncated") without a check after each read.
#include "rpc/wire/messages.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace tensorpc::rpc {
namespace {


// Writes each field as the visitor vocabulary of message_fields.h describes it.
class FieldEncoder {
 public:
  explicit FieldEncoder(WireWriter& w) : w_(w) {}

  void u8(const char*, const uint8_t& v, Bound = {}) { w_.u8(v); }
  void u32(const char*, const uint32_t& v, Bound = {}) { w_.u32(v); }
  void u64(const char*, const uint64_t& v, Bound = {}) { w_.u64(v); }
  void boolean(const char*, const bool& v) { w_.u8(v ? 1 : 0); }
  void str(const char*, const std::string& v) { w_.str(v); }
  template <size_t N>
  void bytes(const char*, const std::array<uint8_t, N>& v) {
    w_.raw(v.data(), N);
  }
  template <typename E>
  void array(const char*, std::vector<E>& v, Count) {
    w_.u32(static_cast<uint32_t>(v.size()));
    for (E& e : v) e.visit_fields(*this);
  }
  void bitmap(const char*, const char*, const std::vector<bool>& v, Count) {
    w_.u32(static_cast<uint32_t>(v.size()));
    for (size_t byte = 0; byte * 8 < v.size(); ++byte) {
      uint8_t bits = 0;
      for (size_t i = byte * 8; i < std::min(v.size(), byte * 8 + 8); ++i) {
        if (v[i]) bits |= static_cast<uint8_t>(1u << (i % 8));
      }
      w_.u8(bits);
    }
  }
  template <typename F>
  void when(bool present, F fields) {
    if (present) fields();
  }

 private:
  WireWriter& w_;
};

// Reads each field, checking its bounds, until the first failure; later
// reads do nothing. Conditions (`when`) see the fields decoded before them.
class FieldDecoder {
 public:
  FieldDecoder(WireReader& r, WireMessage wire) : r_(r), wire_(wire) {}

  void u8(const char* name, uint8_t& v, Bound b = {}) {
    integer(name, v, b, [this] { return r_.u8(); });
  }
  void u32(const char* name, uint32_t& v, Bound b = {}) {
    integer(name, v, b, [this] { return r_.u32(); });
  }
  void u64(const char* name, uint64_t& v, Bound b = {}) {
    integer(name, v, b, [this] { return r_.u64(); });
  }
  void boolean(const char* name, bool& v) {
    uint8_t x = 0;
    u8(name, x, {.max = 1, .meaning = "not 0 or 1"});
    if (ok()) v = x == 1;
  }
  void str(const char* name, std::string& v) {
    uint32_t n = 0;
    u32(name, n);
    if (!ok()) return;
    if (n > kMaxWireString) {
      return fail(name,
                  "is " + std::to_string(n) + " bytes long, more than the limit of " + std::to_string(kMaxWireString));
    }
    const std::span<const uint8_t> b = r_.raw(n);
    if (!r_.ok()) return fail(name, "is truncated");
    v.assign(reinterpret_cast<const char*>(b.data()), b.size());
  }
  template <size_t N>
  void bytes(const char* name, std::array<uint8_t, N>& v) {
    if (!ok()) return;
    const std::span<const uint8_t> b = r_.raw(N);
    if (!r_.ok()) return fail(name, "is truncated");
    std::copy(b.begin(), b.end(), v.begin());
  }
  template <typename E>
  void array(const char* count_name, std::vector<E>& v, Count c) {
    const uint32_t n = count(count_name, c, minimum_size_of<E>(), 1);
    if (!ok()) return;
    v.assign(n, E{});
    const Element outer = element_;
    for (uint32_t i = 0; i < n && ok(); ++i) {
      element_ = {c.element, i};
      v[i].visit_fields(*this);
    }
    element_ = outer;
  }
  void bitmap(const char* count_name, const char* name, std::vector<bool>& v, Count c) {
    const uint32_t n = count(count_name, c, 1, 8);
    if (!ok()) return;
    v.assign(n, false);
    for (uint32_t byte = 0; byte * 8 < n && ok(); ++byte) {
      uint8_t bits = 0;
      u8(name, bits);
      const uint32_t used = std::min<uint32_t>(8, n - byte * 8);
      if (ok() && used < 8 && (bits >> used) != 0) {
        fail(name, std::string("has bits set past ") + c.element + " " + std::to_string(n - 1));
      }
      for (uint32_t i = 0; i < used; ++i) v[byte * 8 + i] = ((bits >> i) & 1) != 0;
    }
  }
  template <typename F>
  void when(bool present, F fields) {
    if (present) fields();
  }

  // The decoder's result: for a whole payload, no bytes may remain.
  Status finish() {
    if (ok() && wire_.extent == Extent::whole && !r_.done()) {
      status_ = protocol_error(prefix() + std::to_string(r_.remaining()) + " unexpected trailing bytes");
    }
    return status_;
  }

 private:
  // The array element being read, named in errors ("of device 2").
  struct Element {
    const char* noun = nullptr;
    uint32_t index = 0;
  };

  bool ok() const { return status_.ok(); }

  // The first failure wins.
  void fail(const char* name, const std::string& why) {
    if (!ok()) return;
    std::string field = "field '" + std::string(name) + "'";
    if (element_.noun != nullptr) field += std::string(" of ") + element_.noun + " " + std::to_string(element_.index);
    status_ = protocol_error(prefix() + field + " " + why);
  }

  template <typename T, typename Get>
  void integer(const char* name, T& v, Bound b, Get get) {
    if (!ok()) return;
    const T x = get();
    if (!r_.ok()) return fail(name, "is truncated");
    if (x < b.min || x > b.max) return fail(name, "is " + std::to_string(x) + ", " + b.meaning);
    v = x;
  }

  // A count of at most c.max whose elements take at least `bytes_per`
  // bytes per `per` elements (rounded up): checked before anything is
  // allocated for them, so a forged count costs nothing.
  uint32_t count(const char* name, Count c, uint64_t bytes_per, uint64_t per) {
    uint32_t n = 0;
    u32(name, n);
    if (!ok()) return 0;
    if (n > c.max) {
      fail(name, "is " + std::to_string(n) + ", more than the limit of " + std::to_string(c.max));
      return 0;
    }
    const uint64_t need = (uint64_t{n} + per - 1) / per * bytes_per;
    if (r_.remaining() < need) {
      fail(name, "says " + std::to_string(n) + ", whose elements take at least " + std::to_string(need) +
                     " bytes, but the payload is truncated: " + std::to_string(r_.remaining()) + " follow");
      return 0;
    }
    return n;
  }

  std::string prefix() const {
    return std::string(name_of(wire_.command)) + (wire_.direction == Direction::request ? " request: " : " reply: ");
  }

  WireReader& r_;
  WireMessage wire_;
  Element element_;
  Status status_;
};

template <typename M>
void encode_fields(WireWriter& w, const M& m) {
  FieldEncoder e(w);
  // One field list serves reading and writing; the encoder only reads through it.
  const_cast<M&>(m).visit_fields(e);
}

template <typename M>
Status decode_fields(WireReader& r, M& m) {
  FieldDecoder d(r, M::wire);
  m.visit_fields(d);
  return d.finish();
}

}  // namespace

const char* name_of(Command c) {
  switch (c) {
    case Command::hello: return "HELLO";
    case Command::list_devices: return "LIST_DEVICES";
    case Command::device_memory: return "DEVICE_MEMORY";
    case Command::buffer_alloc: return "BUFFER_ALLOC";
    case Command::buffer_free: return "BUFFER_FREE";
    case Command::buffer_clear: return "BUFFER_CLEAR";
    case Command::set_tensor: return "SET_TENSOR";
    case Command::set_tensor_hash: return "SET_TENSOR_HASH";
    case Command::get_tensor: return "GET_TENSOR";
    case Command::copy_tensor: return "COPY_TENSOR";
    case Command::graph_compute: return "GRAPH_COMPUTE";
    case Command::graph_recompute: return "GRAPH_RECOMPUTE";
    case Command::synchronize: return "SYNCHRONIZE";
    case Command::ping: return "PING";
    case Command::grant_write: return "GRANT_WRITE";
    case Command::copy_to_peer: return "COPY_TO_PEER";
    case Command::write_granted: return "WRITE_GRANTED";
    case Command::plan_store: return "PLAN_STORE";
    case Command::plan_run: return "PLAN_RUN";
    case Command::grant_standing: return "GRANT_STANDING";
    case Command::auth: return "AUTH";
    case Command::set_tensor_hashes: return "SET_TENSOR_HASHES";
    case Command::keepalive: return "KEEPALIVE";
    case Command::supports: return "SUPPORTS";
  }
  return "UNKNOWN_COMMAND";
}

// ---- frame header ------------------------------------------------------------

void encode_header(const FrameHeader& h, uint8_t out[kFrameHeaderSize]) {
  WireWriter w;
  w.u32(h.magic);
  w.u16(static_cast<uint16_t>(h.command));
  w.u16(h.flags);
  w.u64(h.request_id);
  w.u64(h.payload_length);
  std::memcpy(out, w.bytes().data(), kFrameHeaderSize);
}

StatusOr<FrameHeader> decode_header(std::span<const uint8_t, kFrameHeaderSize> bytes) {
  WireReader r(bytes);
  FrameHeader h;
  h.magic = r.u32();
  const uint16_t command = r.u16();
  h.flags = r.u16();  // unknown flag bits are ignored: a newer minor version may add them
  h.request_id = r.u64();
  h.payload_length = r.u64();
  if (h.magic != kFrameMagic) {
    char magic[16];
    std::snprintf(magic, sizeof magic, "0x%08x", h.magic);
    return protocol_error(std::string("frame header: bad magic ") + magic +
                          " (not a tensorpc peer, or the stream lost its place)");
  }
  if (command >= kCommandCount) {
    return protocol_error("frame header: unknown command " + std::to_string(command));
  }
  h.command = static_cast<Command>(command);
  return h;
}

// ---- status --------------------------------------------------------------------

void encode_status(WireWriter& w, const Status& s) {
  w.u32(static_cast<uint32_t>(s.code()));
  w.str(s.ok() ? std::string_view() : std::string_view(s.message()));
}

Status decode_status(WireReader& r) {
  const uint32_t code = r.u32();
  std::string message = r.str();
  if (!r.ok()) return protocol_error("reply status: truncated, or a message longer than the limit");
  if (code > static_cast<uint32_t>(StatusCode::internal)) {
    return protocol_error("reply status: unknown status code " + std::to_string(code));
  }
  if (code == 0) return Status();  // a message on success means nothing
  return Status(static_cast<StatusCode>(code), std::move(message));
}

// ---- every message -------------------------------------------------------------------

#define TENSORPC_RPC_DEFINE_CODEC(Type)                              \
  void encode(WireWriter& w, const Type& m) { encode_fields(w, m); } \
  Status decode(WireReader& r, Type& m) { return decode_fields(r, m); }
TENSORPC_RPC_MESSAGES(TENSORPC_RPC_DEFINE_CODEC)
#undef TENSORPC_RPC_DEFINE_CODEC

}  // namespace tensorpc::rpc
