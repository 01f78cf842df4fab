// Loading a model onto a remote device: the bytes land, and a second load
// onto the same server (whose weights cache now has them) sends little; with
// a digest store, a second load of the file opened anew hashes nothing. The
// default split: by room, GPUs first where they are mixed with CPUs.
#include "model/runtime/placement.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "file_util.h"
#include "lab/random_model.h"
#include "model/gguf/gguf_tensors.h"
#include "model/runtime/generate.h"
#include "tensorpc/rpc_client.h"
#include "tensorpc/server.h"

namespace tensorpc {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(LayersByRoom, CpusAloneOrGpusAloneShareByRoom) {
  EXPECT_EQ(layers_by_room(12, {{.bytes = 300 * kMiB}, {.bytes = 100 * kMiB}}, 10 * kMiB),
            (std::vector<int64_t>{9, 3}));
  // GPUs alone: by room, what they keep does not count (nowhere else to go).
  EXPECT_EQ(layers_by_room(12, {{100 * kMiB, true, 90 * kMiB}, {300 * kMiB, true, 90 * kMiB}}, 10 * kMiB),
            (std::vector<int64_t>{3, 9}));
}

TEST(LayersByRoom, GpusTakeWhatFitsFirstAndCpusTheRest) {
  // The GPU (first or last in the list) fits (200 - 40) / 16 = 10 layers of 32.
  const LayerRoom gpu{200 * kMiB, true, 40 * kMiB}, cpu{20000 * kMiB};
  EXPECT_EQ(layers_by_room(32, {gpu, cpu}, 16 * kMiB), (std::vector<int64_t>{10, 22}));
  EXPECT_EQ(layers_by_room(32, {cpu, gpu}, 16 * kMiB), (std::vector<int64_t>{22, 10}));
  // Room for more than the model: the GPU takes every layer.
  EXPECT_EQ(layers_by_room(6, {gpu, cpu}, 16 * kMiB), (std::vector<int64_t>{6, 0}));
  // Two GPUs share what fits by their fit (10 and 5), the CPUs the rest by room.
  const LayerRoom small{120 * kMiB, true, 40 * kMiB}, cpu2{10000 * kMiB};
  EXPECT_EQ(layers_by_room(45, {gpu, small, cpu, cpu2}, 16 * kMiB), (std::vector<int64_t>{10, 5, 20, 10}));
  // A GPU that fits no layer gets none; with no GPU room at all, by room.
  const LayerRoom tiny{50 * kMiB, true, 40 * kMiB};
  EXPECT_EQ(layers_by_room(8, {tiny, cpu}, 16 * kMiB), (std::vector<int64_t>{0, 8}));
  // No CPU room (a helper CPU that takes no layers): the GPUs share by room.
  EXPECT_EQ(layers_by_room(8, {gpu, {.bytes = 0}}, 16 * kMiB), (std::vector<int64_t>{8, 0}));
}

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

// ---- the client's digest memo (WeightDigests) ----------------------------------------

// A small random model file (every matrix 128 KiB or more: through the
// weights cache) in a temporary directory, and a server on loopback.
class DigestMemo : public ::testing::Test {
 protected:
  void SetUp() override {
    tools::RandomModelOptions o;
    o.n_embd = 256;
    o.n_ff = 512;
    ASSERT_TRUE(tools::write_random_llama(model_path, o).ok());
    ServerOptions so;
    so.port = 0;
    so.threads = 1;
    auto started = Server::start(so);
    ASSERT_TRUE(started.ok()) << started.status().to_string();
    server = std::move(started).value();
    endpoint = "127.0.0.1:" + std::to_string(server->port());
  }
  void TearDown() override {
    if (server) server->stop();
  }

  std::unique_ptr<LlamaModel> open(const std::string& digest_dir) {
    auto m = LlamaModel::open(model_path, {.digest_dir = digest_dir});
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return m.ok() ? std::move(m).value() : nullptr;
  }

  struct Load {
    uint64_t bytes_sent = 0;
    std::vector<int32_t> tokens;  // a short greedy generation
  };
  // Loads `model` onto the server (a connection of its own, closed after)
  // and generates from it.
  Load load(const LlamaModel& model) {
    Load out;
    auto devices = connect_devices(endpoint);
    EXPECT_TRUE(devices.ok()) << devices.status().to_string();
    if (!devices.ok()) return out;
    const uint64_t before = connection_stats(endpoint).bytes_sent;
    PlacementOptions po;
    po.n_ctx = 64;
    auto placement = ModelPlacement::create(model, {devices.value()[0].get()}, po);
    EXPECT_TRUE(placement.ok()) << placement.status().to_string();
    if (!placement.ok()) return out;
    out.bytes_sent = connection_stats(endpoint).bytes_sent - before;
    GenerateOptions g;
    g.n_predict = 8;
    g.stop_at_eos = false;
    g.sampler.temperature = 0;
    auto r = generate_text(model, *placement.value(), "in the beginning", g);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (r.ok()) out.tokens = r.value().generated;
    return out;
  }

  test::ScopedTempDir tmp;
  std::string model_path = tmp.path + "/model.gguf";
  std::string digest_dir = tmp.path + "/digests";
  std::unique_ptr<Server> server;
  std::string endpoint;
};

TEST_F(DigestMemo, AReloadOfTheFileOpenedAnewSendsOnlyHashesAndGeneratesTheSameTokens) {
  auto first = open(digest_dir);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->digests().known(), 0u);
  const Load cold = load(*first);
  const size_t hashed = first->digests().known();
  EXPECT_GT(hashed, 20u) << "every matrix was hashed and remembered";
  const std::string store = first->digests().path();
  ASSERT_TRUE(std::filesystem::exists(store)) << store;
  const auto saved_at = std::filesystem::last_write_time(store);
  first.reset();

  // A second run: the model opened again, its digests read from the store.
  auto second = open(digest_dir);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->digests().known(), hashed);
  const Load warm = load(*second);
  EXPECT_GT(cold.bytes_sent, 8u << 20);
  EXPECT_LT(warm.bytes_sent, cold.bytes_sent / 100) << "cold " << cold.bytes_sent << " B, warm " << warm.bytes_sent;
  ASSERT_EQ(cold.tokens.size(), 8u);
  EXPECT_EQ(warm.tokens, cold.tokens);
  EXPECT_EQ(second->digests().known(), hashed);
  EXPECT_EQ(std::filesystem::last_write_time(store), saved_at) << "nothing new to save";
}

TEST_F(DigestMemo, AModelFileThatChangedIsHashedAgain) {
  {
    auto first = open(digest_dir);
    ASSERT_TRUE(first);
    load(*first);
    ASSERT_GT(first->digests().known(), 20u);
  }
  // Rewritten with other weights (another seed): another identity.
  tools::RandomModelOptions o;
  o.n_embd = 256;
  o.n_ff = 512;
  o.seed += 1;
  std::filesystem::remove(model_path);
  ASSERT_TRUE(tools::write_random_llama(model_path, o).ok());
  auto changed = open(digest_dir);
  ASSERT_TRUE(changed);
  EXPECT_EQ(changed->digests().known(), 0u);
  const Load reload = load(*changed);
  EXPECT_GT(reload.bytes_sent, 8u << 20) << "new weights travel";
  EXPECT_GT(changed->digests().known(), 20u);
}

TEST_F(DigestMemo, AnUnwritableOrDisabledStoreDoesNotFailTheLoad) {
  const std::string under_a_file = model_path + "/digests";  // a directory inside a regular file
  for (const std::string& dir : {under_a_file, std::string("off"), std::string()}) {
    auto model = open(dir);
    ASSERT_TRUE(model);
    const Load cold = load(*model);
    ASSERT_EQ(cold.tokens.size(), 8u) << dir;
    EXPECT_EQ(model->digests().path(), "") << dir << ": in memory only";
    EXPECT_EQ(model->digests().save_failure().ok(), dir != under_a_file) << model->digests().save_failure().to_string();
    // The memo still spares this model's next load the hashing.
    EXPECT_GT(model->digests().known(), 20u) << dir;
    const Load warm = load(*model);
    EXPECT_EQ(warm.tokens, cold.tokens) << dir;
  }
  EXPECT_TRUE(std::filesystem::is_regular_file(model_path));
}

}  // namespace
}  // namespace tensorpc
