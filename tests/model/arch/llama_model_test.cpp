// LlamaModel::open on files that are GGUF but not a usable llama model: each
// is refused with an error naming what is wrong, before anything is sized by
// the file's word (fuzz/model_fuzz.cpp searches for more).
#include "model/arch/llama_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "lab/random_model.h"

namespace tensorpc {
namespace {

// A small random llama model's file, as bytes.
std::vector<uint8_t> small_model_bytes() {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tensorpc_llama_model_test_" + std::to_string(::getpid()) + ".gguf"))
          .string();
  tools::RandomModelOptions o;
  o.n_embd = 16;
  o.n_layer = 2;
  o.n_ff = 32;
  EXPECT_TRUE(tools::write_random_llama(path, o).ok());
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  return bytes;
}

// Overwrites the u32 value of metadata key `key` (GGUF: the key's length and
// text, the value type 4 = u32, then the value).
void set_u32(std::vector<uint8_t>& bytes, const std::string& key, uint32_t value) {
  const auto at = std::search(bytes.begin(), bytes.end(), key.begin(), key.end());
  ASSERT_NE(at, bytes.end()) << key;
  const size_t type_at = static_cast<size_t>(at - bytes.begin()) + key.size();
  ASSERT_LE(type_at + 8, bytes.size());
  uint32_t type = 0;
  std::memcpy(&type, &bytes[type_at], 4);
  ASSERT_EQ(type, 4u) << key << " is not a u32";
  std::memcpy(&bytes[type_at + 4], &value, 4);
}

std::string open_error(const std::vector<uint8_t>& bytes) {
  auto m = LlamaModel::open_memory(bytes, "test.gguf");
  EXPECT_FALSE(m.ok()) << "a broken model was accepted";
  return m.ok() ? std::string() : m.status().message();
}

TEST(LlamaModelOpen, ASmallRandomModelOpens) {
  const std::vector<uint8_t> bytes = small_model_bytes();
  auto m = LlamaModel::open_memory(bytes, "test.gguf");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m.value()->hparams().n_layer, 2);
  EXPECT_EQ(m.value()->weights().layers.size(), 2u);
}

TEST(LlamaModelOpen, ABlockCountTheTensorsCannotHoldIsRefusedBeforeLayersAreSized) {
  std::vector<uint8_t> bytes = small_model_bytes();
  // Four billion layers: sized by it, the layer table alone would need hundreds of GiB.
  set_u32(bytes, "llama.block_count", 0xFFFFFFFFu);
  const std::string why = open_error(bytes);
  EXPECT_NE(why.find("llama.block_count"), std::string::npos) << why;
  EXPECT_NE(why.find("4294967295"), std::string::npos) << why;

  set_u32(bytes, "llama.block_count", 3);  // the file holds two layers' tensors and three more
  EXPECT_NE(open_error(bytes).find("llama.block_count is 3"), std::string::npos);
}

TEST(LlamaModelOpen, InconsistentHyperParametersAreRefused) {
  std::vector<uint8_t> bytes = small_model_bytes();
  set_u32(bytes, "llama.attention.head_count", 3);  // 16 is not a multiple of 3
  EXPECT_NE(open_error(bytes).find("heads"), std::string::npos);

  bytes = small_model_bytes();
  set_u32(bytes, "llama.feed_forward_length", 33);  // the ffn tensors are 32 wide
  EXPECT_NE(open_error(bytes).find("ffn_"), std::string::npos);
}

TEST(LlamaModelOpen, EveryTruncationIsRefused) {
  const std::vector<uint8_t> bytes = small_model_bytes();
  for (size_t n : {size_t{0}, size_t{4}, size_t{64}, bytes.size() / 2, bytes.size() - 1}) {
    const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_FALSE(open_error(cut).empty()) << "cut at " << n;
  }
}

}  // namespace
}  // namespace tensorpc
