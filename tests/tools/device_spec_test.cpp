// The command line's device specs and byte counts (tools/device_spec.h), and
// `tensorpc devices` against in-process servers (tools/tensorpc/devices.h).
#include "device_spec.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "file_util.h"
#include "core/log.h"
#include "rpc/remote_test_util.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/devices.h"
#ifdef TENSORPC_HAVE_VULKAN
#include "vulkan/vulkan_test_util.h"
#endif

namespace tensorpc::tools {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(DeviceSpec, GoodSpecs) {
  struct Case {
    const char* text;
    int threads;
    uint64_t limit;
  };
  for (const Case& c : {Case{"cpu", 0, 0}, Case{"cpu:2", 2, 0}, Case{"cpu:2:4GiB", 2, 4 * kGiB},
                        Case{"cpu:8:512MiB", 8, 512u << 20}, Case{"cpu::1G", 0, 1000000000},
                        Case{"cpu:1:64KiB", 1, 64 << 10}, Case{"cpu:3:2K", 3, 2000}, Case{"cpu:4:3M", 4, 3000000}}) {
    auto spec = parse_device_spec(c.text);
    ASSERT_TRUE(spec.ok()) << c.text << ": " << spec.status().to_string();
    EXPECT_EQ(spec.value().kind, DeviceKind::cpu) << c.text;
    EXPECT_EQ(spec.value().threads, c.threads) << c.text;
    EXPECT_EQ(spec.value().memory_limit, c.limit) << c.text;
  }
}

TEST(DeviceSpec, VulkanSpecsNameADeviceOrEveryOneWithAnOptionalLimit) {
  struct Case {
    const char* text;
    int index;
    uint64_t limit;
  };
  for (const Case& c : {Case{"vulkan", kEveryVulkanDevice, 0}, Case{"vulkan:0", 0, 0},
                        Case{"vulkan:3:8GiB", 3, 8 * kGiB}, Case{"vulkan::1G", kEveryVulkanDevice, 1000000000}}) {
    auto spec = parse_device_spec(c.text);
#ifdef TENSORPC_HAVE_VULKAN
    ASSERT_TRUE(spec.ok()) << c.text << ": " << spec.status().to_string();
    EXPECT_EQ(spec.value().kind, DeviceKind::gpu) << c.text;
    EXPECT_EQ(spec.value().index, c.index) << c.text;
    EXPECT_EQ(spec.value().memory_limit, c.limit) << c.text;
#else
    ASSERT_FALSE(spec.ok()) << c.text;
    EXPECT_NE(spec.status().message().find("this build has no Vulkan device"), std::string::npos);
#endif
  }
  for (const char* text : {"vulkan:", "vulkan:x", "vulkan:-1", "vulkan:0:", "vulkan:0:0", "vulkan:0:1G:2", "Vulkan"}) {
    EXPECT_FALSE(parse_device_spec(text).ok()) << "'" << text << "' was accepted";
  }
}

TEST(DeviceSpec, BadSpecsAreErrorsNamingTheSpec) {
  for (const char* text : {"", "gpu", "gpu:1", "cpu:", "cpu:0", "cpu:-1", "cpu:x", "cpu:2x", "cpu:99999",
                           "cpu:2:", "cpu:2:0", "cpu:2:lots", "cpu:2:4XB", "cpu:2:4GiB:1", "CPU:2"}) {
    auto spec = parse_device_spec(text);
    ASSERT_FALSE(spec.ok()) << "'" << text << "' was accepted";
    EXPECT_EQ(spec.status().code(), StatusCode::invalid_argument) << text;
    std::string quoted = "spec '";  // built in steps: GCC 12 warns (wrongly) on "'" + s + "'"
    quoted += text;
    quoted += '\'';
    EXPECT_NE(spec.status().message().find(quoted), std::string::npos) << spec.status().message();
  }
}

// `-t`: 0 means every core, as in a device spec without threads; the same
// upper bound as a spec's.
TEST(ThreadCount, FromZeroToTheMostADeviceTakes) {
  for (const char* text : {"0", "1", "16", "4096"}) EXPECT_EQ(check_thread_count(text), "") << text;
  for (const char* text : {"", "-1", "4097", "100000", "2x", " 2", "1.5", "99999999999"}) {
    const std::string why = check_thread_count(text);
    EXPECT_NE(why.find("from 0 (every core) to 4096"), std::string::npos) << text << ": " << why;
  }
  EXPECT_NE(parse_device_spec("cpu:4097").status().message().find("from 1 to 4096"), std::string::npos);
}

TEST(DeviceSpec, MakeDevicesNamesThemInOrderWithTheirLimits) {
  auto devices = make_devices({{.threads = 1}, {.threads = 2, .memory_limit = kGiB}}).value();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0]->name(), "cpu0");
  EXPECT_EQ(devices[1]->name(), "cpu1");
  EXPECT_EQ(dynamic_cast<CpuDevice&>(*devices[0]).threads(), 1);
  EXPECT_EQ(dynamic_cast<CpuDevice&>(*devices[1]).threads(), 2);
  EXPECT_EQ(devices[1]->memory().value().total, kGiB);
}

TEST(DeviceSpec, MakeDevicesPinsTheirThreadsWhenAsked) {
  for (bool pin : {false, true}) {
    const auto devices = make_devices({DeviceSpec{.threads = 2}}, pin).value();
    ASSERT_EQ(devices.size(), 1u);
    EXPECT_EQ(devices[0]->description().find("pinned to cores") != std::string::npos, pin) << devices[0]->description();
  }
}

TEST(ByteCount, Suffixes) {
  uint64_t v = 0;
  EXPECT_TRUE(parse_byte_count("1024", v) && v == 1024);
  EXPECT_TRUE(parse_byte_count("4GiB", v) && v == 4 * kGiB);
  EXPECT_TRUE(parse_byte_count("4gib", v) && v == 4 * kGiB);
  EXPECT_TRUE(parse_byte_count("1.5KiB", v) && v == 1536);
  EXPECT_TRUE(parse_byte_count("2GB", v) && v == 2000000000);
  EXPECT_FALSE(parse_byte_count("", v));
  EXPECT_FALSE(parse_byte_count("GiB", v));
  EXPECT_FALSE(parse_byte_count("-1", v));
  EXPECT_FALSE(parse_byte_count("4 GiB", v));
  EXPECT_FALSE(parse_byte_count("99999999TiB", v));
}

TEST(DevicesCommand, ListsTheLocalCpuAndEveryServerDeviceAndNamesAnUnreachableServer) {
  log::set_level(log::Level::error);
  test::InProcessServer one(test::two_cpus(kGiB, 2 * kGiB));
  test::InProcessServer two;
  const test::RefusingPort nobody;
  const std::string down = nobody.endpoint();
  test::Capture out, err;
  const int rc = list_devices_command({one.endpoint() + "," + down, two.endpoint()}, out.f, err.f);
  const std::string table = out.text(), errors = err.text();
  EXPECT_EQ(rc, 1);
  EXPECT_NE(table.find("NAME"), std::string::npos) << table;
  EXPECT_NE(table.find("local"), std::string::npos) << table;
  EXPECT_NE(table.find(one.endpoint() + "/cpu0"), std::string::npos) << table;
  EXPECT_NE(table.find(one.endpoint() + "/cpu1"), std::string::npos) << table;
  EXPECT_NE(table.find(two.endpoint() + "/cpu0"), std::string::npos) << table;
  EXPECT_NE(table.find("2.0 GiB"), std::string::npos) << table;
  EXPECT_NE(errors.find(down), std::string::npos) << errors;
  EXPECT_EQ(table.find(down), std::string::npos) << table;

  test::Capture out2, err2;
  EXPECT_EQ(list_devices_command({one.endpoint()}, out2.f, err2.f), 0);
  EXPECT_EQ(err2.text(), "");
}

#ifdef TENSORPC_HAVE_VULKAN
TEST(DevicesCommand, ListsEachLocalVulkanDeviceWithItsDriverOrSaysWhyThereIsNone) {
  test::Capture out, err;
  EXPECT_EQ(list_devices_command({}, out.f, err.f), 0);
  const std::string table = out.text();
  auto devices = vulkan_devices();
  if (!devices.ok()) {
    EXPECT_NE(table.find("no local Vulkan device: " + devices.status().message()), std::string::npos) << table;
    TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);  // fails where CI=true
  }
  for (const VulkanDeviceInfo& d : devices.value()) {
    const std::string row = "vulkan:" + std::to_string(d.index) + "  gpu";
    EXPECT_NE(table.find(row), std::string::npos) << table;
    EXPECT_NE(table.find(d.name + ", driver " + d.driver), std::string::npos) << table;
  }
  EXPECT_EQ(table.find("no local Vulkan device"), std::string::npos) << table;
}
#endif

}  // namespace
}  // namespace tensorpc::tools
