// The weights cache asked about many ranges at once: SET_TENSOR_HASHES on
// the wire (a raw client against docs/protocol.md).
#include <gtest/gtest.h>

#include "rpc/log.h"
#include "rpc/remote_test_util.h"
#include "rpc/rpc_test_util.h"
#include "rpc/weights_cache.h"

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

}  // namespace
}  // namespace tensorpc::test
