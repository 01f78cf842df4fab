// `tensorpc-server --models DIR` (api/model_directory.h): a client loading a file the
// server has sends the tensors' digests and not their bytes, and the text is
// the one of a load that sent everything; a tensor whose bytes in the
// server's file differ, or a source whose bytes do not match the digest it
// claims, costs the client the sending of those bytes, never a wrong tensor.
#include "api/model_directory.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "file_util.h"
#include "model/gguf/gguf.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/model.h"
#include "tensorpc/server.h"

namespace tensorpc {
namespace {

using test::ScopedTempDir;

const std::string kModel = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-bpe.gguf";
constexpr const char* kPrompt = "And the LORD said unto Moses";

// Greedy text of the model at kModel, placed by `o` (its path set here).
std::string greedy_text(ModelOptions o, ModelInfo* info = nullptr) {
  o.path = kModel;
  o.context_size = 128;
  o.threads = 1;
  o.remote.key = "";
  auto model = Model::open(o);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return "";
  GenerationOptions g;
  g.max_tokens = 24;
  g.sampling.temperature = 0;
  auto r = model.value().generate(kPrompt, g);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (info != nullptr) *info = model.value().info();
  return r.ok() ? r.value().text : "";
}

// A one-device server on a loopback port the OS picks, reading `weights`.
std::unique_ptr<Server> start_server(std::shared_ptr<const LocalWeights> weights) {
  ServerOptions so;
  so.port = 0;
  so.devices = {std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu0", .threads = 1})};
  so.local_weights = std::move(weights);
  auto server = Server::start(so);
  EXPECT_TRUE(server.ok()) << server.status().to_string();
  return server.ok() ? std::move(server).value() : nullptr;
}

ModelOptions on(const Server& server) {
  ModelOptions o;
  o.servers = {"127.0.0.1:" + std::to_string(server.port())};
  o.use_local_cpu = false;
  return o;
}

// The directory's model file, a copy of kModel; with `changed`, its largest
// tensor's first bytes inverted.
std::string copy_model(const std::string& dir, bool changed) {
  const std::string path = dir + "/kjv-bpe.gguf";
  std::filesystem::copy_file(kModel, path);
  if (changed) {
    auto file = GgufFile::open(kModel);
    EXPECT_TRUE(file.ok());
    const GgufTensorInfo* largest = nullptr;
    for (const GgufTensorInfo& t : file.value()->tensors()) {
      if (largest == nullptr || t.bytes.size() > largest->bytes.size()) largest = &t;
    }
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(file.value()->data_offset() + largest->offset));
    for (int i = 0; i < 64; ++i) f.put(static_cast<char>(~largest->bytes[static_cast<size_t>(i)]));
  }
  return path;
}

TEST(ModelDirectory, AFileTheServerHasIsLoadedFromItsDiskNotSent) {
  const std::string expected = greedy_text({});
  ScopedTempDir dir;
  copy_model(dir.path, false);
  std::ofstream(dir.path + "/notes.gguf") << "not a model\n";
  auto models = ModelDirectory::open(dir.path, "");
  ASSERT_TRUE(models.ok()) << models.status().to_string();
  ASSERT_EQ(models.value()->skipped().size(), 1u);
  EXPECT_NE(models.value()->skipped()[0].find("notes.gguf"), std::string::npos) << models.value()->skipped()[0];
  models.value()->index(2);
  const ModelDirectory::Counts c = models.value()->counts();
  EXPECT_EQ(c.files, 1u);
  EXPECT_GT(c.indexed, 0u);
  EXPECT_LE(c.indexed, c.tensors) << "equal tensors share a digest";

  const auto server = start_server(models.value());
  ASSERT_NE(server, nullptr);
  ModelInfo info;
  EXPECT_EQ(greedy_text(on(*server), &info), expected);
  const ServerStats st = server->stats();
  EXPECT_GT(st.local_weight_hits, 0u);
  EXPECT_EQ(st.local_weight_mismatches, 0u);
  // Tensors under the weights cache's 64 KiB go as bytes; the rest as digests.
  EXPECT_GT(st.local_weight_bytes, info.server_weight_bytes * 9 / 10);
  EXPECT_LT(info.server_bytes_sent, info.server_weight_bytes / 10);
}

TEST(ModelDirectory, ATensorWhoseFileBytesDifferIsSent) {
  const std::string expected = greedy_text({});
  ScopedTempDir dir;
  copy_model(dir.path, true);
  auto models = ModelDirectory::open(dir.path, "");
  ASSERT_TRUE(models.ok()) << models.status().to_string();
  models.value()->index(1);
  const auto server = start_server(models.value());
  ASSERT_NE(server, nullptr);
  ModelInfo info;
  EXPECT_EQ(greedy_text(on(*server), &info), expected);
  EXPECT_GT(server->stats().local_weight_hits, 0u);
  // The changed tensor (the largest) came over the connection.
  EXPECT_GT(info.server_bytes_sent, info.server_weight_bytes / 10);
}

// A source whose bytes are not what it says: every range is checked, found
// wrong, and sent.
class WrongWeights : public LocalWeights {
 public:
  std::span<const uint8_t> find(const std::array<uint8_t, 32>&, uint64_t size) const override {
    return size <= zeros_.size() ? std::span<const uint8_t>(zeros_).first(size) : std::span<const uint8_t>();
  }

 private:
  const std::vector<uint8_t> zeros_ = std::vector<uint8_t>(uint64_t{16} << 20);  // more than any kjv-bpe tensor
};

TEST(ModelDirectory, BytesThatDoNotMatchTheirDigestAreSentByTheClient) {
  const std::string expected = greedy_text({});
  const auto server = start_server(std::make_shared<WrongWeights>());
  ASSERT_NE(server, nullptr);
  ModelInfo info;
  EXPECT_EQ(greedy_text(on(*server), &info), expected);
  const ServerStats st = server->stats();
  EXPECT_EQ(st.local_weight_hits, 0u);
  EXPECT_GT(st.local_weight_mismatches, 0u);
  EXPECT_GE(info.server_bytes_sent, info.server_weight_bytes);
}

TEST(ModelDirectory, ADirectoryThatIsNotOneIsAnError) {
  auto missing = ModelDirectory::open("/nonexistent/tensorpc-models", "");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "--models /nonexistent/tensorpc-models: not a directory");
}

}  // namespace
}  // namespace tensorpc
