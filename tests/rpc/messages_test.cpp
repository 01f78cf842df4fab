// The frame header, the reply status and every message of docs/protocol.md:
// each round-trips; a decoder fails cleanly, naming the command and the
// field, on every truncation, on trailing bytes and on values out of range;
// and the byte layout of the header and of HELLO is pinned against bytes
// written out by hand from the protocol document.
#include "rpc/wire/messages.h"
#include "rpc/wire_bytes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace tensorpc::rpc {
namespace {


bool names(const Status& s, const std::string& needle) { return s.message().find(needle) != std::string::npos; }

// The checks every message must pass. `prefix_only`: the decoder reads only
// the leading fixed part of its payload (bulk data or a graph follows), so
// trailing bytes are not its business.
template <typename M>
::testing::AssertionResult round_trips_and_rejects_truncation(const M& m, const char* command, bool prefix_only) {
  const std::vector<uint8_t> bytes = bytes_of(m);
  M back;
  Status s = decode_bytes(bytes, back);
  if (!s.ok()) return ::testing::AssertionFailure() << "decoding its own encoding failed: " << s.to_string();
  if (bytes_of(back) != bytes) return ::testing::AssertionFailure() << "decoded value encodes differently";

  for (size_t len = 0; len < bytes.size(); ++len) {
    M partial;
    s = decode_bytes(std::span<const uint8_t>(bytes.data(), len), partial);
    if (s.ok()) return ::testing::AssertionFailure() << "a prefix of " << len << " bytes decoded";
    if (s.code() != StatusCode::protocol_error || !names(s, command) || !names(s, "truncated")) {
      return ::testing::AssertionFailure() << "prefix of " << len << " bytes: " << s.to_string();
    }
  }

  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  M extra;
  s = decode_bytes(longer, extra);
  if (prefix_only) {
    if (!s.ok()) return ::testing::AssertionFailure() << "a fixed-part decoder refused what follows: " << s.to_string();
  } else if (s.ok() || !names(s, "trailing") || !names(s, command)) {
    return ::testing::AssertionFailure() << "a trailing byte gave: " << s.to_string();
  }
  return ::testing::AssertionSuccess();
}

TEST(Messages, HelloRequestRoundTrips) {
  HelloRequest m{.major = 1, .minor = 2, .patch = 3, .features = 0x0102030405060708ull, .client = "test client"};
  EXPECT_TRUE(round_trips_and_rejects_truncation(m, "HELLO request", false));
  HelloRequest back;
  ASSERT_TRUE(decode_bytes(bytes_of(m), back).ok());
  EXPECT_EQ(back.major, 1u);
  EXPECT_EQ(back.minor, 2u);
  EXPECT_EQ(back.patch, 3u);
  EXPECT_EQ(back.features, 0x0102030405060708ull);
  EXPECT_EQ(back.client, "test client");
}

TEST(Messages, HelloReplyRoundTrips) {
  HelloReply m{.major = 1, .minor = 0, .patch = 9, .features = 6, .server = "tensorpc-server 1.0.0"};
  EXPECT_TRUE(round_trips_and_rejects_truncation(m, "HELLO reply", false));
  HelloReply back;
  ASSERT_TRUE(decode_bytes(bytes_of(m), back).ok());
  EXPECT_EQ(back.server, "tensorpc-server 1.0.0");
  EXPECT_EQ(back.patch, 9u);
  EXPECT_EQ(back.features, 6u);
}

TEST(Messages, AHelloReplyWithTheKeyFeatureEndsWithTheServersNonce) {
  HelloReply m{.features = kFeatureKey, .server = "s"};
  for (size_t i = 0; i < m.server_nonce.size(); ++i) m.server_nonce[i] = static_cast<uint8_t>(i + 1);
  EXPECT_TRUE(round_trips_and_rejects_truncation(m, "HELLO reply", false));
  const std::vector<uint8_t> bytes = bytes_of(m);
  ASSERT_EQ(bytes.size(), 12u + 8 + 4 + 1 + kAuthNonceSize);
  EXPECT_TRUE(std::equal(m.server_nonce.begin(), m.server_nonce.end(), bytes.end() - kAuthNonceSize));
  HelloReply back;
  ASSERT_TRUE(decode_bytes(bytes, back).ok());
  EXPECT_EQ(back.server_nonce, m.server_nonce);
  // Without the bit there is no nonce on the wire.
  m.features = 0;
  EXPECT_EQ(bytes_of(m).size(), 12u + 8 + 4 + 1);
}

TEST(Messages, AuthRequestIsTheClientsNonceThenItsProof) {
  AuthRequest m;
  m.client_nonce.fill(0xaa);
  m.client_proof.fill(0xbb);
  EXPECT_TRUE(round_trips_and_rejects_truncation(m, "AUTH request", false));
  std::vector<uint8_t> expected(kAuthNonceSize, 0xaa);
  expected.insert(expected.end(), kAuthProofSize, 0xbb);
  EXPECT_EQ(bytes_of(m), expected);

  AuthReply r;
  r.server_proof.fill(0xcc);
  EXPECT_TRUE(round_trips_and_rejects_truncation(r, "AUTH reply", false));
  EXPECT_EQ(bytes_of(r), std::vector<uint8_t>(kAuthProofSize, 0xcc));
}

TEST(Messages, ListDevicesReplyRoundTrips) {
  ListDevicesReply m;
  m.devices.push_back({"cpu", "16 threads", 0, 1u << 30, 1u << 31, 64, 1ull << 33});
  m.devices.push_back({"gpu0", "", 1, 7, 8, 256, 9});
  EXPECT_TRUE(round_trips_and_rejects_truncation(m, "LIST_DEVICES reply", false));
  ListDevicesReply back;
  ASSERT_TRUE(decode_bytes(bytes_of(m), back).ok());
  ASSERT_EQ(back.devices.size(), 2u);
  EXPECT_EQ(back.devices[0].description, "16 threads");
  EXPECT_EQ(back.devices[1].kind, 1u);
  EXPECT_EQ(back.devices[0].max_allocation, 1ull << 33);

  EXPECT_TRUE(round_trips_and_rejects_truncation(ListDevicesReply{}, "LIST_DEVICES reply", false));
}

TEST(Messages, ListDevicesRejectsAnUnknownDeviceKind) {
  ListDevicesReply m;
  m.devices.push_back({"x", "y", 3, 0, 0, 0, 0});
  ListDevicesReply back;
  const Status s = decode_bytes(bytes_of(m), back);
  EXPECT_EQ(s.code(), StatusCode::protocol_error);
  EXPECT_TRUE(names(s, "LIST_DEVICES") && names(s, "'kind'")) << s.to_string();
}

TEST(Messages, ListDevicesRejectsACountTheBytesCannotHold) {
  WireWriter w;
  w.u32(0xffffffffu);  // would be 4 billion devices
  ListDevicesReply back;
  const Status s = decode_bytes(w.bytes(), back);
  EXPECT_EQ(s.code(), StatusCode::protocol_error);
  EXPECT_TRUE(names(s, "'count'")) << s.to_string();
}

TEST(Messages, FixedSizeMessagesRoundTrip) {
  EXPECT_TRUE(round_trips_and_rejects_truncation(DeviceMemoryRequest{.device = 3}, "DEVICE_MEMORY request", false));
  EXPECT_TRUE(
      round_trips_and_rejects_truncation(DeviceMemoryReply{.free = 5, .total = 9}, "DEVICE_MEMORY reply", false));
  EXPECT_TRUE(round_trips_and_rejects_truncation(BufferAllocRequest{.device = 2, .size = 1ull << 40},
                                                 "BUFFER_ALLOC request", false));
  EXPECT_TRUE(round_trips_and_rejects_truncation(BufferAllocReply{.handle = 77}, "BUFFER_ALLOC reply", false));
  EXPECT_TRUE(round_trips_and_rejects_truncation(BufferFreeRequest{.handle = 77}, "BUFFER_FREE request", false));
  EXPECT_TRUE(round_trips_and_rejects_truncation(BufferClearRequest{.handle = 77, .value = 0xab},
                                                 "BUFFER_CLEAR request", false));
  EXPECT_TRUE(round_trips_and_rejects_truncation(GetTensorRequest{.handle = 1, .offset = 2, .size = 3},
                                                 "GET_TENSOR request", false));
  EXPECT_TRUE(round_trips_and_rejects_truncation(
      CopyTensorRequest{.src_handle = 1, .src_offset = 2, .dst_handle = 3, .dst_offset = 4, .size = 5},
      "COPY_TENSOR request", false));
  EXPECT_TRUE(round_trips_and_rejects_truncation(GraphRecomputeRequest{.device = 1, .graph_id = 42},
                                                 "GRAPH_RECOMPUTE request", false));
  EXPECT_TRUE(round_trips_and_rejects_truncation(SetTensorHashReply{.found = true}, "SET_TENSOR_HASH reply", false));
}

TEST(Messages, SetTensorHashRequestRoundTrips) {
  SetTensorHashRequest m{.handle = 9, .offset = 64, .size = 4096, .sha256 = {}};
  for (size_t i = 0; i < m.sha256.size(); ++i) m.sha256[i] = static_cast<uint8_t>(i * 7 + 1);
  EXPECT_TRUE(round_trips_and_rejects_truncation(m, "SET_TENSOR_HASH request", false));
  SetTensorHashRequest back;
  ASSERT_TRUE(decode_bytes(bytes_of(m), back).ok());
  EXPECT_EQ(back.sha256, m.sha256);
  EXPECT_EQ(bytes_of(m).size(), 24u + 32u);
}

TEST(Messages, SetTensorAndGraphComputeDecodeOnlyTheirFixedPart) {
  SetTensorRequest st{.handle = 1, .offset = 128, .size = 4};
  EXPECT_TRUE(round_trips_and_rejects_truncation(st, "SET_TENSOR request", true));
  EXPECT_EQ(bytes_of(st).size(), kSetTensorFixedSize);

  // The reader stops after the fixed part, where the data begins.
  std::vector<uint8_t> payload = bytes_of(st);
  payload.insert(payload.end(), {1, 2, 3, 4});
  WireReader r(payload);
  SetTensorRequest back;
  ASSERT_TRUE(decode(r, back).ok());
  EXPECT_EQ(r.remaining(), 4u);

  EXPECT_TRUE(round_trips_and_rejects_truncation(GraphComputeRequest{.device = 1, .graph_id = 7},
                                                 "GRAPH_COMPUTE request", true));
}

TEST(Messages, SetTensorHashReplyRejectsFoundOtherThanZeroOrOne) {
  const std::vector<uint8_t> bytes{2};
  SetTensorHashReply back;
  const Status s = decode_bytes(bytes, back);
  EXPECT_EQ(s.code(), StatusCode::protocol_error);
  EXPECT_TRUE(names(s, "SET_TENSOR_HASH") && names(s, "'found'")) << s.to_string();
}

TEST(Messages, SetTensorHashesRequestIsACountThenSetTensorHashEntries) {
  SetTensorHashesRequest m;
  for (uint64_t i = 0; i < 3; ++i) {
    SetTensorHashRequest e{.handle = i + 1, .offset = 64 * i, .size = 4096 + i, .sha256 = {}};
    e.sha256.fill(static_cast<uint8_t>(0xa0 + i));
    m.entries.push_back(e);
  }
  EXPECT_TRUE(round_trips_and_rejects_truncation(m, "SET_TENSOR_HASHES request", false));
  const std::vector<uint8_t> bytes = bytes_of(m);
  ASSERT_EQ(bytes.size(), 4 + 3 * kHashEntrySize);
  EXPECT_EQ(bytes[0], 3);
  const std::vector<uint8_t> second = bytes_of(m.entries[1]);
  EXPECT_TRUE(std::equal(second.begin(), second.end(), bytes.begin() + 4 + kHashEntrySize));
  EXPECT_TRUE(round_trips_and_rejects_truncation(SetTensorHashesRequest{}, "SET_TENSOR_HASHES request", false));
}

TEST(Messages, SetTensorHashesRequestRejectsACountOverTheLimitBeforeReadingEntries) {
  WireWriter w;
  w.u32(kMaxHashEntries + 1);
  SetTensorHashesRequest back;
  Status s = decode_bytes(w.bytes(), back);
  EXPECT_EQ(s.code(), StatusCode::protocol_error);
  EXPECT_TRUE(names(s, "'count'") && names(s, std::to_string(kMaxHashEntries))) << s.to_string();

  WireWriter forged;
  forged.u32(kMaxHashEntries);  // and no entries
  s = decode_bytes(forged.bytes(), back);
  EXPECT_TRUE(names(s, "'count'") && names(s, "truncated")) << s.to_string();
}

TEST(Messages, SetTensorHashesReplyIsACountThenABitmap) {
  SetTensorHashesReply m;
  m.found.assign(10, false);
  m.found[0] = m.found[3] = m.found[9] = true;
  EXPECT_EQ(bytes_of(m), (std::vector<uint8_t>{10, 0, 0, 0, 0x09, 0x02}));
  EXPECT_TRUE(round_trips_and_rejects_truncation(m, "SET_TENSOR_HASHES reply", false));
  SetTensorHashesReply back;
  ASSERT_TRUE(decode_bytes(bytes_of(m), back).ok());
  EXPECT_EQ(back.found, m.found);
  EXPECT_EQ(bytes_of(SetTensorHashesReply{}), (std::vector<uint8_t>{0, 0, 0, 0}));
}

TEST(Messages, SetTensorHashesReplyRejectsBitsPastItsCount) {
  SetTensorHashesReply back;
  const Status s = decode_bytes(std::vector<uint8_t>{3, 0, 0, 0, 0x08}, back);
  EXPECT_EQ(s.code(), StatusCode::protocol_error);
  EXPECT_TRUE(names(s, "SET_TENSOR_HASHES reply") && names(s, "'found'")) << s.to_string();
}

TEST(Messages, BufferAllocReplyRejectsHandleZero) {
  BufferAllocReply back;
  const Status s = decode_bytes(bytes_of(BufferAllocReply{.handle = 0}), back);
  EXPECT_EQ(s.code(), StatusCode::protocol_error);
  EXPECT_TRUE(names(s, "'handle'")) << s.to_string();
}

TEST(Messages, StringsLongerThanTheLimitAreRejectedWithoutReadingThem) {
  WireWriter w;
  w.u32(1);
  w.u32(0);
  w.u32(0);
  w.u64(0);
  w.u32(kMaxWireString + 1);  // the client string's length
  w.bytes().resize(w.size() + kMaxWireString + 1, 'x');
  HelloRequest back;
  const Status s = decode_bytes(w.bytes(), back);
  EXPECT_EQ(s.code(), StatusCode::protocol_error);
  EXPECT_TRUE(names(s, "HELLO") && names(s, "'client'") && names(s, "65536")) << s.to_string();
}

TEST(Messages, WriterCutsStringsAtTheLimit) {
  HelloRequest m;
  m.client.assign(kMaxWireString + 10, 'y');
  HelloRequest back;
  ASSERT_TRUE(decode_bytes(bytes_of(m), back).ok());
  EXPECT_EQ(back.client.size(), kMaxWireString);
}

TEST(Messages, StatusRoundTripsEveryCode) {
  for (uint32_t c = 1; c <= static_cast<uint32_t>(StatusCode::internal); ++c) {
    WireWriter w;
    encode_status(w, Status(static_cast<StatusCode>(c), "reason " + std::to_string(c)));
    WireReader r(w.bytes());
    const Status s = decode_status(r);
    EXPECT_EQ(static_cast<uint32_t>(s.code()), c);
    EXPECT_EQ(s.message(), "reason " + std::to_string(c));
    EXPECT_TRUE(r.done());
  }
  WireWriter w;
  encode_status(w, Status());
  EXPECT_EQ(w.bytes(), (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0})) << "ok: code 0, empty message";
  WireReader r(w.bytes());
  EXPECT_TRUE(decode_status(r).ok());
}

TEST(Messages, StatusRejectsUnknownCodesAndTruncation) {
  WireWriter w;
  w.u32(8);
  w.u32(0);
  WireReader r(w.bytes());
  const Status s = decode_status(r);
  EXPECT_EQ(s.code(), StatusCode::protocol_error);
  EXPECT_TRUE(names(s, "status code 8")) << s.to_string();

  WireWriter full;
  encode_status(full, invalid_argument("bad"));
  for (size_t len = 0; len < full.size(); ++len) {
    WireReader part(std::span<const uint8_t>(full.bytes().data(), len));
    EXPECT_EQ(decode_status(part).code(), StatusCode::protocol_error) << "prefix of " << len;
  }
}

// ---- the pinned layouts --------------------------------------------------------

TEST(Messages, HeaderLayoutIsPinned) {
  FrameHeader h;
  h.command = Command::graph_compute;
  h.flags = kFlagNoReply | kFlagCache;
  h.request_id = 0x1122334455667788ull;
  h.payload_length = 0x0102;
  uint8_t out[kFrameHeaderSize];
  encode_header(h, out);
  const std::vector<uint8_t> expected{
      'T',  'R',  'P',  'C',                           // magic 0x43505254, little-endian
      10,   0,                                         // command GRAPH_COMPUTE
      6,    0,                                         // flags NO_REPLY | CACHE
      0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,  // request_id
      0x02, 0x01, 0,    0,    0,    0,    0,    0,     // payload_length
  };
  EXPECT_EQ(std::vector<uint8_t>(out, out + kFrameHeaderSize), expected);

  auto back = decode_header(std::span<const uint8_t, kFrameHeaderSize>(out, kFrameHeaderSize));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->command, Command::graph_compute);
  EXPECT_EQ(back->flags, kFlagNoReply | kFlagCache);
  EXPECT_EQ(back->request_id, 0x1122334455667788ull);
  EXPECT_EQ(back->payload_length, 0x0102u);
}

TEST(Messages, HelloRequestLayoutIsPinned) {
  HelloRequest m{.major = 1, .minor = 0, .patch = 2, .features = 0x0300, .client = "ab"};
  const std::vector<uint8_t> expected{
      1, 0, 0, 0,                  // major
      0, 0, 0, 0,                  // minor
      2, 0, 0, 0,                  // patch
      0, 3, 0, 0, 0,   0,   0, 0,  // features
      2, 0, 0, 0, 'a', 'b',        // client: u32 length, bytes
  };
  EXPECT_EQ(bytes_of(m), expected);
}

TEST(Messages, HeaderRejectsBadMagic) {
  uint8_t out[kFrameHeaderSize];
  encode_header(FrameHeader{}, out);
  out[0] = 'X';
  auto h = decode_header(std::span<const uint8_t, kFrameHeaderSize>(out, kFrameHeaderSize));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::protocol_error);
  EXPECT_TRUE(names(h.status(), "magic")) << h.status().to_string();
}

TEST(Messages, HeaderRejectsUnknownCommand) {
  FrameHeader f;
  f.command = static_cast<Command>(kCommandCount);
  uint8_t out[kFrameHeaderSize];
  encode_header(f, out);
  auto h = decode_header(std::span<const uint8_t, kFrameHeaderSize>(out, kFrameHeaderSize));
  ASSERT_FALSE(h.ok());
  EXPECT_TRUE(names(h.status(), "unknown command " + std::to_string(kCommandCount))) << h.status().to_string();
}

TEST(Messages, EveryCommandHasAName) {
  for (uint16_t c = 0; c < kCommandCount; ++c) {
    EXPECT_STRNE(name_of(static_cast<Command>(c)), "UNKNOWN_COMMAND") << c;
  }
  EXPECT_STREQ(name_of(Command::hello), "HELLO");
  EXPECT_STREQ(name_of(Command::set_tensor_hash), "SET_TENSOR_HASH");
}

}  // namespace
}  // namespace tensorpc::rpc
