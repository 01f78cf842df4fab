// The GPU figures of `tensorpc bench` (bench_gpu.h).
#include "lab/bench_gpu.h"

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "lab/bench_measure.h"
#include "tensorpc/context.h"
#include "tensorpc/graph_allocator.h"

#ifdef TENSORPC_HAVE_VULKAN
#include "tensorpc/vulkan_device.h"
#include "vulkan/vk_peak.h"
#endif

namespace tensorpc::tools {

#ifndef TENSORPC_HAVE_VULKAN

bool gpu_devices_present() { return false; }

StatusOr<std::vector<Figure>> bench_gpu_devices(const GpuBenchOptions&, std::FILE*) {
  return unsupported(
      "GPU figures: this build has no Vulkan device (-DTENSORPC_VULKAN=ON needs libvulkan-dev and glslc)");
}

#else

namespace {

// The shortest FMA dispatch timed: long enough that submitting it is noise.
constexpr double kMinPeakSeconds = 0.02;

// Bytes read per second (GB/s) of a copy of `bytes` between two halves of
// one device-local buffer, each copy waited for.
StatusOr<double> copy_gbs(Device& device, uint64_t bytes, int repetitions) {
  bytes = std::min(bytes, device.max_allocation() / 2);
  bytes -= bytes % std::max<uint64_t>(device.alignment(), 4);
  TENSORPC_ASSIGN_OR_RETURN(auto buffer, device.allocate(2 * bytes));
  TENSORPC_RETURN_IF_ERROR(buffer->clear(1));
  Context ctx;
  Tensor* from = ctx.new_tensor(DType::f32, {static_cast<int64_t>(bytes / 4)}, "copy_from");
  Tensor* to = ctx.new_tensor(DType::f32, {static_cast<int64_t>(bytes / 4)}, "copy_to");
  TENSORPC_RETURN_IF_ERROR(buffer->place(*from, 0));
  TENSORPC_RETURN_IF_ERROR(buffer->place(*to, bytes));
  TENSORPC_RETURN_IF_ERROR(buffer->copy(*from, *to));  // warm-up
  TENSORPC_ASSIGN_OR_RETURN(const double seconds, median_of(repetitions, [&]() -> StatusOr<double> {
                              const auto start = BenchClock::now();
                              TENSORPC_RETURN_IF_ERROR(buffer->copy(*from, *to));
                              return seconds_since(start);
                            }));
  return static_cast<double>(bytes) / seconds / 1e9;
}

// GFLOP/s of the FMA shader, its dispatches lengthened until one takes
// kMinPeakSeconds (those first ones the warm-up).
StatusOr<double> fma_peak(Device& device, int repetitions) {
  uint32_t rounds = 64;
  uint64_t fmas = 0;
  TENSORPC_ASSIGN_OR_RETURN(double seconds, vulkan::time_fma_dispatch(device, rounds, fmas));
  while (seconds < kMinPeakSeconds && rounds < (1u << 24)) {
    rounds *= 2;
    TENSORPC_ASSIGN_OR_RETURN(seconds, vulkan::time_fma_dispatch(device, rounds, fmas));
  }
  TENSORPC_ASSIGN_OR_RETURN(seconds,
                            median_of(repetitions, [&] { return vulkan::time_fma_dispatch(device, rounds, fmas); }));
  return 2.0 * static_cast<double>(fmas) / seconds / 1e9;
}

// Seconds of mul_mat(weight, x) on `device`: a dim × dim weight of `type`
// (from `values`) times `tokens` f32 columns, the median after a warm-up.
StatusOr<double> mul_mat_seconds(Device& device, DType type, const std::vector<float>& values, int64_t dim,
                                 int64_t tokens, int repetitions) {
  Context ctx;
  Tensor* weight = ctx.new_tensor(type, {dim, dim}, "weight");
  Tensor* x = ctx.new_tensor(DType::f32, {dim, tokens}, "x");
  weight->flags |= kFlagInput;
  x->flags |= kFlagInput;
  Graph graph = Graph::build({ctx.mul_mat(weight, x)});
  GraphAllocator allocator(device);
  TENSORPC_RETURN_IF_ERROR(allocator.allocate(graph));
  TENSORPC_RETURN_IF_ERROR(write_from_f32(*weight, values));
  std::vector<float> columns(static_cast<size_t>(dim * tokens));
  for (size_t i = 0; i < columns.size(); ++i) columns[i] = values[i % values.size()];
  TENSORPC_RETURN_IF_ERROR(write_from_f32(*x, columns));
  TENSORPC_ASSIGN_OR_RETURN(auto stream, device.create_stream());
  TENSORPC_RETURN_IF_ERROR(stream->compute(graph));  // warm-up: pipelines built, commands recorded
  return median_of(repetitions, [&]() -> StatusOr<double> {
    const auto start = BenchClock::now();
    TENSORPC_RETURN_IF_ERROR(stream->compute(graph));
    return seconds_since(start);
  });
}

StatusOr<std::vector<Figure>> bench_one_device(Device& device, const GpuBenchOptions& o,
                                               const std::vector<float>& values, std::FILE* progress) {
  if (progress != nullptr) {
    std::fprintf(progress, "tensorpc bench: %s (%s): copy, FMA peak, mul_mat %lldx%lld\n", device.name().c_str(),
                 device.description().c_str(), static_cast<long long>(o.dim), static_cast<long long>(o.dim));
    std::fflush(progress);
  }
  TENSORPC_ASSIGN_OR_RETURN(const double copy, copy_gbs(device, o.copy_bytes, o.repetitions));
  TENSORPC_ASSIGN_OR_RETURN(const double peak, fma_peak(device, o.repetitions));
  const std::string id = "gpu." + device.name() + ".";
  const std::string shape = std::to_string(o.dim) + "x" + std::to_string(o.dim);
  std::vector<Figure> figures;
  for (DType type : {DType::f16, DType::q8_0, DType::q4_K}) {
    TENSORPC_ASSIGN_OR_RETURN(const double s, mul_mat_seconds(device, type, values, o.dim, 1, o.repetitions));
    const std::string name(name_of(type));
    const double bytes = static_cast<double>(row_bytes(type, o.dim)) * static_cast<double>(o.dim);
    figures.push_back({.id = id + "decode." + name,
                       .name = device.name() + " " + name + " " + shape + ": decode weight bytes/s (N = 1)",
                       .value = bytes / s / 1e9,
                       .unit = "GB/s",
                       .baseline = copy,
                       .baseline_name = "device copy, read"});
  }
  for (DType type : {DType::f16, DType::q8_0}) {
    TENSORPC_ASSIGN_OR_RETURN(const double s,
                              mul_mat_seconds(device, type, values, o.dim, o.prefill_tokens, o.repetitions));
    const std::string name(name_of(type));
    const double flops =
        2.0 * static_cast<double>(o.dim) * static_cast<double>(o.dim) * static_cast<double>(o.prefill_tokens);
    figures.push_back({.id = id + "prefill." + name,
                       .name = device.name() + " " + name + " " + shape +
                               ": prefill GFLOP/s (N = " + std::to_string(o.prefill_tokens) + ")",
                       .value = flops / s / 1e9,
                       .unit = "GFLOP/s",
                       .baseline = peak,
                       .baseline_name = "FMA shader peak"});
  }
  return figures;
}

}  // namespace

bool gpu_devices_present() {
  auto devices = vulkan_devices();
  return devices.ok() && !devices.value().empty();
}

StatusOr<std::vector<Figure>> bench_gpu_devices(const GpuBenchOptions& options, std::FILE* progress) {
  std::vector<int> indices = options.devices;
  if (indices.empty()) indices.push_back(kEveryVulkanDevice);
  std::vector<std::unique_ptr<Device>> devices;
  std::map<int, int> openings;
  for (int index : indices) {
    TENSORPC_ASSIGN_OR_RETURN(auto opened, open_vulkan_devices(index, 0, openings));
    for (auto& d : opened) devices.push_back(std::move(d));
  }
  // One set of weights for every type and device: uniform in [-1, 1).
  std::vector<float> values(static_cast<size_t>(options.dim * options.dim));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& v : values) v = uniform(rng);
  std::vector<Figure> figures;
  for (auto& device : devices) {
    TENSORPC_ASSIGN_OR_RETURN(auto some, bench_one_device(*device, options, values, progress));
    for (Figure& f : some) figures.push_back(std::move(f));
  }
  return figures;
}

#endif

}  // namespace tensorpc::tools
