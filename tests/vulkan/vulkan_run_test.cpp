// `tensorpc run` on Vulkan devices: the bundled model's greedy text with
// `--device vulkan` (and with a server's GPU and CPU) is the local CPU's.
// What the GPU does not compute runs on a CPU (the helper CPU locally; the
// server's CPU device remotely), the KV cache included where the GPU cannot
// write it. By free memory, a GPU takes the layers that fit before the CPUs.
#include <string>
#include <vector>

#include "device_spec.h"
#include "file_util.h"
#include "rpc/remote_test_util.h"
#include "tensorpc/model.h"
#include "tensorpc/perplexity.h"
#include "tensorpc/run.h"
#include "vulkan_test_util.h"

namespace tensorpc::test {
namespace {

// `tensorpc run -m models/kjv-tiny.gguf -p PROMPT -n 24 --temp 0` on the
// local devices `local` (none: only `endpoints`), with `split`; stdout, and
// stderr in `err`.
std::string greedy_text(const std::vector<std::string>& local, const std::vector<std::string>& endpoints,
                        const std::vector<double>& split, std::string& err) {
  tools::RunOptions o;
  o.setup.model = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-tiny.gguf";
  o.setup.use_local = !local.empty();
  o.setup.local_devices = local;
  o.setup.endpoints = endpoints;
  o.setup.split = split;
  o.setup.threads = 2;
  o.prompt = "And God said, Let there be";
  o.sampler.temperature = 0;
  o.n_predict = 24;
  Capture out, errors;
  EXPECT_EQ(tools::run_command(o, out.f, errors.f), 0) << errors.text();
  err = errors.text();
  return out.text();
}

TEST(VulkanRun, GreedyTextOnTheGpuIsTheCpusText) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(probe);
  std::string cpu_err, gpu_err;
  const std::string want = greedy_text({"cpu"}, {}, {}, cpu_err);
  const std::string got = greedy_text({"vulkan"}, {}, {}, gpu_err);
  EXPECT_GT(want.size(), std::string("And God said, Let there be").size() + 8) << want;
  EXPECT_EQ(got, want) << gpu_err;
  // The GPU holds the layers; the helper CPU, none of them, but the KV cache
  // the GPU cannot write.
  EXPECT_TRUE(contains(gpu_err, "vulkan:0                         0-")) << gpu_err;
  EXPECT_TRUE(contains(gpu_err, "cpu                              -")) << gpu_err;
}

TEST(VulkanRun, GreedyTextOnTheGpuThenTheCpuIsTheCpusText) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(probe);
  std::string cpu_err, mixed_err;
  const std::string want = greedy_text({"cpu"}, {}, {}, cpu_err);
  EXPECT_EQ(greedy_text({"vulkan", "cpu"}, {}, {1, 1}, mixed_err), want) << mixed_err;
  EXPECT_TRUE(contains(mixed_err, "vulkan:0                         0-1")) << mixed_err;
}

// The bundled chat model on the local CPU with its draft model on the GPU
// (`--draft-device vulkan:0`): the text is plain greedy decoding's, and the
// draft's guesses save steps.
TEST(VulkanRun, ADraftModelOnTheGpuGivesThePlainTextInFewerSteps) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(probe);
  const std::string models = std::string(TENSORPC_SOURCE_DIR) + "/models/";
  ModelOptions o;
  o.path = models + "kjv-bpe.gguf";
  o.threads = 2;
  o.context_size = 256;
  GenerationOptions g;
  g.max_tokens = 32;
  g.sampling.temperature = 0;
  g.stop_at_end = false;
  auto plain = Model::open(o);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  auto expected = plain.value().generate("And the LORD said unto Moses", g);
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();

  o.draft_path = models + "kjv-bpe-draft.gguf";
  o.draft_device = "vulkan:0";
  auto drafted = Model::open(o);
  ASSERT_TRUE(drafted.ok()) << drafted.status().to_string();
  EXPECT_NE(drafted.value().info().draft.find("vulkan:0"), std::string::npos) << drafted.value().info().draft;
  auto r = drafted.value().generate("And the LORD said unto Moses", g);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value().text, expected.value().text);
  EXPECT_GT(r.value().accepted_tokens, 0);
  EXPECT_LT(r.value().decode_steps, expected.value().decode_steps);
}

// Over a server with --device vulkan --device cpu: the layers on both, the
// nodes its GPU does not compute (it says which: SUPPORTS) and its KV cache
// on its CPU device.
TEST(VulkanRun, GreedyTextOverAServerWithAGpuAndACpuIsTheCpusText) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(probe);
  auto devices = tools::make_devices({tools::parse_device_spec("vulkan").value(), tools::DeviceSpec{.threads = 2}});
  ASSERT_TRUE(devices.ok()) << devices.status().to_string();
  InProcessServer server(std::move(devices).value());
  std::string cpu_err, remote_err, both_err;
  const std::string want = greedy_text({"cpu"}, {}, {}, cpu_err);
  EXPECT_EQ(greedy_text({}, {server.endpoint()}, {1, 1}, remote_err), want) << remote_err;
  EXPECT_TRUE(contains(remote_err, server.endpoint() + "/vulkan:0         0-1")) << remote_err;
  // And a local GPU before them.
  EXPECT_EQ(greedy_text({"vulkan"}, {server.endpoint()}, {1, 1, 1}, both_err), want) << both_err;
}

// By free memory (no --split), a GPU beside CPUs takes as many layers as fit
// in it first, and the CPUs the rest: a server's GPU limited to 3 MiB holds
// three of kjv-tiny's four layers (and the output), one of 64 MiB all four.
TEST(VulkanRun, ByFreeMemoryAServersGpuTakesTheLayersThatFitAndTheCpusTheRest) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(probe);
  std::string cpu_err;
  const std::string want = greedy_text({"cpu"}, {}, {}, cpu_err);
  for (const char* limit : {"3M", "64M"}) {
    SCOPED_TRACE(limit);
    auto devices = tools::make_devices(
        {tools::parse_device_spec(std::string("vulkan:0:") + limit).value(), tools::DeviceSpec{.threads = 2}});
    ASSERT_TRUE(devices.ok()) << devices.status().to_string();
    InProcessServer server(std::move(devices).value());
    std::string err;
    EXPECT_EQ(greedy_text({"cpu"}, {server.endpoint()}, {}, err), want) << err;
    const bool all = std::string(limit) == "64M";
    EXPECT_TRUE(contains(err, server.endpoint() + "/vulkan:0         " + (all ? "0-3" : "1-3"))) << err;
    EXPECT_TRUE(contains(err, std::string("cpu                              ") + (all ? "-" : "0-0"))) << err;
    EXPECT_TRUE(contains(err, server.endpoint() + "/cpu1             -")) << err;
  }
}

// `tensorpc perplexity -m MODEL --device DEVICE` over 2 chunks of the held-out
// text: the figure it prints.
double perplexity_on(const std::string& model, const std::string& device) {
  tools::PerplexityCommandOptions o;
  o.setup.model = std::string(TENSORPC_SOURCE_DIR) + "/models/" + model;
  o.setup.local_devices = {device};
  o.setup.threads = 2;
  o.text_file = std::string(TENSORPC_SOURCE_DIR) + "/tests/data/kjv-heldout.txt";
  o.chunks = 2;
  Capture out, err;
  EXPECT_EQ(tools::perplexity_command(o, out.f, err.f), 0) << err.text();
  const std::string text = out.text();
  const size_t at = text.find("perplexity: ");
  EXPECT_NE(at, std::string::npos) << text;
  return at == std::string::npos ? 0 : std::stod(text.substr(at + 12));
}

TEST(VulkanRun, PerplexityOnTheGpuIsWithinHalfAPercentOfTheCpus) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(probe);
  for (const std::string model : {"kjv-tiny.gguf", "kjv-bpe.gguf"}) {
    const double cpu = perplexity_on(model, "cpu");
    const double gpu = perplexity_on(model, "vulkan");
    EXPECT_GT(cpu, 1.0) << model;
    EXPECT_NEAR(gpu, cpu, 0.005 * cpu) << model;
  }
}

// The public ModelOptions: a GPU the machine lacks is an error naming it.
TEST(VulkanRun, AMissingGpuIsAnErrorNamingIt) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(probe);
  ModelOptions o;
  o.path = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-tiny.gguf";
  o.local_devices = {"vulkan:999"};
  auto model = Model::open(o);
  ASSERT_FALSE(model.ok());
  EXPECT_TRUE(contains(model.status().message(), "local device 'vulkan:999'")) << model.status().to_string();
  EXPECT_TRUE(contains(model.status().message(), "Vulkan devices")) << model.status().to_string();
}

}  // namespace
}  // namespace tensorpc::test
