// The vocabulary in which every message of the wire protocol is declared once
// (messages.h): each message struct names its command, whether it is a
// request or a reply, and how much of its payload it takes, and lists its
// fields in wire order in one member template
//
//   template <typename V> void visit_fields(V& v) { v.u32("device", device); ... }
//
// The encoder, the decoder (messages.cpp), the tests and the fuzzer are all
// visitors walking that list; nothing about a message is written twice.
//
// A visitor implements these field kinds (every integer little-endian):
//   u8, u32, u64 (name, value[, Bound])  an integer, optionally bounded
//   boolean(name, value)                 a u8 that is 0 or 1
//   str(name, value)                     u32 length (<= kMaxWireString), bytes
//   bytes(name, std::array<uint8_t, N>)  N raw bytes
//   array(count_name, vector<E>, Count)  u32 count, then count E's, each
//                                        listed by E::visit_fields
//   bitmap(count_name, name, vector<bool>, Count)
//                                        u32 count, then (count + 7) / 8 bytes,
//                                        element i in bit i % 8 of byte i / 8,
//                                        the unused high bits 0
//   when(present, fields)                the fields `fields()` lists are on the
//                                        wire only when `present`, a condition
//                                        on fields listed before them
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tensorpc::rpc {

enum class Command : uint16_t;

enum class Direction : uint8_t { request, reply };
// How much of a payload a decoder takes: all of it (trailing bytes are an
// error), or its leading fixed fields, after which bulk data, a graph or plan
// steps follow for the caller to read.
enum class Extent : uint8_t { whole, prefix };

// What a message struct is on the wire: `static constexpr WireMessage wire{...}`.
struct WireMessage {
  Command command;
  Direction direction;
  Extent extent = Extent::whole;
};

// The range a decoded integer must lie in; `meaning` completes the error
// "field 'kind' is 3, <meaning>".
struct Bound {
  uint64_t min = 0;
  uint64_t max = std::numeric_limits<uint64_t>::max();
  const char* meaning = "";
};
constexpr Bound nonzero(const char* meaning) { return {.min = 1, .meaning = meaning}; }
constexpr Bound at_most(uint64_t max, const char* meaning) { return {.max = max, .meaning = meaning}; }

// The count of a repeated field: at most `max`, and never more elements than
// the bytes that follow can hold (checked before anything is allocated).
// `element` names one element in errors ("... of device 2 ...").
struct Count {
  uint32_t max = std::numeric_limits<uint32_t>::max();
  const char* element = "entry";
};

// The fewest bytes a message (or an element) takes on the wire: every string
// empty, every count 0, every conditional field absent.
class MinimumSize {
 public:
  constexpr void u8(const char*, uint8_t&, Bound = {}) { size += 1; }
  constexpr void u32(const char*, uint32_t&, Bound = {}) { size += 4; }
  constexpr void u64(const char*, uint64_t&, Bound = {}) { size += 8; }
  constexpr void boolean(const char*, bool&) { size += 1; }
  void str(const char*, std::string&) { size += 4; }
  template <size_t N>
  constexpr void bytes(const char*, std::array<uint8_t, N>&) {
    size += N;
  }
  template <typename E>
  void array(const char*, std::vector<E>&, Count) {
    size += 4;
  }
  void bitmap(const char*, const char*, std::vector<bool>&, Count) { size += 4; }
  template <typename F>
  constexpr void when(bool, F) {}

  size_t size = 0;
};

template <typename M>
constexpr size_t minimum_size_of() {
  M m{};
  MinimumSize v;
  m.visit_fields(v);
  return v.size;
}

}  // namespace tensorpc::rpc
