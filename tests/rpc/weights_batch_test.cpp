// The weights cache asked about many ranges at once: SET_TENSOR_HASHES on
// the wire (a raw client against docs/protocol.md) and Buffer::set_tensors
// of a remote buffer, which sends only the bytes its server lacks and hashes
// only the tensors whose digest its caller does not know.
#include <gtest/gtest.h>

#include "core/log.h"
#include "rpc/remote_test_util.h"
#include "rpc/rpc_test_util.h"
#include "rpc/server/weights_cache.h"
#include "tensorpc/context.h"

namespace tensorpc::test {
namespace {

using rpc::SetTensorHashRequest;

SetTensorHashRequest entry(uint64_t handle, uint64_t offset, const std::vector<uint8_t>& bytes) {
  return {.handle = handle, .offset = offset, .size = bytes.size(), .sha256 = rpc::sha256(bytes.data(), bytes.size())};
}

class SetTensorHashes : public ::testing::Test {
 protected:
  void SetUp() override {
    log::set_level(log::Level::error);
    c_ = client();
  }

  // A raw client past HELLO.
  std::unique_ptr<RawClient> client() {
    auto c = std::make_unique<RawClient>(server_.server().port());
    EXPECT_TRUE(c->hello().ok());
    return c;
  }
  // A buffer of c_ holding `size` zero bytes.
  uint64_t zeroed(uint64_t size) {
    const uint64_t h = c_->alloc(size);
    rpc::WireWriter clear;
    rpc::encode(clear, rpc::BufferClearRequest{h, 0});
    EXPECT_TRUE(c_->call_status(rpc::Command::buffer_clear, clear).ok());
    return h;
  }
  // Puts `bytes` into the server's weights cache, from another connection.
  void cache(const std::vector<uint8_t>& bytes) {
    auto c = client();
    const uint64_t h = c->alloc(bytes.size());
    ASSERT_TRUE(c->set_tensor(h, 0, bytes, rpc::kFlagCache).ok());
  }

  InProcessServer server_;
  std::unique_ptr<RawClient> c_;  // the client under test
};

TEST_F(SetTensorHashes, FillsEveryCachedEntryAndAnswersWhichWereMissing) {
  const auto a = random_bytes(5000, 1), b = random_bytes(3000, 2), unknown = random_bytes(4000, 3);
  cache(a);
  cache(b);
  const uint64_t h = zeroed(16384);
  const uint64_t g = zeroed(4096);
  auto found = c_->set_tensor_hashes({entry(h, 0, a), entry(h, 8192, unknown), entry(g, 1000, b), entry(h, 5000, b)});
  ASSERT_TRUE(found.ok()) << found.status().to_string();
  EXPECT_EQ(found.value(), (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(c_->get_tensor(h, 0, a.size()).value(), a);
  EXPECT_EQ(c_->get_tensor(h, 5000, b.size()).value(), b);
  EXPECT_EQ(c_->get_tensor(g, 1000, b.size()).value(), b);
  EXPECT_EQ(c_->get_tensor(h, 8192, unknown.size()).value(), std::vector<uint8_t>(unknown.size(), 0));
  EXPECT_EQ(server_.stats().cache_hits, 3u);
}

TEST_F(SetTensorHashes, AnEntryWhoseSizeDiffersFromTheCachedBytesIsAMiss) {
  const auto a = random_bytes(5000, 4);
  cache(a);
  const uint64_t h = zeroed(8192);
  SetTensorHashRequest shorter = entry(h, 0, a);
  shorter.size -= 1;
  SetTensorHashRequest longer = entry(h, 0, a);
  longer.size += 1;
  auto found = c_->set_tensor_hashes({shorter, longer});
  ASSERT_TRUE(found.ok()) << found.status().to_string();
  EXPECT_EQ(found.value(), (std::vector<bool>{false, false}));
  EXPECT_EQ(c_->get_tensor(h, 0, a.size() + 1).value(), std::vector<uint8_t>(a.size() + 1, 0));
}

TEST_F(SetTensorHashes, InvalidEntriesAreEachNamedAndNothingIsWritten) {
  const auto a = random_bytes(1000, 5);
  cache(a);
  const uint64_t h = zeroed(2048);
  SetTensorHashRequest past_end = entry(h, 1500, a);
  SetTensorHashRequest wrapping = entry(h, UINT64_MAX - 10, a);  // offset + size overflows
  SetTensorHashRequest unknown_handle = entry(h + 100, 0, a);
  auto found = c_->set_tensor_hashes({entry(h, 0, a), past_end, wrapping, unknown_handle});
  ASSERT_FALSE(found.ok());
  const std::string m = found.status().message();
  EXPECT_EQ(m.rfind("SET_TENSOR_HASHES", 0), 0u) << m;
  EXPECT_NE(m.find("3 of 4 entries"), std::string::npos) << m;
  for (const char* named :
       {"entry 1: bytes [1500, +1000)", "entry 2: bytes [18446744073709551605", "entry 3: buffer handle"}) {
    EXPECT_NE(m.find(named), std::string::npos) << named << " not in: " << m;
  }
  EXPECT_EQ(m.find("entry 0"), std::string::npos) << m;
  EXPECT_EQ(c_->get_tensor(h, 0, a.size()).value(), std::vector<uint8_t>(a.size(), 0)) << "entry 0 was not written";
  // The connection is still served.
  auto again = c_->set_tensor_hashes({entry(h, 0, a)});
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again.value(), std::vector<bool>{true});
}

TEST_F(SetTensorHashes, ARequestOverTheEntryLimitIsRefusedAndTheConnectionServed) {
  const uint64_t h = c_->alloc(64);
  std::vector<SetTensorHashRequest> many(rpc::kMaxHashEntries + 1, SetTensorHashRequest{.handle = h, .size = 1});
  auto found = c_->set_tensor_hashes(many);
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), StatusCode::protocol_error);
  EXPECT_NE(found.status().message().find("limit of " + std::to_string(rpc::kMaxHashEntries)), std::string::npos)
      << found.status().to_string();
  EXPECT_TRUE(c_->ping().ok());
  many.pop_back();
  auto at_limit = c_->set_tensor_hashes(many);
  ASSERT_TRUE(at_limit.ok()) << at_limit.status().to_string();
  EXPECT_EQ(at_limit.value().size(), rpc::kMaxHashEntries);
}

// ---- Buffer::set_tensors of a remote buffer ------------------------------------------

// Tensors shaped like a small model's: matrices from 64 KiB to 1 MiB, and
// norm vectors below the cache threshold; random bytes, one buffer.
struct ModelLike {
  explicit ModelLike(uint32_t seed) {
    const std::vector<int64_t> sizes = {1 << 18, 4096, 1 << 16, 1 << 16, 300000, 5000, 1 << 20, 1 << 14, 90000};
    for (size_t i = 0; i < sizes.size(); ++i) {
      tensors.push_back(ctx.new_tensor(DType::i32, {sizes[i] / 4}));
      bytes.push_back(random_bytes(static_cast<size_t>(sizes[i]), seed + static_cast<uint32_t>(i)));
      total += static_cast<uint64_t>(sizes[i]);
    }
  }
  // Placed one after another into a fresh buffer of `device`.
  std::unique_ptr<Buffer> place(Device& device) {
    uint64_t size = 0;
    for (Tensor* t : tensors) size += (t->nbytes() + 255) / 256 * 256;
    auto b = device.allocate(size);
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    uint64_t offset = 0;
    for (Tensor* t : tensors) {
      EXPECT_TRUE(b.value()->place(*t, offset).ok());
      offset += (t->nbytes() + 255) / 256 * 256;
    }
    return std::move(b).value();
  }
  std::vector<TensorBytes> writes() const {
    std::vector<TensorBytes> w;
    for (size_t i = 0; i < tensors.size(); ++i) w.push_back({tensors[i], bytes[i].data()});
    return w;
  }
  void expect_landed(const Buffer& buffer) const {
    for (size_t i = 0; i < tensors.size(); ++i) {
      std::vector<uint8_t> back(bytes[i].size());
      ASSERT_TRUE(buffer.get(*tensors[i], back.data(), 0, back.size()).ok());
      EXPECT_EQ(back, bytes[i]) << "tensor " << i;
    }
  }

  Context ctx;
  std::vector<Tensor*> tensors;
  std::vector<std::vector<uint8_t>> bytes;
  uint64_t total = 0;
};

TEST(RemoteSetTensors, ASecondUploadSendsOnlyHashesAndSmallTensorsInOneRoundTrip) {
  log::set_level(log::Level::error);
  InProcessServer server;
  auto device = remote_device(server.endpoint(), 0);
  ModelLike model(11);
  {
    auto buffer = model.place(*device);
    const ConnectionStats before = connection_stats(server.endpoint());
    ASSERT_TRUE(buffer->set_tensors(model.writes()).ok());
    const ConnectionStats after = connection_stats(server.endpoint());
    EXPECT_GE(after.bytes_sent - before.bytes_sent, model.total);
    EXPECT_EQ(after.round_trips - before.round_trips, 1u) << "one SET_TENSOR_HASHES for every cached tensor";
    model.expect_landed(*buffer);
  }
  auto buffer = model.place(*device);  // new buffer (maybe a new connection): only the cache has the bytes
  const ConnectionStats before = connection_stats(server.endpoint());
  ASSERT_TRUE(buffer->set_tensors(model.writes()).ok());
  const ConnectionStats after = connection_stats(server.endpoint());
  // The tensors under 64 KiB (25 KiB) travel again, and 56 bytes per hash.
  EXPECT_LT(after.bytes_sent - before.bytes_sent, model.total / 50);
  EXPECT_EQ(after.round_trips - before.round_trips, 1u);
  model.expect_landed(*buffer);
}

TEST(RemoteSetTensors, TensorsTheCacheLacksAreSentAndTheRestFilled) {
  log::set_level(log::Level::error);
  InProcessServer server;
  auto device = remote_device(server.endpoint(), 0);
  ModelLike first(21);
  { ASSERT_TRUE(first.place(*device)->set_tensors(first.writes()).ok()); }
  // Half the tensors changed (a fine-tuned model): those are sent whole.
  ModelLike second(21);
  uint64_t changed = 0;
  for (size_t i = 0; i < second.bytes.size(); i += 2) {
    second.bytes[i] = random_bytes(second.bytes[i].size(), 1000 + static_cast<uint32_t>(i));
    changed += second.bytes[i].size();
  }
  auto buffer = second.place(*device);
  const uint64_t before = connection_stats(server.endpoint()).bytes_sent;
  ASSERT_TRUE(buffer->set_tensors(second.writes()).ok());
  const uint64_t sent = connection_stats(server.endpoint()).bytes_sent - before;
  EXPECT_GE(sent, changed);
  EXPECT_LT(sent, changed + second.total / 50);
  second.expect_landed(*buffer);
}

// ---- TensorBytes::digest: the caller's memo of the digests ---------------------------

// Bytes of the tensors of `model` that set_tensors sends without the cache
// (under the default threshold of 64 KiB).
uint64_t small_bytes(const ModelLike& model) {
  uint64_t n = 0;
  for (const auto& b : model.bytes) n += b.size() < (64u << 10) ? b.size() : 0;
  return n;
}

// The writes of `model`, each with its digest in `digests`.
std::vector<TensorBytes> writes_with(const ModelLike& model, std::vector<ContentDigest>& digests) {
  digests.resize(model.tensors.size());
  std::vector<TensorBytes> w = model.writes();
  for (size_t i = 0; i < w.size(); ++i) w[i].digest = &digests[i];
  return w;
}

TEST(RemoteSetTensorsDigests, UnknownDigestsAreFilledInWithTheBytesSha256) {
  log::set_level(log::Level::error);
  InProcessServer server;
  auto device = remote_device(server.endpoint(), 0);
  ModelLike model(41);
  auto buffer = model.place(*device);
  std::vector<ContentDigest> digests;
  ASSERT_TRUE(buffer->set_tensors(writes_with(model, digests)).ok());
  for (size_t i = 0; i < digests.size(); ++i) {
    const std::vector<uint8_t>& b = model.bytes[i];
    if (b.size() < (64u << 10)) {
      EXPECT_FALSE(digests[i].known) << "tensor " << i << " is sent without the cache, so never hashed";
    } else {
      EXPECT_TRUE(digests[i].known) << "tensor " << i;
      EXPECT_EQ(digests[i].sha256, rpc::sha256(b.data(), b.size())) << "tensor " << i;
    }
  }
  model.expect_landed(*buffer);
}

TEST(RemoteSetTensorsDigests, KnownDigestsMoveNoTensorBytesAndTheTensorsReadBackEqual) {
  log::set_level(log::Level::error);
  InProcessServer server;
  auto device = remote_device(server.endpoint(), 0);
  ModelLike model(51);
  std::vector<ContentDigest> digests;
  {
    auto buffer = model.place(*device);
    ASSERT_TRUE(buffer->set_tensors(writes_with(model, digests)).ok());
    model.expect_landed(*buffer);  // a round trip: the server has cached the bytes
  }
  const std::vector<ContentDigest> first = digests;

  auto buffer = model.place(*device);  // a fresh buffer: only the weights cache has the bytes
  const ConnectionStats before = connection_stats(server.endpoint());
  ASSERT_TRUE(buffer->set_tensors(writes_with(model, digests)).ok());
  const ConnectionStats after = connection_stats(server.endpoint());
  // The small tensors, a frame for each, and one SET_TENSOR_HASHES of 6 entries.
  EXPECT_LT(after.bytes_sent - before.bytes_sent, small_bytes(model) + 2048);
  EXPECT_EQ(after.round_trips - before.round_trips, 1u);
  model.expect_landed(*buffer);
  for (size_t i = 0; i < digests.size(); ++i) {
    EXPECT_EQ(digests[i].known, first[i].known) << i;
    EXPECT_EQ(digests[i].sha256, first[i].sha256) << i;
  }
}

TEST(RemoteSetTensorsDigests, AKnownDigestIsUsedAsGivenNotRecomputed) {
  log::set_level(log::Level::error);
  InProcessServer server;
  auto device = remote_device(server.endpoint(), 0);
  Context ctx;
  Tensor* t = ctx.new_tensor(DType::i32, {1 << 16});  // 256 KiB: through the cache
  const std::vector<uint8_t> cached = random_bytes(t->nbytes(), 61), other = random_bytes(t->nbytes(), 62);
  auto first = device->allocate(t->nbytes());
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(first.value()->place(*t, 0).ok());
  ASSERT_TRUE(first.value()->set_tensors(std::vector<TensorBytes>{{t, cached.data()}}).ok());

  // A caller that claims `other` has the digest of `cached` gets what the
  // server holds under that digest: the claim is not checked by hashing.
  auto second = device->allocate(t->nbytes());
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(second.value()->place(*t, 0).ok());
  ContentDigest claimed{.known = true, .sha256 = rpc::sha256(cached.data(), cached.size())};
  ASSERT_TRUE(second.value()->set_tensors(std::vector<TensorBytes>{{t, other.data(), &claimed}}).ok());
  std::vector<uint8_t> back(t->nbytes());
  ASSERT_TRUE(second.value()->get(*t, back.data(), 0, back.size()).ok());
  EXPECT_EQ(back, cached);
}

TEST(RemoteSetTensorsDigests, KnownDigestsAreSentAndCachedWhenTheServerLacksThem) {
  log::set_level(log::Level::error);
  ModelLike model(71);
  std::vector<ContentDigest> digests;
  {
    InProcessServer first;
    auto device = remote_device(first.endpoint(), 0);
    ASSERT_TRUE(model.place(*device)->set_tensors(writes_with(model, digests)).ok());
  }
  // Another server, whose cache is empty: the bytes travel, and it caches them.
  InProcessServer server;
  auto device = remote_device(server.endpoint(), 0);
  {
    auto buffer = model.place(*device);
    const uint64_t before = connection_stats(server.endpoint()).bytes_sent;
    ASSERT_TRUE(buffer->set_tensors(writes_with(model, digests)).ok());
    EXPECT_GE(connection_stats(server.endpoint()).bytes_sent - before, model.total);
    model.expect_landed(*buffer);
  }
  auto buffer = model.place(*device);
  const uint64_t before = connection_stats(server.endpoint()).bytes_sent;
  ASSERT_TRUE(buffer->set_tensors(writes_with(model, digests)).ok());
  EXPECT_LT(connection_stats(server.endpoint()).bytes_sent - before, small_bytes(model) + 2048);
  model.expect_landed(*buffer);
}

TEST(RemoteSetTensorsDigests, WithEveryDigestKnownManyMegabytesTakeOneRoundTrip) {
  log::set_level(log::Level::error);
  InProcessServer server;
  auto device = remote_device(server.endpoint(), 0);
  // 20 tensors of 1 MiB: hashing them takes two batches (16 MiB, then 4).
  Context ctx;
  std::vector<Tensor*> tensors;
  std::vector<std::vector<uint8_t>> bytes;
  for (uint32_t i = 0; i < 20; ++i) {
    tensors.push_back(ctx.new_tensor(DType::i32, {1 << 18}));
    bytes.push_back(random_bytes(1 << 20, 100 + i));
  }
  std::vector<ContentDigest> digests(tensors.size());
  const auto upload = [&]() -> uint64_t {
    auto buffer = device->allocate(uint64_t{20} << 20);
    EXPECT_TRUE(buffer.ok());
    if (!buffer.ok()) return 0;
    std::vector<TensorBytes> writes;
    for (size_t i = 0; i < tensors.size(); ++i) {
      EXPECT_TRUE(buffer.value()->place(*tensors[i], i << 20).ok());
      writes.push_back({tensors[i], bytes[i].data(), &digests[i]});
    }
    const uint64_t before = connection_stats(server.endpoint()).round_trips;
    EXPECT_TRUE(buffer.value()->set_tensors(writes).ok());
    const uint64_t round_trips = connection_stats(server.endpoint()).round_trips - before;
    std::vector<uint8_t> back(1 << 20);
    EXPECT_TRUE(buffer.value()->get(*tensors[19], back.data(), 0, back.size()).ok());
    EXPECT_EQ(back, bytes[19]);
    return round_trips;
  };
  EXPECT_EQ(upload(), 2u);
  EXPECT_EQ(upload(), 1u) << "no bytes to hash: one SET_TENSOR_HASHES asks about all";
}

TEST(RemoteSetTensors, ATensorOfAnotherBufferIsRefusedBeforeAnythingIsSent) {
  InProcessServer server;
  auto device = remote_device(server.endpoint(), 0);
  ModelLike model(31);
  auto buffer = model.place(*device);
  auto other = device->allocate(1024);
  ASSERT_TRUE(other.ok());
  Context ctx;
  Tensor* stray = ctx.new_tensor(DType::i32, {25});
  ASSERT_TRUE(other.value()->place(*stray, 0).ok());
  std::vector<TensorBytes> writes = model.writes();
  const std::vector<uint8_t> bytes(100);
  writes.push_back({stray, bytes.data()});
  const uint64_t before = connection_stats(server.endpoint()).bytes_sent;
  const Status s = buffer->set_tensors(writes);
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("set_tensors"), std::string::npos) << s.to_string();
  EXPECT_EQ(connection_stats(server.endpoint()).bytes_sent, before);
}

}  // namespace
}  // namespace tensorpc::test
