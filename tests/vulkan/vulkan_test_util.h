// The Vulkan tests' device and their comparison against the CPU device.
//
// Without a Vulkan driver the tests skip, saying why — unless the
// environment variable CI is "true": CI must really run them, so there a
// missing driver fails them.
#pragma once

#include <cstdlib>
#include <functional>
#include <string>

#include "tensorpc/vulkan_device.h"
#include "test_util.h"

namespace tensorpc::test {

// Vulkan device 0 (force_staging: every transfer through the staging buffer),
// or null after GTEST_SKIP / a failure when there is none.
inline std::unique_ptr<Device> open_vulkan_or_skip(bool force_staging = false) {
  auto dev = open_vulkan_device({.index = 0, .force_staging = force_staging});
  if (dev.ok()) return std::move(dev).value();
  const char* ci = std::getenv("CI");
  if (ci != nullptr && std::string(ci) == "true") {
    ADD_FAILURE() << "CI=true and no Vulkan device: " << dev.status().to_string();
  } else {
    GTEST_LOG_(INFO) << "skipped: " << dev.status().to_string();
  }
  return nullptr;
}

#define TENSORPC_VULKAN_DEVICE_OR_SKIP(var, ...)                 \
  auto var = ::tensorpc::test::open_vulkan_or_skip(__VA_ARGS__); \
  if (var == nullptr) GTEST_SKIP() << "no Vulkan device (see the log)"

// Builds a graph (the same on every call) whose leaves the comparison fills.
using GraphBuilder = std::function<std::vector<Tensor*>(Context&)>;

// The outputs of `build` computed on dev, every f32/f16 leaf filled with
// seeded random values and every i32 leaf with indices i * 5 % index_range.
inline std::vector<std::vector<float>> run_graph(Device& dev, const GraphBuilder& build, int32_t index_range,
                                                 int runs = 1) {
  Context ctx;
  const std::vector<Tensor*> outputs = build(ctx);
  for (Tensor* t : outputs) t->flags |= kFlagOutput;
  GraphRun run(dev, outputs);
  uint32_t seed = 1;
  for (Tensor* leaf : run.graph().leafs()) {
    if (leaf->type == DType::i32) {
      std::vector<int32_t> ids(static_cast<size_t>(leaf->nelements()));
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i * 5 % static_cast<size_t>(index_range));
      run.write_i32(leaf, ids);
    } else {
      run.write(leaf, random_floats(leaf->nelements(), seed++));
    }
  }
  for (int i = 0; i < runs; ++i) run.compute();
  std::vector<std::vector<float>> values;
  for (Tensor* t : outputs) values.push_back(run.read(t));
  return values;
}

// Checks that `build` gives on the Vulkan device what `reference` (the same
// leaves, in the same order) gives on the CPU.
inline ::testing::AssertionResult matches_cpu(Device& vulkan, const GraphBuilder& build, const GraphBuilder& reference,
                                              Tolerance tol, int32_t index_range = 1, int runs = 1) {
  CpuDevice cpu(CpuDeviceOptions{.threads = 1});
  const auto want = run_graph(cpu, reference, index_range);
  const auto got = run_graph(vulkan, build, index_range, runs);
  for (size_t i = 0; i < want.size(); ++i) {
    const std::vector<double> w(want[i].begin(), want[i].end());
    auto r = all_near(got[i], w, tol);
    if (!r) return r << " (output " << i << ")";
  }
  return ::testing::AssertionSuccess();
}

// Checks that `build` gives on the Vulkan device what it gives on the CPU.
inline ::testing::AssertionResult same_as_cpu(Device& vulkan, const GraphBuilder& build, Tolerance tol,
                                              int32_t index_range = 1, int runs = 1) {
  return matches_cpu(vulkan, build, build, tol, index_range, runs);
}

}  // namespace tensorpc::test
