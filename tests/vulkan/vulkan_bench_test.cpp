// `tensorpc bench --gpu-only` on the Vulkan device: every GPU figure is
// measured, with its ceiling from the same run.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "core/log.h"
#include "file_util.h"
#include "lab/bench_command.h"
#include "vulkan_test_util.h"

namespace tensorpc::tools {
namespace {

using test::Capture;
using test::read_file;
using test::ScopedTempDir;

// The JSON object of figure `id` in `json`, or "" when it is not there.
std::string figure_of(const std::string& json, const std::string& id) {
  const size_t at = json.find("\"id\": \"" + id + "\"");
  return at == std::string::npos ? std::string() : json.substr(at, json.find('}', at) - at);
}

// The number after `"key": ` in a figure, or -1 when it has none.
double number_of(const std::string& figure, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(figure, m, std::regex("\"" + key + "\": ([-0-9.eE+]+)"))) return -1;
  return std::stod(m[1]);
}

TEST(BenchCommand, AQuickGpuRunWritesEveryFigureWithPositiveValues) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  dev.reset();  // the bench opens its own
  log::set_level(log::Level::warn);
  const ScopedTempDir dir;
  BenchOptions o;
  o.quick = true;
  o.gpu_only = true;
  o.repetitions = 1;
  o.gpu_devices = std::vector<int>{0};
  o.gpu_dim = 256;
  o.gpu_copy_bytes = uint64_t{4} << 20;
  o.json_path = dir.path + "/bench.json";
  Capture out, err;
  ASSERT_EQ(bench_command(o, out.f, err.f), 0) << err.text();
  const std::string json = read_file(o.json_path);
  for (const char* id : {"decode.f16", "decode.q8_0", "decode.q4_K", "prefill.f16", "prefill.q8_0"}) {
    const std::string figure = figure_of(json, "gpu.vulkan:0." + std::string(id));
    ASSERT_FALSE(figure.empty()) << id << "\n" << json;
    EXPECT_GT(number_of(figure, "value"), 0) << figure;
    EXPECT_GT(number_of(figure, "baseline"), 0) << figure;
    EXPECT_GT(number_of(figure, "ratio"), 0) << figure;
  }
  // The GPU figures alone: nothing of the CPU's or the servers'.
  EXPECT_EQ(json.find("\"id\": \"rpc."), std::string::npos) << json;
  EXPECT_NE(out.text().find("vulkan:0 q4_K 256x256: decode weight bytes/s"), std::string::npos) << out.text();
}

}  // namespace
}  // namespace tensorpc::tools
