// Loading a model onto a remote device: the bytes land, and a second load
// onto the same server (whose weights cache now has them) sends little.
#include "model/placement.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "model/gguf_tensors.h"
#include "tensorpc/random_model.h"
#include "tensorpc/rpc_client.h"
#include "tensorpc/server.h"

namespace tensorpc {
namespace {

TEST(ModelPlacement, ASecondLoadOntoTheSameServerSendsOnlyHashesAndNorms) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tensorpc_placement_test_" + std::to_string(::getpid()) + ".gguf"))
          .string();
  tools::RandomModelOptions o;
  o.n_embd = 256;  // every matrix 128 KiB or more: above the weights cache's threshold
  o.n_ff = 512;
  ASSERT_TRUE(tools::write_random_llama(path, o).ok());
  auto model = LlamaModel::open(path);
  std::filesystem::remove(path);  // the mapping stays
  ASSERT_TRUE(model.ok()) << model.status().to_string();

  ServerOptions so;
  so.port = 0;
  so.threads = 1;
  auto server = Server::start(so);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const std::string endpoint = "127.0.0.1:" + std::to_string(server.value()->port());

  // Bytes sent for one load; the placement and the devices go after it, so
  // the server frees the buffers and keeps only its weights cache.
  const auto load = [&]() -> uint64_t {
    auto devices = connect_devices(endpoint);
    EXPECT_TRUE(devices.ok()) << devices.status().to_string();
    if (!devices.ok()) return 0;
    const uint64_t before = connection_stats(endpoint).bytes_sent;
    uint64_t last_done = 0, last_total = 1;
    PlacementOptions po;
    po.progress = [&](uint64_t done, uint64_t total, const std::string&) {
      EXPECT_GT(done, last_done);
      last_done = done;
      last_total = total;
    };
    auto placement = ModelPlacement::create(*model.value(), {devices.value()[0].get()}, po);
    EXPECT_TRUE(placement.ok()) << placement.status().to_string();
    if (!placement.ok()) return 0;
    EXPECT_EQ(last_done, last_total) << "the progress reaches the end";
    const uint64_t sent = connection_stats(endpoint).bytes_sent - before;
    // The weights landed: each one's bytes read back equal the file's.
    for (const Tensor* t : {model.value()->weights().tok_embd, model.value()->weights().layers[3].ffn_down,
                            model.value()->weights().output_norm}) {
      const GgufTensorInfo* info = model.value()->info_of(t);
      std::vector<uint8_t> back(t->nbytes());
      EXPECT_TRUE(t->buffer->get(*t, back.data(), 0, back.size()).ok());
      EXPECT_TRUE(std::equal(back.begin(), back.end(), info->bytes.begin())) << describe(*t);
    }
    return sent;
  };
  const uint64_t cold = load();
  const uint64_t warm = load();
  EXPECT_GT(cold, 8u << 20);
  EXPECT_LT(warm, cold / 100) << "cold " << cold << " B, warm " << warm << " B";
  server.value()->stop();
}

}  // namespace
}  // namespace tensorpc
