// Tensor overrides in a placement (PlacementOptions::overrides): a weight
// goes to the device of the first override whose pattern its GGUF name
// matches, the other weights with their layers, and by free memory the
// layers are shared out by what the overrides leave; a bad pattern, one that
// matches nothing, an unknown or ambiguous device name and an override that
// overfills its device are errors that allocate nothing.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "model/runtime/placement.h"
#include "tensorpc/cpu_device.h"
#include "test_util.h"

namespace tensorpc {
namespace {

using test::contains;

const std::string kModelPath = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-tiny.gguf";

class OverridePlacement : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = LlamaModel::open(kModelPath, {.digest_dir = "off"});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value();
  }

  // Room for the model on every device, far below the host's free memory:
  // a device's free bytes are then its account's alone, which other
  // processes do not move while a test compares them.
  static constexpr uint64_t kRoomy = uint64_t{64} << 20;

  // Three CPU devices named a, b, c, each limited to `limit` bytes (0: none).
  void make_devices(uint64_t limit) {
    for (const char* name : {"a", "b", "c"}) {
      owned_.push_back(
          std::make_unique<CpuDevice>(CpuDeviceOptions{.name = name, .threads = 1, .memory_limit = limit}));
      devices_.push_back(owned_.back().get());
    }
  }

  StatusOr<std::unique_ptr<ModelPlacement>> place(std::vector<PlacementOverride> overrides,
                                                  std::vector<double> ratios = {}) {
    return ModelPlacement::create(*model_, devices_,
                                  {.ratios = std::move(ratios), .overrides = std::move(overrides), .n_ctx = 64});
  }

  // Every weight of the model with its file name.
  std::vector<std::pair<const Tensor*, std::string>> weights() const {
    std::vector<std::pair<const Tensor*, std::string>> out;
    const LlamaWeights& w = model_->weights();
    std::vector<const Tensor*> all = {w.tok_embd, w.output_norm};
    if (w.output != w.tok_embd) all.push_back(w.output);
    for (const LlamaLayerWeights& l : w.layers) {
      for (const Tensor* t : l.tensors()) all.push_back(t);
    }
    for (const Tensor* t : all) out.emplace_back(t, model_->info_of(t)->name);
    return out;
  }

  // Each device's free bytes now.
  std::vector<uint64_t> free_memory() const {
    std::vector<uint64_t> out;
    for (Device* d : devices_) out.push_back(d->memory().value().free);
    return out;
  }

  // The placement fails with `code` and a message holding every one of
  // `says`, and no device lost a byte.
  void expect_refused(std::vector<PlacementOverride> overrides, StatusCode code, std::vector<std::string> says) {
    const std::vector<uint64_t> before = free_memory();
    auto p = place(std::move(overrides), {1, 1, 1});
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), code) << p.status().to_string();
    for (const std::string& s : says) EXPECT_TRUE(contains(p.status().message(), s)) << p.status().to_string();
    EXPECT_EQ(free_memory(), before) << "nothing allocated";
  }

  std::unique_ptr<LlamaModel> model_;
  std::vector<std::unique_ptr<Device>> owned_;
  std::vector<Device*> devices_;
};

TEST_F(OverridePlacement, TheFirstOverrideThatMatchesAWeightPutsItOnItsDevice) {
  make_devices(0);
  // Every layer on a; ffn_up to b though ffn_.* would take it too; the rest
  // of the feed-forward to c.
  auto p = place({{"ffn_up", "b"}, {"ffn_.*", "c"}}, {1, 0, 0});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  size_t up = 0, ffn = 0;
  uint64_t up_bytes = 0, ffn_bytes = 0;
  for (const auto& [t, name] : weights()) {
    const std::string want = contains(name, "ffn_up") ? "b" : contains(name, "ffn_") ? "c" : "a";
    ASSERT_NE(t->buffer, nullptr) << name;
    EXPECT_EQ(t->buffer->device().name(), want) << name;
    if (want == "b") ++up, up_bytes += t->nbytes();
    if (want == "c") ++ffn, ffn_bytes += t->nbytes();
  }
  ASSERT_GT(up, 0u);
  ASSERT_GT(ffn, 0u);
  const std::vector<ModelPlacement::OverrideUse>& uses = p.value()->overrides();
  ASSERT_EQ(uses.size(), 2u);
  EXPECT_EQ(uses[0].device, 1u);
  EXPECT_EQ(uses[0].tensors, up);
  EXPECT_GE(uses[0].bytes, up_bytes);  // aligned as the device holds them
  EXPECT_EQ(uses[1].device, 2u);
  EXPECT_EQ(uses[1].tensors, ffn);
  EXPECT_GE(uses[1].bytes, ffn_bytes);
  EXPECT_EQ(p.value()->layer_device(), std::vector<size_t>(model_->hparams().n_layer, 0));

  // The table names each override, its device, its tensors and bytes.
  const std::string table = p.value()->table();
  EXPECT_TRUE(contains(table, "override")) << table;
  EXPECT_TRUE(contains(table, "ffn_up ")) << table;
  EXPECT_TRUE(contains(table, std::to_string(up) + " ")) << table;
  EXPECT_TRUE(contains(table, "ffn_.* ")) << table;
  EXPECT_TRUE(contains(table, std::to_string(ffn) + " ")) << table;
}

TEST_F(OverridePlacement, ByFreeMemoryTheLayersGoWhereTheOverridesLeaveRoom) {
  make_devices(uint64_t{4} << 20);
  auto even = place({});
  ASSERT_TRUE(even.ok()) << even.status().to_string();
  const std::vector<size_t> layers = even.value()->layer_device();
  even.value().reset();
  // The feed-forward weights on a take about half of the model: a gets fewer
  // layers than b and c, which share the rest.
  auto p = place({{"ffn_", "a"}});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const auto count = [](const std::vector<size_t>& l, size_t d) { return std::count(l.begin(), l.end(), d); };
  EXPECT_LT(count(p.value()->layer_device(), 0), count(layers, 0));
  EXPECT_GE(count(p.value()->layer_device(), 1), count(layers, 1));
  EXPECT_GE(count(p.value()->layer_device(), 2), count(layers, 2));
}

TEST_F(OverridePlacement, ABadPatternIsAnErrorWithTheRegexComplaint) {
  make_devices(kRoomy);
  expect_refused({{"blk.(1", "a"}}, StatusCode::invalid_argument, {"'blk.(1'", "not a regular expression: "});
}

TEST_F(OverridePlacement, APatternThatMatchesNoTensorIsAnError) {
  make_devices(kRoomy);
  expect_refused({{"ffn_", "a"}, {"exps", "b"}}, StatusCode::not_found, {"'exps=b'", "matches no tensor"});
}

TEST_F(OverridePlacement, AnUnknownDeviceIsAnErrorListingTheDevices) {
  make_devices(kRoomy);
  expect_refused({{"ffn_", "vulkan:0"}}, StatusCode::not_found,
                 {"no device is named 'vulkan:0'", "(the devices: a, b, c)"});
}

TEST_F(OverridePlacement, ADeviceTwoDevicesAreNamedIsAnError) {
  make_devices(kRoomy);
  owned_.push_back(std::make_unique<CpuDevice>(CpuDeviceOptions{.name = "a", .threads = 1}));
  devices_.push_back(owned_.back().get());
  auto p = place({{"ffn_", "a"}}, {1, 1, 1, 1});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::invalid_argument) << p.status().to_string();
  EXPECT_TRUE(contains(p.status().message(), "2 devices are named 'a'")) << p.status().to_string();
}

TEST_F(OverridePlacement, AnOverrideThatOverfillsItsDeviceIsAnError) {
  make_devices(uint64_t{256} << 10);  // less than the token embedding alone
  expect_refused({{"token_embd", "b"}}, StatusCode::out_of_memory, {"tensor overrides put", "on b"});
}

}  // namespace
}  // namespace tensorpc
