// Every message of messages.h, taken from its one declaration: filled with
// values other than its defaults, it round-trips through encode and decode,
// and every truncation of its encoding fails naming the message and a field;
// and its field list, written out as types and names, is the row of
// docs/protocol.md's table of commands for that message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "file_util.h"
#include "rpc/wire/messages.h"
#include "rpc/wire_bytes.h"

namespace tensorpc::rpc {
namespace {

// Gives every field a value other than its default and inside its bounds:
// integers odd (so a field present when HELLO's KEY bit is set is present),
// strings and byte arrays non-empty, three elements in every array and ten
// bits (across a byte boundary) in every bitmap.
class Filler {
 public:
  void u8(const char*, uint8_t& v, Bound b = {}) { v = static_cast<uint8_t>(pick(b, 0)); }
  void u32(const char*, uint32_t& v, Bound b = {}) { v = static_cast<uint32_t>(pick(b, 0x11223300)); }
  void u64(const char*, uint64_t& v, Bound b = {}) { v = pick(b, 0x1122334455667700ull); }
  void boolean(const char*, bool& v) { v = true; }
  void str(const char* name, std::string& v) { v = std::string(name) + " " + std::to_string(++n_); }
  template <size_t N>
  void bytes(const char*, std::array<uint8_t, N>& v) {
    for (uint8_t& b : v) b = static_cast<uint8_t>(1 + ++n_ % 255);
  }
  template <typename E>
  void array(const char*, std::vector<E>& v, Count c) {
    v.resize(std::min<uint32_t>(3, c.max));
    for (E& e : v) e.visit_fields(*this);
  }
  void bitmap(const char*, const char*, std::vector<bool>& v, Count c) {
    v = {true, false, true, true, false, false, true, false, true, true};
    v.resize(std::min<size_t>(v.size(), c.max));
  }
  template <typename F>
  void when(bool, F fields) {
    fields();
  }

 private:
  uint64_t pick(Bound b, uint64_t base) {
    const uint64_t x = base | (2 * (++n_ % 100) + 1);
    return std::clamp(x, b.min, b.max);
  }
  uint64_t n_ = 0;
};

// Each field's value as text, keyed by its place ("device 1 name"), fields
// under a condition included whether or not it holds.
class Values {
 public:
  void u8(const char* name, uint8_t& v, Bound = {}) { add(name, std::to_string(v)); }
  void u32(const char* name, uint32_t& v, Bound = {}) { add(name, std::to_string(v)); }
  void u64(const char* name, uint64_t& v, Bound = {}) { add(name, std::to_string(v)); }
  void boolean(const char* name, bool& v) { add(name, v ? "true" : "false"); }
  void str(const char* name, std::string& v) { add(name, '"' + v + '"'); }
  template <size_t N>
  void bytes(const char* name, std::array<uint8_t, N>& v) {
    std::string hex;
    for (uint8_t b : v) hex += "0123456789abcdef"[b >> 4], hex += "0123456789abcdef"[b & 15];
    add(name, hex);
  }
  template <typename E>
  void array(const char* count_name, std::vector<E>& v, Count c) {
    add(count_name, std::to_string(v.size()));
    const std::string outer = place_;
    for (size_t i = 0; i < v.size(); ++i) {
      place_ = outer + c.element + " " + std::to_string(i) + " ";
      v[i].visit_fields(*this);
    }
    place_ = outer;
  }
  void bitmap(const char* count_name, const char* name, std::vector<bool>& v, Count) {
    add(count_name, std::to_string(v.size()));
    std::string bits;
    for (bool b : v) bits += b ? '1' : '0';
    add(name, bits);
  }
  template <typename F>
  void when(bool, F fields) {
    fields();
  }

  std::vector<std::pair<std::string, std::string>> fields;

 private:
  void add(const char* name, std::string value) { fields.emplace_back(place_ + name, std::move(value)); }
  std::string place_;
};

// The fields as docs/protocol.md writes them: "u32 major", "string client",
// "u8[32] sha256"; an array's element fields once, after its count.
class Layout {
 public:
  void u8(const char* name, uint8_t&, Bound = {}) { add("u8", name); }
  void u32(const char* name, uint32_t&, Bound = {}) { add("u32", name); }
  void u64(const char* name, uint64_t&, Bound = {}) { add("u64", name); }
  void boolean(const char* name, bool&) { add("u8", name); }
  void str(const char* name, std::string&) { add("string", name); }
  template <size_t N>
  void bytes(const char* name, std::array<uint8_t, N>&) {
    add("u8[" + std::to_string(N) + "]", name);
  }
  template <typename E>
  void array(const char* count_name, std::vector<E>&, Count) {
    add("u32", count_name);
    E element{};
    element.visit_fields(*this);
  }
  void bitmap(const char* count_name, const char* name, std::vector<bool>&, Count) {
    add("u32", count_name);
    add(std::string("u8[(") + count_name + " + 7) / 8]", name);
  }
  template <typename F>
  void when(bool, F fields) {
    fields();
  }

  std::vector<std::string> fields;

 private:
  void add(const std::string& type, const char* name) { fields.push_back(type + " " + name); }
};


template <typename M>
std::vector<std::pair<std::string, std::string>> values_of(M m) {
  Values v;
  m.visit_fields(v);
  return v.fields;
}

template <typename M>
std::string message_name() {
  return std::string(name_of(M::wire.command)) + (M::wire.direction == Direction::request ? " request" : " reply");
}

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

template <typename M>
void expect_round_trip_with_every_field_set() {
  SCOPED_TRACE(message_name<M>());
  M m;
  Filler filler;
  m.visit_fields(filler);

  // Every field the message starts with now holds something else.
  const auto defaults = values_of(M{});
  const auto filled = values_of(m);
  for (const auto& field : defaults) {
    const auto it = std::find_if(filled.begin(), filled.end(), [&](const auto& f) { return f.first == field.first; });
    ASSERT_NE(it, filled.end()) << field.first;
    EXPECT_NE(it->second, field.second) << "field '" << field.first << "' was left at its default";
  }

  const std::vector<uint8_t> bytes = bytes_of(m);
  M back;
  const Status s = decode_bytes(bytes, back);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(values_of(back), filled);
  EXPECT_EQ(bytes_of(back), bytes);

  for (size_t len = 0; len < bytes.size(); ++len) {
    M partial;
    const Status t = decode_bytes(std::span<const uint8_t>(bytes.data(), len), partial);
    ASSERT_EQ(t.code(), StatusCode::protocol_error) << "a prefix of " << len << " bytes: " << t.to_string();
    EXPECT_EQ(t.message().rfind(message_name<M>() + ": field '", 0), 0u) << t.message();
    EXPECT_TRUE(contains(t.message(), "truncated")) << t.message();
  }

  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  M extra;
  const Status t = decode_bytes(longer, extra);
  if (M::wire.extent == Extent::prefix) {
    EXPECT_TRUE(t.ok()) << "a fixed-part decoder refused what follows: " << t.to_string();
  } else {
    EXPECT_EQ(t.message(), message_name<M>() + ": 1 unexpected trailing bytes");
  }
}

TEST(MessageFields, EveryMessageRoundTripsWithEveryFieldSetAndNamesTheFieldOfATruncation) {
#define TENSORPC_CHECK_MESSAGE(Type) expect_round_trip_with_every_field_set<Type>();
  TENSORPC_RPC_MESSAGES(TENSORPC_CHECK_MESSAGE)
#undef TENSORPC_CHECK_MESSAGE
}

TEST(MessageFields, AnElementsFieldIsNamedWithItsIndex) {
  ListDevicesReply m;
  m.devices.resize(2);
  m.devices[1].kind = 3;
  ListDevicesReply back;
  const Status s = decode_bytes(bytes_of(m), back);
  EXPECT_EQ(s.message(), "LIST_DEVICES reply: field 'kind' of device 1 is 3, not 0 (cpu), 1 (gpu) or 2 (remote)");
}

TEST(MessageFields, TheFixedSizesAreTheSumsOfTheFields) {
  EXPECT_EQ(kSetTensorFixedSize, bytes_of(SetTensorRequest{}).size());
  EXPECT_EQ(kWriteGrantedFixedSize, bytes_of(WriteGrantedRequest{}).size());
  EXPECT_EQ(kHashEntrySize, bytes_of(SetTensorHashRequest{}).size());
  EXPECT_EQ(minimum_size_of<DeviceInfo>(), 4u + 4 + 4 + 4 * 8);
}

// ---- the protocol document -------------------------------------------------------

// The cell of docs/protocol.md's table of commands that describes M.
template <typename M>
std::string document_cell() {
  static const std::string doc = test::read_file(std::string(TENSORPC_SOURCE_DIR) + "/docs/protocol.md");
  const std::string row_start =
      "| " + std::to_string(static_cast<int>(M::wire.command)) + " | " + name_of(M::wire.command) + " |";
  std::istringstream in(doc);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(row_start, 0) != 0) continue;
    std::vector<std::string> cells;
    std::istringstream row(line.substr(row_start.size()));
    for (std::string cell; std::getline(row, cell, '|');) cells.push_back(cell);
    const size_t column = M::wire.direction == Direction::request ? 0 : 1;
    return column < cells.size() ? cells[column] : "";
  }
  return "";
}

// Where `words` first occur in `text` from `from` on, not as the start of a
// longer word ("u64 size", not "u64 size_bytes").
size_t find_words(const std::string& text, const std::string& words, size_t from) {
  for (size_t at = text.find(words, from); at != std::string::npos; at = text.find(words, at + 1)) {
    const size_t end = at + words.size();
    if (end == text.size() || !(std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_')) return at;
  }
  return std::string::npos;
}

template <typename M>
void expect_documented() {
  SCOPED_TRACE(message_name<M>());
  const std::string cell = document_cell<M>();
  ASSERT_FALSE(cell.empty()) << "no row for it in docs/protocol.md's table of commands";
  Layout layout;
  M m;
  m.visit_fields(layout);

  // Each field, in order, as whole words.
  size_t at = 0;
  for (const std::string& field : layout.fields) {
    const size_t found = find_words(cell, field, at);
    ASSERT_NE(found, std::string::npos) << "'" << field << "' is not in the document's row, or out of order: " << cell;
    at = found + field.size();
  }
  // And nothing else, where the payload is only these fields.
  if (M::wire.extent == Extent::whole) {
    const std::regex documented_field(R"((u8|u32|u64|string|u8\[[^\]]*\]) (\w+))");
    for (auto it = std::sregex_iterator(cell.begin(), cell.end(), documented_field); it != std::sregex_iterator();
         ++it) {
      EXPECT_NE(std::find(layout.fields.begin(), layout.fields.end(), it->str()), layout.fields.end())
          << "the document has '" << it->str() << "', the declaration does not";
    }
  }
}

TEST(MessageFields, EveryMessagesFieldsAreItsRowOfTheProtocolDocument) {
#define TENSORPC_CHECK_MESSAGE(Type) expect_documented<Type>();
  TENSORPC_RPC_MESSAGES(TENSORPC_CHECK_MESSAGE)
#undef TENSORPC_CHECK_MESSAGE
}

}  // namespace
}  // namespace tensorpc::rpc
